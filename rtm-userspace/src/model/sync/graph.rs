//! The sync graph: threads and the synchronization objects they use, with one edge per
//! (thread, object, role) carrying counts and wait/hold distributions; "waits for" edges
//! from a waiting thread to the thread whose wake ended its wait; barrier rounds; and the
//! thread tree.
//!
//! Memory is bounded: threads, objects, edges and barrier calls are capped ([`Limits`])
//! and events beyond a cap are counted in [`ModelCounters::dropped_over_limits`], never
//! silently lost.
//!
//! This file holds the graph's tables and applies lifecycle and synchronization-call
//! events; `futex` applies futex waits and wakes, `query` reads the graph, and
//! `forget` drops exited processes.

use foldhash::{HashMap, HashSet};

use super::{
    barrier::Arrival,
    edge::{Count, EdgeStats, Span},
    holds::{Acquired, Holds},
    semantics::{self, Failure, Hold},
    types::*,
};
use crate::model::dist::HistogramBudget;
use rtm_common::{
    CLONE_THREAD, LifecycleOp, Primitive, SYNC_FLAG_BEGIN, SYNC_FLAG_BLOCKED, SYNC_FLAG_CONTENDED,
    SyncOp,
    decode::{Event, LifecycleRecord, SyncRecord},
};

const EAGAIN: i32 = 11;
const EBUSY: i32 = 16;
const ETIMEDOUT: i32 = 110;
/// A robust mutex whose owner died: the caller does own it.
const EOWNERDEAD: i32 = 130;
/// Most waits without a waker kept for matching with thread exits.
const MAX_UNWOKEN: usize = 4096;
/// PTHREAD_BARRIER_SERIAL_THREAD.
const BARRIER_SERIAL: i32 = -1;

/// The graph's large tables: entries in one vector (whose unused capacity is never
/// touched, so never resident), found through a small index of positions. A hash map of
/// the entries themselves keeps a quarter to a half of its slots empty but resident, and
/// holds the old and the new table at once while it grows.
type Arena<K, V> = indexmap::IndexMap<K, V, foldhash::fast::RandomState>;

/// The sync graph.
#[derive(Debug)]
pub struct SyncGraph {
    limits: Limits,
    /// Contention mode: futex waits are the objects. Otherwise they only feed waits-for.
    futex_objects: bool,
    budget: HistogramBudget,
    threads: HashMap<ThreadKey, ThreadNode>,
    pids: HashSet<u32>,
    /// Processes the session traces (see [`SyncGraph::trace_process`]).
    traced: HashSet<u32>,
    objects: Arena<ObjectKey, ObjectMeta>,
    edges: Arena<EdgeId, EdgeStats>,
    waits_for: Arena<WaitsForKey, WaitsFor>,
    /// Waiter -> the mutex's holder when the wait began (contention mode).
    held_by: HashMap<HeldByKey, HeldBy>,
    /// Keyed by the object's position in `objects` and the return address.
    call_sites: Arena<(u32, u64), CallSite>,
    unwoken: Vec<UnwokenWait>,
    holds: Holds,
    /// Which lock was taken while holding which (full mode).
    order: super::order::LockOrder,
    /// pthread_mutex_lock calls seen at entry only, per thread: the record, with its
    /// timestamp moved to the end of the last futex wait on the mutex since.
    pending_locks: HashMap<ThreadKey, PendingLock>,
    barrier_calls: usize,
    counters: ModelCounters,
    /// Futex wait totals per process.
    totals: HashMap<u32, ProcessTotals>,
}

/// A lock call recorded at entry whose acquisition is not settled yet.
#[derive(Debug, Clone, Copy)]
struct PendingLock {
    record: SyncRecord,
    /// When the last futex wait on the lock ended (the entry time until one does).
    acquired_ns: u64,
}

impl SyncGraph {
    /// An empty graph with the given caps. With `futex_objects` (contention mode), futex
    /// waits become objects and edges; otherwise they only yield waits-for edges.
    pub fn new(limits: Limits, futex_objects: bool) -> Self {
        Self {
            limits,
            futex_objects,
            budget: HistogramBudget::new(limits.max_histograms),
            threads: HashMap::default(),
            pids: HashSet::default(),
            traced: HashSet::default(),
            objects: Arena::default(),
            edges: Arena::default(),
            waits_for: Arena::default(),
            held_by: HashMap::default(),
            call_sites: Arena::default(),
            unwoken: Vec::new(),
            holds: Holds::default(),
            order: super::order::LockOrder::default(),
            pending_locks: HashMap::default(),
            barrier_calls: 0,
            counters: ModelCounters::default(),
            totals: HashMap::default(),
        }
    }

    /// Applies one decoded event.
    pub fn apply(&mut self, event: &Event) -> Applied {
        self.counters.events += 1;
        let h = event.header();
        let thread = ThreadKey {
            pid: h.pid,
            tid: h.tid,
        };
        let mut applied = Applied::default();
        if !self.touch_thread(thread, h.ts_ns, &mut applied) {
            return applied;
        }
        if !self.pending_locks.is_empty() {
            self.settle_lock(thread, event);
        }
        match event {
            Event::Sync(s) => self.apply_sync(thread, s),
            Event::Lifecycle(t) => self.apply_lifecycle(thread, t, &mut applied),
            // MPI calls feed the rank graph; stacks are unwound and counted beside the
            // graph (`model::stacks`), timed calls too (`analyses::functions`).
            Event::FutexAgg(a) => self.apply_futex_sums(thread, a),
            Event::Mpi(_) | Event::Stacks(_) | Event::Func(_) => {}
        }
        applied
    }

    /// A lock call seen at entry only is settled by the thread's next event: a futex wait
    /// on the same word is part of the call (the acquisition moves to its end); anything
    /// else means the call returned, holding the lock since the last such wait.
    fn settle_lock(&mut self, thread: ThreadKey, event: &Event) {
        let Some(p) = self.pending_locks.get_mut(&thread) else {
            return;
        };
        if let Event::Sync(s) = event
            && s.primitive == Primitive::Futex
            && s.op == SyncOp::Wait
            && s.raw.object == p.record.raw.object
        {
            p.acquired_ns = s.raw.header.ts_ns;
            p.record.raw.flags |= SYNC_FLAG_BLOCKED;
            return;
        }
        if let Some(p) = self.pending_locks.remove(&thread) {
            self.complete_lock(thread, p);
        }
    }

    fn complete_lock(&mut self, thread: ThreadKey, p: PendingLock) {
        let mut record = p.record;
        let start = record.raw.header.ts_ns;
        record.raw.flags &= !SYNC_FLAG_BEGIN;
        record.raw.header.ts_ns = p.acquired_ns;
        record.raw.wait_ns = p.acquired_ns.saturating_sub(start);
        self.apply_sync(thread, &record);
    }

    /// Settles every lock call seen at entry only, as acquired (at the end of the trace:
    /// their threads did nothing traced since).
    pub fn settle_pending(&mut self) {
        let pending: Vec<_> = self.pending_locks.drain().collect();
        for (thread, p) in pending {
            self.complete_lock(thread, p);
        }
    }

    /// Records activity of a thread; false when it is new and the thread cap is reached.
    fn touch_thread(&mut self, thread: ThreadKey, ts_ns: u64, applied: &mut Applied) -> bool {
        if let Some(node) = self.threads.get_mut(&thread) {
            node.last_event_ns = node.last_event_ns.max(ts_ns);
            return true;
        }
        if self.threads.len() >= self.limits.max_threads {
            self.counters.dropped_over_limits += 1;
            return false;
        }
        if self.pids.insert(thread.pid) {
            applied.new_process = Some(thread.pid);
        }
        self.threads.insert(
            thread,
            ThreadNode {
                first_event_ns: ts_ns,
                last_event_ns: ts_ns,
                ..Default::default()
            },
        );
        applied.new_thread = Some(thread);
        true
    }

    fn apply_lifecycle(&mut self, thread: ThreadKey, t: &LifecycleRecord, applied: &mut Applied) {
        let ts = t.raw.header.ts_ns;
        match t.op {
            LifecycleOp::Spawn => {
                let is_thread = t.raw.clone_flags & CLONE_THREAD != 0;
                let child = ThreadKey {
                    pid: if is_thread { thread.pid } else { t.raw.child },
                    tid: t.raw.child,
                };
                if !is_thread {
                    applied.spawned_process = Some(child.pid);
                }
                if self.touch_thread(child, ts, applied) {
                    let node = self.threads.get_mut(&child).expect("touched");
                    node.parent = Some(thread);
                    node.start_ns.get_or_insert(ts);
                    if node.name.is_none() && !t.comm().is_empty() {
                        node.name = Some(t.comm().to_owned());
                    }
                }
            }
            LifecycleOp::Exit => {
                self.order.thread_exited(thread.pid, thread.tid);
                let node = self.threads.get_mut(&thread).expect("touched");
                node.exited_ns.get_or_insert(ts);
                if !t.comm().is_empty() {
                    node.name = Some(t.comm().to_owned());
                    node.name_is_final = true;
                }
                if t.raw.child != 0 {
                    applied.process_exited = Some(thread.pid);
                }
            }
            LifecycleOp::Exec => {
                applied.exec = Some(thread.pid);
                let node = self.threads.get_mut(&thread).expect("touched");
                if !t.comm().is_empty() {
                    node.name = Some(t.comm().to_owned());
                }
            }
        }
    }

    /// The object `key` (made if new and under the cap) and its position.
    fn object(&mut self, key: ObjectKey) -> Option<(usize, &mut ObjectMeta)> {
        let i = match self.objects.get_index_of(&key) {
            Some(i) => i,
            None if self.objects.len() >= self.limits.max_objects => {
                self.counters.dropped_over_limits += 1;
                return None;
            }
            None => self.objects.insert_full(key, ObjectMeta::default()).0,
        };
        Some((i, &mut self.objects[i]))
    }

    /// The position of edge `id` (made if new and under the cap).
    fn edge(&mut self, id: EdgeId) -> Option<usize> {
        match self.edges.get_index_of(&id) {
            Some(i) => Some(i),
            None if self.edges.len() >= self.limits.max_edges => {
                self.counters.dropped_over_limits += 1;
                None
            }
            None => Some(self.edges.insert_full(id, EdgeStats::default()).0),
        }
    }

    /// The position of an existing edge of `thread` to `object`.
    fn edge_of(&self, thread: ThreadKey, object: &ObjectKey, role: Role) -> Option<usize> {
        let i = self.objects.get_index_of(object)?;
        self.edges.get_index_of(&EdgeId::new(i, thread.tid, role))
    }

    /// The key an edge stands for.
    fn key_of(&self, id: &EdgeId) -> EdgeKey {
        let (object, _) = self
            .objects
            .get_index(id.object())
            .expect("edges refer to objects, which are never removed");
        let thread = ThreadKey {
            pid: object.pid,
            tid: id.tid(),
        };
        EdgeKey::new(thread, *object, id.role())
    }

    fn apply_sync(&mut self, thread: ThreadKey, s: &SyncRecord) {
        let raw = &s.raw;
        let ts = raw.header.ts_ns;
        let object = ObjectKey {
            pid: thread.pid,
            primitive: s.primitive,
            addr: raw.object,
        };
        if s.primitive == Primitive::Futex {
            return self.apply_futex(thread, s);
        }
        if raw.flags & SYNC_FLAG_BEGIN != 0 {
            if s.primitive == Primitive::Mutex && s.op == SyncOp::Lock {
                // Settled by the thread's next event (see settle_lock).
                self.pending_locks.insert(
                    thread,
                    PendingLock {
                        record: *s,
                        acquired_ns: ts,
                    },
                );
                return;
            }
            // A condition-variable wait starts and releases its mutex.
            if s.primitive == Primitive::Cond {
                let m = ObjectKey {
                    pid: thread.pid,
                    primitive: Primitive::Mutex,
                    addr: raw.aux,
                };
                self.release(thread, m, ts);
            }
            return;
        }
        let what = semantics::of(s.primitive, s.op);
        if what.releases {
            return self.release(thread, object, ts);
        }
        let room = self.barrier_calls < self.limits.max_barrier_calls;
        let mut barrier_call = None;
        let Some((object_index, meta)) = self.object(object) else {
            return;
        };
        match (s.primitive, s.op) {
            (Primitive::Cond, SyncOp::Wait | SyncOp::TimedWait) => {
                meta.facts().mutex = Some(raw.aux)
            }
            (Primitive::Thread, SyncOp::Create) if raw.extra != 0 => {
                meta.facts().tid = Some(raw.extra)
            }
            // A semaphore used as a lock: each take by a thread then its own post.
            (Primitive::Sem, SyncOp::Wait | SyncOp::TryWait | SyncOp::TimedWait)
                if raw.ret == 0 =>
            {
                let f = meta.facts();
                f.sem_not_lock |= f.sem_taker.is_some();
                f.sem_taker = Some(thread.tid);
            }
            (Primitive::Sem, SyncOp::Post) => {
                let f = meta.facts();
                if f.sem_taker == Some(thread.tid) {
                    f.sem_taker = None;
                } else {
                    f.sem_not_lock = true;
                }
            }
            (Primitive::Barrier, SyncOp::Wait) => {
                let barrier = &mut meta.facts().barrier;
                if raw.ret == BARRIER_SERIAL {
                    barrier.serial += 1;
                }
                if room {
                    barrier.calls.push(Arrival {
                        tid: thread.tid,
                        arrive_ns: ts.saturating_sub(raw.wait_ns),
                        depart_ns: ts,
                    });
                }
                barrier_call = Some(room);
            }
            _ => {}
        }
        match barrier_call {
            Some(true) => self.barrier_calls += 1,
            Some(false) => self.counters.dropped_over_limits += 1,
            None => {}
        }
        if raw.caller != 0 && what.has_call_site {
            let site = (object_index as u32, raw.caller);
            if self.call_sites.contains_key(&site) || self.call_sites.len() < self.limits.max_edges
            {
                let c = self.call_sites.entry(site).or_default();
                c.calls += 1;
                c.wait_ns = c.wait_ns.saturating_add(raw.wait_ns);
                if raw.flags & (SYNC_FLAG_CONTENDED | SYNC_FLAG_BLOCKED) != 0 {
                    c.contended += 1;
                }
            } else {
                self.counters.dropped_over_limits += 1;
            }
        }
        let role = what.role;
        let Some(i) = self.edge(EdgeId::new(object_index, thread.tid, role)) else {
            return;
        };
        let (budget, edge) = (&mut self.budget, &mut self.edges[i]);
        if raw.flags & SYNC_FLAG_BLOCKED != 0 {
            edge.add(Count::Blocked, 1);
        }
        if what.wakes {
            match s.op {
                SyncOp::Post => edge.add(Count::Posts, 1),
                SyncOp::Signal | SyncOp::Broadcast => {
                    if s.op == SyncOp::Signal {
                        edge.add(Count::Signals, 1);
                    } else {
                        edge.add(Count::Broadcasts, 1);
                    }
                    edge.add(Count::Woken, raw.extra as u64);
                }
                _ => {}
            }
            return;
        }
        let is_try = what.is_try;
        let minus_one = what.failure == Failure::MinusOne;
        let ok = match raw.ret {
            0 | EOWNERDEAD => true,
            BARRIER_SERIAL if s.primitive == Primitive::Barrier => true,
            // sem_* return -1 and set errno: a failed trywait is "would block".
            -1 if minus_one && is_try => {
                edge.add(Count::FailedTrylocks, 1);
                false
            }
            -1 if minus_one && what.timed => {
                edge.add(Count::Timeouts, 1);
                edge.record(Span::Wait, raw.wait_ns, budget);
                false
            }
            EBUSY | EAGAIN if is_try => {
                edge.add(Count::FailedTrylocks, 1);
                false
            }
            ETIMEDOUT => {
                edge.add(Count::Timeouts, 1);
                edge.record(Span::Wait, raw.wait_ns, budget);
                false
            }
            _ => {
                edge.add(Count::Errors, 1);
                false
            }
        };
        if !what.acquires {
            // Condition variables, barriers, joins: waits (timeouts were recorded above).
            edge.add(Count::Waits, 1);
            if ok {
                edge.record(Span::Wait, raw.wait_ns, budget);
            }
            if s.primitive == Primitive::Cond {
                self.cond_wait_moved_mutex(thread, raw.aux, ts, raw.wait_ns, raw.caller);
            }
            return;
        }
        if !ok {
            return;
        }
        edge.add(Count::Acquisitions, 1);
        // The wait distribution is over the acquisitions that waited: its total is the
        // time waited, and an uncontended call's few hundred ns in the probe do not
        // drown its percentiles.
        let contended = raw.flags & (SYNC_FLAG_CONTENDED | SYNC_FLAG_BLOCKED) != 0;
        if contended {
            edge.add(Count::Contended, 1);
            edge.add(Count::ContendedWaitNs, raw.wait_ns);
        }
        if contended && !is_try {
            edge.record(Span::Wait, raw.wait_ns, budget);
        }
        if let Some(hold) = what.holds {
            let exclusive = hold == Hold::Exclusive;
            if self.holds.acquire(object, thread.tid, ts, role, exclusive) == Acquired::Interrupted
            {
                self.counters.interrupted_holds += 1;
            }
            self.order
                .acquired(thread.pid, thread.tid, raw.object, raw.caller);
        }
    }

    /// A condition-variable wait released `mutex` when it started and re-acquired it
    /// inside libc before returning: end the hold at the wait's start (when the start
    /// record was not seen), start a new one at its end.
    fn cond_wait_moved_mutex(
        &mut self,
        thread: ThreadKey,
        mutex: u64,
        ts: u64,
        wait_ns: u64,
        site: u64,
    ) {
        let m = ObjectKey {
            pid: thread.pid,
            primitive: Primitive::Mutex,
            addr: mutex,
        };
        self.order.released(thread.pid, thread.tid, mutex);
        let (released, _) = self
            .holds
            .release(m, thread.tid, ts.saturating_sub(wait_ns));
        if let Some(r) = released
            && let Some(i) = self.edge_of(thread, &m, r.role)
        {
            self.edges[i].record(Span::Hold, r.held_ns, &mut self.budget);
        }
        if self.holds.acquire(m, thread.tid, ts, Role::Use, true) == Acquired::Interrupted {
            self.counters.interrupted_holds += 1;
        }
        self.order.acquired(thread.pid, thread.tid, mutex, site);
    }

    fn release(&mut self, thread: ThreadKey, object: ObjectKey, ts: u64) {
        self.order.released(thread.pid, thread.tid, object.addr);
        let (released, known) = self.holds.release(object, thread.tid, ts);
        if !known {
            self.counters.unmatched_releases += 1;
        }
        if let Some(r) = released
            && let Some(i) = self.edge_of(thread, &object, r.role)
        {
            self.edges[i].record(Span::Hold, r.held_ns, &mut self.budget);
        }
    }

    /// Marks a process as traced, whether or not any of its events is seen (a waker of
    /// a process-shared word may only wake): a wake by one of its threads is not a wake
    /// from outside.
    pub fn trace_process(&mut self, pid: u32) {
        self.traced.insert(pid);
    }

    /// Records a thread that exists without any event of its own yet (a thread of an
    /// attached process, idle since before the attach), seen at `ts_ns`. Returns what is
    /// new, as [`SyncGraph::apply`] does.
    pub fn thread_seen(&mut self, thread: ThreadKey, ts_ns: u64) -> Applied {
        let mut applied = Applied::default();
        self.touch_thread(thread, ts_ns, &mut applied);
        applied
    }

    /// Records what was learnt about a thread outside the event stream (/proc). The
    /// read may be older than the records already applied: the name the kernel gave at
    /// the thread's exit stays.
    pub fn set_thread_info(&mut self, key: ThreadKey, name: Option<String>, start_ns: Option<u64>) {
        if let Some(node) = self.threads.get_mut(&key) {
            if name.is_some() && !node.name_is_final {
                node.name = name;
            }
            if start_ns.is_some() {
                node.start_ns = start_ns;
            }
        }
    }

    /// Marks a thread as gone; its observed lifetime then ends at `at_ns`.
    pub fn mark_thread_exited(&mut self, key: ThreadKey, at_ns: u64) {
        if let Some(node) = self.threads.get_mut(&key) {
            node.exited_ns.get_or_insert(at_ns);
        }
    }
}

mod forget;
mod futex;
mod query;
#[cfg(test)]
mod tests;
