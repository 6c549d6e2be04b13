//! `rtm-trace --pid N --blocked`: a snapshot of who is blocked on what, held by whom,
//! and the deadlocks among them, against workloads that deadlock on purpose and say
//! which thread holds what (deadlock.c); and the mutex layout it reads, against the
//! installed glibc (layout_probe.c).

use std::{
    collections::HashMap,
    process::Command,
    time::{Duration, Instant},
};

use rtm::model::blocked::{self, Holder, MUTEX_BYTES, MUTEX_KIND, MUTEX_OWNER};
use rtm_tests::{
    LineWatch, Proc, TempDir, Value, can_trace, read_json, rtm_bin, run, spawn, workload,
};

const T: Duration = Duration::from_secs(60);

/// Starts `deadlock MODE`; returns it and its truth lines once it is ready.
fn start(mode: &str) -> (Proc, Vec<HashMap<String, String>>) {
    let mut p = spawn(Command::new(workload("deadlock")).arg(mode));
    let mut out = LineWatch::new(p.child.stdout.take().unwrap());
    let mut truths = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let line = out.wait_for("", deadline.saturating_duration_since(Instant::now()));
        if line.trim() == "ready" {
            break;
        }
        if let Some(rest) = line.trim().strip_prefix("truth ") {
            truths.push(
                rest.split_whitespace()
                    .filter_map(|kv| kv.split_once('='))
                    .map(|(k, v)| (k.to_owned(), v.to_owned()))
                    .collect(),
            );
        }
    }
    (p, truths)
}

/// Runs `rtm-trace --blocked` on `pids`; returns its exit code, report and JSON.
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
        matches!(out.status.code(), Some(0 | 3)),
        "{}\n{report}",
        String::from_utf8_lossy(&out.stderr)
    );
    (
        out.status.code(),
        report,
        read_json(&json)["blocked"].clone(),
    )
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

#[test]
fn an_abba_deadlock_names_both_threads_locks_and_holders() {
    if !can_trace("--blocked abba") {
        return;
    }
    let (p, truths) = start("abba");
    let (code, report, doc) = snapshot(&[p.pid()]);
    assert_eq!(code, Some(3), "a deadlock exits 3:\n{report}");
    let by_index: HashMap<&str, u64> = truths
        .iter()
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

#[test]
fn a_three_thread_cycle_and_one_across_processes() {
    if !can_trace("--blocked three and pshared") {
        return;
    }
    let (p, truths) = start("three");
    let (code, _, doc) = snapshot(&[p.pid()]);
    assert_eq!(code, Some(3));
    let cycles = doc["cycles"].as_array().unwrap();
    assert_eq!(cycles.len(), 1, "{doc:#}");
    assert_eq!(cycles[0]["threads"].as_array().unwrap().len(), 3);
    for t in &truths {
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

#[test]
fn each_mutex_type_names_its_holder_and_a_condition_variable_says_unknown() {
    if !can_trace("--blocked mutex types") {
        return;
    }
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

#[test]
fn a_lock_passed_around_is_never_a_deadlock() {
    if !can_trace("--blocked contended") {
        return;
    }
    let (p, _) = start("contended");
    for _ in 0..5 {
        let (code, report, doc) = snapshot(&[p.pid()]);
        assert_eq!(code, Some(0), "{report}");
        assert!(doc["cycles"].as_array().unwrap().is_empty());
        assert!(report.contains("No deadlock"));
    }
    drop(p);
}

#[test]
fn the_mutex_layout_is_the_installed_glibcs() {
    let out = run(&mut Command::new(workload("layout_probe")), T);
    let text = String::from_utf8_lossy(&out.stdout);
    let facts: HashMap<&str, i64> = text
        .split_whitespace()
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k, v.parse().unwrap()))
        .collect();
    assert_eq!(facts["mutex_owner"] as usize, MUTEX_OWNER, "{text}");
    assert_eq!(facts["mutex_kind"] as usize, MUTEX_KIND, "{text}");
    assert!(facts["mutex_size"] as usize >= MUTEX_BYTES);
    // Every type's __kind, as this glibc sets it, is one the model takes for a mutex
    // (a waiter of it sleeps on the value 2; a robust one's word holds the owner).
    for ty in [
        "normal",
        "recursive",
        "errorcheck",
        "adaptive",
        "pshared",
        "robust",
    ] {
        let mut bytes = vec![0u8; MUTEX_BYTES];
        let robust = ty == "robust";
        let lock: i32 = if robust { 4242 | i32::MIN } else { 2 };
        bytes[..4].copy_from_slice(&lock.to_le_bytes());
        bytes[MUTEX_OWNER..MUTEX_OWNER + 4].copy_from_slice(&4242i32.to_le_bytes());
        bytes[MUTEX_KIND..MUTEX_KIND + 4].copy_from_slice(&(facts[ty] as i32).to_le_bytes());
        assert!(
            matches!(
                blocked::holder(0x80, &bytes),
                Holder::Thread { tid: 4242, .. }
            ),
            "{ty} (__kind {})",
            facts[ty]
        );
    }
}
