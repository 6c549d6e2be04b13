//! Per-process totals and forgetting processes.

use super::*;

/// The per-process totals count every futex wait, its sleep and its bucket; forgetting a
/// process drops everything of it and keeps the others' objects, edges and call sites
/// pointing at the right objects.
#[test]
fn process_totals_and_forgetting_a_process() {
    let mut g = SyncGraph::new(Limits::default(), true);
    let in_pid = |pid: u32, mut e: Event<'static>| -> Event<'static> {
        if let Event::Sync(s) = &mut e {
            s.raw.header.pid = pid;
        }
        e
    };
    let wait = |pid, tid, ts, obj, ns, ret, waker| {
        in_pid(
            pid,
            evp(
                Primitive::Futex,
                tid,
                ts,
                SyncOp::Wait,
                obj,
                ns,
                ret,
                0,
                128,
                waker,
            ),
        )
    };
    // Process 100 first, so that 200's objects sit after it and must move down.
    g.apply(&wait(100, 1, 1_000, M1, 5_000, 0, 2));
    g.apply(&wait(100, 1, 2_000, M2, 50, 0, 2));
    g.apply(&wait(200, 7, 3_000, M1, 2_000_000, 0, 8));
    g.apply(&wait(200, 7, 4_000, M1, 20_000_000_000, -110, 0));
    g.apply(&wait(200, 7, 5_000, M2, 0, -11, 0));
    let t = *g.process_totals(200).unwrap();
    assert_eq!((t.waits, t.sleeps, t.unslept, t.timeouts), (3, 2, 1, 1));
    assert_eq!(t.wait_ns, 20_002_000_000);
    // 2 ms in the bucket whose bound is the first at or over it; 20 s past the last.
    let at = |ns: u64| WAIT_BUCKETS_NS.partition_point(|&b| b < ns);
    assert!(WAIT_BUCKETS_NS[at(2_000_000) - 1] < 2_000_000);
    assert!(WAIT_BUCKETS_NS[at(2_000_000)] >= 2_000_000);
    assert_eq!(t.buckets[at(2_000_000)], 1);
    assert_eq!(t.buckets.iter().sum::<u64>(), 2);
    assert_eq!(t.buckets[WAIT_BUCKETS_NS.len()], 1);
    // 5 us and 50 ns (under the first bound).
    assert_eq!(g.process_totals(100).unwrap().buckets[at(5_000)], 1);
    assert_eq!(g.process_totals(100).unwrap().buckets[0], 1);

    g.forget_processes(&[100].into_iter().collect());
    assert!(g.process_totals(100).is_none());
    assert_eq!(g.process_totals(200), Some(&t));
    assert!(g.objects().all(|(k, _)| k.pid == 200));
    assert_eq!(g.objects().count(), 2);
    assert!(g.threads().all(|(k, _)| k.pid == 200));
    assert!(g.waits_for().all(|(k, _)| k.pid == 200));
    let keys: Vec<(u32, u64)> = g
        .edges()
        .map(|(k, _)| (k.thread().tid, k.object().addr))
        .collect();
    assert_eq!(keys, vec![(7, M1), (7, M2)]);
    // A later wait on the same word lands on the same edge, not a new one.
    g.apply(&wait(200, 7, 6_000, M1, 1_000, 0, 8));
    assert_eq!(g.edge_count(), 2);
    let (_, e) = g.edges().find(|(k, _)| k.object().addr == M1).unwrap();
    assert_eq!(e.counts().contended_wait_ns, 20_002_001_000);
}
