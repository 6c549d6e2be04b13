//! End-to-end: what rtm-trace reports is true, or says where it is not complete:
//! forked children counted from their first call, wakes across processes named, timeouts
//! told from other wakes, and nothing unprobed hidden.

use std::{
    io::Write as _,
    path::Path,
    process::Command,
    time::{Duration, Instant},
};

use rtm_tests::*;
use rtm_tests::{e2e, harness::E2e};

/// This file's tests, each with what it needs besides the tracer.
pub(crate) const TESTS: &[E2e] = &[
    e2e!(forked_children_are_counted_from_their_first_call, Root),
    e2e!(a_child_running_a_library_no_probe_covered_is_reported_as_unprobed, Root),
    e2e!(wakes_from_another_traced_process_are_wakes_not_timeouts, Root),
    e2e!(wakes_from_an_untraced_process_are_wakes_from_outside, Root),
    e2e!(a_stripped_program_is_named_from_its_debug_file_by_build_id, Root),
    e2e!(idle_threads_count_and_a_duration_is_that_long, Root),
    e2e!(a_condition_variable_is_named_the_same_in_both_modes, Root),
    e2e!(timer_expiries_are_timeouts_whatever_thread_has_the_cpu, Root),
    e2e!(a_lock_that_is_no_glibc_mutex_names_no_holder, Root),
    e2e!(idle_waits_are_shown_apart_and_the_contended_lock_ranks_first, Root),
    e2e!(full_mode_shows_locks_that_make_no_pthread_call, Root),
    e2e!(a_go_programs_runtime_parking_is_not_contention, Root),
    e2e!(objects_from_one_call_site_have_one_name_each_in_every_output, Root, PerfettoSchema),
];

const T: Duration = Duration::from_secs(120);

fn model(doc: &Value) -> &Value {
    &doc["sync_graph"]["model"]
}

fn waits_for(doc: &Value) -> Vec<&Value> {
    doc["sync_graph"]["waits_for"]
        .as_array()
        .map(|a| a.iter().collect())
        .unwrap_or_default()
}

fn forked_children_are_counted_from_their_first_call() {
    let (stdout, doc) = trace_json(
        &["--mode", "full", "--ring-size", "67108864"],
        &workload("fork_children"),
        &["4", "20000"],
    );
    assert_eq!(
        doc["run"]["losses"]["ring_full"], 0,
        "a bigger ring is needed"
    );
    let truths: Vec<(u64, u64)> = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("truth "))
        .map(|l| {
            let f = |k: &str| {
                l.split_whitespace()
                    .find_map(|kv| kv.strip_prefix(k))
                    .unwrap()
                    .parse::<u64>()
                    .unwrap()
            };
            (f("pid="), f("locks="))
        })
        .collect();
    assert_eq!(truths.len(), 4, "{stdout}");
    for (pid, locks) in truths {
        let lock = doc["sync_graph"]["objects"]
            .as_array()
            .unwrap()
            .iter()
            .find(|o| o["pid"].as_u64() == Some(pid) && o["name"] == "child_lock")
            .unwrap_or_else(|| panic!("child {pid}: child_lock not seen"));
        println!("child {pid}: {} of {locks}", lock["acquisitions"]);
        assert_eq!(lock["acquisitions"].as_u64(), Some(locks), "child {pid}");
    }
    assert_eq!(doc["run"]["unprobed"].as_array().unwrap().len(), 0);
}

fn a_child_running_a_library_no_probe_covered_is_reported_as_unprobed() {
    let script = format!(
        "sleep 0.05; exec {} spin 2 5000 5",
        workload("sync_workload_static").display()
    );
    let (report, doc) = trace_json(&["--mode", "full"], Path::new("/bin/sh"), &["-c", &script]);
    let unprobed = doc["run"]["unprobed"].as_array().unwrap();
    assert_eq!(unprobed.len(), 1, "{report}");
    let u = &unprobed[0];
    let ms = (u["until_ns"].as_u64().unwrap() - u["since_ns"].as_u64().unwrap()) as f64 / 1e6;
    println!("unprobed for {ms:.2} ms: {}", u["why"]);
    assert!(
        u["why"].as_str().unwrap().contains("sync_workload_static"),
        "{u}"
    );
    assert!(report.contains("PTHREAD CALLS UNPROBED"), "{report}");
    assert!(!report.contains("lost events: none\n"), "{report}");
    // Probed from then on: the spin lock's calls are (nearly all) seen.
    let spin = object(&doc, "counter_spin").expect("counter_spin traced after the exec");
    assert!(spin["acquisitions"].as_u64().unwrap() > 0, "{spin}");
}

/// Checks the waits of a pingpong run: every wait that slept was woken by the other
/// process's thread (`outside` when it was not traced), but for one timeout.
fn check_pingpong(doc: &Value, outside: bool) {
    let m = model(doc);
    println!("{m}");
    assert_eq!(m["waits_timed_out"], 1, "{m}");
    assert_eq!(m["waits_interrupted"], 0, "{m}");
    assert_eq!(m["waits_without_waker"], 1, "{m}");
    let edges = waits_for(doc);
    assert!(!edges.is_empty());
    let mut woken = 0;
    for e in &edges {
        assert_ne!(e["waker_pid"], e["pid"], "{e}");
        assert_eq!(e["outside"], outside, "{e}");
        woken += e["count"].as_u64().unwrap();
    }
    let from_outside = m["waits_woken_from_outside"].as_u64().unwrap();
    assert_eq!(from_outside, if outside { woken } else { 0 }, "{m}");
    println!("{woken} waits woken across processes");
    assert!(woken > 0);
}

fn wakes_from_another_traced_process_are_wakes_not_timeouts() {
    for mode in ["contention", "full"] {
        let (stdout, doc) = trace_json(
            &["--mode", mode],
            &workload("pingpong"),
            &["20000", "--timed"],
        );
        assert!(stdout.contains("truth rounds=20000 timeouts=1"), "{stdout}");
        println!("{mode}:");
        check_pingpong(&doc, false);
    }
}

fn wakes_from_an_untraced_process_are_wakes_from_outside() {
    let mut p =
        spawn(Command::new(workload("pingpong")).args(["20000", "--timed", "--wait-stdin"]));
    let mut lines = LineWatch::new(p.child.stdout.take().unwrap());
    lines.wait_for("ready", T);
    let dir = TempDir::new("outside");
    let json = dir.join("out.json");
    // Only the parent is traced: the child was forked before the trace and is not followed.
    let mut tracer = spawn(
        Command::new(rtm_bin())
            .args(["-p", &p.pid().to_string(), "--json"])
            .arg(&json),
    );
    let mut err = LineWatch::new(tracer.child.stderr.take().unwrap());
    err.wait_for("attached", T);
    writeln!(p.child.stdin.as_mut().unwrap(), "go").unwrap();
    lines.wait_for("truth rounds=20000 timeouts=1", T);
    let started = Instant::now();
    let out = tracer.wait_output(T);
    assert!(
        out.status.success(),
        "{:?}",
        err.rest(Duration::from_secs(1))
    );
    println!("rtm-trace exited {:?} after its target", started.elapsed());
    let doc = read_json(&json);
    check_pingpong(&doc, true);
}

/// A copy of the demo, stripped, with its debug information split off; returns the
/// stripped program, the debug file and the build id (hex).
fn stripped_demo(dir: &TempDir) -> (std::path::PathBuf, std::path::PathBuf, String) {
    let exe = dir.join("demo_stripped");
    let debug = dir.join("demo_stripped.debug");
    std::fs::copy(workload("demo"), &exe).unwrap();
    let ok = |c: &mut Command| assert!(c.status().unwrap().success(), "{c:?}");
    ok(Command::new("objcopy")
        .arg("--only-keep-debug")
        .arg(&exe)
        .arg(&debug));
    ok(Command::new("strip").arg("--strip-all").arg(&exe));
    let notes = Command::new("readelf")
        .arg("-n")
        .arg(&exe)
        .output()
        .unwrap();
    let id = String::from_utf8_lossy(&notes.stdout)
        .lines()
        .find_map(|l| l.trim().strip_prefix("Build ID: ").map(str::to_owned))
        .expect("the workloads are built with a build id");
    (exe, debug, id)
}

fn a_stripped_program_is_named_from_its_debug_file_by_build_id() {
    let dir = TempDir::new("dbgsym");
    let (exe, debug, id) = stripped_demo(&dir);
    // Without debug symbols: addresses, and the hint, once.
    let out = run(
        Command::new(rtm_bin())
            .args(["--mode", "full", "--"])
            .arg(&exe),
        T,
    );
    let (report, err) = (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    );
    assert!(out.status.success(), "{err}");
    assert!(!report.contains("audit_lock"), "{report}");
    let hints = err
        .matches("is stripped and no debug symbols were found")
        .count();
    assert_eq!(hints, 1, "{err}");
    assert!(err.contains("-dbgsym"), "{err}");
    // With the debug file where Linux keeps them, in the target's own mount namespace
    // (a tmpfs over /usr/lib/debug that only it sees).
    let script = format!(
        "mount -t tmpfs rtm-test /usr/lib/debug && mkdir -p /usr/lib/debug/.build-id/{a} && \
         cp {debug} /usr/lib/debug/.build-id/{a}/{b}.debug && exec {exe}",
        a = &id[..2],
        b = &id[2..],
        debug = debug.display(),
        exe = exe.display()
    );
    let out = run(
        Command::new(rtm_bin())
            .args(["--mode", "full", "--", "unshare", "-m", "sh", "-c"])
            .arg(&script),
        T,
    );
    let (report, err) = (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    );
    assert!(out.status.success(), "{err}");
    assert!(report.contains("mutex audit_lock"), "{report}");
    assert!(
        report.contains("worker+0x") && report.contains("(demo.c:"),
        "{report}"
    );
    assert!(!err.contains("demo_stripped is stripped"), "{err}");
}

fn idle_threads_count_and_a_duration_is_that_long() {
    let mut p = spawn(Command::new(workload("idle_threads")).arg("1000"));
    let mut lines = LineWatch::new(p.child.stdout.take().unwrap());
    lines.wait_for("ready", T);
    let dir = TempDir::new("idle");
    let json = dir.join("out.json");
    let started = Instant::now();
    let mut tracer = spawn(
        Command::new(rtm_bin())
            .args(["-p", &p.pid().to_string(), "-d", "2", "--json"])
            .arg(&json),
    );
    drop(tracer.child.stdin.take());
    let (out, kept_off) = tracer.wait_output_and_run_delay(T);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    println!("rtm-trace ran {:?}", started.elapsed());
    let doc = read_json(&json);
    let threads = doc["sync_graph"]["threads"].as_array().unwrap().len();
    assert_eq!(threads, 1001, "the main thread and 1,000 idle ones");
    let w = &doc["sync_graph"]["window"];
    let secs = (w["end_ns"].as_u64().unwrap() - w["start_ns"].as_u64().unwrap()) as f64 / 1e9;
    // The window ends when the tracer's loop sees the deadline pass: late by as long
    // as a loaded machine kept the tracer off the CPUs, at most.
    let kept_off = kept_off.as_secs_f64();
    println!("traced for {secs:.3} s with -d 2; the tracer waited {kept_off:.3} s for a CPU");
    assert!(
        (2.0..2.3 + kept_off).contains(&secs),
        "{secs} s, {kept_off:.3} s of it waiting for a CPU"
    );
}

fn a_condition_variable_is_named_the_same_in_both_modes() {
    for mode in ["contention", "full"] {
        let (report, _) = trace_json(
            &["--mode", mode],
            &workload("sync_workload"),
            &["cond", "5", "10", "0"],
        );
        let row = report
            .lines()
            .find(|l| l.contains("ready_cond"))
            .unwrap_or_else(|| panic!("{mode}: {report}"));
        println!("{mode}: {row}");
        assert!(!row.contains("ready_cond+0x"), "{mode}: {row}");
    }
}

/// A timed wait that expires while another thread of the process has the CPU, inside a
/// futex call on the same word, timed out: the timer's expiry runs in that thread's
/// context, which did not wake it. Every expiry the program counts is a timeout, none a
/// wake. Contention mode (full mode sees futex words through pthread calls, and these
/// are raw futex calls); on the scheduler's tracepoints on the host, on the kernel's
/// futex functions in the kernel matrix's guests.
fn timer_expiries_are_timeouts_whatever_thread_has_the_cpu() {
    let mode = "contention";
    let (stdout, doc) = trace_json(
        &["--mode", mode],
        &workload("timer_expiries"),
        &["300", "2000"],
    );
    let truth = |key: &str| -> u64 {
        stdout
            .split_whitespace()
            .find_map(|w| w.strip_prefix(&format!("{key}=")))
            .unwrap_or_else(|| panic!("no {key} in {stdout}"))
            .parse()
            .unwrap()
    };
    let word = stdout
        .split_whitespace()
        .find_map(|w| w.strip_prefix("word="))
        .unwrap_or_else(|| panic!("no word in {stdout}"))
        .to_owned();
    assert_eq!(truth("timeouts"), 300, "{stdout}");
    let m = model(&doc);
    println!("{mode}: {stdout}{m}");
    let woken: u64 = waits_for(&doc)
        .iter()
        .filter(|e| e["object"].as_str() == Some(&word))
        .map(|e| e["count"].as_u64().unwrap())
        .sum();
    let waits: u64 = doc["sync_graph"]["objects"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|o| o["addr"].as_str() == Some(&word))
        .filter_map(|o| o["waits"].as_u64())
        .sum();
    let seen = format!("{mode}: {woken} woken, {waits} waits on the word, {m}");
    // On the kernel's futex functions every ETIMEDOUT from futex_wait is a timed-out
    // wait; on the scheduler's tracepoints a wait begins at its sleep, and on a busy CPU
    // a deadline can pass before the call sleeps (the kernel then returns at once): the
    // workload counts the timeouts during which it slept, by its voluntary switches.
    let futex_functions = doc["run"]["collection"]["futex_functions"] == true;
    let expected = if futex_functions {
        300
    } else {
        truth("slept_timeouts")
    };
    assert!(expected >= 150, "most waits slept: {stdout}");
    assert_eq!(m["waits_timed_out"], expected, "{seen}");
    assert_eq!(m["waits_interrupted"], 0, "{seen}");
    assert_eq!(woken, 0, "timeouts credited to a waker: {seen}");
}

/// A Rust `std::sync::Mutex` is a futex word with the protected value where a glibc
/// mutex keeps its owner: contention mode names no holder for it (the counter's values
/// were shown as holders), and every sleep on it counts as holder unknown.
fn a_lock_that_is_no_glibc_mutex_names_no_holder() {
    let (threads, rounds) = (4u64, 3000u64);
    let (stdout, doc) = trace_json(
        &["--mode", "contention"],
        Path::new(env!("CARGO_BIN_EXE_rust_mutex")),
        &[&threads.to_string(), &rounds.to_string()],
    );
    let field = |key: &str| -> String {
        stdout
            .split_whitespace()
            .find_map(|w| w.strip_prefix(&format!("{key}=")))
            .unwrap_or_else(|| panic!("no {key} in {stdout}"))
            .to_owned()
    };
    assert_eq!(
        field("counter").parse::<u64>().unwrap(),
        1_000_000 + threads * rounds
    );
    let word = field("lock");
    let sleeps: u64 = doc["sync_graph"]["objects"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|o| o["addr"].as_str() == Some(&word))
        .filter_map(|o| o["contended"].as_u64())
        .sum();
    let held: Vec<&Value> = doc["sync_graph"]["held_by"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter(|h| h["object"].as_str() == Some(&word))
                .collect()
        })
        .unwrap_or_default();
    let m = model(&doc);
    println!("{sleeps} sleeps on {word}; held by rows {held:?}; {m}");
    assert!(
        sleeps > 0,
        "the workload's lock was never contended: {stdout}"
    );
    assert!(
        held.is_empty(),
        "holders invented for a non-glibc lock: {held:?}"
    );
    assert!(m["waits_holder_unknown"].as_u64().unwrap() >= sleeps, "{m}");
}

/// A thread pool idle on a condition variable, a housekeeping thread in timed waits and
/// a main thread in pthread_join, beside the stats lock every request takes
/// (thread_pool.c): the lock is the contention and ranks first; the idle waits are
/// shown apart as waiting for work, named by kind; the threads that wait on the lock
/// rank first. Contention mode, where only futex words are seen.
fn idle_waits_are_shown_apart_and_the_contended_lock_ranks_first() {
    // Every wait's stacks: a futex word's kind comes from the waiter stacks sampled on
    // it, and at the default rate the stats lock's ~10,000 waits a second can spend the
    // sampling budget before a condition variable's second word gets one (it then
    // ranks among the contended as an unknown word: seen once in CI; a known limit).
    // Every wait's stacks are ~10,000 records a second with their stack copies: with
    // the default 8 MiB ring the (debug-built) reader lost 700-4,700 of them (counted
    // and reported), timed-out waits among them (13 of 16 counted). A 64 MiB ring loses
    // none, which the test checks before it holds the counts exact.
    let (stdout, doc) = trace_json(
        &[
            "--mode",
            "contention",
            "--stack-rate",
            "all",
            "--ring-size",
            "67108864",
        ],
        &workload("thread_pool"),
        &["1500"],
    );
    assert_eq!(
        doc["run"]["losses"]["ring_full"], 0,
        "events lost: the counts below cannot be exact ({})",
        doc["run"]["losses"]
    );
    let truth = truth_maps(&stdout);
    let get = |k: &str| -> String {
        truth
            .iter()
            .find_map(|t| t.get(k))
            .unwrap_or_else(|| panic!("no {k} in {stdout}"))
            .clone()
    };
    let (lock, ticks) = (get("stats_lock"), get("ticks").parse::<u64>().unwrap());
    let objects = doc["sync_graph"]["objects"].as_array().unwrap();
    let kind_of = |o: &Value| o["wait_kind"].as_str().unwrap().to_owned();
    let stats = objects
        .iter()
        .find(|o| o["addr"].as_str() == Some(&lock))
        .unwrap_or_else(|| panic!("no {lock} in {objects:#?}"));
    assert_eq!(kind_of(stats), "mutex", "{stats}");
    // The housekeeping thread's condition variable: every timed wait timed out.
    let timed: Vec<&Value> = objects
        .iter()
        .filter(|o| o["timeouts"].as_u64() > Some(0))
        .collect();
    assert_eq!(timed.len(), 1, "{timed:#?}");
    assert_eq!(kind_of(timed[0]), "condvar", "{}", timed[0]);
    // A wait called with its deadline already passed (the thread preempted for 100 ms
    // after reading the clock: the workload counts them) may not sleep, and contention
    // mode counts waits that slept.
    let late = get("late_ticks").parse::<u64>().unwrap();
    let timeouts = timed[0]["timeouts"].as_u64().unwrap();
    println!("timed waits: {ticks} by the workload ({late} called late), {timeouts} timed out");
    assert!(
        timeouts <= ticks && timeouts + late >= ticks,
        "{}",
        timed[0]
    );
    // The pool's waits: condition variables, together longer than the lock's.
    let idle_ns: u64 = objects
        .iter()
        .filter(|o| kind_of(o) == "condvar")
        .map(|o| o["contended_wait_ns"].as_u64().unwrap())
        .sum();
    let lock_ns = stats["contended_wait_ns"].as_u64().unwrap();
    println!("stats lock {lock_ns} ns waited; condition variables {idle_ns} ns");
    assert!(idle_ns > lock_ns, "the idle waits would have ranked first");
    assert!(
        objects.iter().any(|o| kind_of(o) == "join"),
        "main's pthread_join: {objects:#?}"
    );
    // The report: the lock first among the contended; no idle kind there; the idle
    // waits in their own table.
    let report = &stdout;
    let section = |title: &str| -> Vec<&str> {
        report
            .lines()
            .skip_while(|l| !l.starts_with(title))
            .skip(2)
            .take_while(|l| !l.trim().is_empty())
            .collect()
    };
    let contended = section("Most contended");
    assert!(
        contended
            .first()
            .is_some_and(|l| l.contains("mutex in handler (thread_pool.c")),
        "{report}"
    );
    for l in &contended {
        assert!(!l.contains("condvar") && !l.contains("join"), "{l}");
    }
    let idle = section("Waiting for work");
    assert!(
        idle.iter().any(|l| l.contains("condvar in pool_worker")),
        "{report}"
    );
    // The threads that waited on the lock rank first: the request handlers.
    let threads = doc["sync_graph"]["threads"].as_array().unwrap();
    let on_lock: Vec<u64> = doc["sync_graph"]["edges"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["object"].as_str() == Some(&lock))
        .map(|e| e["tid"].as_u64().unwrap())
        .collect();
    let ranked = section("Threads by time spent waiting for locks");
    for l in ranked.iter().take(3) {
        let tid: u64 = l.split_whitespace().next().unwrap().parse().unwrap();
        assert!(on_lock.contains(&tid), "{tid} not a handler: {ranked:#?}");
    }
    assert!(threads.iter().any(|t| t["idle_wait_ns"].as_u64() > Some(0)));
}

/// Full mode on a program whose locks make no pthread call (Rust's std Mutex is a bare
/// futex word): the word is shown as an object of its own, with exactly the sleeps
/// bpftrace counts on it (its waits that did not return EAGAIN), classed as a mutex by
/// its stack, and the report says why it has no acquisitions or holds. A pthread
/// mutex's futex word is never shown beside it (its waits are the mutex's).
fn full_mode_shows_locks_that_make_no_pthread_call() {
    let me = std::process::id();
    let script = format!(
        "tracepoint:syscalls:sys_enter_futex /comm == \"rust_mutex\" && \
         ((args->op & 127) == 0 || (args->op & 127) == 9)/ {{ @w[tid] = args->uaddr; }} \
         tracepoint:syscalls:sys_exit_futex /@w[tid]/ {{ if (args->ret != -11) \
         {{ @n[@w[tid]] = count(); }} delete(@w[tid]); }} \
         tracepoint:syscalls:sys_enter_getppid /pid == {me}/ {{ printf(\"attached\\n\"); }}"
    );
    let mut bt = spawn(Command::new("bpftrace").args(["-e", &script]));
    let mut bt_out = LineWatch::new(bt.child.stdout.take().unwrap());
    bt_out.wait_for("Attaching", T);
    let asked = Instant::now();
    while bt_out
        .try_wait_for("attached", Duration::from_millis(200))
        .is_none()
    {
        assert!(asked.elapsed() < T, "bpftrace did not attach");
        // SAFETY: a system call without arguments.
        unsafe { libc::getppid() };
    }
    let (stdout, doc) = trace_json(
        &["--mode", "full"],
        Path::new(env!("CARGO_BIN_EXE_rust_mutex")),
        &["4", "3000"],
    );
    bt.signal(libc::SIGINT);
    let counts = bt_out.rest(T);
    let word = stdout
        .split_whitespace()
        .find_map(|w| w.strip_prefix("lock="))
        .unwrap_or_else(|| panic!("no lock= in {stdout}"))
        .to_owned();
    let kernel: u64 = counts
        .iter()
        .filter_map(|l| {
            let (k, v) = l.trim().strip_prefix("@n[")?.split_once("]: ")?;
            let addr = u64::from_str_radix(k.trim_start_matches("0x"), 16).ok()?;
            (format!("{addr:#x}") == word).then(|| v.trim().parse::<u64>().ok())?
        })
        .sum();
    let objects = doc["sync_graph"]["objects"].as_array().unwrap();
    let lock = objects
        .iter()
        .find(|o| o["addr"].as_str() == Some(&word))
        .unwrap_or_else(|| panic!("no object for the Rust lock {word}: {objects:#?}"));
    println!(
        "rust lock {word}: {} sleeps, bpftrace {kernel}; kind {}",
        lock["contended"], lock["wait_kind"]
    );
    assert!(kernel > 0, "the workload's lock was never contended");
    assert_eq!(lock["kind"], "futex");
    assert_eq!(lock["contended"].as_u64(), Some(kernel));
    assert_eq!(lock["wait_kind"], "mutex", "{lock}");
    let report = stdout;
    assert!(
        report.contains("came from no probed pthread call"),
        "{report}"
    );

    // A pthread program in full mode: its mutexes' words are not shown as futex words.
    let (_, doc) = trace_json(
        &["--mode", "full"],
        &workload("mutex_workload"),
        &["--threads", "4", "--iters", "200", "--hold-us", "50"],
    );
    let words: Vec<&Value> = doc["sync_graph"]["objects"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|o| o["kind"] == "futex")
        .collect();
    let shared = object(&doc, "shared_lock").expect("shared_lock named");
    assert!(shared["contended"].as_u64().unwrap() > 0, "{shared}");
    assert!(
        words.iter().all(|w| w["addr"] != shared["addr"]),
        "the mutex's word shown beside it: {words:#?}"
    );
}

/// A Go program whose goroutines contend on a `sync.Mutex` (go_mutex.go; Go's own mutex
/// profile says they did): a blocked goroutine parks in the runtime, not on a futex, so
/// its futex waits are the runtime's own. Its idle threads' parking is told as such
/// (`park`, never in the contention table), nothing is called a condition variable
/// (the runtime's variables only look like glibc's), and the report says why the mutex
/// itself is not seen. Every wait's stack is taken, so each word is classed by it.
fn a_go_programs_runtime_parking_is_not_contention() {
    // As built, and stripped as distributions ship Go programs (their frames are then
    // named from the program's own function table).
    for bin in ["go_mutex", "go_mutex_stripped"] {
        go_parking_is_told(&workload(bin));
    }
}

fn go_parking_is_told(bin: &Path) {
    println!("{}", bin.display());
    assert!(
        bin.exists(),
        "{} was not built: golang-go is missing (run cargo xtask setup)",
        bin.display()
    );
    let (stdout, doc) = trace_json(
        &["--mode", "contention", "--stack-rate", "all"],
        bin,
        &["8", "1000"],
    );
    let t = truths(&stdout).pop().expect("the workload's truth line");
    assert!(
        t.get("acquisitions") > 0 && t.get("mutex_contention_cycles") > 0,
        "{stdout}"
    );
    let pid = doc["run"]["targets"][0]["pid"].as_u64().unwrap();
    assert_eq!(doc["sync_graph"]["go_processes"], serde_json::json!([pid]));
    let objects: Vec<&Value> = doc["sync_graph"]["objects"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|o| o["pid"].as_u64() == Some(pid))
        .collect();
    for o in &objects {
        println!("{} {} waits {}", o["wait_kind"], o["name"], o["waits"]);
        assert_ne!(o["wait_kind"], "condvar", "{o}");
        assert!(!o["name"].as_str().unwrap_or("").contains("condvar"), "{o}");
    }
    // Every word whose waits parked an idle thread (runtime.notesleep) is a park.
    let rows = doc["sync_graph"]["stacks"]["rows"].as_array().unwrap();
    let parked: std::collections::HashSet<&str> = rows
        .iter()
        .filter(|r| {
            r["waiter"].as_array().is_some_and(|f| {
                f.iter().any(|f| {
                    f.as_str()
                        .is_some_and(|f| f.starts_with("runtime.notesleep"))
                })
            })
        })
        .filter_map(|r| r["object"].as_str())
        .collect();
    assert!(!parked.is_empty(), "no thread parked idle: {rows:#?}");
    for o in &objects {
        if parked.contains(o["addr"].as_str().unwrap()) {
            assert_eq!(o["wait_kind"], "park", "{o}");
        }
    }
    // The contention table lists no park.
    let table: Vec<&str> = stdout
        .lines()
        .skip_while(|l| !l.starts_with("Most contended"))
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .collect();
    assert!(
        table.iter().all(|l| !l.trim_start().starts_with("park ")),
        "{table:#?}"
    );
    assert!(stdout.contains("runs a Go program"), "{stdout}");
}

/// Heap mutexes all taken at one line of many_locks.c's worker(): each is its own
/// object with its own name (`in worker (many_locks.c:LINE) #N`), and the same name in
/// every part of the JSON, the report, the DOT file, the HTML graph, the folded
/// stacks (they were one merged "in worker (many_locks.c:35)" node) and the Perfetto
/// timeline (where they were `futex 0xADDR`: written while tracing, before the stacks
/// that name them were read).
fn objects_from_one_call_site_have_one_name_each_in_every_output() {
    let python = perfetto_python();
    let dir = TempDir::new("names");
    let (json, report, dot, html, folded, timeline) = (
        dir.join("t.json"),
        dir.join("report.txt"),
        dir.join("t.dot"),
        dir.join("t.html"),
        dir.join("t.folded"),
        dir.join("t.pftrace"),
    );
    let mut p = spawn(
        Command::new(rtm_bin())
            .args(["--mode", "contention", "--stack-rate", "all"])
            .arg("--json")
            .arg(&json)
            .arg("-o")
            .arg(&report)
            .arg("--dot")
            .arg(&dot)
            .arg("--html")
            .arg(&html)
            .arg("--folded")
            .arg(&folded)
            .arg("--timeline")
            .arg(&timeline)
            .arg("--")
            .arg(workload("many_locks"))
            .args(["4", "8", "1500"]),
    );
    let mut stdin = p.child.stdin.take().unwrap();
    writeln!(stdin, "go").unwrap();
    drop(stdin);
    let out = p.wait_output(T);
    assert!(
        out.status.success(),
        "rtm-trace failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc = read_json(&json);
    let g = &doc["sync_graph"];
    let name_at = |pid: &Value, addr: &Value| -> Option<String> {
        g["objects"]
            .as_array()
            .unwrap()
            .iter()
            .find(|o| o["pid"] == *pid && o["addr"] == *addr)
            .and_then(|o| o["name"].as_str().map(str::to_owned))
    };
    let site: Vec<(String, String)> = g["objects"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|o| {
            let n = o["name"].as_str()?;
            n.starts_with("in worker (many_locks.c:")
                .then(|| (n.to_owned(), o["addr"].as_str().unwrap().to_owned()))
        })
        .collect();
    println!("named from the call site: {site:?}");
    assert!(
        site.len() >= 2,
        "several heap locks named by their site: {site:?}"
    );
    let mut names: Vec<&str> = site.iter().map(|(n, _)| n.as_str()).collect();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), site.len(), "one name per object: {site:?}");
    assert!(
        site.iter().all(|(n, _)| n
            .rsplit_once(" #")
            .is_some_and(|(_, k)| k.parse::<u32>().is_ok())),
        "numbered apart: {site:?}"
    );
    // The same name wherever the JSON names the word.
    let rows = g["waits_for"]
        .as_array()
        .unwrap()
        .iter()
        .chain(g["stacks"]["rows"].as_array().unwrap());
    for r in rows {
        assert_eq!(
            r["object_name"].as_str().map(str::to_owned),
            name_at(&r["pid"], &r["object"]),
            "{r}"
        );
    }
    let report = std::fs::read_to_string(&report).unwrap();
    let dot = std::fs::read_to_string(&dot).unwrap();
    let html = std::fs::read_to_string(&html).unwrap();
    let graph = &html[html.find("id=\"sync-graph\"").expect("the HTML graph")..];
    let graph = &graph[..graph.find("</svg>").unwrap()];
    let folded = std::fs::read_to_string(&folded).unwrap();
    let slices: Vec<String> = decode_timeline(&python, &timeline)["slices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap().to_owned())
        .collect();
    for (name, addr) in &site {
        let waits = slices
            .iter()
            .filter(|s| **s == format!("wait {name}"))
            .count();
        println!("timeline: {waits} waits on {name}");
        assert!(waits > 0, "{name} in the timeline");
        assert!(
            !slices.iter().any(|s| s.ends_with(&format!("futex {addr}"))),
            "{addr} named by its address in the timeline"
        );
        assert!(report.contains(name.as_str()), "{name} in the report");
        // One node each in the DOT graph, one in the HTML graph.
        let node = format!(
            "o{}_{} [",
            doc["run"]["targets"][0]["pid"],
            addr.trim_start_matches("0x")
        );
        let line = dot
            .lines()
            .find(|l| l.trim_start().starts_with(&node))
            .unwrap_or_else(|| panic!("no node {node} in {dot}"));
        // Its one display name: its kind, then the name.
        assert!(line.contains(&format!(" {name}\"")), "{line}");
        assert_eq!(
            dot.matches(&format!(" {name}\"")).count(),
            1,
            "{name}: {dot}"
        );
        // The same display name as the DOT node's, once in the HTML graph.
        let shown = line
            .split("label=\"")
            .nth(1)
            .and_then(|l| l.split('"').next())
            .unwrap_or_else(|| panic!("no label in {line}"));
        assert!(
            report.contains(shown),
            "{shown} (the DOT's name) in the report"
        );
        assert_eq!(
            graph.matches(&format!("<title>{shown}</title>")).count(),
            1,
            "{name} in the HTML graph"
        );
        let root = name.replace(' ', "_");
        assert!(
            folded
                .lines()
                .any(|l| l.starts_with(&format!("contention:mutex;{root};"))),
            "{root} in the folded stacks"
        );
    }
}
