//! `--pprof FILE` read by a real pprof client: Go's `go tool pprof` (Debian's golang-go,
//! which `cargo xtask setup` installs). The workload's call chains are known from its
//! source (worker -> lock_a -> lock_b -> lock_c -> pthread_mutex_lock), and the profile's
//! totals are checked against the JSON's stack rows of the same run.

use std::{process::Command, time::Duration};

use rtm_tests::{
    TempDir, pprof::{go, pprof_top, total},
    read_json, rtm_bin, run, workload,
};
use rtm_tests::{e2e, harness::E2e};

/// This file's tests, each with what it needs besides the tracer.
pub(crate) const TESTS: &[E2e] = &[
    e2e!(go_tool_pprof_lists_the_workload_and_agrees_with_the_json, Root, Tool("go", "golang-go")),
];

fn go_tool_pprof_lists_the_workload_and_agrees_with_the_json() {
    let go = go();
    let dir = TempDir::new("pprof");
    let (profile, json) = (dir.join("f.pb.gz"), dir.join("t.json"));
    let out = run(
        Command::new(rtm_bin())
            .arg("--pprof")
            .arg(&profile)
            .arg("--json")
            .arg(&json)
            .arg("-o")
            .arg(dir.join("report.txt"))
            .args(["--stack-rate", "all", "--"])
            .arg(workload("stack_workload"))
            .args(["4", "1000", "30"]),
        Duration::from_secs(120),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc = read_json(&json);
    let stacks = &doc["sync_graph"]["stacks"];
    let rows = stacks["rows"].as_array().expect("stack rows");
    assert!(!rows.is_empty(), "no stack rows: {stacks}");
    let sum = |key: &str| rows.iter().map(|r| r[key].as_u64().unwrap()).sum::<u64>();
    let wait_ns = sum("wait_ns") + stacks["other_wait_ns"].as_u64().unwrap_or(0);
    let waits = sum("waits") + stacks["other_waits"].as_u64().unwrap_or(0);

    let delay = pprof_top(&go, &dir, &profile, "delay");
    for func in ["worker", "lock_a", "lock_b", "lock_c", "cache_get"] {
        assert!(
            delay
                .lines()
                .any(|l| l.split_whitespace().last() == Some(func)),
            "{func} not listed:\n{delay}"
        );
    }
    let pprof_ns = total(&delay);
    eprintln!("pprof delay total {pprof_ns} ns, JSON stack rows {wait_ns} ns");
    assert!(
        (pprof_ns - wait_ns as f64).abs() <= wait_ns as f64 * 0.01,
        "pprof's delay {pprof_ns} ns vs the JSON's {wait_ns} ns:\n{delay}"
    );

    let contentions = pprof_top(&go, &dir, &profile, "contentions");
    let pprof_waits = total(&contentions);
    eprintln!("pprof contentions total {pprof_waits}, JSON stack rows {waits} waits");
    assert_eq!(pprof_waits, waits as f64, "{contentions}");
}
