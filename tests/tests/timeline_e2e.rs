//! `--timeline`: the Perfetto trace, decoded with Perfetto's published schema (not the
//! tracer's encoder), holds the tracks, slices, flows and counters of workloads whose
//! waits, wakes and acquisitions are known from the workloads themselves.

use std::{ffi::OsStr, process::Command, time::Duration};

use rtm_tests::{
    TempDir, Value, decode_timeline, perfetto_python, rtm_bin, run, times_comparable,
    truth_maps, truths, workload,
};
use rtm_tests::{e2e, harness::E2e};

/// This file's tests, each with what it needs besides the tracer.
pub(crate) const TESTS: &[E2e] = &[
    e2e!(waits_wakes_and_counters_of_a_condition_variable, Root, PerfettoSchema),
    e2e!(holds_and_calls_in_full_mode_match_the_workload_count, Root, PerfettoSchema),
    e2e!(the_size_cap_holds_and_what_it_left_out_is_reported, Root, PerfettoSchema),
    e2e!(mpi_messages_are_arrows_and_collectives_are_linked_across_ranks, Root, PerfettoSchema),
    e2e!(barrier_rounds_are_linked_across_threads, Root, PerfettoSchema),
];

/// What a traced run left: the tracer's output and its timeline, decoded with
/// Perfetto's published schema, and the timeline's size.
struct Traced {
    stdout: String,
    stderr: String,
    size: u64,
    doc: Value,
}

/// Runs `rtm-trace --timeline FILE OPTIONS -- PROGRAM ARGS` to its end, asserts it
/// succeeded and decodes the timeline.
fn traced(options: &[&str], program: &OsStr, args: &[&str]) -> Traced {
    let python = perfetto_python();
    let dir = TempDir::new("timeline");
    let file = dir.join("t.pftrace");
    let out = run(
        Command::new(rtm_bin())
            .arg("--timeline")
            .arg(&file)
            .args(options)
            .args(["-o", "/dev/null", "--"])
            .arg(program)
            .args(args),
        Duration::from_secs(120),
    );
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stderr}");
    Traced {
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr,
        size: std::fs::metadata(&file).unwrap().len(),
        doc: decode_timeline(&python, &file),
    }
}

/// The value after `key=` on the workload's `truth cond ...` lines.
fn cond_truth(stdout: &str, key: &str) -> String {
    stdout
        .lines()
        .filter_map(|l| l.strip_prefix("truth cond "))
        .find_map(|l| l.strip_prefix(&format!("{key}=")))
        .unwrap_or_else(|| panic!("no truth {key} in {stdout}"))
        .to_owned()
}

fn track_of(doc: &Value, tid: u64) -> &Value {
    doc["tracks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["kind"] == "thread" && t["tid"].as_u64() == Some(tid))
        .unwrap_or_else(|| panic!("no track for thread {tid}"))
}

fn slices<'a>(doc: &'a Value, track: &Value, prefix: &str) -> Vec<&'a Value> {
    doc["slices"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["track"] == track["uuid"])
        .filter(|s| s["name"].as_str().unwrap().starts_with(prefix))
        .collect()
}

fn ms(s: &Value) -> f64 {
    (s["end"].as_u64().unwrap() - s["begin"].as_u64().unwrap()) as f64 / 1e6
}

fn waits_wakes_and_counters_of_a_condition_variable() {
    // 5 waits the signaler ends after 50 ms each, then one 30 ms wait that times out.
    let Traced { stdout, doc, .. } = traced(
        &["--interval", "0.1"],
        workload("sync_workload").as_os_str(),
        &["cond", "5", "50", "30"],
    );
    let waiter: u64 = cond_truth(&stdout, "waiter").parse().unwrap();
    let signaler: u64 = cond_truth(&stdout, "signaler").parse().unwrap();
    assert_eq!(cond_truth(&stdout, "timedwait"), "timeout");

    assert_eq!(
        doc["clocks"],
        serde_json::json!([3, 6, 1]),
        "monotonic, boot, real"
    );
    assert_eq!(doc["unclosed"], 0, "every slice ends");
    let w = track_of(&doc, waiter);
    let s = track_of(&doc, signaler);
    assert_eq!(s["name"], "signaler", "the thread's own name");
    assert!(
        doc["tracks"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["kind"] == "process"
                && t["pid"].as_u64() == Some(waiter)
                && t["name"] == "sync_workload"),
        "a named process track"
    );

    // The waits on the condition variable: five woken by the signaler, each from a
    // pthread_cond_wait call to a wake inside a pthread_cond_signal call (by the
    // workload's CLOCK_MONOTONIC, the trace's clock: on a loaded machine a waiter back
    // late to its next wait makes that wait shorter than the signaler's 50 ms sleep),
    // and one that timed out after 30 ms.
    let waits = slices(&doc, w, "wait ready_cond");
    let woken: Vec<_> = waits
        .iter()
        .filter(|s| s["args"]["result"] == "woken")
        .collect();
    let timed_out: Vec<_> = waits
        .iter()
        .filter(|s| s["args"]["result"] == "timed out")
        .collect();
    println!(
        "waits: {:?}",
        waits
            .iter()
            .map(|s| (ms(s), s["args"]["result"].clone()))
            .collect::<Vec<_>>()
    );
    assert_eq!(woken.len(), 5, "five woken waits");
    assert_eq!(timed_out.len(), 1, "one timed-out wait");
    // Durations against the workload's clock on the host only: on emulated CPUs the
    // waiter's own steps before its call (the deadline is absolute) take milliseconds.
    let timed = times_comparable("the condition variable's wait times");
    let truth = truth_maps(&stdout);
    let ns = |t: &std::collections::HashMap<String, String>, k: &str| -> u64 {
        t[k].parse().unwrap()
    };
    let calls: Vec<u64> = truth
        .iter()
        .filter(|t| t.contains_key("t0_ns"))
        .map(|t| ns(t, "t0_ns"))
        .collect();
    let signals: Vec<(u64, u64)> = truth
        .iter()
        .filter(|t| t.contains_key("before_ns"))
        .map(|t| (ns(t, "before_ns"), ns(t, "after_ns")))
        .collect();
    assert_eq!(signals.len(), 5, "{stdout}");
    let mut woken = woken.clone();
    woken.sort_by_key(|s| s["begin"].as_u64());
    for (s, &(signal_began, signal_ended)) in woken.iter().zip(&signals) {
        let (begin, end) = (s["begin"].as_u64().unwrap(), s["end"].as_u64().unwrap());
        // Its call: the last to begin before the signal that ended it.
        let call = calls
            .iter()
            .copied()
            .filter(|&t0| t0 <= signal_began)
            .max()
            .unwrap_or_else(|| panic!("no call before the signal: {calls:?}"));
        println!(
            "woken wait {:.3} ms: from {} us after its call to {} us into its signal",
            ms(s),
            begin.saturating_sub(call) / 1000,
            end.saturating_sub(signal_began) / 1000
        );
        assert!(
            call <= begin && signal_began <= end && end <= signal_ended,
            "a wait from {begin} to {end}: its call began at {call}, its signal spans \
             {signal_began} to {signal_ended}"
        );
        assert_eq!(s["args"]["waker tid"].as_u64(), Some(signaler));
    }
    assert!(
        !timed || ms(timed_out[0]) >= 29.0,
        "timed out after {} ms",
        ms(timed_out[0])
    );

    // Each woken wait: the wake an instant on the signaler, an arrow from it to the
    // waiter's `runnable` slice, which starts where the wait's sleep ended.
    let runnable = slices(&doc, w, "runnable");
    let mut arrows = 0;
    for r in &runnable {
        let Some(id) = doc["slices"].as_array().and_then(|_| {
            doc["flows_in"]
                .as_object()
                .unwrap()
                .iter()
                .find(|(_, f)| f["track"] == w["uuid"] && f["ts"] == r["begin"])
                .map(|(k, _)| k.clone())
        }) else {
            continue;
        };
        let from = &doc["flows_out"][&id];
        assert_eq!(from["track"], s["uuid"], "the arrow starts on the signaler");
        assert_eq!(from["ts"], r["begin"], "at the wake");
        assert!(
            slices(&doc, w, "wait ")
                .iter()
                .any(|wt| wt["end"] == r["begin"]),
            "the runnable slice follows a wait"
        );
        arrows += 1;
    }
    assert!(arrows >= 5, "{arrows} wake arrows to the waiter's waits");
    let wakes = doc["instants"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| {
            i["track"] == s["uuid"] && i["name"].as_str().unwrap().starts_with("wake ready_cond")
        })
        .count();
    assert!(wakes >= 5, "{wakes} wake instants on the signaler");

    // Counter tracks on the same axis: the system and the traced process.
    let counter = |name: &str| {
        let t = doc["tracks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["kind"] == "counter" && t["name"] == name)
            .unwrap_or_else(|| panic!("no counter track {name}"));
        doc["counters"][t["uuid"].to_string()]
            .as_array()
            .map_or(0, |v| v.len())
    };
    assert!(counter("CPU busy %") >= 1);
    assert!(counter("run queue (tasks running)") >= 1);
    assert!(counter(&format!("RSS (pid {waiter})")) >= 1);
    assert!(counter("rtm-trace events/s") >= 1);
}

fn holds_and_calls_in_full_mode_match_the_workload_count() {
    let Traced { stdout, doc, .. } = traced(
        &["-m", "full"],
        workload("mutex_workload").as_os_str(),
        &[
            "--threads",
            "4",
            "--iters",
            "150",
            "--hold-us",
            "50",
            "--private",
            "40",
        ],
    );
    assert_eq!(doc["unclosed"], 0, "every slice ends");
    for t in truths(&stdout) {
        // Each thread's holds of the shared lock and of its own, from its own count.
        let holds: Vec<&Value> = doc["tracks"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|h| h["kind"] == "child" && h["name"] == "holds")
            .filter(|h| h["parent"] == track_of(&doc, t.tid)["uuid"])
            .collect();
        assert_eq!(holds.len(), 1, "thread {} has a holds track", t.tid);
        let shared = slices(&doc, holds[0], "hold shared_lock").len() as u64;
        let private = slices(&doc, holds[0], "hold private_locks").len() as u64;
        println!(
            "thread {}: {shared} holds of shared_lock (truth {}), {private} of its own (truth {})",
            t.tid,
            t.get("shared"),
            t.get("private")
        );
        assert_eq!(shared, t.get("shared"));
        assert_eq!(private, t.get("private"));
    }
}

fn the_size_cap_holds_and_what_it_left_out_is_reported() {
    let Traced {
        stderr, size, doc, ..
    } = traced(
        &["-m", "full", "--timeline-max-mb", "1"],
        workload("mutex_workload").as_os_str(),
        &[
            "--threads",
            "4",
            "--iters",
            "200",
            "--hold-us",
            "1",
            "--private",
            "50000",
        ],
    );
    println!("timeline: {size} bytes; {stderr}");
    assert!(size <= 1 << 20, "{size} bytes over a 1 MiB cap");
    assert!(
        size > 1 << 19,
        "the cap was reached, not missed: {size} bytes"
    );
    let left: u64 = stderr
        .split("MiB): ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no report of events left out: {stderr}"));
    assert!(left > 0);
    // What was written is a whole, decodable trace.
    assert!(!doc["slices"].as_array().unwrap().is_empty());
}

fn mpi_messages_are_arrows_and_collectives_are_linked_across_ranks() {
    let ranks = 4;
    let steps = rtm_tests::mpi::STEPS.to_string();
    let ring = workload("mpi_ring_openmpi");
    let Traced { doc, .. } = traced(
        &["--mpi"],
        OsStr::new("mpirun.openmpi"),
        &[
            "--allow-run-as-root",
            "--oversubscribe",
            "-np",
            &ranks.to_string(),
            ring.to_str().unwrap(),
            &steps,
        ],
    );
    assert_eq!(doc["unclosed"], 0);

    // Each arrow joins a "send to rank D" instant to a "received from rank S" one.
    let instants = doc["instants"].as_array().unwrap();
    let at = |f: &Value, prefix: &str| -> Option<i64> {
        instants
            .iter()
            .find(|i| i["track"] == f["track"] && i["ts"] == f["ts"])
            .and_then(|i| i["name"].as_str()?.strip_prefix(prefix)?.parse().ok())
    };
    let mut seen = std::collections::BTreeMap::<(i64, i64), u64>::new();
    for (id, from) in doc["flows_out"].as_object().unwrap() {
        let Some(dst) = at(from, "send to rank ") else {
            continue;
        };
        let to = &doc["flows_in"][id];
        let src = at(to, "received from rank ").expect("the arrow ends at a receive");
        *seen.entry((src, dst)).or_default() += 1;
    }
    let expected: std::collections::BTreeMap<(i64, i64), u64> =
        rtm_tests::mpi::expected(ranks, true)
            .into_iter()
            .map(|(k, v)| (k, v.0))
            .collect();
    println!("arrows per (src, dst): {seen:?}\nthe workload's messages: {expected:?}");
    assert_eq!(seen, expected, "one arrow per message the workload sends");

    // A collective's instance is one slice in each rank, linked by its correlation id.
    let mut instances = std::collections::BTreeMap::<u64, Vec<&str>>::new();
    for s in doc["slices"].as_array().unwrap() {
        if let Some(c) = s["correlation"].as_u64().filter(|c| *c != 0) {
            instances
                .entry(c)
                .or_default()
                .push(s["name"].as_str().unwrap());
        }
    }
    assert!(
        instances.len() >= 20,
        "{} collective instances",
        instances.len()
    );
    for (c, names) in &instances {
        assert_eq!(names.len() as i64, ranks, "instance {c:#x}: {names:?}");
        assert!(
            names.iter().all(|n| *n == names[0]),
            "instance {c:#x}: {names:?}"
        );
    }
}

fn barrier_rounds_are_linked_across_threads() {
    // 4 threads, 6 rounds; thread i works (i+1) ms before each wait.
    let Traced { doc, .. } = traced(
        &["-m", "full"],
        workload("sync_workload").as_os_str(),
        &["barrier", "4", "6", "1000"],
    );
    let mut rounds = std::collections::BTreeMap::<u64, Vec<u64>>::new();
    for s in doc["slices"].as_array().unwrap() {
        let c = s["correlation"].as_u64().unwrap_or(0);
        if c != 0 && s["name"].as_str().unwrap().starts_with("wait ") {
            rounds
                .entry(c)
                .or_default()
                .push(s["track"].as_u64().unwrap());
        }
    }
    println!("rounds: {rounds:?}");
    assert_eq!(rounds.len(), 6, "one linked instance per round");
    for (c, tracks) in &rounds {
        let mut t = tracks.clone();
        t.sort_unstable();
        t.dedup();
        assert_eq!(
            t.len(),
            4,
            "round {c:#x}: one wait in each of the 4 threads"
        );
    }
}
