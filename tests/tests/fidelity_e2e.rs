//! Fidelity: rtm-trace's numbers against what the workloads measured themselves
//! (clock_gettime around their own critical sections, lock calls and barrier arrivals).
//! Each comparison prints expected vs measured. MPI call counts and bytes are compared
//! exactly in mpi_e2e.rs, a spinning thread's CPU share in ambient_e2e.rs.

use rtm_tests::{Value, edge, object, trace_json, truths, within, workload};
use rtm_tests::{e2e, harness::E2e};

/// This file's tests, each with what it needs besides the tracer.
pub(crate) const TESTS: &[E2e] = &[
    e2e!(one_millisecond_holds_and_waits_within_two_percent, Root),
    e2e!(ten_millisecond_holds_and_waits_within_two_percent, Root),
    e2e!(barrier_imbalance_within_two_percent, Root),
];

fn traced(bin: &str, args: &[&str]) -> (String, Value) {
    let (stdout, doc) = trace_json(&["--mode", "full", "--bpf-stats"], &workload(bin), args);
    assert_eq!(doc["run"]["losses"]["ring_full"], 0);
    (stdout, doc)
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

/// Two threads take `shared_lock` `iters` times each, holding it `hold_us`.
fn holds_and_waits(iters: u64, hold_us: u64) {
    let (stdout, doc) = traced(
        "mutex_workload",
        &[
            "--threads",
            "2",
            "--iters",
            &iters.to_string(),
            "--hold-us",
            &hold_us.to_string(),
            "--private",
            "0",
        ],
    );
    // The kernel's statistics count every run of the lock/unlock probe.
    let mark = doc["run"]["bpf"]["programs"]
        .as_array()
        .expect("--bpf-stats")
        .iter()
        .find(|p| p["name"] == "call_mark")
        .expect("call_mark ran");
    let runs = mark["runs"].as_u64().unwrap();
    println!("call_mark: {runs} runs, {} ns per run", mark["ns_per_run"]);
    assert!(runs >= 4 * iters, "{mark}");
    let shared = object(&doc, "shared_lock").expect("shared_lock named");
    let addr = shared["addr"].as_str().unwrap();
    for t in truths(&stdout) {
        let e = edge(&doc, t.tid, addr).expect("edge for the thread");
        println!("thread {}:", t.tid);
        // Counts are exact.
        assert_eq!(e["acquisitions"].as_u64(), Some(t.get("shared")));
        // Time the thread spent runnable, not running, around its lock and unlock calls
        // (preempted, or woken and not yet on a CPU): between a probe and the thread's
        // clock read it is in one's times and not the other's, so the probes' hold may
        // be longer by up to it, and their wait shorter (0 on an idle machine).
        let delay = t.get("edge_delay_ns") as f64;
        let (hold, n) = (t.get("hold_ns") as f64, t.get("shared") as f64);
        between(
            f(&e["hold"]["mean_ns"]),
            (hold / n, (hold + delay) / n),
            0.02,
            "  hold mean ns",
        );
        between(
            f(&e["hold"]["total_ns"]),
            (hold, hold + delay),
            0.02,
            "  hold total ns",
        );
        // Waiting is measured around pthread_mutex_lock by the thread itself; with two
        // threads alternating on long sections most acquisitions wait a whole section.
        let wait = t.get("wait_ns") as f64;
        between(
            f(&e["wait"]["total_ns"]),
            ((wait - delay).max(0.0), wait),
            0.02,
            "  wait total ns",
        );
    }
}

/// Asserts `measured` is within `tol` (a fraction) of the range `(lo, hi)`, printing it.
fn between(measured: f64, (lo, hi): (f64, f64), tol: f64, what: &str) {
    if hi - lo < 1.0 {
        return within(measured, lo, tol, what);
    }
    println!("{what}: expected {lo:.1} to {hi:.1}, measured {measured:.1}");
    assert!(
        measured >= lo * (1.0 - tol) && measured <= hi * (1.0 + tol),
        "{what}: measured {measured}, expected {lo} to {hi} (within {tol})"
    );
}

fn one_millisecond_holds_and_waits_within_two_percent() {
    holds_and_waits(60, 1_000);
}

fn ten_millisecond_holds_and_waits_within_two_percent() {
    holds_and_waits(10, 10_000);
}

fn barrier_imbalance_within_two_percent() {
    let (stdout, doc) = traced("sync_workload", &["barrier", "3", "20", "4000"]);
    // `ROUND spread_ns=NS last=I margin_ns=NS preempted=N`
    let truth: Vec<(u64, f64, u64)> = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("truth barrier round="))
        .map(|r| {
            let (round, rest) = r.split_once(' ').expect("round line");
            let field = |key: &str| -> f64 {
                rest.split_whitespace()
                    .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
                    .unwrap_or_else(|| panic!("{key} in {r}"))
                    .parse()
                    .unwrap()
            };
            (
                round.parse().unwrap(),
                field("spread_ns"),
                field("preempted") as u64,
            )
        })
        .collect();
    assert_eq!(truth.len(), 20, "{stdout}");
    let b = doc["sync_graph"]["objects"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["name"] == "round_barrier")
        .expect("round_barrier");
    let rounds = b["barrier"]["round_list"].as_array().unwrap();
    assert_eq!(rounds.len(), 20);
    // A thread preempted between its clock reading and its arrival (a loaded machine)
    // reached the probe later than its clock says: that round's truth is not exact.
    let mut checked = 0;
    for (r, spread, preempted) in truth {
        if preempted > 0 {
            println!("round {r}: {preempted} thread(s) preempted around arrival, not compared");
            continue;
        }
        // 2%, or 5 us on a round whose spread is short: each arrival reaches the probe
        // a uprobe trap (1-3 us here, more on a loaded machine) after the thread's own
        // clock reading, which is 9% of a 35 us spread (seen under load in CI).
        let measured = f(&rounds[r as usize]["spread_ns"]);
        if (measured - spread).abs() <= 5_000.0 {
            println!(
                "round {r} spread ns: expected {spread:.0}, measured {measured:.0} (within 5 us)"
            );
        } else {
            within(measured, spread, 0.02, &format!("round {r} spread ns"));
        }
        checked += 1;
    }
    println!("{checked} of 20 rounds compared");
    assert!(checked >= 5, "only {checked} of 20 rounds undisturbed");
}
