//! Every pthread primitive in full mode, against workloads that know what they did.

use std::{
    collections::{BTreeMap, HashMap},
    path::PathBuf,
};

use rtm_tests::{Value, trace_json, truth_maps, within, workload};
use rtm_tests::{e2e, harness::E2e};

/// This file's tests, each with what it needs besides the tracer.
pub(crate) const TESTS: &[E2e] = &[
    e2e!(barrier_rounds_show_the_spread_and_the_last_arriver, Root),
    e2e!(condition_variables_show_waits_timeouts_signals_and_their_mutex, Root),
    e2e!(rwlocks_separate_readers_and_writers, Root),
    e2e!(semaphores_count_waits_posts_and_failed_trywaits, Root),
    e2e!(spinlocks_count_every_acquisition_once, Root),
    e2e!(the_thread_tree_has_its_known_shape_and_joins, Root),
    e2e!(a_statically_linked_target_is_traced, Root),
    e2e!(a_spin_loop_attached_while_it_runs_is_seen_from_its_next_call, Root),
];

/// The value of `key` in the first truth line that has it.
fn truth(t: &[HashMap<String, String>], key: &str) -> String {
    t.iter()
        .find_map(|m| m.get(key).cloned())
        .unwrap_or_else(|| panic!("no truth {key} in {t:?}"))
}

/// Traces `sync_workload ARGS` (or another binary) in full mode; returns its truths, the
/// JSON document and the report.
fn trace(bin: PathBuf, args: &[&str]) -> (Vec<HashMap<String, String>>, Value, String) {
    let (stdout, doc) = trace_json(&["--mode", "full"], &bin, args);
    assert!(stdout.contains(&format!("done {}", args[0])), "{stdout}");
    assert_eq!(doc["run"]["losses"]["ring_full"], 0);
    (truth_maps(&stdout), doc, stdout)
}

fn objects<'a>(doc: &'a Value, kind: &str) -> Vec<&'a Value> {
    doc["sync_graph"]["objects"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|o| o["kind"] == kind)
        .collect()
}

fn named<'a>(doc: &'a Value, kind: &str, name: &str) -> &'a Value {
    objects(doc, kind)
        .into_iter()
        .find(|o| o["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} named {name} in {}", doc["sync_graph"]["objects"]))
}

fn edges<'a>(doc: &'a Value, tid: u64, object: &Value) -> Vec<&'a Value> {
    doc["sync_graph"]["edges"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["tid"] == tid && e["object"] == object["addr"])
        .collect()
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a number: {v}"))
}

fn tid(s: &str) -> u64 {
    s.parse().expect("tid")
}

fn barrier_rounds_show_the_spread_and_the_last_arriver() {
    let sync = workload("sync_workload");
    let (t, doc, report) = trace(sync, &["barrier", "3", "6", "3000"]);
    let tid_of = |index: &str| {
        t.iter()
            .find(|m| m.get("index").map(String::as_str) == Some(index))
            .map(|m| tid(&m["tid"]))
            .unwrap()
    };
    let b = named(&doc, "barrier", "round_barrier");
    let bv = &b["barrier"];
    assert_eq!(u(&bv["rounds"]), 6, "{bv}");
    // Thread i sleeps (i+1)*3 ms per round: the last arrives ~3 ms after the one before,
    // ~6 ms after the first. The workload measures each round's arrivals itself (a
    // loaded machine stretches sleeps, and can even reorder the threads).
    let rounds = bv["round_list"].as_array().unwrap();
    let truths: Vec<_> = t.iter().filter(|m| m.contains_key("spread_ns")).collect();
    assert_eq!(truths.len(), 6, "{t:?}");
    let mut lasts: BTreeMap<u64, u64> = BTreeMap::new();
    let mut clear = true;
    for m in truths {
        let r = &rounds[m["round"].parse::<usize>().unwrap()];
        let spread: f64 = m["spread_ns"].parse().unwrap();
        // Unless a thread was preempted between its clock reading and its arrival.
        if m["preempted"] == "0" {
            within(u(&r["spread_ns"]) as f64, spread, 0.05, "round spread");
        }
        let last = tid_of(&m["last"]);
        *lasts.entry(last).or_default() += 1;
        // The workload reads its clock just before the call: an arrival closer than
        // that to the runner-up's (a preemption in between) is a tie.
        if m["margin_ns"].parse::<u64>().unwrap() > 200_000 {
            assert_eq!(u(&r["last_tid"]), last, "round {}: {m:?}", m["round"]);
        } else {
            clear = false;
        }
    }
    // Rounds per last arriver: on an idle machine, six for the thread that sleeps most.
    let counted: BTreeMap<u64, u64> = bv["last_arrivals"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (u(&p[0]), u(&p[1])))
        .collect();
    assert_eq!(counted.values().sum::<u64>(), 6, "{bv}");
    if clear {
        assert_eq!(counted, lasts, "{bv}");
    }
    assert_eq!(u(&bv["serial_returns"]), 6);
    assert!(report.contains("round_barrier"), "{report}");
}

fn condition_variables_show_waits_timeouts_signals_and_their_mutex() {
    let (t, doc, _) = trace(workload("sync_workload"), &["cond", "4", "30", "20"]);
    assert_eq!(truth(&t, "timedwait"), "timeout");
    let waiter = tid(&truth(&t, "waiter"));
    let signaler = tid(&truth(&t, "signaler"));
    let cv = named(&doc, "condvar", "ready_cond");
    let mutex = named(&doc, "mutex", "cond_lock");
    assert_eq!(cv["mutex"], mutex["addr"]);
    assert_eq!(
        (u(&cv["waits"]), u(&cv["timeouts"]), u(&cv["signals"])),
        (5, 1, 4)
    );
    assert!(u(&cv["woken"]) >= 1 && u(&cv["woken"]) <= 4, "{cv}");
    let w = edges(&doc, waiter, cv);
    let waited = u(&w[0]["wait"]["total_ns"]) as f64;
    // Four waits of ~30 ms and a 20 ms timeout, as the waiter's own clock timed them (a
    // loaded machine stretches them).
    let truth: f64 = truth(&t, "waited_ns").parse().unwrap();
    within(waited, truth, 0.05, "condvar wait total");
    let wf = doc["sync_graph"]["waits_for"].as_array().unwrap();
    assert!(
        wf.iter()
            .any(|e| e["waiter"] == waiter && e["waker"] == signaler),
        "{wf:?}"
    );
    assert_eq!(doc["sync_graph"]["model"]["interrupted_holds"], 0);
}

fn rwlocks_separate_readers_and_writers() {
    let (t, doc, report) = trace(
        workload("sync_workload"),
        &["rwlock", "2", "1", "30", "400"],
    );
    let lock = named(&doc, "rwlock", "table_lock");
    for m in t.iter().filter(|m| m.contains_key("role")) {
        let e = edges(&doc, tid(&m["tid"]), lock);
        assert_eq!(e.len(), 1, "{e:?}");
        assert_eq!(e[0]["role"], m["role"].as_str());
        assert_eq!(u(&e[0]["acquisitions"]), 30);
        assert_eq!(u(&e[0]["hold"]["count"]), 30);
        // The median: three spinning threads on a small machine get preempted now and
        // then, which stretches a few holds.
        within(
            u(&e[0]["hold"]["p50_ns"]) as f64,
            400e3,
            0.05,
            "rwlock hold median",
        );
    }
    assert!(report.contains("Read-write locks"), "{report}");
}

fn semaphores_count_waits_posts_and_failed_trywaits() {
    let (t, doc, _) = trace(workload("sync_workload"), &["sem", "6", "3000"]);
    let sem = named(&doc, "semaphore", "items");
    let consumer = edges(&doc, tid(&truth(&t, "consumer")), sem);
    let producer = edges(&doc, tid(&truth(&t, "producer")), sem);
    assert_eq!(u(&consumer[0]["acquisitions"]), 6);
    assert_eq!(u(&consumer[0]["failed_trylocks"]), 1);
    assert_eq!(u(&producer[0]["posts"]), 6);
}

fn spinlocks_count_every_acquisition_once() {
    let (t, doc, _) = trace(workload("sync_workload"), &["spin", "2", "300", "10"]);
    let spin = named(&doc, "spinlock", "counter_spin");
    for m in t.iter().filter(|m| m.contains_key("iters")) {
        let e = edges(&doc, tid(&m["tid"]), spin);
        assert_eq!(u(&e[0]["acquisitions"]), 300, "{}", e[0]);
        assert_eq!(u(&e[0]["hold"]["count"]), 300);
    }
    assert_eq!(doc["sync_graph"]["model"]["interrupted_holds"], 0);
}

fn the_thread_tree_has_its_known_shape_and_joins() {
    let (t, doc, report) = trace(workload("sync_workload"), &["tree"]);
    let node = |n: &str| {
        t.iter()
            .find(|m| m.get("node").map(String::as_str) == Some(n))
            .map(|m| tid(&m["tid"]))
            .unwrap()
    };
    let threads = doc["sync_graph"]["threads"].as_array().unwrap();
    let parent = |tid: u64| {
        threads
            .iter()
            .find(|x| x["tid"] == tid)
            .map(|x| x["parent"]["tid"].clone())
            .unwrap()
    };
    assert_eq!(parent(node("middle")), node("main"));
    assert_eq!(parent(node("leaf1")), node("middle"));
    assert_eq!(parent(node("leaf2")), node("middle"));
    for (joiner, joined) in [("main", "middle"), ("middle", "leaf1"), ("middle", "leaf2")] {
        let h = objects(&doc, "thread")
            .into_iter()
            .find(|o| o["thread_tid"] == node(joined))
            .unwrap_or_else(|| panic!("no handle for {joined}"));
        let e = edges(&doc, node(joiner), h);
        assert_eq!(u(&e[0]["waits"]), 1, "{joiner} joined {joined}");
    }
    // leaf2 sleeps 40 ms, leaf1 20 ms: middle waits ~20 ms more for leaf2 after leaf1.
    assert!(report.contains("Thread tree"), "{report}");
}

fn a_statically_linked_target_is_traced() {
    let (t, doc, _) = trace(
        workload("sync_workload_static"),
        &["barrier", "2", "4", "2000"],
    );
    // Two threads, each saying which it is (and a spread line per round).
    assert_eq!(t.iter().filter(|m| m.contains_key("index")).count(), 2);
    let b = named(&doc, "barrier", "round_barrier");
    assert_eq!(u(&b["barrier"]["rounds"]), 4, "{b}");
    let lib = doc["run"]["targets"][0]["library"].as_str().unwrap();
    assert!(lib.ends_with("sync_workload_static"), "{lib}");
}

fn a_spin_loop_attached_while_it_runs_is_seen_from_its_next_call() {
    // Two threads contend on a spin lock for a few seconds: most of the time one of them
    // is inside pthread_spin_lock's retry loop, where the attach finds it.
    let app = rtm_tests::spawn(
        std::process::Command::new(workload("sync_workload")).args(["spin", "2", "400000", "2"]),
    );
    std::thread::sleep(std::time::Duration::from_millis(300));
    let dir = rtm_tests::TempDir::new("spin-attach");
    let json = dir.join("o.json");
    let out = rtm_tests::run(
        std::process::Command::new(rtm_tests::rtm_bin())
            .args([
                "--mode",
                "full",
                "-d",
                "1",
                "-p",
                &app.pid().to_string(),
                "--json",
            ])
            .arg(&json),
        std::time::Duration::from_secs(120),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc = rtm_tests::read_json(&json);
    let spin = named(&doc, "spinlock", "counter_spin");
    let spinners: Vec<&Value> = doc["sync_graph"]["threads"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["name"].as_str().is_some_and(|n| n.starts_with("spinner")))
        .collect();
    assert_eq!(spinners.len(), 2, "{}", doc["sync_graph"]["threads"]);
    // Each thread's calls after the attach are seen: a call that was in flight when the
    // probes attached (its return never probed) does not hide the ones after it. At
    // 2 us a hold, a second gives each thread tens of thousands.
    for t in spinners {
        let e = edges(&doc, u(&t["tid"]), spin);
        let n = u(&e[0]["acquisitions"]);
        println!("spinner {}: {n} acquisitions in 1 s", t["tid"]);
        assert!(n >= 1_000, "{}", e[0]);
    }
    // Those calls in flight are counted, once each, not once per pass of the loop.
    let missed = u(&doc["run"]["losses"]["missed_entry"]);
    assert!(missed <= 8, "missed_entry {missed}");
}
