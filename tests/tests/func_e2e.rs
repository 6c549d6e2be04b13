//! `--func`: timed functions against a workload that counts its own calls and clocks
//! them itself (func_workload.c): 1 ms and 10 ms busy functions, a static recursive
//! one, one in a shared library; a stripped copy; `--tid` and `--cpu` filters on a
//! running process, and a call still running when the trace ends.

use std::{
    collections::HashMap,
    io::Write as _,
    process::Command,
    time::Duration,
};

use rtm_tests::{
    LineWatch, TempDir, Truth, Value, decode_timeline, perfetto_python, read_json,
    rtm_bin, run, spawn, truth_maps, truths, workload,
};
use rtm_tests::{e2e, harness::E2e};

/// This file's tests, each with what it needs besides the tracer.
pub(crate) const TESTS: &[E2e] = &[
    e2e!(calls_and_times_match_the_workloads_own_per_thread, Root, PerfettoSchema),
    e2e!(threads_sharing_a_slot_are_each_timed_exactly, Root),
    e2e!(calls_kept_unsent_when_the_trace_ends_are_counted, Root, PerfettoSchema),
    e2e!(a_stripped_program_is_refused_with_the_reason_and_its_library_still_timed, Root),
    e2e!(what_cannot_be_timed_is_refused_before_anything_runs, Root),
    e2e!(tid_and_cpu_filters_keep_exactly_their_calls_and_running_calls_are_reported, Root),
];

const T: Duration = Duration::from_secs(120);

/// The JSON's rows for `function`, by thread.
fn rows<'a>(doc: &'a Value, function: &str) -> HashMap<u64, &'a Value> {
    doc["functions"]["threads"]
        .as_array()
        .expect("functions in the JSON")
        .iter()
        .filter(|r| r["name"] == function)
        .map(|r| (r["tid"].as_u64().unwrap(), r))
        .collect()
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a number: {v}"))
}

/// A total measured by the probes (entry to return) against the workload's own clocks:
/// read inside the function (`inside`, after the entry probe and before the return
/// one) and by the caller around each call (`around`, before the entry probe and after
/// the return one). The probes' time lies between the two on any machine, however
/// loaded (a preemption widens the bracket, never breaks it); 1 us a call covers the
/// clock reads.
fn bracketed(measured: u64, t: &Truth, key: &str, calls: u64, what: &str) {
    let (inside, around) = (
        t.get(&format!("{key}_ns")),
        t.get(&format!("{key}_around_ns")),
    );
    let slack = calls * 1_000;
    println!(
        "{what}: workload {inside} ns inside, {around} ns around; rtm-trace {measured} ns \
         ({calls} calls)"
    );
    assert!(
        measured + slack >= inside && measured <= around + slack,
        "{what}: rtm-trace {measured} ns, not between the workload's {inside} ns (inside) \
         and {around} ns (around) ({calls} calls)"
    );
}

/// The per-thread truth lines with counts (not the start lines).
fn workers(stdout: &str) -> Vec<Truth> {
    truths(stdout)
        .into_iter()
        .filter(|t| t.fields.contains_key("work_1ms"))
        .collect()
}

fn calls_and_times_match_the_workloads_own_per_thread() {
    let python = perfetto_python();
    let dir = TempDir::new("func");
    let (json, timeline) = (dir.join("t.json"), dir.join("t.pftrace"));
    let rounds = 15;
    let out = run(
        Command::new(rtm_bin())
            .args(["-o", "/dev/null", "--json"])
            .arg(&json)
            .arg("--timeline")
            .arg(&timeline)
            // A glob (work_1ms, work_10ms), a static function found by the symbol
            // table, and one in a library the program loads.
            .args(["--func", "work_*", "--func", "descend"])
            .args(["--func", "lib_step@libfuncs", "--"])
            .arg(workload("func_workload"))
            .args(["3", &rounds.to_string(), "20"]),
        T,
    );
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc = read_json(&json);
    assert_eq!(doc["run"]["losses"]["missed_entry"], 0);
    assert_eq!(doc["run"]["losses"]["ring_full"], 0);
    let names: Vec<&str> = doc["functions"]["functions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["name"].as_str().unwrap())
        .collect();
    for f in ["work_1ms", "work_10ms", "descend", "lib_step"] {
        assert!(names.contains(&f), "{f} not timed: {names:?}");
    }
    let lib = doc["functions"]["functions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["name"] == "lib_step")
        .unwrap();
    assert!(
        lib["module"].as_str().unwrap().ends_with("libfuncs.so"),
        "{lib}"
    );
    let threads = workers(&stdout);
    assert_eq!(threads.len(), 3, "{stdout}");
    for t in &threads {
        for f in ["work_1ms", "work_10ms", "lib_step"] {
            let r = rows(&doc, f)[&t.tid];
            let calls = t.get(f);
            assert_eq!(u(&r["time"]["count"]), calls, "{f} calls of {}", t.tid);
            assert_eq!(u(&r["recursive_calls"]), 0);
            bracketed(u(&r["outer_ns"]), t, f, calls, f);
        }
        // descend(3): four calls a round, three of them inside the first.
        let r = rows(&doc, "descend")[&t.tid];
        assert_eq!(u(&r["time"]["count"]), t.get("descend"));
        assert_eq!(u(&r["recursive_calls"]), 3 * rounds);
        bracketed(
            u(&r["outer_ns"]),
            t,
            "descend",
            rounds,
            "descend (outermost)",
        );
        // The inner calls end at the bottom: the smallest is the 200 us of busy work.
        let min = u(&r["time"]["min_ns"]);
        assert!((190_000..2_000_000).contains(&min), "{r}");
        assert_eq!(u(&r["running"]), 0);
    }
    // The saved trace renders them again (no root needed for that).
    let again = run(Command::new(rtm_bin()).arg("report").arg(&json), T);
    let text = String::from_utf8_lossy(&again.stdout);
    assert!(
        text.contains("Timed functions") && text.contains("work_10ms"),
        "{text}"
    );
    // The timeline: a slice per call on each thread's "timed functions" track.
    let tl = decode_timeline(&python, &timeline);
    assert_eq!(tl["unclosed"], 0);
    let lanes: Vec<&Value> = tl["tracks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["name"] == "timed functions")
        .collect();
    assert_eq!(lanes.len(), 3, "a track per thread");
    let slices = tl["slices"].as_array().unwrap();
    let count = |name: &str| slices.iter().filter(|s| s["name"] == name).count() as u64;
    let total = |key: &str| threads.iter().map(|t| t.get(key)).sum::<u64>();
    assert_eq!(count("work_1ms"), total("work_1ms"));
    assert_eq!(count("descend"), total("descend"));
    assert!(
        slices
            .iter()
            .filter(|s| s["name"] == "descend")
            .any(|s| s["args"]["recursion depth"] == 3),
        "the innermost descend says its depth"
    );
}

/// Threads whose tids share one slot of the kernel's per-thread table of calls in
/// flight: the first holds the slot, the others keep theirs in the fallback map; each
/// thread's calls are still counted exactly, recursion included.
fn threads_sharing_a_slot_are_each_timed_exactly() {
    let dir = TempDir::new("func-slots");
    let json = dir.join("t.json");
    let slots = rtm_common::names::MAX_FUNC_SLOTS;
    let rounds = 10;
    let out = run(
        Command::new(rtm_bin())
            .args(["-o", "/dev/null", "--json"])
            .arg(&json)
            .args(["--func", "work_1ms", "--func", "descend", "--"])
            .arg(workload("func_workload"))
            .args(["3", &rounds.to_string(), "20", "0", "0", &slots.to_string()]),
        T,
    );
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let threads = workers(&stdout);
    assert_eq!(threads.len(), 3, "{stdout}");
    let residues: Vec<u64> = threads.iter().map(|t| t.tid % u64::from(slots)).collect();
    assert!(residues.iter().all(|&r| r == residues[0]), "{residues:?}");
    let doc = read_json(&json);
    assert_eq!(doc["run"]["losses"]["missed_entry"], 0);
    assert_eq!(doc["run"]["losses"]["pending_full"], 0);
    for t in &threads {
        let r = rows(&doc, "work_1ms")[&t.tid];
        assert_eq!(u(&r["time"]["count"]), t.get("work_1ms"), "{}", t.tid);
        bracketed(
            u(&r["outer_ns"]),
            t,
            "work_1ms",
            t.get("work_1ms"),
            "work_1ms",
        );
        let r = rows(&doc, "descend")[&t.tid];
        assert_eq!(u(&r["time"]["count"]), t.get("descend"), "{}", t.tid);
        assert_eq!(u(&r["recursive_calls"]), 3 * rounds);
    }
}

/// Each thread sends its finished calls a few at a time: calls kept unsent when the
/// trace ends (the threads still alive) are taken then, into the JSON and the timeline.
fn calls_kept_unsent_when_the_trace_ends_are_counted() {
    let python = perfetto_python();
    let dir = TempDir::new("func-kept");
    let (json, timeline) = (dir.join("t.json"), dir.join("t.pftrace"));
    // Fewer calls a thread than a batch, within the time a batch waits; the threads
    // then stay alive past the trace's end.
    let calls = rtm_common::FUNC_BATCH as u64 - 3;
    let mut app = spawn(
        Command::new(rtm_bin())
            .args(["-o", "/dev/null", "-d", "2", "--json"])
            .arg(&json)
            .arg("--timeline")
            .arg(&timeline)
            .args(["--func", "work_1ms", "--"])
            .arg(workload("func_workload"))
            // The threads linger 4 s (rtm-trace's stdio, held by the workload, closes
            // then).
            .args(["2", &calls.to_string(), "20", "0", "0", "0", "4000"]),
    );
    let mut lines = LineWatch::new(app.child.stdout.take().unwrap());
    let done: Vec<Truth> = (0..2)
        .map(|_| lines.wait_for("work_1ms=", Duration::from_secs(30)))
        .flat_map(|l| workers(&l))
        .collect();
    let out = app.wait_output(T);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc = read_json(&json);
    assert_eq!(done.len(), 2);
    for t in &done {
        assert_eq!(t.get("work_1ms"), calls);
        let r = rows(&doc, "work_1ms")[&t.tid];
        assert_eq!(u(&r["time"]["count"]), calls, "{}", t.tid);
        bracketed(u(&r["outer_ns"]), t, "work_1ms", calls, "work_1ms");
    }
    let tl = decode_timeline(&python, &timeline);
    let n = tl["slices"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["name"] == "work_1ms")
        .count() as u64;
    assert_eq!(n, 2 * calls, "a slice per call on the timeline");
}

fn a_stripped_program_is_refused_with_the_reason_and_its_library_still_timed() {
    let out = run(
        Command::new(rtm_bin())
            .args(["-o", "/dev/null", "--func", "work_1ms", "--"])
            .arg(workload("func_workload_stripped"))
            .args(["1", "2", "0"]),
        T,
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("--func work_1ms: no function matches") && err.contains("stripped"),
        "{err}"
    );
    // Its library's exported function is known.
    let dir = TempDir::new("func-stripped");
    let json = dir.join("t.json");
    let out = run(
        Command::new(rtm_bin())
            .args(["-o", "/dev/null", "--func", "lib_step", "--json"])
            .arg(&json)
            .arg("--")
            .arg(workload("func_workload_stripped"))
            .args(["2", "7", "0"]),
        T,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc = read_json(&json);
    let stdout = String::from_utf8_lossy(&out.stdout);
    for t in workers(&stdout) {
        assert_eq!(u(&rows(&doc, "lib_step")[&t.tid]["time"]["count"]), 7);
    }
}

fn what_cannot_be_timed_is_refused_before_anything_runs() {
    for (spec, says) in [
        ("no_such_function_xyz", "no function matches"),
        ("*", "narrow the pattern"),
        ("memcpy@libc", "indirect function"),
        ("lib_step@libnothere", "no mapped file is named libnothere"),
    ] {
        let out = run(
            Command::new(rtm_bin())
                .args(["-o", "/dev/null", "--func", spec, "--"])
                .arg(workload("func_workload"))
                .args(["1", "1", "0"]),
            T,
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{spec}: {err}");
        assert!(err.contains(says), "{spec}: {err}");
        // The program never ran.
        assert!(!String::from_utf8_lossy(&out.stdout).contains("done"));
    }
    let out = run(
        Command::new(rtm_bin()).args(["--func", "a;b", "--", "true"]),
        T,
    );
    assert_eq!(out.status.code(), Some(2));
}

fn tid_and_cpu_filters_keep_exactly_their_calls_and_running_calls_are_reported() {
    let test = "--tid, --cpu and running calls";
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    assert!(cpus >= 2, "{test}: needs two CPUs to pin threads apart");
    let dir = TempDir::new("func-filters");
    let rounds = 10u64;
    // Two threads pinned to CPUs 0 and 1, starting their calls at a line on stdin; a
    // third sits in long_call from then until a second line.
    let mut app = spawn(Command::new(workload("func_workload")).args([
        "2",
        &rounds.to_string(),
        "-1",
        "1",
        "-1",
    ]));
    let mut lines = LineWatch::new(app.child.stdout.take().unwrap());
    let first = lines.wait_for("started=1", Duration::from_secs(10));
    let second = lines.wait_for("started=1", Duration::from_secs(10));
    let tid_of = |line: &str, index: &str| -> Option<u64> {
        let t = rtm_tests::truths(line).pop()?;
        (t.fields.get("index").map(u64::to_string).as_deref() == Some(index)).then_some(t.tid)
    };
    let t0 = tid_of(&first, "0")
        .or_else(|| tid_of(&second, "0"))
        .unwrap();
    let t1 = tid_of(&first, "1")
        .or_else(|| tid_of(&second, "1"))
        .unwrap();
    let pid = app.pid().to_string();
    // The three start at once, and each is attached before the calls begin.
    let tracer = |name: &str, args: &[&str]| {
        let json = dir.join(name);
        let mut p = spawn(
            Command::new(rtm_bin())
                .args(["-o", "/dev/null", "--json"])
                .arg(&json)
                .args(["--pid", &pid])
                .args(args),
        );
        let err = LineWatch::new(p.child.stderr.take().unwrap());
        (p, json, err)
    };
    let (ta, a, mut ea) = tracer(
        "tid.json",
        &["--tid", &t0.to_string(), "--func", "work_1ms"],
    );
    let (tb, b, mut eb) = tracer("cpu.json", &["--cpu", "1", "--func", "work_1ms"]);
    // Ended (SIGINT) while the long call runs.
    let (tc, c, mut ec) = tracer("running.json", &["--func", "long_call"]);
    for e in [&mut ea, &mut eb, &mut ec] {
        e.wait_for("attached to PID", Duration::from_secs(60));
    }
    let mut stdin = app.child.stdin.take().unwrap();
    writeln!(stdin, "go").unwrap();
    lines.wait_for("long_call in", T);
    tc.signal(libc::SIGINT);
    assert!(tc.wait_output(T).status.success());
    writeln!(stdin, "end the long call").unwrap();
    drop(stdin);
    let out = app.wait_output(T);
    assert!(out.status.success());
    assert!(ta.wait_output(T).status.success());
    assert!(tb.wait_output(T).status.success());
    let stdout: String = lines.rest(T).join("\n");
    let pinned: HashMap<u64, u64> = workers(&stdout)
        .iter()
        .map(|t| (t.tid, t.get("cpu")))
        .collect();
    assert_eq!(pinned.len(), 2, "{stdout}");
    // --tid: that thread's calls, all of them; none of the other's.
    let doc = read_json(&a);
    let r = rows(&doc, "work_1ms");
    assert_eq!(r.keys().copied().collect::<Vec<_>>(), vec![t0], "{r:?}");
    assert_eq!(u(&r[&t0]["time"]["count"]), rounds);
    assert_eq!(doc["run"]["losses"]["missed_entry"], 0);
    // --cpu 1: the thread pinned there, all its calls.
    let doc = read_json(&b);
    let r = rows(&doc, "work_1ms");
    let on_1 = pinned
        .iter()
        .find(|(_, c)| **c == 1)
        .map(|(t, _)| *t)
        .unwrap();
    assert_eq!(on_1, t1);
    assert_eq!(r.keys().copied().collect::<Vec<_>>(), vec![on_1], "{r:?}");
    assert_eq!(u(&r[&on_1]["time"]["count"]), rounds);
    // The call still running when the trace ended: reported as such, not as a call.
    let doc = read_json(&c);
    let f = &doc["functions"]["functions"][0];
    assert_eq!(f["name"], "long_call");
    assert_eq!((u(&f["time"]["count"]), u(&f["running"])), (0, 1), "{f}");
    // Running from its entry probe, which fired between the workload's two clock reads,
    // to the trace's end.
    let ran = u(&f["running_longest_ns"]);
    let end = u(&doc["sync_graph"]["window"]["end_ns"]);
    let t = truth_maps(&stdout)
        .into_iter()
        .find(|t| t.contains_key("long_call_before_ns"))
        .unwrap_or_else(|| panic!("no long_call truth in {stdout}"));
    let clock = |k: &str| t[k].parse::<u64>().unwrap();
    let (lo, hi) = (
        end - clock("long_call_inside_ns"),
        end - clock("long_call_before_ns"),
    );
    println!("long_call running {ran} ns at the end: {lo} to {hi} by the workload's clock");
    assert!((lo..=hi).contains(&ran), "running for {ran} ns at the end");
}
