use rtm_common::{
    EventHeader, EventKind, FUTEX_OP_OUTSIDE_CALL, LifecycleEvent, LifecycleOp, SyncEvent,
    decode::decode, decode::encode,
};

use super::*;

mod forget;

const M1: u64 = 0x1000;
const M2: u64 = 0x2000;

fn ev(
    tid: u32,
    ts: u64,
    op: SyncOp,
    obj: u64,
    wait: u64,
    ret: i32,
    contended: bool,
) -> Event<'static> {
    let flags = if contended { SYNC_FLAG_CONTENDED } else { 0 };
    evp(Primitive::Mutex, tid, ts, op, obj, wait, ret, flags, 0, 0)
}

#[allow(clippy::too_many_arguments)]
fn evp(
    primitive: Primitive,
    tid: u32,
    ts: u64,
    op: SyncOp,
    obj: u64,
    wait: u64,
    ret: i32,
    flags: u32,
    aux: u64,
    extra: u32,
) -> Event<'static> {
    let raw = SyncEvent {
        header: EventHeader {
            kind: EventKind::Sync as u32,
            cpu: 0,
            ts_ns: ts,
            pid: 100,
            tid,
        },
        object: obj,
        aux,
        caller: 0,
        wait_ns: wait,
        primitive: primitive as u32,
        op: op as u32,
        ret,
        flags,
        extra,
        repeats: 0,
    };
    decode(encode(&raw)).expect("valid event").to_static()
}

fn edge(g: &SyncGraph, tid: u32, obj: u64) -> &EdgeStats {
    edge_as(g, tid, obj, Role::Use)
}

fn edge_as(g: &SyncGraph, tid: u32, obj: u64, role: Role) -> &EdgeStats {
    g.edges()
        .find(|(k, _)| k.thread().tid == tid && k.object().addr == obj && k.role() == role)
        .map(|(_, e)| e)
        .expect("edge exists")
}

/// Thread 1 holds M1 for 100 ns twice; thread 2 waits 50 ns once, contended, and holds
/// it 250 ns.
fn three_holds_of_m1(g: &mut SyncGraph) {
    g.apply(&ev(1, 1_000, SyncOp::Lock, M1, 10, 0, false));
    g.apply(&ev(1, 1_100, SyncOp::Unlock, M1, 0, 0, false));
    g.apply(&ev(2, 1_150, SyncOp::Lock, M1, 50, 0, true));
    g.apply(&ev(2, 1_400, SyncOp::Unlock, M1, 0, 0, false));
    g.apply(&ev(1, 2_000, SyncOp::Lock, M1, 10, 0, false));
    g.apply(&ev(1, 2_100, SyncOp::Unlock, M1, 0, 0, false));
}

#[test]
fn lock_unlock_pairs_give_counts_waits_and_holds() {
    let mut g = SyncGraph::new(Limits::default(), false);
    three_holds_of_m1(&mut g);

    let e1 = edge(&g, 1, M1);
    assert_eq!((e1.counts().acquisitions, e1.counts().contended), (2, 0));
    assert_eq!((e1.hold().count(), e1.hold().total()), (2, 200));
    // The wait distribution is over the acquisitions that waited: none here.
    assert_eq!((e1.wait().count(), e1.wait().total()), (0, 0));
    let e2 = edge(&g, 2, M1);
    assert_eq!(
        (
            e2.counts().acquisitions,
            e2.counts().contended,
            e2.counts().contended_wait_ns
        ),
        (1, 1, 50)
    );
    assert_eq!(e2.hold().total(), 250);
    assert_eq!((e2.wait().count(), e2.wait().total()), (1, 50));
    assert_eq!(g.counters().events, 6);
    assert_eq!(g.counters().unmatched_releases, 0);
}

#[test]
fn failed_trylocks_timeouts_and_errors_are_not_acquisitions() {
    let mut g = SyncGraph::new(Limits::default(), false);
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
    assert_eq!(e.counts().acquisitions, 1);
    assert_eq!(
        (
            e.counts().failed_trylocks,
            e.counts().timeouts,
            e.counts().errors
        ),
        (1, 1, 1)
    );
    // The timeout waited; the successful trylock did not block.
    assert_eq!((e.wait().count(), e.wait().total()), (1, 5_000));
}

#[test]
fn recursive_acquisitions_hold_until_the_last_release() {
    let mut g = SyncGraph::new(Limits::default(), false);
    g.apply(&ev(1, 100, SyncOp::Lock, M1, 0, 0, false));
    g.apply(&ev(1, 200, SyncOp::Lock, M1, 0, 0, false));
    g.apply(&ev(1, 300, SyncOp::Unlock, M1, 0, 0, false));
    g.apply(&ev(1, 400, SyncOp::Unlock, M1, 0, 0, false));
    let e = edge(&g, 1, M1);
    assert_eq!(e.counts().acquisitions, 2);
    assert_eq!((e.hold().count(), e.hold().total()), (1, 300));
}

#[test]
fn release_without_acquire_and_missed_release_are_counted() {
    let mut g = SyncGraph::new(Limits::default(), false);
    g.apply(&ev(1, 100, SyncOp::Unlock, M1, 0, 0, false));
    g.apply(&ev(1, 200, SyncOp::Lock, M2, 0, 0, false));
    g.apply(&ev(2, 300, SyncOp::Lock, M2, 0, 0, false)); // thread 1's release was not seen
    g.apply(&ev(2, 350, SyncOp::Unlock, M2, 0, 0, false));
    let c = g.counters();
    assert_eq!((c.unmatched_releases, c.interrupted_holds), (1, 1));
    assert_eq!(edge(&g, 1, M2).hold().count(), 0);
    assert_eq!(edge(&g, 2, M2).hold().total(), 50);
}

#[test]
fn caps_bound_memory_and_count_what_they_drop() {
    let limits = Limits {
        max_threads: 2,
        max_objects: 3,
        max_edges: 4,
        max_histograms: 1,
        max_barrier_calls: 10,
    };
    let mut g = SyncGraph::new(limits, false);
    for obj in 0..10u64 {
        g.apply(&ev(1, obj, SyncOp::Lock, obj, 1, 0, true));
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
    let mut g = SyncGraph::new(Limits::default(), false);
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

#[test]
fn rwlock_readers_share_and_writers_are_separate_edges() {
    let mut g = SyncGraph::new(Limits::default(), false);
    let rw = |tid, ts, op, wait, contended| {
        let flags = if contended { SYNC_FLAG_CONTENDED } else { 0 };
        evp(Primitive::RwLock, tid, ts, op, M1, wait, 0, flags, 0, 0)
    };
    g.apply(&rw(1, 100, SyncOp::RdLock, 5, false));
    g.apply(&rw(2, 110, SyncOp::RdLock, 5, false)); // a second reader: no interruption
    g.apply(&rw(1, 200, SyncOp::Unlock, 0, false));
    g.apply(&rw(2, 260, SyncOp::Unlock, 0, false));
    g.apply(&rw(3, 300, SyncOp::WrLock, 150, true)); // waited for the readers
    g.apply(&rw(3, 400, SyncOp::Unlock, 0, false));
    assert_eq!(g.counters().interrupted_holds, 0);
    assert_eq!(edge_as(&g, 1, M1, Role::Read).hold().total(), 100);
    assert_eq!(edge_as(&g, 2, M1, Role::Read).hold().total(), 150);
    let w = edge_as(&g, 3, M1, Role::Write);
    assert_eq!(
        (w.counts().contended, w.counts().contended_wait_ns),
        (1, 150)
    );
    assert_eq!(w.hold().total(), 100);
}

#[test]
fn cond_wait_ends_and_restarts_the_mutex_hold() {
    let mut g = SyncGraph::new(Limits::default(), false);
    const C: u64 = 0x3000;
    g.apply(&ev(1, 100, SyncOp::Lock, M1, 0, 0, false));
    // Waits 1000 ns on C from 200 to 1200, releasing M1 meanwhile.
    g.apply(&evp(
        Primitive::Cond,
        1,
        1_200,
        SyncOp::Wait,
        C,
        1_000,
        0,
        0,
        M1,
        0,
    ));
    g.apply(&ev(1, 1_250, SyncOp::Unlock, M1, 0, 0, false));
    g.apply(&evp(
        Primitive::Cond,
        2,
        1_100,
        SyncOp::Signal,
        C,
        3,
        0,
        0,
        0,
        1,
    ));
    let m = edge(&g, 1, M1);
    assert_eq!((m.hold().count(), m.hold().total()), (2, 100 + 50));
    let c = edge(&g, 1, C);
    assert_eq!((c.counts().waits, c.wait().total()), (1, 1_000));
    let s = edge(&g, 2, C);
    assert_eq!((s.counts().signals, s.counts().woken), (1, 1));
    let meta = g.objects().find(|(k, _)| k.addr == C).unwrap().1;
    assert_eq!(meta.mutex(), Some(M1));
    assert_eq!(g.counters().interrupted_holds, 0);
}

#[test]
fn futex_waits_name_their_waker_and_are_objects_only_in_contention_mode() {
    for futex_objects in [true, false] {
        let mut g = SyncGraph::new(Limits::default(), futex_objects);
        let wait = |tid, ts, waker| {
            evp(
                Primitive::Futex,
                tid,
                ts,
                SyncOp::Wait,
                M1,
                400,
                0,
                0,
                128,
                waker,
            )
        };
        g.apply(&wait(1, 1_000, 2));
        g.apply(&wait(1, 2_000, 2));
        g.apply(&wait(3, 2_100, 0));
        g.apply(&evp(
            Primitive::Futex,
            2,
            990,
            SyncOp::Wake,
            M1,
            0,
            1,
            0,
            129,
            0,
        ));
        let (k, w) = g.waits_for().next().unwrap();
        assert_eq!((k.waiter, k.waker, k.object, w.count), (1, 2, M1, 2));
        assert_eq!(w.wait.total(), 800);
        assert_eq!(g.counters().waits_without_waker, 1);
        assert_eq!(g.objects().count(), usize::from(futex_objects));
        if futex_objects {
            let e = edge(&g, 1, M1);
            assert_eq!((e.counts().waits, e.counts().contended_wait_ns), (2, 800));
            assert_eq!(edge(&g, 2, M1).counts().woken, 1);
        }
    }
}

/// Contention mode folds a thread's run of waits that returned without sleeping into
/// its next record: they count as waits, not as sleeps, wait time or waits without a
/// waker.
#[test]
fn futex_waits_that_did_not_sleep_are_counted_apart() {
    let mut g = SyncGraph::new(Limits::default(), true);
    let record = |ts, wait, ret, waker, repeats| {
        let mut e = evp(
            Primitive::Futex,
            1,
            ts,
            SyncOp::Wait,
            M1,
            wait,
            ret,
            0,
            128,
            waker,
        );
        if let Event::Sync(s) = &mut e {
            s.raw.repeats = repeats;
        }
        e
    };
    // Five that did not sleep, then one that slept 400 ns and was woken by thread 2.
    g.apply(&record(1_000, 400, 0, 2, 5));
    // Three that did not sleep, sent on their own (the thread moved to another word).
    g.apply(&record(2_000, 0, -11, 0, 2));
    assert_eq!(g.counters().waits_unslept, 8);
    assert_eq!(g.counters().waits_without_waker, 0);
    let e = edge(&g, 1, M1);
    assert_eq!(
        (
            e.counts().waits,
            e.counts().contended,
            e.counts().contended_wait_ns
        ),
        (9, 1, 400)
    );
    let (k, w) = g.waits_for().next().unwrap();
    assert_eq!((k.waker, w.count, w.wait.total()), (2, 1, 400));
}

#[test]
fn spawns_build_the_thread_tree_and_report_new_processes() {
    let mut g = SyncGraph::new(Limits::default(), false);
    let task = |pid, tid, ts, op: LifecycleOp, child, flags, name: &str| {
        let mut comm = [0u8; 16];
        comm[..name.len()].copy_from_slice(name.as_bytes());
        let raw = LifecycleEvent {
            header: EventHeader {
                kind: EventKind::Lifecycle as u32,
                cpu: 0,
                ts_ns: ts,
                pid,
                tid,
            },
            op: op as u32,
            child,
            clone_flags: flags,
            comm,
        };
        decode(encode(&raw)).unwrap().to_static()
    };
    g.apply(&task(
        100,
        100,
        10,
        LifecycleOp::Spawn,
        101,
        CLONE_THREAD,
        "app",
    ));
    let a = g.apply(&task(100, 101, 20, LifecycleOp::Spawn, 200, 0, "app"));
    assert_eq!(a.spawned_process, Some(200));
    let b = g.apply(&task(100, 101, 30, LifecycleOp::Exit, 0, 0, "worker"));
    assert_eq!(b.process_exited, None);
    let t = |pid, tid| {
        g.threads()
            .find(|(k, _)| **k == ThreadKey { pid, tid })
            .unwrap()
            .1
    };
    assert_eq!(t(100, 101).parent, Some(ThreadKey { pid: 100, tid: 100 }));
    assert_eq!(
        (t(100, 101).start_ns, t(100, 101).exited_ns),
        (Some(10), Some(30))
    );
    assert_eq!(t(100, 101).name.as_deref(), Some("worker"));
    assert_eq!(t(200, 200).parent, Some(ThreadKey { pid: 100, tid: 101 }));
    // A /proc read asked for when the thread was new, answered after its exit record,
    // is older than the name the kernel gave at the exit.
    g.set_thread_info(ThreadKey { pid: 100, tid: 101 }, Some("app".into()), None);
    // A live thread's name is read again.
    g.set_thread_info(ThreadKey { pid: 100, tid: 100 }, Some("main".into()), None);
    let name = |tid| {
        let key = ThreadKey { pid: 100, tid };
        g.threads()
            .find(|(k, _)| **k == key)
            .unwrap()
            .1
            .name
            .clone()
    };
    assert_eq!(name(101).as_deref(), Some("worker"));
    assert_eq!(name(100).as_deref(), Some("main"));
}

#[test]
fn semaphores_count_posts_and_failed_trywaits() {
    let mut g = SyncGraph::new(Limits::default(), false);
    const S: u64 = 0x4000;
    let sem =
        |tid, op, wait, ret, flags| evp(Primitive::Sem, tid, 10, op, S, wait, ret, flags, 0, 0);
    g.apply(&sem(
        1,
        SyncOp::Wait,
        900,
        0,
        SYNC_FLAG_CONTENDED | SYNC_FLAG_BLOCKED,
    ));
    g.apply(&sem(1, SyncOp::TryWait, 1, -1, 0));
    g.apply(&sem(2, SyncOp::Post, 0, 0, 0));
    g.apply(&sem(2, SyncOp::Post, 0, 0, 0));
    let e = edge(&g, 1, S);
    assert_eq!(
        (
            e.counts().acquisitions,
            e.counts().contended,
            e.counts().blocked,
            e.counts().failed_trylocks
        ),
        (1, 1, 1, 1)
    );
    assert_eq!(edge(&g, 2, S).counts().posts, 2);
    assert_eq!(g.counters().unmatched_releases, 0);
}

/// Full mode: a semaphore used as a lock (each take then the taker's own post) is held
/// by the thread that took it last; one posted by another thread or taken while taken
/// is a counter or a signal, held by no one.
#[test]
fn a_semaphore_used_as_a_lock_is_held_by_its_last_taker() {
    let mut g = SyncGraph::new(Limits::default(), false);
    let (lock, signal, counter) = (0x5000, 0x6000, 0x7000);
    let sem = |tid, obj, op| evp(Primitive::Sem, tid, 10, op, obj, 0, 0, 0, 0, 0);
    g.apply(&sem(1, lock, SyncOp::Wait));
    assert_eq!(g.semaphore_holder(100, lock), Some(1));
    g.apply(&sem(1, lock, SyncOp::Post));
    assert_eq!(g.semaphore_holder(100, lock), None);
    g.apply(&sem(2, lock, SyncOp::TimedWait));
    assert_eq!(g.semaphore_holder(100, lock), Some(2));
    // A failed try is no take.
    g.apply(&evp(
        Primitive::Sem,
        3,
        10,
        SyncOp::TryWait,
        lock,
        0,
        -1,
        0,
        0,
        0,
    ));
    assert_eq!(g.semaphore_holder(100, lock), Some(2));
    // A producer posts, a consumer takes: a signal.
    g.apply(&sem(4, signal, SyncOp::Post));
    g.apply(&sem(5, signal, SyncOp::Wait));
    assert_eq!(g.semaphore_holder(100, signal), None);
    // Two takes without a post: a counting semaphore.
    g.apply(&sem(6, counter, SyncOp::Wait));
    g.apply(&sem(7, counter, SyncOp::Wait));
    assert_eq!(g.semaphore_holder(100, counter), None);
}

/// Full mode: a futex wait in no probed pthread call (a runtime's own lock) makes its
/// word an object; one inside a pthread call, or inside a pthread_mutex_lock seen at its
/// entry only, does not (its pthread object stands for it).
#[test]
fn full_mode_shows_words_waited_on_outside_pthread_calls() {
    let mut g = SyncGraph::new(Limits::default(), false);
    let outside = u64::from(FUTEX_OP_OUTSIDE_CALL | 128);
    let futex = |tid, ts, obj, aux| {
        evp(
            Primitive::Futex,
            tid,
            ts,
            SyncOp::Wait,
            obj,
            500,
            0,
            0,
            aux,
            7,
        )
    };
    // A Rust-style lock word: two waits outside any call.
    g.apply(&futex(1, 1_000, M2, outside));
    g.apply(&futex(2, 2_000, M2, outside));
    // A wait inside a probed call (no flag): no object.
    g.apply(&futex(3, 2_500, 0x3000, 128));
    // A pthread_mutex_lock seen at entry, whose futex wait has no call in flight.
    let begin = evp(
        Primitive::Mutex,
        4,
        3_000,
        SyncOp::Lock,
        M1,
        0,
        0,
        SYNC_FLAG_BEGIN | SYNC_FLAG_CONTENDED,
        0,
        0,
    );
    g.apply(&begin);
    g.apply(&futex(4, 3_600, M1, outside));
    g.apply(&ev(4, 3_900, SyncOp::Unlock, M1, 0, 0, false));
    g.settle_pending();

    let futex_objects: Vec<u64> = g
        .objects()
        .filter(|(k, _)| k.primitive == Primitive::Futex)
        .map(|(k, _)| k.addr)
        .collect();
    assert_eq!(futex_objects, vec![M2]);
    assert_eq!(edge(&g, 1, M2).counts().waits, 1);
    assert_eq!(edge(&g, 2, M2).counts().contended_wait_ns, 500);
    // The mutex's wait is its acquisition's.
    assert_eq!(edge(&g, 4, M1).counts().contended, 1);
}

#[test]
fn lock_seen_at_entry_is_settled_by_the_threads_next_event() {
    let mut g = SyncGraph::new(Limits::default(), false);
    let begin = |tid, ts, contended: bool| {
        let flags = SYNC_FLAG_BEGIN | if contended { SYNC_FLAG_CONTENDED } else { 0 };
        evp(
            Primitive::Mutex,
            tid,
            ts,
            SyncOp::Lock,
            M1,
            0,
            0,
            flags,
            0,
            0,
        )
    };
    // Thread 1 takes M1 at once and holds it 1000 ns.
    g.apply(&begin(1, 1_000, false));
    // Thread 2 enters lock at 1_200 while M1 is held and sleeps twice on its futex word
    // (woken once, lost the race) before getting it at 2_500; it holds it 300 ns.
    g.apply(&begin(2, 1_200, true));
    g.apply(&ev(1, 2_000, SyncOp::Unlock, M1, 0, 0, false));
    let futex = |ts, wait| evp(Primitive::Futex, 2, ts, SyncOp::Wait, M1, wait, 0, 0, 0, 1);
    g.apply(&futex(2_100, 850));
    g.apply(&futex(2_500, 300));
    // Not settled yet: no acquisition without the thread's next event.
    assert!(g.edges().all(|(k, _)| k.thread().tid != 2));
    g.apply(&ev(2, 2_800, SyncOp::Unlock, M1, 0, 0, false));
    // Thread 1 enters lock again and the trace ends.
    g.apply(&begin(1, 3_000, false));
    g.settle_pending();

    let e1 = edge(&g, 1, M1);
    assert_eq!((e1.counts().acquisitions, e1.counts().contended), (2, 0));
    assert_eq!((e1.hold().count(), e1.hold().total()), (1, 1_000));
    let e2 = edge(&g, 2, M1);
    assert_eq!(
        (
            e2.counts().acquisitions,
            e2.counts().contended,
            e2.counts().blocked
        ),
        (1, 1, 1)
    );
    assert_eq!(e2.counts().contended_wait_ns, 1_300);
    assert_eq!((e2.hold().count(), e2.hold().total()), (1, 300));
    // The futex waits still name the waker (thread 1).
    let w: Vec<_> = g
        .waits_for()
        .map(|(k, w)| (k.waiter, k.waker, w.count))
        .collect();
    assert_eq!(w, vec![(2, 1, 2)]);
}

#[test]
fn snapshot_rows_total_each_object_over_its_edges_and_serialize_in_order() {
    let mut g = SyncGraph::new(Limits::default(), false);
    // M1: thread 1 holds 100 ns twice, thread 2 waits 50 ns (contended) and holds 250.
    // M2: thread 2 only, uncontended.
    three_holds_of_m1(&mut g);
    g.apply(&ev(2, 3_000, SyncOp::Lock, M2, 5, 0, false));
    g.apply(&ev(2, 3_020, SyncOp::Unlock, M2, 0, 0, false));
    let window = crate::model::Window {
        start_ns: 0,
        end_ns: 10_000,
    };
    let snap = crate::model::Snapshot::build(
        &g,
        window,
        &mut |k| (k.addr == M1).then(|| "big_lock".to_owned()),
        &mut |_, _| None,
    );
    // Most contended first, totals over both threads' edges.
    let objects: Vec<_> = snap.objects.iter().collect();
    assert_eq!(objects.len(), 2);
    let m1 = &objects[0];
    assert_eq!((m1.addr, m1.name.as_deref()), (M1, Some("big_lock")));
    assert_eq!(m1.threads, 2);
    assert_eq!(m1.counts.acquisitions, 3);
    assert_eq!(m1.counts.contended, 1);
    // Over the acquisitions that waited: thread 2's 50 ns, not the uncontended 10s.
    assert_eq!(m1.wait.total_ns, 50);
    assert_eq!(m1.wait.total_ns, m1.counts.contended_wait_ns);
    assert_eq!(m1.hold.total_ns, 450);
    assert_eq!((m1.hold.min_ns, m1.hold.max_ns), (Some(100), Some(250)));
    assert_eq!(objects[1].addr, M2);
    assert!(snap.objects.rows().iter().all(|r| r.active));
    let row = snap.objects.find(100, M1, Primitive::Mutex).unwrap();
    assert_eq!(snap.objects.edges_of(row).len(), 2);
    // Edges: most wait first; threads: most wait first, with their totals.
    let edges: Vec<_> = snap.edges.iter().collect();
    assert_eq!(edges.len(), 3);
    assert_eq!((edges[0].tid, edges[0].wait.total_ns), (2, 50));
    assert_eq!(snap.threads[0].tid, 2);
    assert_eq!(snap.threads[0].wait.total_ns, 50);
    assert_eq!(snap.threads[0].hold.total_ns, 270);
    // The lazy lists serialize as the arrays of views they stand for.
    let json = serde_json::to_value(&snap).unwrap();
    assert_eq!(json["objects"][0]["name"], "big_lock");
    assert_eq!(json["objects"][0]["acquisitions"], 3);
    assert_eq!(json["objects"].as_array().unwrap().len(), 2);
    assert_eq!(json["edges"][0]["wait"]["total_ns"], 50);
    assert_eq!(json["edges"].as_array().unwrap().len(), 3);
}

#[test]
fn the_snapshot_lists_the_call_sites_with_most_wait_first() {
    let mut g = SyncGraph::new(Limits::default(), false);
    // 700 mutexes, one call site each, waits of 0..700 us in a scrambled order; two share
    // the largest wait (ties go by object address).
    for i in 0..700u64 {
        let n = (i * 337) % 700;
        let mut e = ev(
            1,
            i * 10,
            SyncOp::Lock,
            0x10_0000 + i * 64,
            n * 1000,
            0,
            false,
        );
        if let Event::Sync(s) = &mut e {
            s.raw.caller = 0x40_1000 + n;
            if n == 0 {
                s.raw.wait_ns = 699_000;
            }
        }
        g.apply(&e);
    }
    let snap = crate::model::Snapshot::build(
        &g,
        crate::model::Window {
            start_ns: 0,
            end_ns: 10_000,
        },
        &mut |_| None,
        &mut |_, _| None,
    );
    let sites = &snap.call_sites;
    assert_eq!(sites.len(), 500);
    let waits: Vec<u64> = sites.iter().map(|c| c.wait_ns).collect();
    assert!(waits.windows(2).all(|w| w[0] >= w[1]), "{waits:?}");
    assert_eq!((waits[0], waits[1], waits[2]), (699_000, 699_000, 698_000));
    assert!(sites[0].object < sites[1].object);
    // The 500 largest of 700 distinct waits (one moved up): the smallest kept is 201 us.
    assert_eq!(waits[499], 201_000);
}

#[test]
fn futex_words_that_never_slept_are_not_active() {
    // Contention mode: word M1 had waits that all returned without sleeping (-EAGAIN),
    // M2 one that slept. Only M2 belongs in the tables of contention.
    let mut g = SyncGraph::new(Limits::default(), true);
    let wait = |ts, obj, wait_ns, ret| {
        evp(
            Primitive::Futex,
            1,
            ts,
            SyncOp::Wait,
            obj,
            wait_ns,
            ret,
            0,
            128,
            0,
        )
    };
    g.apply(&wait(1_000, M1, 0, -11));
    g.apply(&wait(2_000, M1, 0, -11));
    g.apply(&wait(3_000, M2, 500, 0));
    let snap = crate::model::Snapshot::build(
        &g,
        crate::model::Window {
            start_ns: 0,
            end_ns: 10_000,
        },
        &mut |_| None,
        &mut |_, _| None,
    );
    let active: Vec<(u64, bool)> = snap
        .objects
        .rows()
        .iter()
        .map(|r| (r.key.addr, r.active))
        .collect();
    assert!(active.contains(&(M1, false)), "{active:?}");
    assert!(active.contains(&(M2, true)), "{active:?}");
    assert_eq!(g.counters().waits_unslept, 2);
}

#[test]
fn wakes_from_other_processes_and_interrupted_waits_are_told_apart() {
    let mut g = SyncGraph::new(Limits::default(), true);
    // Woken by thread 7 of process 200 (a process-shared word).
    let mut from_other = evp(
        Primitive::Futex,
        1,
        1_000,
        SyncOp::Wait,
        M1,
        300,
        0,
        0,
        128,
        7,
    );
    if let Event::Sync(s) = &mut from_other {
        s.raw.caller = 200;
    }
    g.apply(&from_other);
    g.apply(&evp(
        Primitive::Futex,
        1,
        2_000,
        SyncOp::Wait,
        M1,
        300,
        -110,
        0,
        128,
        0,
    ));
    g.apply(&evp(
        Primitive::Futex,
        1,
        3_000,
        SyncOp::Wait,
        M1,
        300,
        -4,
        0,
        128,
        0,
    ));
    let (k, w) = g.waits_for().next().unwrap();
    assert_eq!((k.pid, k.waker_pid, k.waker, w.count), (100, 200, 7, 1));
    let c = g.counters();
    assert_eq!(
        (
            c.waits_without_waker,
            c.waits_timed_out,
            c.waits_interrupted
        ),
        (2, 1, 1)
    );
    let window = crate::model::Window {
        start_ns: 0,
        end_ns: 10_000,
    };
    // Process 200 not traced: a wake from outside; once traced, a cross-process edge.
    let snap = crate::model::Snapshot::build(&g, window, &mut |_| None, &mut |_, _| None);
    assert_eq!(snap.model.waits_woken_from_outside, 1);
    assert!(snap.waits_for.iter().all(|w| w.outside));
    drop(snap);
    g.trace_process(200);
    let snap = crate::model::Snapshot::build(&g, window, &mut |_| None, &mut |_, _| None);
    assert_eq!(snap.model.waits_woken_from_outside, 0);
    assert!(
        snap.waits_for
            .iter()
            .all(|w| !w.outside && w.waker_pid == 200)
    );
}

/// Heap words named by the one call site that waits on them all are told apart, by
/// address, and every view of the snapshot (objects, waits-for rows, call sites) gives
/// each object the same one name.
#[test]
fn objects_of_one_call_site_get_one_name_each_in_every_view() {
    let mut g = SyncGraph::new(Limits::default(), true);
    let words = [0x7000u64, 0x5000, 0x6000];
    for (i, w) in words.iter().enumerate() {
        let ts = 1_000 * (i as u64 + 1);
        g.apply(&evp(
            Primitive::Futex,
            1,
            ts,
            SyncOp::Wait,
            *w,
            400,
            0,
            0,
            128,
            2,
        ));
    }
    let site = "in worker (many_locks.c:35)";
    let snap = crate::model::Snapshot::build(
        &g,
        crate::model::Window {
            start_ns: 0,
            end_ns: 10_000,
        },
        &mut |k| words.contains(&k.addr).then(|| site.to_owned()),
        &mut |_, _| None,
    );
    let names: std::collections::HashMap<u64, String> = snap
        .objects
        .iter()
        .map(|o| (o.addr, o.name.clone().expect("named")))
        .collect();
    assert_eq!(names[&0x5000], format!("{site} #1"));
    assert_eq!(names[&0x6000], format!("{site} #2"));
    assert_eq!(names[&0x7000], format!("{site} #3"));
    let rows: Vec<_> = snap.waits_for.iter().collect();
    assert_eq!(rows.len(), 3);
    for w in rows {
        assert_eq!(w.object_name.as_ref(), Some(&names[&w.object]), "{w:?}");
    }
}
