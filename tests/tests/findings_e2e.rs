//! Findings: the report, the saved trace's report, the JSON and the HTML page open with
//! what limits the traced work, and name it as the workload's own source says: the
//! demo's audit lock (held across a slow write, demo.c), the thread pool's stats lock
//! (its address printed by thread_pool.c), with the pool's idle waits called out as not
//! the problem.

use std::{process::Command, time::Duration};

use rtm_tests::{TempDir, Value, read_json, rtm_bin, run, workload};
use rtm_tests::{e2e, harness::E2e};

/// This file's tests, each with what it needs besides the tracer.
pub(crate) const TESTS: &[E2e] = &[
    e2e!(the_demo_opens_with_its_audit_lock_and_its_line, Root),
    e2e!(a_thread_pool_opens_with_its_stats_lock_and_calls_idle_waits_no_problem, Root),
];

/// Traces `program` launched with `options`; returns the report, the JSON document and
/// the HTML page.
fn traced(
    dir: &TempDir,
    options: &[&str],
    program: &str,
    args: &[&str],
) -> (String, Value, String) {
    let (report, json, html) = (dir.join("r.txt"), dir.join("t.json"), dir.join("t.html"));
    let out = run(
        Command::new(rtm_bin())
            .args(options)
            .arg("-o")
            .arg(&report)
            .arg("--json")
            .arg(&json)
            .arg("--html")
            .arg(&html)
            .arg("--")
            .arg(workload(program))
            .args(args),
        Duration::from_secs(120),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    (
        std::fs::read_to_string(&report).unwrap(),
        read_json(&json),
        std::fs::read_to_string(&html).unwrap(),
    )
}

/// The report's findings section.
fn section(report: &str) -> String {
    report
        .lines()
        .skip_while(|l| !l.starts_with("Findings"))
        .take_while(|l| !l.trim().is_empty())
        .collect::<Vec<_>>()
        .join("\n")
}

fn the_demo_opens_with_its_audit_lock_and_its_line() {
    let dir = TempDir::new("findings-demo");
    let (report, doc, html) = traced(&dir, &["-m", "full"], "demo", &[]);
    let first = &doc["findings"][0];
    println!("{}", section(&report));
    assert_eq!(first["kind"], "lock", "{first}");
    let title = first["title"].as_str().unwrap();
    assert!(title.contains("audit_lock"), "{title}");
    assert!(
        first["location"].as_str().unwrap().contains("demo.c:"),
        "{first}"
    );
    assert_eq!(first["confidence"], "high");
    // Its share is the audit lock's own waits over its waiters' time, from the JSON's
    // edges and threads.
    let g = &doc["sync_graph"];
    let addr = g["objects"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["name"] == "audit_lock")
        .unwrap()["addr"]
        .clone();
    let mut waited = 0u64;
    let mut their = 0u64;
    for e in g["edges"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["object"] == addr)
    {
        let w = e["contended_wait_ns"].as_u64().unwrap_or(0);
        if w > 0 {
            waited += w;
            their += g["threads"]
                .as_array()
                .unwrap()
                .iter()
                .find(|t| t["tid"] == e["tid"])
                .unwrap()["observed_ns"]
                .as_u64()
                .unwrap();
        }
    }
    let share = waited as f64 / their as f64;
    assert!(
        (first["share"].as_f64().unwrap() - share).abs() < 1e-6,
        "{first} vs {share}"
    );
    // The same findings in the report, the saved trace's report and the page.
    let again = run(
        Command::new(rtm_bin())
            .arg("report")
            .arg(dir.join("t.json")),
        Duration::from_secs(60),
    );
    let saved = String::from_utf8_lossy(&again.stdout);
    assert_eq!(section(&saved), section(&report));
    let page_first = html.find("id=\"findings\"").expect("findings on the page");
    let tables = html.find("class=\"cards\"").unwrap();
    assert!(page_first < tables, "findings first");
    assert!(html[page_first..].contains("audit_lock"));
}

fn a_thread_pool_opens_with_its_stats_lock_and_calls_idle_waits_no_problem() {
    let dir = TempDir::new("findings-pool");
    let (report, doc, _) = traced(&dir, &["-m", "contention"], "thread_pool", &["1500"]);
    println!("{}", section(&report));
    let findings = doc["findings"].as_array().unwrap();
    let first = &findings[0];
    assert_eq!(first["kind"], "lock", "{first}");
    assert!(
        first["title"]
            .as_str()
            .unwrap()
            .contains("in handler (thread_pool.c"),
        "{first}"
    );
    assert_eq!(
        first["confidence"], "medium",
        "contention mode sees no holds"
    );
    assert!(first["not_seen"].as_str().unwrap().contains("-m full"));
    assert!(
        findings.iter().any(|f| f["kind"] == "idle"),
        "the pool's waits called out: {findings:#?}"
    );
    assert!(
        !findings
            .iter()
            .any(|f| f["kind"] == "lock" && f["title"].as_str().unwrap().starts_with("condvar")),
        "{findings:#?}"
    );
}
