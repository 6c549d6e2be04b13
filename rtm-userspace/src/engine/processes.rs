//! Per-process summaries, published beside the [`Summary`](super::Summary) when a front
//! end asks for them (the metrics agent): each traced process's futex wait totals, its
//! threads, the waits it is asleep in now, and its objects and waiter -> waker edges
//! grouped by folded name (see [`crate::model::views::fold`]), so that their number
//! stays bounded whatever the process does.

use std::collections::{HashMap, HashSet};

use rtm_common::Primitive;
use serde::Serialize;

use crate::{
    analyses::mpi::{RankGraphView, RankSummary},
    config::Mode,
    model::{Snapshot, sync::ProcessTotals, views::fold, wait_kind::WaitKind},
};

/// Most groups kept per process and list (the rest are in the list's totals only).
pub const MAX_GROUPS: usize = 512;

/// Counts of a group of objects or of edges. `sleeps` and `wait_ns` mean the same in
/// both modes; acquisitions are seen in full mode only.
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq, Eq)]
pub struct GroupValues {
    /// Acquisitions (objects, full mode: pthread locks, trylocks, timed locks and
    /// semaphore takes that succeeded); 0 in contention mode and for futex words.
    pub acquisitions: u64,
    /// Of those, the ones that found the object held.
    pub contended: u64,
    /// Waits that slept in the kernel: on an object, a futex wait on its word that
    /// slept (contention mode) or a call that slept in one (full mode); on an edge, a
    /// sleep its waker ended.
    pub sleeps: u64,
    /// Time waited, ns.
    pub wait_ns: u64,
}

impl GroupValues {
    /// Adds `o` into these.
    pub fn add(&mut self, o: &GroupValues) {
        self.acquisitions = self.acquisitions.saturating_add(o.acquisitions);
        self.contended = self.contended.saturating_add(o.contended);
        self.sleeps = self.sleeps.saturating_add(o.sleeps);
        self.wait_ns = self.wait_ns.saturating_add(o.wait_ns);
    }
}

/// Objects of one folded name and kind.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct LockGroup {
    /// Folded name.
    pub name: String,
    /// What its waits are for ([`WaitKind::name`]: "mutex", "condvar", "join",
    /// "unknown" ...), the same for one object in both modes.
    pub kind: &'static str,
    /// Their counts.
    pub values: GroupValues,
}

/// Waiter -> waker edges between threads of folded names.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct EdgeGroup {
    /// The waiting threads' folded name.
    pub waiter: String,
    /// The waking threads' folded name.
    pub waker: String,
    /// Their counts.
    pub values: GroupValues,
}

/// A wait a thread is asleep in now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Asleep {
    /// Process.
    pub pid: u32,
    /// Thread.
    pub tid: u32,
    /// When the wait began (CLOCK_MONOTONIC ns).
    pub start_ns: u64,
    /// Its futex word.
    pub word: u64,
    /// The value it expected in the word (a join's: the joined thread's TID).
    pub val: u32,
}

/// One traced process.
#[derive(Debug, Clone, Serialize, Default)]
pub struct ProcessSummary {
    /// Process id.
    pub pid: u32,
    /// When it started (clock ticks since boot): with the pid, which process it is.
    pub start: u64,
    /// Whether it still runs.
    pub live: bool,
    /// The mode of the engine that traces it.
    pub mode: Mode,
    /// Its futex waits.
    pub totals: ProcessTotals,
    /// Its threads now (seen and not exited).
    pub threads: usize,
    /// Threads asleep in a futex wait now.
    pub asleep: u64,
    /// The longest of those waits so far that may be contention (not waiting for work
    /// or for another thread: no condition variable, join ...), ns: a hang shows here.
    pub oldest_asleep_ns: u64,
    /// Its threads in a deadlock found while tracing.
    pub deadlocked_threads: u64,
    /// Object groups, most time waited first (at most MAX_GROUPS).
    pub locks: Vec<LockGroup>,
    /// Every object's counts summed.
    pub locks_total: GroupValues,
    /// Edge groups, most time waited first (at most MAX_GROUPS).
    pub edges: Vec<EdgeGroup>,
    /// Every edge's counts summed.
    pub edges_total: GroupValues,
    /// Its MPI figures, when it made MPI calls that were probed.
    pub mpi: Option<RankSummary>,
}

/// What the summaries need besides the snapshot (read from the model and the source
/// before the snapshot is taken).
#[derive(Debug, Default)]
pub struct Inputs {
    /// The engine's mode.
    pub mode: Mode,
    /// The processes (pid, start), with whether each still runs.
    pub pids: Vec<(u32, u64, bool)>,
    /// Their futex wait totals.
    pub totals: HashMap<u32, ProcessTotals>,
    /// The waits their threads are asleep in.
    pub asleep: Vec<Asleep>,
    /// The threads (pid, tid) in the deadlocks found so far.
    pub deadlocked: Vec<(u32, u32)>,
}

impl Inputs {
    /// The summaries of the processes at `now_ns`; `mpi`: the snapshot's rank graph.
    pub fn build(
        self,
        snap: &Snapshot,
        mpi: Option<&RankGraphView>,
        now_ns: u64,
    ) -> Vec<ProcessSummary> {
        build(self, snap, mpi, now_ns)
    }
}

fn build(
    inputs: Inputs,
    snap: &Snapshot,
    mpi: Option<&RankGraphView>,
    now_ns: u64,
) -> Vec<ProcessSummary> {
    let Inputs {
        mode,
        pids,
        totals,
        asleep,
        deadlocked,
    } = inputs;
    let mut out: HashMap<u32, ProcessSummary> = pids
        .iter()
        .map(|&(pid, start, live)| {
            (
                pid,
                ProcessSummary {
                    pid,
                    start,
                    live,
                    mode,
                    totals: totals.get(&pid).copied().unwrap_or_default(),
                    ..Default::default()
                },
            )
        })
        .collect();
    let mut names: HashMap<(u32, u32), String> = HashMap::new();
    for t in &snap.threads {
        if let Some(p) = out.get_mut(&t.pid) {
            p.threads += usize::from(!t.exited);
            names.insert((t.pid, t.tid), fold::thread(t.name.as_deref()));
        }
    }
    for &(pid, _) in &deadlocked {
        if let Some(p) = out.get_mut(&pid).filter(|p| p.live) {
            p.deadlocked_threads += 1;
        }
    }
    // Waits for work or for another thread are no hang: a word known to be for that,
    // or a join's (it expects the TID of a thread of its process: the joined one's).
    let idle: HashSet<(u32, u64)> = snap
        .objects
        .rows()
        .iter()
        .filter(|o| o.wait_kind.is_idle())
        .map(|o| (o.key.pid, o.key.addr))
        .collect();
    let tids: HashSet<(u32, u32)> = snap.threads.iter().map(|t| (t.pid, t.tid)).collect();
    for a in &asleep {
        if let Some(p) = out.get_mut(&a.pid) {
            p.asleep += 1;
            if !idle.contains(&(a.pid, a.word)) && !tids.contains(&(a.pid, a.val)) {
                p.oldest_asleep_ns = p.oldest_asleep_ns.max(now_ns.saturating_sub(a.start_ns));
            }
        }
    }
    // Full mode: a futex word at a pthread object's address (its waits seen outside a
    // probed call, as when the probes came in mid-call) is that object, of its kind.
    let pthread_kinds: HashMap<(u32, u64), WaitKind> = snap
        .objects
        .rows()
        .iter()
        .filter(|r| r.key.primitive != Primitive::Futex)
        .map(|r| ((r.key.pid, r.key.addr), r.wait_kind))
        .collect();
    let mut locks: HashMap<u32, HashMap<(String, &'static str), GroupValues>> = HashMap::new();
    for o in snap.objects.iter() {
        let Some(p) = out.get_mut(&o.pid) else {
            continue;
        };
        // A futex word's "contended" counts its sleeps: no acquisition.
        let word = o.kind == Primitive::Futex;
        let kind = match pthread_kinds.get(&(o.pid, o.addr)) {
            Some(k) if word && o.wait_kind == WaitKind::Unknown => *k,
            _ => o.wait_kind,
        };
        // A join is a thread's exit in both modes (full mode's thread handle has no
        // name of its own).
        let name = if kind == WaitKind::Join {
            fold::object(Some("exit of thread 0"))
        } else {
            fold::object(o.name.as_deref())
        };
        let v = GroupValues {
            acquisitions: o.counts.acquisitions,
            contended: if word { 0 } else { o.counts.contended },
            sleeps: o.counts.blocked,
            wait_ns: o.wait.total_ns,
        };
        p.locks_total.add(&v);
        locks
            .entry(o.pid)
            .or_default()
            .entry((name, kind.name()))
            .or_default()
            .add(&v);
    }
    let mut edges: HashMap<u32, HashMap<(String, String), GroupValues>> = HashMap::new();
    for w in snap.waits_for.iter() {
        let Some(p) = out.get_mut(&w.pid) else {
            continue;
        };
        let v = GroupValues {
            sleeps: w.count,
            wait_ns: w.wait.total_ns,
            ..GroupValues::default()
        };
        p.edges_total.add(&v);
        let name = |pid, tid| {
            names
                .get(&(pid, tid))
                .cloned()
                .unwrap_or_else(|| fold::thread(None))
        };
        let waker = if w.outside {
            "another process".to_owned()
        } else {
            name(w.waker_pid, w.waker)
        };
        edges
            .entry(w.pid)
            .or_default()
            .entry((name(w.pid, w.waiter), waker))
            .or_default()
            .add(&v);
    }
    if let Some(tasks) = mpi {
        for (pid, m) in crate::analyses::mpi::series::ranks(tasks) {
            if let Some(p) = out.get_mut(&pid) {
                p.mpi = Some(m);
            }
        }
    }
    let mut list: Vec<ProcessSummary> = out.into_values().collect();
    for p in &mut list {
        p.locks = top(locks.remove(&p.pid), |(name, kind), values| LockGroup {
            name,
            kind,
            values,
        });
        p.edges = top(edges.remove(&p.pid), |(waiter, waker), values| EdgeGroup {
            waiter,
            waker,
            values,
        });
    }
    list.sort_by_key(|p| p.pid);
    list
}

/// The MAX_GROUPS groups of most time waited (then most waits, then by name).
fn top<K: Ord, T>(
    groups: Option<HashMap<K, GroupValues>>,
    make: impl Fn(K, GroupValues) -> T,
) -> Vec<T> {
    let mut v: Vec<(K, GroupValues)> = groups.unwrap_or_default().into_iter().collect();
    v.sort_by(|a, b| {
        (b.1.wait_ns, b.1.sleeps, b.1.acquisitions)
            .cmp(&(a.1.wait_ns, a.1.sleeps, a.1.acquisitions))
            .then_with(|| a.0.cmp(&b.0))
    });
    v.truncate(MAX_GROUPS);
    v.into_iter().map(|(k, g)| make(k, g)).collect()
}
