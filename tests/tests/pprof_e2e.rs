//! `--pprof FILE` read by a real pprof client: Go's `go tool pprof` (Debian's golang-go,
//! which `cargo xtask setup` installs). The workload's call chains are known from its
//! source (worker -> lock_a -> lock_b -> lock_c -> pthread_mutex_lock), and the profile's
//! totals are checked against the JSON's stack rows of the same run.

use std::{
    path::{Path, PathBuf},
    process::Command,
    time::Duration,
};

use rtm_tests::{TempDir, can_trace, read_json, rtm_bin, run, workload};

/// `go`, or None said loudly (a failure in CI) when it is missing.
fn go(test: &str) -> Option<PathBuf> {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join("go"))
            .find(|p| p.is_file())
    });
    if found.is_none() {
        let msg =
            format!("{test}: NOT RUN: `go` is missing (cargo xtask setup installs golang-go)");
        assert!(std::env::var("CI").as_deref() != Ok("true"), "{msg}");
        eprintln!("{msg}");
    }
    found
}

/// `go tool pprof -top -sample_index=INDEX file`'s output.
fn pprof_top(go: &Path, dir: &TempDir, file: &Path, index: &str) -> String {
    let out = run(
        Command::new(go)
            .args(["tool", "pprof", "-top", "-nodefraction=0"])
            .arg(format!("-sample_index={index}"))
            .arg(file)
            .env("GOCACHE", dir.join("go-cache"))
            .env("HOME", dir.join("home")),
        Duration::from_secs(120),
    );
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "go tool pprof: {}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// The total pprof prints (`... of 472.21ms total`), in its base unit (ns for times).
fn total(top: &str) -> f64 {
    let line = top
        .lines()
        .find(|l| l.starts_with("Showing nodes accounting for"))
        .unwrap_or_else(|| panic!("no total in {top}"));
    let v = line
        .rsplit_once(" of ")
        .and_then(|(_, t)| t.strip_suffix(" total"))
        .unwrap_or_else(|| panic!("no total in {line}"));
    let split = v
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(v.len());
    let (n, unit) = v.split_at(split);
    let n: f64 = n.parse().unwrap_or_else(|_| panic!("total {v}"));
    n * match unit {
        "" | "ns" => 1.0,
        "us" => 1e3,
        "ms" => 1e6,
        "s" => 1e9,
        "mins" => 60e9,
        u => panic!("unit {u} in {line}"),
    }
}

#[test]
fn go_tool_pprof_lists_the_workload_and_agrees_with_the_json() {
    let test = "go_tool_pprof_lists_the_workload_and_agrees_with_the_json";
    if !can_trace(test) {
        return;
    }
    let Some(go) = go(test) else { return };
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
