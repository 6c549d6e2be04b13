//! Deadlocks and who holds what: `rtm-trace --pid N --blocked` (a snapshot of who is
//! blocked on what, held by whom, and the cycles among them) and the live detection
//! while tracing (`--on-deadlock exit`), against workloads that deadlock on purpose and
//! say which thread holds what and when it blocked (deadlock.c); and the mutex layout
//! read, against the installed glibc (layout_probe.c).

use std::{
    collections::HashMap,
    io::Write as _,
    process::Command,
    time::{Duration, Instant},
};

use rtm::{Holder, MUTEX_BYTES, MUTEX_KIND, MUTEX_OWNER, futex_holder};
use rtm_tests::{
    LineWatch, Proc, TempDir, Value, read_json, rtm_bin, run, spawn, truth_maps,
    workload,
};
use rtm_tests::{e2e, harness::E2e};

/// This file's tests, each with what it needs besides the tracer.
pub(crate) const TESTS: &[E2e] = &[
    e2e!(an_abba_deadlock_names_both_threads_locks_and_holders, Root),
    e2e!(a_three_thread_cycle_and_one_across_processes, Root),
    e2e!(a_private_mutex_owned_across_a_fork_is_no_deadlock, Root),
    e2e!(each_mutex_type_names_its_holder_and_a_condition_variable_says_unknown, Root),
    e2e!(a_lock_passed_around_is_never_a_deadlock, Root),
    e2e!(the_mutex_layout_is_the_installed_glibcs),
    e2e!(a_deadlock_on_semaphores_used_as_locks_is_found_in_full_mode, Root),
    e2e!(a_deadlock_is_found_while_tracing_within_a_second_and_ends_the_run, Root),
    e2e!(three_threads_and_two_processes_deadlocked_live, Root),
    e2e!(a_contended_lock_passed_around_is_no_deadlock_while_tracing, Root),
    e2e!(locks_taken_in_both_orders_are_reported_before_they_hang, Root),
    e2e!(each_waits_holder_is_recorded_when_the_wait_begins, Root),
    e2e!(a_deadlock_on_semaphores_is_never_called_no_deadlock, Root),
    e2e!(a_semaphore_deadlock_traced_in_contention_mode_is_said_undecided, Root),
    e2e!(names_with_line_feeds_forge_no_line_on_stderr, Root),
];

const T: Duration = Duration::from_secs(60);

/// Starts `deadlock MODE`; returns it and its truth lines once it is ready.
fn start(mode: &str) -> (Proc, Vec<HashMap<String, String>>) {
    let mut p = spawn(Command::new(workload("deadlock")).arg(mode));
    let mut out = LineWatch::new(p.child.stdout.take().unwrap());
    out.wait_for("ready", Duration::from_secs(20));
    let truths = truth_maps(&out.seen.join("\n"));
    (p, truths)
}

/// Runs `rtm-trace --blocked` on `pids`; returns its exit code (0: no deadlock, 3: a
/// deadlock, 4: cannot tell), report and JSON.
fn snapshot(pids: &[u32]) -> (Option<i32>, String, Value) {
    let dir = TempDir::new("blocked");
    let json = dir.join("b.json");
    let started = Instant::now();
    let out = run(
        Command::new(rtm_bin())
            .arg("--blocked")
            .args(
                pids.iter()
                    .flat_map(|p| ["--pid".to_string(), p.to_string()]),
            )
            .arg("--json")
            .arg(&json),
        T,
    );
    println!("--blocked took {:?}", started.elapsed());
    let report = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        matches!(out.status.code(), Some(0 | 3 | 4)),
        "{}\n{report}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc = read_json(&json)["blocked"].clone();
    // No thread was off its CPU longer than its process has existed (the ages are read
    // after the snapshot: longer than when it read each thread).
    for b in doc["blocked"].as_array().unwrap() {
        if let Some(off) = b["off_cpu_ns"].as_u64() {
            let age = process_age_ns(b["pid"].as_u64().unwrap());
            assert!(
                off <= age,
                "off CPU {off} ns in a process {age} ns old: {b}"
            );
        }
    }
    (out.status.code(), report, doc)
}

/// How long process `pid` has existed: CLOCK_BOOTTIME now less its start (`stat` field
/// 22, clock ticks since boot).
fn process_age_ns(pid: u64) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let ticks: u64 = stat
        .rsplit_once(')')
        .unwrap()
        .1
        .split_whitespace()
        .nth(19)
        .unwrap()
        .parse()
        .unwrap();
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as u64;
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a valid out-pointer.
    let read = unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut now) };
    assert_eq!(read, 0, "CLOCK_BOOTTIME");
    let now_ns = now.tv_sec as u64 * 1_000_000_000 + now.tv_nsec as u64;
    now_ns - ticks * 1_000_000_000 / hz
}

fn tid(t: &HashMap<String, String>) -> u64 {
    t["tid"].parse().unwrap()
}

fn blocked_thread(doc: &Value, tid: u64) -> &Value {
    doc["blocked"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["tid"] == tid)
        .unwrap_or_else(|| panic!("thread {tid} not blocked in {doc:#}"))
}

fn an_abba_deadlock_names_both_threads_locks_and_holders() {
    let (p, truths) = start("abba");
    let (code, report, doc) = snapshot(&[p.pid()]);
    assert_eq!(code, Some(3), "a deadlock exits 3:\n{report}");
    // `rtm-trace blocked` is `--blocked`.
    let sub = run(
        Command::new(rtm_bin()).args(["blocked", "-p", &p.pid().to_string()]),
        T,
    );
    let sub_report = String::from_utf8_lossy(&sub.stdout);
    assert_eq!(sub.status.code(), Some(3), "{sub_report}");
    assert!(sub_report.contains("lock_a"), "{sub_report}");
    let by_index: HashMap<&str, u64> = truths
        .iter()
        .filter(|t| t.contains_key("tid"))
        .map(|t| (t["index"].as_str(), tid(t)))
        .collect();
    let (t0, t1) = (by_index["0"], by_index["1"]);
    // Thread 0 holds lock_a and waits for lock_b, held by thread 1; and the reverse.
    for (me, other, lock) in [(t0, t1, "lock_b"), (t1, t0, "lock_a")] {
        let b = blocked_thread(&doc, me);
        assert_eq!(b["word_name"], lock, "{b}");
        assert_eq!(b["holder"]["tid"], other, "{b}");
        assert_eq!(b["holder"]["mutex"], "normal");
        let stack: Vec<&str> = b["stack"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f.as_str().unwrap())
            .collect();
        assert!(
            stack.iter().any(|f| f.starts_with("take_two+")),
            "its stack shows where it waits: {stack:#?}"
        );
    }
    let cycles = doc["cycles"].as_array().unwrap();
    assert_eq!(cycles.len(), 1, "{doc:#}");
    let mut members: Vec<u64> = cycles[0]["threads"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t[1].as_u64().unwrap())
        .collect();
    members.sort_unstable();
    let mut want = vec![t0, t1];
    want.sort_unstable();
    assert_eq!(members, want);
    assert!(report.contains("Deadlocks (1)"), "{report}");
    assert!(report.contains("lock_a") && report.contains("lock_b"));
    // How long it took is a speed figure (`cargo xtask bench blocked`), not checked here.
    println!("snapshot took {} ns", doc["took_ns"]);
    drop(p);
}

fn a_three_thread_cycle_and_one_across_processes() {
    let (p, truths) = start("three");
    let (code, _, doc) = snapshot(&[p.pid()]);
    assert_eq!(code, Some(3));
    let cycles = doc["cycles"].as_array().unwrap();
    assert_eq!(cycles.len(), 1, "{doc:#}");
    assert_eq!(cycles[0]["threads"].as_array().unwrap().len(), 3);
    for t in truths.iter().filter(|t| t.contains_key("tid")) {
        let b = blocked_thread(&doc, tid(t));
        assert_eq!(b["holder"]["kind"], "thread", "{b}");
    }
    drop(p);
    // Two processes, each holding a process-shared mutex the other wants.
    let (p, truths) = start("pshared");
    let child = truths
        .iter()
        .find(|t| t["pshared_index"] == "1")
        .map(tid)
        .unwrap() as u32;
    let (code, report, doc) = snapshot(&[p.pid(), child]);
    assert_eq!(code, Some(3), "{report}");
    let cycles = doc["cycles"].as_array().unwrap();
    assert_eq!(cycles.len(), 1, "{doc:#}");
    let pids: Vec<u64> = cycles[0]["threads"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t[0].as_u64().unwrap())
        .collect();
    assert!(
        pids.contains(&u64::from(p.pid())) && pids.contains(&u64::from(child)),
        "{pids:?}"
    );
    let b = blocked_thread(&doc, u64::from(p.pid()));
    assert_eq!(
        b["holder_pid"], child,
        "the holder is in the other process: {b}"
    );
    // SAFETY: kill has no memory effects; the child is ours (the workload's).
    unsafe { libc::kill(child as i32, libc::SIGKILL) };
    drop(p);
}

/// Two processes, each blocked on its own private mutex whose owner field names a thread
/// of the other (fork_owned.c): a private mutex is owned in its own process only, so no
/// holder is named and no deadlock is claimed across them.
fn a_private_mutex_owned_across_a_fork_is_no_deadlock() {
    let mut p = spawn(&mut Command::new(workload("fork_owned")));
    let mut out = LineWatch::new(p.child.stdout.take().unwrap());
    out.wait_for("ready", Duration::from_secs(20));
    let truth = truth_maps(&out.seen.join("\n"));
    let pid = |k: &str| -> u32 {
        truth
            .iter()
            .find_map(|t| t.get(k))
            .unwrap_or_else(|| panic!("no {k} in {truth:?}"))
            .parse()
            .unwrap()
    };
    let (parent, child) = (pid("parent"), pid("child"));
    // Both are in their lock waits once each shows as blocked (the parent blocks just
    // after saying ready).
    let started = Instant::now();
    let (code, report, doc) = loop {
        let (code, report, doc) = snapshot(&[parent, child]);
        let n = doc["blocked"].as_array().map_or(0, Vec::len);
        if n >= 2 || started.elapsed() > Duration::from_secs(20) {
            break (code, report, doc);
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    println!("{report}");
    for tid in [parent, child] {
        let b = blocked_thread(&doc, u64::from(tid));
        assert_eq!(b["holder"]["kind"], "unknown", "{b}");
        assert!(
            b["holder"]["why"]
                .as_str()
                .unwrap()
                .contains("another process"),
            "{b}"
        );
    }
    assert_eq!(doc["cycles"].as_array().map_or(0, Vec::len), 0, "{doc:#}");
    assert_ne!(code, Some(3), "no deadlock is claimed:\n{report}");
    // SAFETY: kill has no memory effects; the child is ours (the workload's).
    unsafe { libc::kill(child as i32, libc::SIGKILL) };
    drop(p);
}

fn each_mutex_type_names_its_holder_and_a_condition_variable_says_unknown() {
    let (p, truths) = start("types");
    let (code, report, doc) = snapshot(&[p.pid()]);
    assert_eq!(code, Some(0), "no deadlock here:\n{report}");
    let holder_of: HashMap<&str, u64> = truths
        .iter()
        .filter_map(|t| Some((t.get("holder")?.as_str(), tid(t))))
        .collect();
    let mutex = HashMap::from([
        ("normal", "normal"),
        ("recursive", "recursive"),
        ("errorcheck", "error-checking"),
        ("robust", "robust"),
        ("pi", "priority-inheritance"),
    ]);
    for t in truths.iter().filter(|t| t.contains_key("waiter")) {
        let ty = t["waiter"].as_str();
        let b = blocked_thread(&doc, tid(t));
        assert_eq!(b["holder"]["tid"], holder_of[ty], "{ty}: {b}");
        assert_eq!(b["holder"]["mutex"], mutex[ty], "{ty}: {b}");
    }
    let cond = truths
        .iter()
        .find(|t| t.contains_key("cond_waiter"))
        .map(tid)
        .unwrap();
    let b = blocked_thread(&doc, cond);
    assert_eq!(b["holder"]["kind"], "unknown", "{b}");
    assert!(
        b["word_name"]
            .as_str()
            .unwrap_or("")
            .starts_with("never_signalled"),
        "{b}"
    );
    drop(p);
}

fn a_lock_passed_around_is_never_a_deadlock() {
    let (p, _) = start("contended");
    for _ in 0..5 {
        let (code, report, doc) = snapshot(&[p.pid()]);
        assert_eq!(code, Some(0), "{report}");
        assert!(doc["cycles"].as_array().unwrap().is_empty());
        assert!(report.contains("No deadlock"));
    }
    drop(p);
}

fn the_mutex_layout_is_the_installed_glibcs() {
    let out = run(&mut Command::new(workload("layout_probe")), T);
    let text = String::from_utf8_lossy(&out.stdout);
    let facts: HashMap<&str, i64> = text
        .split_whitespace()
        .filter_map(|kv| kv.split_once('='))
        .filter_map(|(k, v)| Some((k, v.parse().ok()?)))
        .collect();
    assert_eq!(facts["mutex_owner"] as usize, MUTEX_OWNER, "{text}");
    assert_eq!(facts["mutex_kind"] as usize, MUTEX_KIND, "{text}");
    assert!(facts["mutex_size"] as usize >= MUTEX_BYTES);
    // Each type's head as this glibc leaves it while held (lock, count, owner, nusers,
    // kind), with waiters (2, or the robust word's waiters bit): the model names its
    // holder.
    let tid = facts["tid"] as u32;
    for ty in [
        "normal",
        "recursive",
        "errorcheck",
        "adaptive",
        "pshared",
        "robust",
    ] {
        let head: Vec<u32> = text
            .split_whitespace()
            .find_map(|kv| kv.strip_prefix(&format!("held_{ty}=")))
            .unwrap_or_else(|| panic!("no held_{ty} in {text}"))
            .split(',')
            .map(|w| w.parse::<i64>().unwrap() as u32)
            .collect();
        assert_eq!(
            head[2], tid,
            "{ty}: the owner is the locking thread: {head:?}"
        );
        let mut bytes = vec![0u8; MUTEX_BYTES];
        for (i, w) in head.iter().enumerate() {
            bytes[4 * i..4 * i + 4].copy_from_slice(&w.to_le_bytes());
        }
        let waiting = if ty == "robust" { head[0] | 1 << 31 } else { 2 };
        bytes[..4].copy_from_slice(&waiting.to_le_bytes());
        assert!(
            matches!(futex_holder(0x80, &bytes), Holder::Thread { tid: t, .. } if t == tid),
            "{ty} (head {head:?}): {:?}",
            futex_holder(0x80, &bytes)
        );
    }
}

/// The PID rtm-trace says it launched ("launched PROGRAM as PID N").
fn launched_pid(stderr: &str) -> Option<i32> {
    stderr
        .split_whitespace()
        .skip_while(|w| *w != "PID")
        .nth(1)
        .and_then(|p| p.trim_end_matches(';').parse().ok())
}

/// Traces `deadlock MODE` launched, `--on-deadlock exit` and `options`; returns the exit
/// code, stdout (the workload's truth lines), and the JSON; the deadlocked processes
/// are killed.
fn live(mode: &str, options: &[&str]) -> (Option<i32>, String, Value) {
    let dir = TempDir::new("deadlock-live");
    let (json, out_file, err_file) = (dir.join("t.json"), dir.join("out"), dir.join("err"));
    // Output to files: the deadlocked program keeps them open after rtm-trace exits.
    let status = Command::new(rtm_bin())
        .args([
            "--on-deadlock",
            "exit",
            "-o",
            "/dev/null",
            "-d",
            "20",
            "--json",
        ])
        .arg(&json)
        .args(options)
        .arg("--")
        .arg(workload("deadlock"))
        .arg(mode)
        .stdin(std::process::Stdio::null())
        .stdout(std::fs::File::create(&out_file).unwrap())
        .stderr(std::fs::File::create(&err_file).unwrap())
        .status()
        .expect("running rtm-trace");
    let stdout = std::fs::read_to_string(&out_file).unwrap();
    let stderr = std::fs::read_to_string(&err_file).unwrap();
    // The launched program (and its child) are deadlocked: they go now.
    let mut pids: Vec<i32> = launched_pid(&stderr).into_iter().collect();
    pids.extend(
        stdout
            .lines()
            .filter(|l| l.contains("pshared_index=1"))
            .filter_map(|l| l.rsplit_once("tid=")?.1.trim().parse::<i32>().ok()),
    );
    for p in pids {
        // SAFETY: kill has no memory effects; these are the workload's processes.
        unsafe { libc::kill(p, libc::SIGKILL) };
    }
    println!("{stderr}");
    (status.code(), stdout, read_json(&json))
}

/// Checks the one deadlock found: its threads are the workload's, each waiting for the
/// next's lock, found within a second of the last of them blocking.
fn check_live(code: Option<i32>, stdout: &str, doc: &Value, n: usize) -> Vec<Value> {
    assert_eq!(code, Some(3), "a deadlock ends the run with 3:\n{stdout}");
    let found = doc["sync_graph"]["deadlocks"]
        .as_array()
        .unwrap_or_else(|| panic!("no deadlocks in the JSON: {}", doc["sync_graph"]));
    assert_eq!(found.len(), 1, "{found:#?}");
    let threads = found[0]["threads"].as_array().unwrap().clone();
    assert_eq!(threads.len(), n, "{found:#?}");
    let truths = truth_maps(stdout);
    let closed = truths
        .iter()
        .filter_map(|t| t.get("at_ns")?.parse::<u64>().ok())
        .max()
        .expect("blocking times");
    let detected = found[0]["detected_ns"].as_u64().unwrap();
    println!(
        "found {} ms after the cycle closed",
        (detected - closed) as f64 / 1e6
    );
    assert!(
        detected > closed && detected - closed < 1_000_000_000,
        "found {} ns after the cycle closed",
        detected.saturating_sub(closed)
    );
    // Each waits for the next's lock.
    for (i, t) in threads.iter().enumerate() {
        let next = &threads[(i + 1) % n];
        assert_eq!(t["holder"]["tid"], next["tid"], "{t}");
        // How long: from the wait's start where the tracer saw it (contention mode),
        // else since it last ran.
        assert!(
            t["waited_ns"]
                .as_u64()
                .or(t["off_cpu_ns"].as_u64())
                .is_some(),
            "{t}"
        );
        let stack: Vec<&str> = t["stack"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f.as_str().unwrap())
            .collect();
        assert!(!stack.is_empty(), "{t}");
    }
    threads
}

/// Two threads deadlocked on two binary semaphores taken in opposite orders: full mode
/// sees every take and post, so a semaphore used as a lock has a holder (the thread
/// that took it last and has not posted it): the deadlock is found while tracing.
fn a_deadlock_on_semaphores_used_as_locks_is_found_in_full_mode() {
    let (code, stdout, doc) = live("semaphores", &["--mode", "full"]);
    let threads = check_live(code, &stdout, &doc, 2);
    let mut words: Vec<&str> = threads
        .iter()
        .map(|t| t["word_name"].as_str().unwrap())
        .collect();
    words.sort_unstable();
    assert_eq!(words, ["sem_a", "sem_b"]);
    for t in &threads {
        assert_eq!(t["holder"]["mutex"], "binary semaphore", "{t}");
    }
}

fn a_deadlock_is_found_while_tracing_within_a_second_and_ends_the_run() {
    let (code, stdout, doc) = live("abba", &[]);
    let threads = check_live(code, &stdout, &doc, 2);
    let mut words: Vec<&str> = threads
        .iter()
        .map(|t| t["word_name"].as_str().unwrap())
        .collect();
    words.sort_unstable();
    assert_eq!(words, ["lock_a", "lock_b"]);
    for t in &threads {
        assert!(
            t["stack"]
                .as_array()
                .unwrap()
                .iter()
                .any(|f| f.as_str().unwrap().starts_with("take_two+")),
            "{t}"
        );
    }
    // Full mode finds it too (it reads /proc for the threads that wait).
    let (code, stdout, doc) = live("abba", &["--mode", "full"]);
    check_live(code, &stdout, &doc, 2);
}

fn three_threads_and_two_processes_deadlocked_live() {
    let (code, stdout, doc) = live("three", &[]);
    check_live(code, &stdout, &doc, 3);
    let (code, stdout, doc) = live("pshared", &[]);
    let threads = check_live(code, &stdout, &doc, 2);
    let mut pids: Vec<u64> = threads.iter().map(|t| t["pid"].as_u64().unwrap()).collect();
    pids.dedup();
    assert_eq!(pids.len(), 2, "one thread in each process: {threads:#?}");
}

fn a_contended_lock_passed_around_is_no_deadlock_while_tracing() {
    let dir = TempDir::new("deadlock-none");
    let json = dir.join("t.json");
    let mut p = spawn(Command::new(workload("deadlock")).arg("contended"));
    let out = run(
        Command::new(rtm_bin())
            .args([
                "--on-deadlock",
                "exit",
                "-o",
                "/dev/null",
                "-d",
                "3",
                "--json",
            ])
            .arg(&json)
            .args(["--pid", &p.pid().to_string()]),
        T,
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc = read_json(&json);
    assert!(
        doc["sync_graph"].get("deadlocks").is_none(),
        "{}",
        doc["sync_graph"]
    );
    // It was contended: the four threads slept on the lock.
    let waits: u64 = doc["sync_graph"]["waits_for"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["count"].as_u64().unwrap())
        .sum();
    assert!(waits > 10, "{waits} woken waits");
    let _ = p.child.kill();
}

fn locks_taken_in_both_orders_are_reported_before_they_hang() {
    let dir = TempDir::new("inversion");
    let (json, report) = (dir.join("t.json"), dir.join("r.txt"));
    let out = run(
        Command::new(rtm_bin())
            .args(["--mode", "full", "--json"])
            .arg(&json)
            .arg("-o")
            .arg(&report)
            .arg("--")
            .arg(workload("deadlock"))
            .arg("inversion"),
        T,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("done"));
    let doc = read_json(&json);
    let order = &doc["sync_graph"]["lock_order"];
    let inv = order["inversions"].as_array().expect("inversions");
    assert_eq!(inv.len(), 1, "{order:#}");
    let i = &inv[0];
    let mut names = [i["a_name"].as_str().unwrap(), i["b_name"].as_str().unwrap()];
    names.sort_unstable();
    assert_eq!(names, ["lock_a", "lock_b"]);
    // Each order three times, from its own function, both call sites named.
    for (o, first_is_a) in [(&i["a_then_b"], true), (&i["b_then_a"], false)] {
        assert_eq!(o["count"], 3, "{o}");
        let path = if (i["a_name"] == "lock_a") == first_is_a {
            "path_ab+"
        } else {
            "path_ba+"
        };
        for site in ["first_site", "then_site"] {
            let s = o[site].as_str().unwrap_or("");
            assert!(
                s.starts_with(path) && s.contains("deadlock.c:"),
                "{site}: {s} ({o})"
            );
        }
    }
    let text = std::fs::read_to_string(&report).unwrap();
    assert!(text.contains("Lock-order inversions"), "{text}");
    // Contention mode does not see acquisitions, so it claims none.
    let (_, doc) = rtm_tests::trace_json(&[], &workload("deadlock"), &["inversion"]);
    assert!(doc["sync_graph"].get("lock_order").is_none());
}

fn each_waits_holder_is_recorded_when_the_wait_begins() {
    let dir = TempDir::new("held-by");
    let json = dir.join("t.json");
    // The threads lock once the trace is attached; it ends (SIGINT) once every thread
    // sleeps, every waiter still asleep.
    let mut p = spawn(Command::new(workload("deadlock")).args(["types", "-1"]));
    let mut tracer = spawn(
        Command::new(rtm_bin())
            .args(["-o", "/dev/null", "--json"])
            .arg(&json)
            .args(["--pid", &p.pid().to_string()]),
    );
    let mut err = LineWatch::new(tracer.child.stderr.take().unwrap());
    err.wait_for("attached to PID", Duration::from_secs(60));
    writeln!(p.child.stdin.as_mut().unwrap(), "go").unwrap();
    let mut out = LineWatch::new(p.child.stdout.take().unwrap());
    out.wait_for("ready", Duration::from_secs(60));
    tracer.signal(libc::SIGINT);
    assert!(tracer.wait_output(T).status.success());
    let truths = truth_maps(&out.seen.join("\n"));
    let doc = read_json(&json);
    let held_by = doc["sync_graph"]["held_by"]
        .as_array()
        .unwrap_or_else(|| panic!("no held_by: {}", doc["sync_graph"]));
    let holder_of: HashMap<&str, u64> = truths
        .iter()
        .filter_map(|t| Some((t.get("holder")?.as_str(), tid(t))))
        .collect();
    for t in truths.iter().filter(|t| t.contains_key("waiter")) {
        let ty = t["waiter"].as_str();
        let rows: Vec<&Value> = held_by.iter().filter(|h| h["waiter"] == tid(t)).collect();
        assert_eq!(rows.len(), 1, "{ty}: {held_by:#?}");
        assert_eq!(rows[0]["holder"], holder_of[ty], "{ty}: {}", rows[0]);
        assert_eq!(rows[0]["in_progress"], 1, "{ty}: still asleep at the end");
    }
    // The condition variable's waiter has none: it is counted as unknown.
    let cond = truths
        .iter()
        .find(|t| t.contains_key("cond_waiter"))
        .map(tid)
        .unwrap();
    assert!(!held_by.iter().any(|h| h["waiter"] == cond), "{held_by:#?}");
    assert!(
        doc["sync_graph"]["model"]["waits_holder_unknown"]
            .as_u64()
            .unwrap()
            >= 1
    );
    drop(p);
}

/// Two threads deadlocked on two binary semaphores taken in opposite orders (how
/// Python's `threading.Lock`s deadlock): a semaphore has no owner, so `--blocked` cannot
/// see the cycle; it must say it cannot tell, why, and exit 4, never "No deadlock" and
/// 0. A condition variable's idle waiter (a wait for work) does not make it undecided.
fn a_deadlock_on_semaphores_is_never_called_no_deadlock() {
    let (p, truths) = start("semaphores");
    let (code, report, doc) = snapshot(&[p.pid()]);
    println!("{report}");
    assert_eq!(code, Some(4), "cannot tell exits 4:\n{report}");
    assert!(!report.contains("No deadlock"), "{report}");
    assert!(report.contains("Cannot tell"), "{report}");
    let undecided: Vec<u64> = doc["cannot_tell"]
        .as_array()
        .expect("cannot_tell in the JSON")
        .iter()
        .map(|u| {
            assert_eq!(u["wait_kind"], "semaphore", "{u}");
            assert!(u["why"].as_str().unwrap().contains("no owner"), "{u}");
            u["tid"].as_u64().unwrap()
        })
        .collect();
    for t in truths.iter().filter(|t| t.contains_key("sem_index")) {
        assert!(undecided.contains(&tid(t)), "{t:?} not undecided: {doc:#}");
    }
    drop(p);

    // Mutexes whose holders are all known, and a condition variable's idle waiter: no
    // deadlock, said as such.
    let (p, _) = start("types");
    let (code, report, doc) = snapshot(&[p.pid()]);
    assert_eq!(code, Some(0), "{report}");
    assert!(doc["cannot_tell"].is_null(), "{doc:#}");
    drop(p);
}

/// The same semaphore deadlock traced in contention mode, which sees only futex words:
/// no owner can be known, so it never claims a deadlock nor stays silent: it says on
/// stderr, once per thread, that it cannot tell, and the results list both threads.
fn a_semaphore_deadlock_traced_in_contention_mode_is_said_undecided() {
    let dir = TempDir::new("sem-contention");
    let (json, err_file) = (dir.join("t.json"), dir.join("err"));
    let mut tracer = Command::new(rtm_bin())
        .args(["-d", "3", "-o", "/dev/null", "--json"])
        .arg(&json)
        .arg("--")
        .arg(workload("deadlock"))
        .arg("semaphores")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&err_file).unwrap())
        .spawn()
        .expect("running rtm-trace");
    // The results are written after 3 s; the deadlocked program is then waited for:
    // it is killed here.
    let started = Instant::now();
    let stderr = loop {
        let text = std::fs::read_to_string(&err_file).unwrap_or_default();
        if text.contains("results written") {
            break text;
        }
        assert!(started.elapsed() < T, "no results: {text}");
        std::thread::sleep(Duration::from_millis(100));
    };
    let pid = launched_pid(&stderr).expect("the launched PID");
    // SAFETY: kill has no memory effects; the workload is ours.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    let status = tracer.wait().unwrap();
    println!("{stderr}");
    assert_ne!(
        status.code(),
        Some(3),
        "no deadlock can be claimed: {stderr}"
    );
    assert_eq!(
        stderr.matches("cannot tell whether thread").count(),
        2,
        "{stderr}"
    );
    assert!(!stderr.contains("deadlock: "), "{stderr}");
    let doc = read_json(&json);
    let undecided = doc["sync_graph"]["cannot_tell"]
        .as_array()
        .unwrap_or_else(|| panic!("no cannot_tell: {}", doc["sync_graph"]));
    let mut words: Vec<&str> = undecided
        .iter()
        .map(|u| {
            assert_eq!(u["wait_kind"], "semaphore", "{u}");
            u["word_name"].as_str().unwrap()
        })
        .collect();
    words.sort_unstable();
    assert_eq!(words, ["sem_a", "sem_b"]);
}

/// A program named to forge the tracer's lines (`c\nrtm-trace: ok`, its threads named
/// so too) deadlocks: every line rtm-trace writes on stderr (the launch, the deadlock
/// with its threads' names, the results) stays one line, the name escaped; no line
/// starts with the forged text.
fn names_with_line_feeds_forge_no_line_on_stderr() {
    let dir = TempDir::new("forged");
    let forged = dir.join("c\nrtm-trace: ok");
    std::fs::copy(workload("deadlock"), &forged).unwrap();
    let err_file = dir.join("err");
    let status = Command::new(rtm_bin())
        .args(["--on-deadlock", "exit", "-o", "/dev/null", "-d", "20", "--"])
        .arg(&forged)
        .arg("abba")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&err_file).unwrap())
        .status()
        .expect("running rtm-trace");
    let stderr = std::fs::read_to_string(&err_file).unwrap();
    if let Some(p) = launched_pid(&stderr) {
        // SAFETY: kill has no memory effects; the deadlocked workload is ours.
        unsafe { libc::kill(p, libc::SIGKILL) };
    }
    println!("{stderr}");
    assert_eq!(status.code(), Some(3), "{stderr}");
    assert!(
        stderr.lines().all(|l| !l.starts_with("rtm-trace: ok")),
        "a forged line: {stderr}"
    );
    let deadlock = stderr
        .lines()
        .find(|l| l.starts_with("rtm-trace: deadlock:"))
        .expect("the deadlock said");
    assert!(deadlock.contains("c\\nrtm-trace: ok"), "{deadlock}");
}
