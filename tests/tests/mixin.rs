//! The monitoring mixin in deploy/mixin: promtool checks the rules and runs their unit
//! tests, every recording and alerting rule has a test, and the Grafana dashboard is
//! valid JSON with the panels the docs promise, whose every expression parses (promtool
//! checks them as rules) and names only metrics the agent's code exports. (That a real
//! agent exports them is checked by agent_modes_e2e.)

use std::{collections::BTreeSet, path::Path, process::Command};

use rtm_tests::{TempDir, mixin};
use rtm_tests::{e2e, harness::E2e};

/// This file's tests, each with what it needs besides the tracer.
pub(crate) const TESTS: &[E2e] = &[
    e2e!(promtool_checks_the_rules_and_passes_their_unit_tests, Tool("promtool", "prometheus")),
    e2e!(
        the_dashboard_has_its_panels_and_every_expression_parses_and_is_exported,
        Tool("promtool", "prometheus")
    ),
];

/// Runs promtool with `args` in deploy/mixin; asserts it succeeded; returns its output.
fn run_promtool(args: &[&str], dir: &Path) -> String {
    let out = Command::new("promtool")
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "promtool {args:?}:\n{text}");
    text
}

/// The names after `key:` in the rule file (`record` or `alert`).
fn rule_names(key: &str) -> Vec<String> {
    let text = std::fs::read_to_string(mixin::file("rules.yml")).unwrap();
    text.lines()
        .filter_map(|l| {
            l.trim()
                .trim_start_matches("- ")
                .strip_prefix(&format!("{key}:"))
        })
        .map(|n| n.trim().to_owned())
        .collect()
}

fn promtool_checks_the_rules_and_passes_their_unit_tests() {
    let dir = mixin::file("");
    let out = run_promtool(&["check", "rules", "rules.yml"], &dir);
    println!("{out}");
    let out = run_promtool(&["test", "rules", "tests.yml"], &dir);
    println!("{out}");
    assert!(out.contains("SUCCESS"), "{out}");
    // Every rule is tested: each recording rule's name is an expression tested, each
    // alert is an alertname tested.
    let tests = std::fs::read_to_string(mixin::file("tests.yml")).unwrap();
    let records = rule_names("record");
    let alerts = rule_names("alert");
    assert!(
        records.len() >= 10 && alerts.len() >= 6,
        "{records:?} {alerts:?}"
    );
    for r in &records {
        assert!(
            tests.contains(&format!("expr: {r}\n")),
            "recording rule {r} has no test in tests.yml"
        );
    }
    for a in &alerts {
        assert!(
            tests.contains(&format!("alertname: {a}\n")),
            "alert {a} has no test in tests.yml"
        );
    }
    println!(
        "{} recording rules and {} alerts, each tested",
        records.len(),
        alerts.len()
    );
}

/// The metric names the agent's code exports: the names of its families, with the
/// suffixes the exposition adds.
fn exported_in_code() -> BTreeSet<String> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../rtm-userspace/src/agent");
    let text: String = ["metrics.rs", "metrics/families.rs"]
        .iter()
        .map(|f| std::fs::read_to_string(src.join(f)).unwrap())
        .collect();
    let mut names = BTreeSet::new();
    for part in text.split('"').skip(1).step_by(2) {
        if (part.starts_with("rtm_") || part.starts_with("process_"))
            && part.bytes().all(|b| b.is_ascii_lowercase() || b == b'_')
        {
            for suffix in ["", "_total", "_bucket", "_count", "_sum", "_info"] {
                names.insert(format!("{part}{suffix}"));
            }
        }
    }
    names
}

fn the_dashboard_has_its_panels_and_every_expression_parses_and_is_exported() {
    let d = mixin::dashboard();
    assert!(d["uid"].is_string() && d["title"].is_string(), "uid, title");
    let panels = mixin::panels(&d);
    let titles: Vec<&str> = panels.iter().filter_map(|p| p["title"].as_str()).collect();
    for want in [
        "Top locks by time waited",
        "Waiter -> waker",
        "Futex sleep lengths",
        "Threads per target",
        "Agent health",
        "Agent up and ready",
        "Events lost",
        "MPI traffic between ranks",
    ] {
        assert!(titles.contains(&want), "no panel {want:?} in {titles:?}");
    }
    let heatmap = panels
        .iter()
        .find(|p| p["type"] == "heatmap")
        .expect("a heatmap");
    assert_eq!(heatmap["targets"][0]["format"], "heatmap");
    let mut ids = BTreeSet::new();
    for p in panels.iter().filter(|p| p["type"] != "row") {
        let title = p["title"].as_str().unwrap_or("?");
        assert!(ids.insert(p["id"].as_u64().unwrap()), "{title}: id taken");
        let g = &p["gridPos"];
        assert!(
            g["w"].as_u64().is_some_and(|w| w > 0)
                && g["x"].as_u64().unwrap() + g["w"].as_u64().unwrap() <= 24,
            "{title}: gridPos {g}"
        );
        let targets = p["targets"].as_array().unwrap_or_else(|| panic!("{title}"));
        assert!(!targets.is_empty(), "{title}: no query");
        for t in targets {
            assert!(
                t["expr"].as_str().is_some_and(|e| !e.is_empty()),
                "{title}: {t}"
            );
        }
    }
    // Every metric named is one the agent's code exports.
    let exported = exported_in_code();
    assert!(exported.contains("rtm_lock_sleeps_total"), "{exported:?}");
    let exprs = mixin::dashboard_exprs();
    let used: BTreeSet<String> = exprs
        .iter()
        .chain(mixin::rule_exprs().iter())
        .flat_map(|e| mixin::names_in(e))
        .collect();
    let unknown: Vec<&String> = used.iter().filter(|n| !exported.contains(*n)).collect();
    assert!(unknown.is_empty(), "not exported by the agent: {unknown:?}");
    println!("{} metric names used, all exported: {used:?}", used.len());
    // Every expression parses: promtool checks them as recording rules.
    let dir = TempDir::new("mixin-dashboard");
    let mut rules = String::from("groups:\n  - name: dashboard\n    rules:\n");
    for (i, e) in exprs.iter().enumerate() {
        rules += &format!(
            "      - record: dashboard_expr_{i}\n        expr: {}\n",
            serde_json::to_string(e).unwrap()
        );
    }
    std::fs::write(dir.join("dashboard_rules.yml"), &rules).unwrap();
    let out = run_promtool(&["check", "rules", "dashboard_rules.yml"], &dir.0);
    println!("{} dashboard expressions: {out}", exprs.len());
}
