//! What-if estimates checked against the real change: a program with knobs (whatif.c:
//! threads, rounds, the hold, the work outside the lock) and the demo (its audit hold)
//! are traced in full mode, the first finding's estimate for a halved hold is read from
//! the JSON, then the program is run untraced with the hold as it was and halved; the
//! estimate must be within 20% of the speedup the program measures with its own clock.
//! Traced and untraced runs alternate (traced, as is, halved; three times) and the
//! medians are compared, so a burst of load on the machine decides neither side.

use std::{process::Command, time::Duration};

use rtm_tests::{TempDir, Value, read_json, rtm_bin, run, workload};
use rtm_tests::{e2e, harness::E2e};

/// This file's tests, each with what it needs besides the tracer.
pub(crate) const TESTS: &[E2e] = &[
    e2e!(a_lock_bound_program_nearly_doubles_as_predicted, Root),
    e2e!(a_program_busy_outside_its_lock_gains_about_nothing_as_predicted, Root),
    e2e!(a_lock_near_saturation_gains_what_the_queue_model_predicts, Root),
    e2e!(the_demo_predicts_what_halving_its_audit_hold_buys, Root),
];

/// Rounds of (traced, as is, halved).
const ROUNDS: usize = 3;
/// How far the estimate may be from the measured speedup.
const WITHIN: f64 = 0.20;

/// The elapsed time the program prints: `elapsed_ns=N` (whatif) or `in X s` (demo).
fn elapsed_s(program: &str, args: &[&str]) -> f64 {
    let out = run(
        Command::new(workload(program)).args(args),
        Duration::from_secs(120),
    );
    assert!(out.status.success(), "{program} {args:?}: {out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    if let Some(v) = text.split("elapsed_ns=").nth(1) {
        let n: f64 = v.split_whitespace().next().unwrap().parse().unwrap();
        return n / 1e9;
    }
    let secs = text
        .rsplit(" in ")
        .next()
        .and_then(|t| t.trim().strip_suffix(" s"))
        .unwrap_or_else(|| panic!("no elapsed time in {text:?}"));
    secs.parse().unwrap()
}

/// The speedup the program measures when `halved` replaces `as_is`.
fn measured_speedup(program: &str, as_is: &[&str], halved: &[&str]) -> f64 {
    elapsed_s(program, as_is) / elapsed_s(program, halved)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Traces `program args` in full mode; returns the JSON document.
fn traced(dir: &TempDir, program: &str, args: &[&str]) -> Value {
    let json = dir.join("t.json");
    let out = run(
        Command::new(rtm_bin())
            .args(["-m", "full", "-o"])
            .arg(dir.join("r.txt"))
            .arg("--json")
            .arg(&json)
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
    println!(
        "{}",
        std::fs::read_to_string(dir.join("r.txt"))
            .unwrap()
            .lines()
            .skip_while(|l| !l.starts_with("Findings"))
            .take_while(|l| !l.trim().is_empty())
            .collect::<Vec<_>>()
            .join("\n")
    );
    read_json(&json)
}

/// The first finding's what-if: (estimate, low, high, the finding).
fn estimate(doc: &Value) -> (f64, f64, f64, Value) {
    let first = doc["findings"][0].clone();
    let w = &first["what_if"];
    assert!(w.is_object(), "no what-if on the first finding: {first:#}");
    let f = |k: &str| w[k].as_f64().unwrap();
    assert!(f("low") <= f("speedup") && f("speedup") <= f("high"), "{w}");
    (f("speedup"), f("low"), f("high"), first)
}

/// Traces `program as_is` and runs it as is and halved, [`ROUNDS`] times; checks the
/// median estimate against the median measured speedup. Returns them and the first
/// finding of the last traced run.
fn check(name: &str, program: &str, as_is: &[&str], halved: &[&str]) -> (f64, f64, Value) {
    let dir = TempDir::new(name);
    let (mut predicted, mut measured, mut first) = (Vec::new(), Vec::new(), Value::Null);
    for _ in 0..ROUNDS {
        let doc = traced(&dir, program, as_is);
        let (p, low, high, f) = estimate(&doc);
        let m = measured_speedup(program, as_is, halved);
        println!("{name}: predicted x{p:.3} [{low:.3}-{high:.3}], measured x{m:.3}");
        predicted.push(p);
        measured.push(m);
        first = f;
    }
    let (p, m) = (median(predicted.clone()), median(measured.clone()));
    println!("{name}: median predicted x{p:.3}, median measured x{m:.3}");
    assert!(
        (p / m - 1.0).abs() <= WITHIN,
        "{name}: predicted x{p:.3} ({predicted:.3?}) but halving the hold gave x{m:.3} \
         ({measured:.3?}): {first:#}"
    );
    (p, m, first)
}

fn a_lock_bound_program_nearly_doubles_as_predicted() {
    // 4 threads want a lock held 300 us after 300 us outside it (sleeping, as if on
    // I/O): the lock is busy all the time and sets the pace.
    let (predicted, measured, first) = check(
        "whatif-lock-bound",
        "whatif",
        &["4", "500", "300", "300", "sleep"],
        &["4", "500", "150", "300", "sleep"],
    );
    assert_eq!(first["kind"], "lock", "{first:#}");
    assert!(measured > 1.4 && predicted > 1.4, "{predicted} {measured}");
}

fn a_program_busy_outside_its_lock_gains_about_nothing_as_predicted() {
    // 2 threads computing 2 ms between 20 us holds: no lock limits it, and the estimate
    // (on the "no lock limits" finding) says about 1.0x.
    let (predicted, _, first) = check(
        "whatif-cpu-bound",
        "whatif",
        &["2", "300", "20", "2000", "spin"],
        &["2", "300", "10", "2000", "spin"],
    );
    assert_eq!(first["kind"], "none", "{first:#}");
    assert!((0.97..1.05).contains(&predicted), "{predicted}");
}

fn a_lock_near_saturation_gains_what_the_queue_model_predicts() {
    // 4 threads, 200 us holds after 500 us outside: the lock is busy most of the time,
    // and how long the queues are decides the gain.
    check(
        "whatif-mixed",
        "whatif",
        &["4", "500", "200", "500", "sleep"],
        &["4", "500", "100", "500", "sleep"],
    );
}

fn the_demo_predicts_what_halving_its_audit_hold_buys() {
    let (_, _, first) = check(
        "whatif-demo",
        "demo",
        &["--audit-us", "2000"],
        &["--audit-us", "1000"],
    );
    assert!(
        first["what_if"]["change"]
            .as_str()
            .unwrap()
            .starts_with("the hold of audit_lock (locked at demo.c:"),
        "{first:#}"
    );
}
