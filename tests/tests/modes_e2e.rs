//! Contention mode against full mode and the workload's own clock; a target in its own
//! mount namespace; forked children followed.

use std::{io::Write, process::Command, time::Duration};

use rtm_tests::{
    LineWatch, TempDir, Value, read_json, rtm_bin, run, spawn, times_comparable,
    trace_json, truths, workload,
};
use rtm_tests::{e2e, harness::E2e};

/// This file's tests, each with what it needs besides the tracer.
pub(crate) const TESTS: &[E2e] = &[
    e2e!(contention_mode_agrees_with_full_mode_and_names_the_releaser, Root),
    e2e!(contention_mode_agrees_on_its_fallback_paths, Root),
    e2e!(a_target_in_its_own_mount_namespace_is_probed_in_its_own_libc, Root),
    e2e!(forked_children_are_followed_in_launch_mode, Root),
    e2e!(joins_name_the_exiting_thread_in_contention_mode, Root),
    e2e!(contention_mode_counts_waits_that_did_not_sleep_and_timeouts, Root),
    e2e!(a_lock_shared_between_processes_is_traced_in_bounded_memory, Root),
    e2e!(thousands_of_short_children_cost_little_memory, Root),
    e2e!(a_wait_still_asleep_at_the_end_is_reported, Root),
    e2e!(a_quiet_threads_last_wait_is_in_the_summaries_and_the_results, Root),
    e2e!(full_mode_follows_a_program_started_through_a_wrapper, Root),
    e2e!(full_mode_counts_exactly_on_its_fallback_paths, Root),
];

const T: Duration = Duration::from_secs(120);

const ARGS: [&str; 8] = [
    "--threads",
    "2",
    "--iters",
    "60",
    "--hold-us",
    "1000",
    "--private",
    "0",
];

fn object<'a>(doc: &'a Value, kind: &str, name: &str) -> &'a Value {
    doc["sync_graph"]["objects"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["kind"] == kind && o["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name}"))
}

/// Runs mutex_workload under `mode`, with the fallback paths forced when `fallbacks`;
/// returns (truth wait sum, doc, worker tids).
fn traced(mode: &str, fallbacks: bool) -> (f64, Value, Vec<u64>) {
    let dir = TempDir::new(mode);
    let json = dir.join("o.json");
    let out = run(
        Command::new(rtm_bin())
            .env("RTM_TRACE_FALLBACKS", if fallbacks { "1" } else { "0" })
            .args(["--mode", mode, "-o", "/dev/null", "--json"])
            .arg(&json)
            .arg("--")
            .arg(workload("mutex_workload"))
            .args(ARGS),
        T,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let t = truths(&String::from_utf8_lossy(&out.stdout));
    let wait: u64 = t.iter().map(|t| t.get("wait_ns")).sum();
    (
        wait as f64,
        read_json(&json),
        t.iter().map(|t| t.tid).collect(),
    )
}

fn contention_mode_agrees_with_full_mode_and_names_the_releaser() {
    let (truth_c, doc_c, tids_c) = traced("contention", false);
    let (truth_f, doc_f, tids_f) = traced("full", false);
    let c = object(&doc_c, "futex", "shared_lock")["contended_wait_ns"]
        .as_u64()
        .unwrap() as f64;
    let f = object(&doc_f, "mutex", "shared_lock")["contended_wait_ns"]
        .as_u64()
        .unwrap() as f64;
    // Each run against the workload's own measure of time spent in pthread_mutex_lock.
    let (ec, ef) = ((c - truth_c).abs() / truth_c, (f - truth_f).abs() / truth_f);
    println!(
        "contention mode: {c:.0} ns vs truth {truth_c:.0} ({:.2}% off); full mode: {f:.0} ns vs \
         truth {truth_f:.0} ({:.2}% off)",
        ec * 100.0,
        ef * 100.0
    );
    if times_comparable("wait totals") {
        // Full mode times the whole call. Contention mode sees a wait from its sleep to
        // its thread's next run: inside the call, never more than it, short of it by
        // the lock's work around its sleeps and its waits that did not sleep (EAGAIN),
        // which grow on a loaded machine (5.0% seen in CI, 0.8-2.9% on a quiet one).
        assert!(ef < 0.05, "full mode {:.2}% off", ef * 100.0);
        assert!(
            c <= truth_c * 1.01 && c >= truth_c * 0.92,
            "contention mode {c} outside [0.92, 1.01] x {truth_c}"
        );
    }
    // Per wait ended, the same story in both modes: each worker waited for the other.
    for (doc, tids) in [(&doc_c, &tids_c), (&doc_f, &tids_f)] {
        let wf = doc["sync_graph"]["waits_for"].as_array().unwrap();
        assert!(!wf.is_empty());
        for e in wf.iter().filter(|e| e["object_name"] == "shared_lock") {
            let (w, k) = (e["waiter"].as_u64().unwrap(), e["waker"].as_u64().unwrap());
            assert!(tids.contains(&w) && tids.contains(&k) && w != k, "{e}");
        }
    }
    assert_eq!(doc_c["run"]["mode"], "contention");
    // What contention mode cannot see is not made up.
    assert_eq!(object(&doc_c, "futex", "shared_lock")["acquisitions"], 0);
}

/// Kernels without BTF get raw and per-syscall tracepoints, and tids and tgids past the
/// arrays (pid_max raised, or above the futex table's cap) get hash maps: the same
/// waits, the same releasers.
fn contention_mode_agrees_on_its_fallback_paths() {
    let (truth, doc, tids) = traced("contention", true);
    let c = object(&doc, "futex", "shared_lock")["contended_wait_ns"]
        .as_u64()
        .unwrap() as f64;
    let e = (c - truth).abs() / truth;
    println!(
        "contention mode, fallback paths: {c:.0} ns vs truth {truth:.0} ({:.2}% off)",
        e * 100.0
    );
    if times_comparable("fallback paths' wait time") {
        assert!(e < 0.05);
    }
    let wf = doc["sync_graph"]["waits_for"].as_array().unwrap();
    let on_lock: Vec<_> = wf
        .iter()
        .filter(|e| e["object_name"] == "shared_lock")
        .collect();
    assert!(!on_lock.is_empty(), "no releaser named: {wf:?}");
    for e in on_lock {
        let (w, k) = (e["waiter"].as_u64().unwrap(), e["waker"].as_u64().unwrap());
        assert!(tids.contains(&w) && tids.contains(&k) && w != k, "{e}");
    }
}

fn a_target_in_its_own_mount_namespace_is_probed_in_its_own_libc() {
    // The target sees a copy of libc bind-mounted over the host's path: a different file.
    // Probing the host's libc by path would see nothing.
    let dir = TempDir::new("mntns");
    let libc = std::fs::read_to_string("/proc/self/maps")
        .unwrap()
        .lines()
        .filter_map(|l| l.split_whitespace().nth(5).map(str::to_owned))
        .find(|p| p.contains("/libc.so"))
        .unwrap();
    let copy = dir.join("libc-copy.so");
    let script = format!(
        "cp {libc} {copy} && mount --bind {copy} {libc} && exec {wl} --wait-stdin {args}",
        copy = copy.display(),
        wl = workload("mutex_workload").display(),
        args = ARGS.join(" ")
    );
    let mut w = spawn(
        Command::new("unshare")
            .args(["--mount", "--propagation", "private", "sh", "-c"])
            .arg(&script),
    );
    let mut out = LineWatch::new(w.child.stdout.take().unwrap());
    let pid: u32 = out
        .wait_for("ready", Duration::from_secs(10))
        .trim_start_matches("ready ")
        .trim()
        .parse()
        .unwrap();
    let json = dir.join("o.json");
    let mut tr = spawn(
        Command::new(rtm_bin())
            .args(["--mode", "full", "-v", "-o", "/dev/null", "--json"])
            .arg(&json)
            .args(["--pid", &pid.to_string()]),
    );
    let mut err = LineWatch::new(tr.child.stderr.take().unwrap());
    err.wait_for("attached to PID", Duration::from_secs(30));
    writeln!(w.child.stdin.as_mut().unwrap(), "go").unwrap();
    let t = truths(&out.rest(T).join("\n"));
    let done = tr.wait_output(T);
    assert!(done.status.success());
    let doc = read_json(&json);
    let lock = object(&doc, "mutex", "shared_lock");
    let total: u64 = t.iter().map(|t| t.get("shared")).sum();
    assert_eq!(lock["acquisitions"].as_u64().unwrap(), total);
}

fn forked_children_are_followed_in_launch_mode() {
    // A shell forks the workload: its events come from a process rtm-trace did not start.
    let dir = TempDir::new("follow");
    let json = dir.join("o.json");
    let script = format!(
        "{} {} --quiet; true",
        workload("mutex_workload").display(),
        ARGS.join(" ")
    );
    let out = run(
        Command::new(rtm_bin())
            .args(["-o", "/dev/null", "--json"])
            .arg(&json)
            .args(["--", "sh", "-c"])
            .arg(&script),
        T,
    );
    assert!(out.status.success());
    let doc = read_json(&json);
    let lock = object(&doc, "futex", "shared_lock");
    let shell = doc["run"]["targets"][0]["pid"].as_u64().unwrap();
    assert_ne!(lock["pid"].as_u64().unwrap(), shell);
    assert!(lock["waits"].as_u64().unwrap() > 0);
    let threads = doc["sync_graph"]["threads"].as_array().unwrap();
    let child = threads
        .iter()
        .find(|t| t["pid"] == lock["pid"] && t["tid"] == lock["pid"])
        .unwrap();
    assert_eq!(child["parent"]["pid"].as_u64().unwrap(), shell);
}

/// The tid sync_workload's `tree` printed for `node`.
fn tree_tid(stdout: &str, node: &str) -> u64 {
    stdout
        .lines()
        .find(|l| l.contains(&format!("node={node} ")))
        .and_then(|l| l.rsplit("tid=").next())
        .and_then(|t| t.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {node} in {stdout}"))
}

fn joins_name_the_exiting_thread_in_contention_mode() {
    let dir = TempDir::new("joins");
    let json = dir.join("o.json");
    let out = run(
        Command::new(rtm_bin())
            .args(["-o", "/dev/null", "--json"])
            .arg(&json)
            .arg("--")
            .arg(workload("sync_workload"))
            .arg("tree"),
        T,
    );
    assert!(out.status.success());
    let stdout = String::from_utf8_lossy(&out.stdout);
    let tid = |node: &str| tree_tid(&stdout, node);
    let doc = read_json(&json);
    let wf = doc["sync_graph"]["waits_for"].as_array().unwrap();
    // glibc's pthread_join sleeps on the joined thread's tid word; the kernel wakes it
    // when that thread exits.
    for (waiter, joined) in [("main", "middle"), ("middle", "leaf1"), ("middle", "leaf2")] {
        let e = wf
            .iter()
            .find(|e| e["waiter"] == tid(waiter) && e["waker"] == tid(joined))
            .unwrap_or_else(|| panic!("{waiter} -> {joined} missing: {wf:?}"));
        assert_eq!(e["at_exit"], true);
        assert_eq!(e["count"], 1);
    }
}

fn futex_sum(doc: &Value, field: &str) -> u64 {
    doc["sync_graph"]["objects"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|o| o["kind"] == "futex")
        .map(|o| o[field].as_u64().unwrap_or(0))
        .sum()
}

/// Contention mode ends a wait at its wake. A wait whose word changed before the thread
/// slept is counted as a wait that did not sleep; a timed wait that no thread woke, as
/// timed out.
fn contention_mode_counts_waits_that_did_not_sleep_and_timeouts() {
    // Four threads, empty critical sections on two CPUs: lock attempts often find the
    // word changed by the time the kernel looks.
    let args = [
        "--threads",
        "4",
        "--iters",
        "100000",
        "--hold-us",
        "0",
        "--private",
        "0",
    ];
    let opts = ["--mode", "contention", "-o", "/dev/null"];
    let (_, doc) = trace_json(&opts, &workload("mutex_workload"), &args);
    let unslept = doc["sync_graph"]["model"]["waits_unslept"]
        .as_u64()
        .unwrap();
    let (waits, sleeps) = (futex_sum(&doc, "waits"), futex_sum(&doc, "contended"));
    println!("futex waits {waits}: {sleeps} slept, {unslept} did not");
    assert!(unslept > 0 && sleeps > 0);
    assert_eq!(waits, sleeps + unslept);
    // Four signalled waits of 30 ms, then a 20 ms timed wait that times out.
    let (stdout, doc) = trace_json(
        &opts,
        &workload("sync_workload"),
        &["cond", "4", "30", "20"],
    );
    assert!(stdout.contains("timedwait=timeout"), "{stdout}");
    assert_eq!(futex_sum(&doc, "timeouts"), 1);
    assert_eq!(doc["sync_graph"]["model"]["waits_without_waker"], 1);
}

/// A lock in a shared anonymous mapping, taken in turns by a process and its forked
/// child: the mapping names /dev/zero, which naming the lock must not read (it never
/// ends: rtm-trace once grew until the kernel killed it, and this run would fail). The waits are seen in both
/// processes; the waker is in the other process, so none is named.
fn a_lock_shared_between_processes_is_traced_in_bounded_memory() {
    // The trace ends while both processes still run, so their maps are read to name
    // the lock.
    let (stdout, doc) = trace_json(
        &["--duration", "0.5", "-o", "/dev/null"],
        &workload("sync_workload"),
        &["shared", "20000", "50"],
    );
    assert!(stdout.contains("child_status=0"), "{stdout}");
    let pids: std::collections::HashSet<u64> = doc["sync_graph"]["objects"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|o| o["kind"] == "futex" && o["contended"].as_u64() > Some(0))
        .map(|o| o["pid"].as_u64().unwrap())
        .collect();
    println!("processes that slept on the shared lock: {pids:?}");
    assert_eq!(pids.len(), 2, "{pids:?}");
    let rss = doc["run"]["tracer_max_rss_kib"].as_u64().unwrap();
    println!("tracer peak RSS: {rss} KiB");
    assert!(rss < 256 << 10, "{rss} KiB");
}

/// A program that forks 20,000 short children: each is followed, and rtm-trace's
/// memory per child stays small (it read and kept every child's maps, ~10-20 KiB each,
/// until the children's maps were shared with their parent's and read only for
/// children that synchronize). The bound is on the growth between a run of 2,000
/// children and one of 20,000, not on the peak: the peak also holds the tracer's own
/// code pages and ring buffers (~40 MiB for a debug build), which grow with the binary,
/// not with the target.
fn thousands_of_short_children_cost_little_memory() {
    let peak = |children: u32| {
        let (stdout, doc) = trace_json(
            &["-o", "/dev/null"],
            &workload("sync_workload"),
            &["forks", &children.to_string()],
        );
        assert!(
            stdout.contains(&format!("truth forks ok={children}")),
            "{stdout}"
        );
        let rss = doc["run"]["tracer_max_rss_kib"].as_u64().unwrap();
        let threads = doc["sync_graph"]["threads"].as_array().map_or(0, Vec::len);
        println!("{children} children: tracer peak RSS {rss} KiB, {threads} threads in the graph");
        assert_eq!(threads as u32, children + 1);
        rss
    };
    let (few, many) = (peak(2_000), peak(20_000));
    let per_child = many.saturating_sub(few) as f64 / 18_000.0;
    println!("growth: {per_child:.2} KiB per child");
    assert!(per_child < 4.0, "{per_child:.2} KiB per child");
}

/// A thread still asleep in a futex wait when the trace ends shows, with its wait so
/// far: main waits 300 ms for its first signal, and the trace lasts 150 ms.
fn a_wait_still_asleep_at_the_end_is_reported() {
    let (_, doc) = trace_json(
        &["--duration", "0.15", "-o", "/dev/null"],
        &workload("sync_workload"),
        &["cond", "1", "300", "10"],
    );
    assert_eq!(doc["sync_graph"]["model"]["waits_in_progress"], 1);
    let waited = futex_sum(&doc, "contended_wait_ns");
    println!("waited so far: {waited} ns");
    assert!((100_000_000..300_000_000).contains(&waited), "{waited}");
}

/// Contention mode sends a thread's last wait when the thread next waits or exits. A
/// thread that does neither (main, sleeping after its join) still has its wait in the
/// periodic summary once it has been quiet for a second, and in the results when the
/// trace ends before the thread does.
fn a_quiet_threads_last_wait_is_in_the_summaries_and_the_results() {
    let dir = TempDir::new("quiet");
    let json = dir.join("o.json");
    let out = run(
        Command::new(rtm_bin())
            .args(["--duration", "3.5", "--interval", "3", "--json"])
            .arg(&json)
            .arg("--")
            .arg(workload("sync_workload"))
            .args(["tree", "6000"]),
        T,
    );
    assert!(out.status.success());
    let stdout = String::from_utf8_lossy(&out.stdout);
    let (main, middle) = (tree_tid(&stdout, "main"), tree_tid(&stdout, "middle"));
    // The join ended at about 40 ms, and main sleeps until 6 s. The one periodic summary
    // comes about 3 s in (later on a loaded machine: its heading says when).
    let summary = stdout
        .split("== rtm-trace: ")
        .find(|s| s.starts_with("summary at +"))
        .unwrap_or_else(|| panic!("no periodic summary: {stdout}"));
    let joined = |text: &str| {
        text.lines().any(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            w.first() == Some(&main.to_string().as_str())
                && w.get(2) == Some(&middle.to_string().as_str())
        })
    };
    assert!(joined(summary), "main -> middle not in: {summary}");
    let doc = read_json(&json);
    assert_eq!(doc["run"]["end_reason"], "duration");
    let wf = doc["sync_graph"]["waits_for"].as_array().unwrap();
    let e = wf
        .iter()
        .find(|e| e["waiter"] == main && e["waker"] == middle)
        .unwrap_or_else(|| panic!("main -> middle missing: {wf:?}"));
    assert_eq!(e["count"], 1);
}

fn full_mode_follows_a_program_started_through_a_wrapper() {
    // `env` and `sh` use no pthread function themselves: the probes must still be in
    // place for the program they exec (env) or fork and exec (sh -c).
    let bin = workload("mutex_workload");
    let script = format!("{} {} --quiet; true", bin.display(), ARGS.join(" "));
    let via_env: Vec<String> = std::iter::once(bin.display().to_string())
        .chain(ARGS.iter().map(|a| a.to_string()))
        .collect();
    for (name, command) in [
        ("env", [vec!["env".to_owned()], via_env].concat()),
        ("sh", vec!["sh".into(), "-c".into(), script]),
    ] {
        let dir = TempDir::new(name);
        let json = dir.join("o.json");
        let out = run(
            Command::new(rtm_bin())
                .args(["--mode", "full", "-o", "/dev/null", "--json"])
                .arg(&json)
                .arg("--")
                .args(&command),
            T,
        );
        assert!(out.status.success(), "{out:?}");
        let doc = read_json(&json);
        // Two threads, 60 iterations each, on the shared lock. A program exec'd in place
        // keeps the probes placed before it ran: every call is counted. A forked child
        // gets its own probes once the tracer has seen the fork, a few milliseconds in.
        let lock = object(&doc, "mutex", "shared_lock");
        let n = lock["acquisitions"].as_u64().unwrap();
        println!("via {name}: shared_lock acquisitions {n} of 120");
        if name == "env" {
            assert_eq!(n, 120);
        } else {
            assert!(n > 0 && n <= 120, "via {name}: {n}");
        }
    }
}

fn full_mode_counts_exactly_on_its_fallback_paths() {
    // RTM_TRACE_FALLBACKS=1: no BTF tracepoints and one perf-event uprobe per probe (no
    // uprobe_multi links), as on kernels that have neither.
    let dir = TempDir::new("full-fallbacks");
    let json = dir.join("o.json");
    let out = run(
        Command::new(rtm_bin())
            .env("RTM_TRACE_FALLBACKS", "1")
            .args(["--mode", "full", "-v", "-o", "/dev/null", "--json"])
            .arg(&json)
            .arg("--")
            .arg(workload("mutex_workload"))
            .args(ARGS),
        T,
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let truth: u64 = truths(&String::from_utf8_lossy(&out.stdout))
        .iter()
        .map(|t| t.get("shared"))
        .sum();
    let doc = read_json(&json);
    let lock = object(&doc, "mutex", "shared_lock");
    assert_eq!(lock["acquisitions"].as_u64(), Some(truth), "{lock}");
    assert!(
        err.contains("uprobes are removed in the background"),
        "{err}"
    );
}
