use rtm_common::{EventHeader, EventKind, SyncEvent, decode::decode, decode::encode};

use super::*;

const M1: u64 = 0x1000;
const M2: u64 = 0x2000;

fn ev(tid: u32, ts: u64, op: SyncOp, obj: u64, wait: u64, ret: i32, contended: bool) -> Event {
    let raw = SyncEvent {
        header: EventHeader {
            kind: EventKind::Sync as u32,
            cpu: 0,
            ts_ns: ts,
            pid: 100,
            tid,
        },
        object: obj,
        caller: 0,
        wait_ns: wait,
        primitive: Primitive::Mutex as u32,
        op: op as u32,
        ret,
        flags: if contended { SYNC_FLAG_CONTENDED } else { 0 },
    };
    decode(encode(&raw)).expect("valid event")
}

fn edge(g: &SyncGraph, tid: u32, obj: u64) -> &EdgeStats {
    g.edges()
        .find(|(k, _)| k.thread.tid == tid && k.object.addr == obj)
        .map(|(_, e)| e)
        .expect("edge exists")
}

#[test]
fn lock_unlock_pairs_give_counts_waits_and_holds() {
    let mut g = SyncGraph::new(Limits::default());
    // Thread 1 holds M1 for 100 ns twice; thread 2 waits 50 ns once, contended.
    g.apply(&ev(1, 1_000, SyncOp::Lock, M1, 10, 0, false));
    g.apply(&ev(1, 1_100, SyncOp::Unlock, M1, 0, 0, false));
    g.apply(&ev(2, 1_150, SyncOp::Lock, M1, 50, 0, true));
    g.apply(&ev(2, 1_400, SyncOp::Unlock, M1, 0, 0, false));
    g.apply(&ev(1, 2_000, SyncOp::Lock, M1, 10, 0, false));
    g.apply(&ev(1, 2_100, SyncOp::Unlock, M1, 0, 0, false));

    let e1 = edge(&g, 1, M1);
    assert_eq!((e1.counts.acquisitions, e1.counts.contended), (2, 0));
    assert_eq!((e1.hold.count(), e1.hold.total()), (2, 200));
    assert_eq!(e1.wait.total(), 20);
    let e2 = edge(&g, 2, M1);
    assert_eq!(
        (
            e2.counts.acquisitions,
            e2.counts.contended,
            e2.counts.contended_wait_ns
        ),
        (1, 1, 50)
    );
    assert_eq!(e2.hold.total(), 250);
    assert_eq!(g.counters().events, 6);
    assert_eq!(g.counters().unmatched_releases, 0);
}

#[test]
fn failed_trylocks_timeouts_and_errors_are_not_acquisitions() {
    let mut g = SyncGraph::new(Limits::default());
    g.apply(&ev(1, 10, SyncOp::TryLock, M1, 1, EBUSY, false));
    g.apply(&ev(1, 20, SyncOp::TimedLock, M1, 5_000, ETIMEDOUT, true));
    g.apply(&ev(
        1,
        30,
        SyncOp::Lock,
        M1,
        1,
        35, /* EDEADLK */
        false,
    ));
    g.apply(&ev(1, 40, SyncOp::TryLock, M1, 1, 0, false));
    let e = edge(&g, 1, M1);
    assert_eq!(e.counts.acquisitions, 1);
    assert_eq!(
        (e.counts.failed_trylocks, e.counts.timeouts, e.counts.errors),
        (1, 1, 1)
    );
    // The timeout waited; the successful trylock did not block.
    assert_eq!((e.wait.count(), e.wait.total()), (1, 5_000));
}

#[test]
fn recursive_acquisitions_hold_until_the_last_release() {
    let mut g = SyncGraph::new(Limits::default());
    g.apply(&ev(1, 100, SyncOp::Lock, M1, 0, 0, false));
    g.apply(&ev(1, 200, SyncOp::Lock, M1, 0, 0, false));
    g.apply(&ev(1, 300, SyncOp::Unlock, M1, 0, 0, false));
    g.apply(&ev(1, 400, SyncOp::Unlock, M1, 0, 0, false));
    let e = edge(&g, 1, M1);
    assert_eq!(e.counts.acquisitions, 2);
    assert_eq!((e.hold.count(), e.hold.total()), (1, 300));
}

#[test]
fn release_without_acquire_and_missed_release_are_counted() {
    let mut g = SyncGraph::new(Limits::default());
    g.apply(&ev(1, 100, SyncOp::Unlock, M1, 0, 0, false));
    g.apply(&ev(1, 200, SyncOp::Lock, M2, 0, 0, false));
    g.apply(&ev(2, 300, SyncOp::Lock, M2, 0, 0, false)); // thread 1's release was not seen
    g.apply(&ev(2, 350, SyncOp::Unlock, M2, 0, 0, false));
    let c = g.counters();
    assert_eq!((c.unmatched_releases, c.interrupted_holds), (1, 1));
    assert_eq!(edge(&g, 1, M2).hold.count(), 0);
    assert_eq!(edge(&g, 2, M2).hold.total(), 50);
}

#[test]
fn caps_bound_memory_and_count_what_they_drop() {
    let limits = Limits {
        max_threads: 2,
        max_objects: 3,
        max_edges: 4,
        max_histograms: 1,
    };
    let mut g = SyncGraph::new(limits);
    for obj in 0..10u64 {
        g.apply(&ev(1, obj, SyncOp::Lock, obj, 1, 0, false));
    }
    g.apply(&ev(3, 100, SyncOp::Lock, 0, 1, 0, false));
    g.apply(&ev(4, 101, SyncOp::Lock, 0, 1, 0, false)); // third thread: over the cap
    assert_eq!(g.objects().count(), 3);
    assert_eq!(g.threads().count(), 2);
    assert_eq!(g.counters().dropped_over_limits, 8);
    assert!(g.counters().histograms_refused > 0);
}

#[test]
fn new_threads_and_processes_are_reported_once() {
    let mut g = SyncGraph::new(Limits::default());
    let a = g.apply(&ev(1, 1, SyncOp::Lock, M1, 0, 0, false));
    assert_eq!(a.new_process, Some(100));
    assert_eq!(a.new_thread, Some(ThreadKey { pid: 100, tid: 1 }));
    let b = g.apply(&ev(2, 2, SyncOp::Lock, M2, 0, 0, false));
    assert_eq!(
        (b.new_process, b.new_thread.map(|t| t.tid)),
        (None, Some(2))
    );
    let c = g.apply(&ev(2, 3, SyncOp::Unlock, M2, 0, 0, false));
    assert_eq!(c, Applied::default());
}
