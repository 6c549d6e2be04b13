//! End-to-end: rtm-trace against mutex_workload, whose threads report what they did.
//! Runs as root with real eBPF (each test's needs: the TESTS table below).

use std::{
    io::Write,
    process::Command,
    time::{Duration, Instant},
};

use rtm_tests::*;
use rtm_tests::{e2e, harness::E2e};

/// This file's tests, each with what it needs besides the tracer.
pub(crate) const TESTS: &[E2e] = &[
    e2e!(launch_mode_counts_hold_times_and_contention_match_ground_truth, Root),
    e2e!(traced_program_output_and_exit_code_are_unchanged, Root),
    e2e!(attach_sees_threads_created_later_and_stops_when_the_target_exits, Root),
    e2e!(sigint_and_sigterm_detach_write_results_and_leave_the_target_unharmed, Root),
    e2e!(duration_stops_tracing_on_time, Root),
    e2e!(target_survives_the_tracer_being_killed, Root),
    e2e!(interval_prints_periodic_summaries, Root),
];

const T: Duration = Duration::from_secs(90);

fn private_name(i: usize) -> String {
    // Element i of the array, element 0 named as the others.
    format!("private_locks[{i}]")
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a number: {v}"))
}

/// Checks every thread's counts against its own report.
fn check_exact_counts(doc: &Value, truths: &[Truth]) {
    let shared = object(doc, "shared_lock").expect("shared_lock named in the graph");
    let addr = shared["addr"].as_str().unwrap();
    let mut total = 0;
    for (i, t) in truths.iter().enumerate() {
        let e = edge(doc, t.tid, addr)
            .unwrap_or_else(|| panic!("edge thread {} -> shared_lock", t.tid));
        let expect = t.get("shared") + t.get("try_ok");
        println!(
            "thread {}: shared_lock acquisitions expected {expect}, measured {}",
            t.tid, e["acquisitions"]
        );
        assert_eq!(u(&e["acquisitions"]), expect);
        assert_eq!(u(&e["failed_trylocks"]), t.get("try_busy"));
        total += expect;
        let p =
            object(doc, &private_name(i)).unwrap_or_else(|| panic!("{} in graph", private_name(i)));
        let pe = edge(doc, t.tid, p["addr"].as_str().unwrap()).expect("private edge");
        println!(
            "thread {}: {} acquisitions expected {}, measured {}",
            t.tid,
            private_name(i),
            t.get("private"),
            pe["acquisitions"]
        );
        assert_eq!(u(&pe["acquisitions"]), t.get("private"));
        assert_eq!(u(&p["threads"]), 1, "a private lock is used by one thread");
        assert_eq!(u(&p["contended"]), 0, "a private lock is never contended");
    }
    assert_eq!(u(&shared["acquisitions"]), total);
}

fn launch_mode_counts_hold_times_and_contention_match_ground_truth() {
    let dir = TempDir::new("launch");
    let json = dir.join("out.json");
    let out = run(
        Command::new(rtm_bin())
            .args(["--mode", "full"])
            .arg("--json")
            .arg(&json)
            .arg("-o")
            .arg(dir.join("report.txt"))
            .arg("--")
            .arg(workload("mutex_workload"))
            .args([
                "--threads",
                "2",
                "--iters",
                "40",
                "--hold-us",
                "1000",
                "--private",
                "300",
                "--trylocks",
                "30",
            ]),
        T,
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "rtm-trace failed: {stderr}");
    let truths = truths(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(
        truths.len(),
        2,
        "stdout: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    let doc = read_json(&json);
    assert_eq!(doc["format"], "rtm-trace");
    assert_eq!(doc["version"], 1);
    assert_eq!(doc["run"]["end_reason"], "targets_exited");
    assert_eq!(doc["run"]["losses"]["ring_full"], 0);
    check_exact_counts(&doc, &truths);

    // Hold times: the tracer's mean against the workload's own mean per thread (a
    // median would drift from the mean whenever the spinning thread is preempted).
    let shared = object(&doc, "shared_lock").unwrap();
    // Contended: the lock's word was not 0 at pthread_mutex_lock's entry. The workload
    // reads it just before its calls (how often the threads overlap is the scheduler's
    // choice: on a loaded machine they may never); the word can change in the
    // microseconds between its read and the probe's.
    let busy: u64 = truths.iter().map(|t| t.get("busy")).sum();
    let contended = u(&shared["contended"]);
    println!("shared_lock: contended {contended}, found held by the workload {busy}");
    assert!(
        contended.abs_diff(busy) <= 1 + busy / 10,
        "contended {contended}, the workload found it held {busy} times"
    );
    // Time the thread spent runnable, not running, around its calls is in the probes'
    // hold and not in the workload's (0 on an idle machine).
    for t in &truths {
        let n = (t.get("shared") + t.get("try_ok")) as f64;
        let hold = t.get("hold_ns") as f64;
        let (lo, hi) = (hold / n, (hold + t.get("edge_delay_ns") as f64) / n);
        let e = edge(&doc, t.tid, shared["addr"].as_str().unwrap()).unwrap();
        let mean = e["hold"]["mean_ns"].as_f64().expect("hold mean");
        println!(
            "thread {}: hold expected {lo:.0} to {hi:.0} ns, measured mean {mean:.0} ns",
            t.tid
        );
        if times_comparable("hold means") {
            assert!(
                mean >= lo * 0.95 && mean <= hi * 1.05,
                "hold mean {mean} vs truth {lo} to {hi}"
            );
        }
    }
    // Thread names and the report file.
    let names: Vec<&str> = doc["sync_graph"]["threads"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert!(
        names.contains(&"worker-0") && names.contains(&"worker-1"),
        "{names:?}"
    );
    let report = std::fs::read_to_string(dir.join("report.txt")).unwrap();
    assert!(
        report.contains("shared_lock") && report.contains("lost events: none"),
        "{report}"
    );
}

fn traced_program_output_and_exit_code_are_unchanged() {
    let args = [
        "--threads",
        "3",
        "--iters",
        "30",
        "--hold-us",
        "100",
        "--private",
        "200",
        "--quiet",
        "--exit-code",
        "7",
    ];
    let plain = run(Command::new(workload("mutex_workload")).args(args), T);
    let dir = TempDir::new("unchanged");
    let traced = run(
        Command::new(rtm_bin())
            .args(["--mode", "full"])
            .arg("-o")
            .arg(dir.join("r.txt"))
            .arg("--")
            .arg(workload("mutex_workload"))
            .args(args),
        T,
    );
    assert_eq!(plain.status.code(), Some(7));
    assert_eq!(
        traced.status.code(),
        Some(7),
        "stderr: {}",
        String::from_utf8_lossy(&traced.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&plain.stdout),
        String::from_utf8_lossy(&traced.stdout)
    );
    assert!(
        String::from_utf8_lossy(&plain.stdout).contains("done threads=3 shared=90 private=600")
    );
}

/// Starts mutex_workload waiting on stdin; returns it, its stdout watcher and its pid.
fn waiting_workload(args: &[&str]) -> (Proc, LineWatch, u32) {
    let mut w = spawn(
        Command::new(workload("mutex_workload"))
            .arg("--wait-stdin")
            .args(args),
    );
    let mut out = LineWatch::new(w.child.stdout.take().unwrap());
    let ready = out.wait_for("ready", Duration::from_secs(10));
    let pid = ready.trim_start_matches("ready ").trim().parse().unwrap();
    (w, out, pid)
}

fn attach(pid: u32, extra: &[&str]) -> (Proc, LineWatch) {
    let mut tr = spawn(
        Command::new(rtm_bin())
            .args(["--mode", "full"])
            .arg("--pid")
            .arg(pid.to_string())
            .args(extra),
    );
    let mut err = LineWatch::new(tr.child.stderr.take().unwrap());
    err.wait_for("attached to PID", Duration::from_secs(30));
    (tr, err)
}

fn go(w: &mut Proc) {
    writeln!(w.child.stdin.as_mut().unwrap(), "go").unwrap();
}

fn attach_sees_threads_created_later_and_stops_when_the_target_exits() {
    let dir = TempDir::new("attach");
    let json = dir.join("a.json");
    let (mut w, wout, pid) = waiting_workload(&[
        "--threads",
        "3",
        "--iters",
        "25",
        "--hold-us",
        "300",
        "--private",
        "150",
        "--trylocks",
        "10",
    ]);
    let (tr, _err) = attach(
        pid,
        &[
            "--json",
            json.to_str().unwrap(),
            "-o",
            dir.join("r.txt").to_str().unwrap(),
        ],
    );
    go(&mut w);
    let truths = truths(&wout.rest(T).join("\n"));
    assert_eq!(truths.len(), 3);
    let started = Instant::now();
    let out = tr.wait_output(T);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "tracer noticed the exit late"
    );
    let doc = read_json(&json);
    assert_eq!(doc["run"]["end_reason"], "targets_exited");
    assert_eq!(doc["run"]["targets"][0]["pid"], pid);
    assert_eq!(doc["run"]["targets"][0]["ended"], "exited");
    assert_eq!(doc["run"]["targets"][0]["comm"], "mutex_workload");
    check_exact_counts(&doc, &truths);
}

fn sigint_and_sigterm_detach_write_results_and_leave_the_target_unharmed() {
    for (sig, name) in [(libc::SIGINT, "SIGINT"), (libc::SIGTERM, "SIGTERM")] {
        let dir = TempDir::new("signal");
        let json = dir.join("s.json");
        let (mut w, wout, pid) =
            waiting_workload(&["--threads", "2", "--iters", "5", "--private", "5"]);
        let (tr, _err) = attach(pid, &["--json", json.to_str().unwrap()]);
        tr.signal(sig);
        let out = tr.wait_output(Duration::from_secs(20));
        assert!(
            out.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let report = String::from_utf8_lossy(&out.stdout);
        assert!(
            report.contains("final report") && report.contains("interrupted"),
            "{name}: {report}"
        );
        assert_eq!(read_json(&json)["run"]["end_reason"], "signal", "{name}");
        // The target is alive and works normally after the tracer left.
        go(&mut w);
        let truths = truths(&wout.rest(T).join("\n"));
        assert_eq!(truths.len(), 2, "{name}");
        assert!(
            truths
                .iter()
                .all(|t| t.get("shared") == 5 && t.get("private") == 5)
        );
        assert_eq!(w.wait_output(T).status.code(), Some(0), "{name}");
    }
}

fn duration_stops_tracing_on_time() {
    let (_w, _wout, pid) = waiting_workload(&[]);
    let start = Instant::now();
    let (tr, _err) = attach(pid, &["--duration", "1"]);
    let out = tr.wait_output(Duration::from_secs(30));
    let took = start.elapsed();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("--duration elapsed"));
    assert!(
        took >= Duration::from_secs(1) && took < Duration::from_secs(10),
        "{took:?}"
    );
}

fn target_survives_the_tracer_being_killed() {
    let (mut w, wout, pid) =
        waiting_workload(&["--threads", "2", "--iters", "10", "--private", "50"]);
    let (tr, _err) = attach(pid, &[]);
    tr.signal(libc::SIGKILL);
    let out = tr.wait_output(Duration::from_secs(10));
    assert_eq!(out.status.code(), None, "killed by a signal");
    go(&mut w);
    let truths = truths(&wout.rest(T).join("\n"));
    assert_eq!(truths.len(), 2);
    assert!(
        truths
            .iter()
            .all(|t| t.get("shared") == 10 && t.get("private") == 50)
    );
    assert_eq!(w.wait_output(T).status.code(), Some(0));
}

fn interval_prints_periodic_summaries() {
    let out = run(
        Command::new(rtm_bin())
            .args(["--mode", "full"])
            .args(["-i", "0.3", "--"])
            .arg(workload("mutex_workload"))
            .args([
                "--threads",
                "2",
                "--iters",
                "400",
                "--hold-us",
                "1000",
                "--private",
                "0",
                "--quiet",
            ]),
        T,
    );
    assert!(out.status.success());
    let s = String::from_utf8_lossy(&out.stdout);
    let n = s.matches("(cumulative)").count();
    println!("periodic summaries: {n}");
    assert!(n >= 2, "{s}");
    assert!(s.contains("final report"));
}
