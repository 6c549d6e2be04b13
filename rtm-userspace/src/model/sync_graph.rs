//! The sync graph: threads and the synchronization objects they use, with one edge per
//! (thread, object) pair carrying counts and wait/hold distributions.
//!
//! Memory is bounded: threads, objects and edges are capped ([`Limits`]) and events
//! beyond a cap are counted in [`ModelCounters::dropped_over_limits`], never silently lost.

use std::collections::{HashMap, HashSet};

use rtm_common::{Primitive, SYNC_FLAG_CONTENDED, SyncOp, decode::Event, decode::SyncRecord};
use serde::Serialize;

use super::dist::{Dist, HistogramBudget};

const EBUSY: i32 = 16;
const ETIMEDOUT: i32 = 110;
/// A robust mutex whose owner died: the caller does own it.
const EOWNERDEAD: i32 = 130;

/// A thread of a traced process.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct ThreadKey {
    /// Process id.
    pub pid: u32,
    /// Thread id.
    pub tid: u32,
}

/// A synchronization object, identified by its address in its process.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectKey {
    /// Process id (addresses are per process).
    pub pid: u32,
    /// What kind of object.
    pub primitive: Primitive,
    /// Address in the process.
    pub addr: u64,
}

/// A thread -> object edge.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct EdgeKey {
    /// The thread.
    pub thread: ThreadKey,
    /// The object it used.
    pub object: ObjectKey,
}

/// Caps that bound the model's memory whatever the target does.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Distinct threads tracked.
    pub max_threads: usize,
    /// Distinct objects tracked.
    pub max_objects: usize,
    /// Distinct thread -> object edges tracked.
    pub max_edges: usize,
    /// Distributions that keep a percentile histogram (about 10 KiB each).
    pub max_histograms: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_threads: 65_536,
            max_objects: 200_000,
            max_edges: 400_000,
            max_histograms: 4_096,
        }
    }
}

/// What is known of a thread.
#[derive(Clone, Debug, Default)]
pub struct ThreadNode {
    /// Its name (comm), when it could be read.
    pub name: Option<String>,
    /// When it started (CLOCK_MONOTONIC ns), when known.
    pub start_ns: Option<u64>,
    /// When it ended, when it ended during the trace.
    pub exited_ns: Option<u64>,
    /// Timestamp of its first event.
    pub first_event_ns: u64,
    /// Timestamp of its last event.
    pub last_event_ns: u64,
}

/// Operation counts of an edge, or summed over an object's or a thread's edges.
#[derive(Clone, Copy, Debug, Default, Serialize, PartialEq, Eq)]
pub struct Counts {
    /// Successful acquisitions (lock, trylock, timedlock).
    pub acquisitions: u64,
    /// Acquisitions that found the object held at entry.
    pub contended: u64,
    /// Total time spent in contended acquisitions, ns.
    pub contended_wait_ns: u64,
    /// Trylocks that failed because the object was held.
    pub failed_trylocks: u64,
    /// Timed acquisitions that timed out.
    pub timeouts: u64,
    /// Calls that returned another error (EINVAL, EDEADLK, ...).
    pub errors: u64,
}

impl Counts {
    /// Adds another set of counts into this one.
    pub fn add(&mut self, o: &Counts) {
        self.acquisitions += o.acquisitions;
        self.contended += o.contended;
        self.contended_wait_ns += o.contended_wait_ns;
        self.failed_trylocks += o.failed_trylocks;
        self.timeouts += o.timeouts;
        self.errors += o.errors;
    }
}

/// Per-edge statistics.
#[derive(Clone, Debug, Default)]
pub struct EdgeStats {
    /// What the thread did with the object.
    pub counts: Counts,
    /// Time spent inside blocking acquisitions (lock, timedlock), timeouts included.
    pub wait: Dist,
    /// Time between acquisition and release.
    pub hold: Dist,
}

#[derive(Clone, Copy, Debug)]
struct Holder {
    tid: u32,
    since_ns: u64,
    depth: u32,
}

/// Counters of what the model saw but could not fully attribute.
#[derive(Clone, Copy, Debug, Default, Serialize, PartialEq, Eq)]
pub struct ModelCounters {
    /// Events applied.
    pub events: u64,
    /// Events not recorded because a thread, object or edge cap was reached.
    pub dropped_over_limits: u64,
    /// Releases of objects whose acquisition was not seen (acquired before attach).
    pub unmatched_releases: u64,
    /// Acquisitions of an object another thread held as far as the events showed: a release
    /// was not seen (a condition variable wait releases its mutex inside libc, or an event
    /// was lost). The earlier hold is discarded, not guessed.
    pub interrupted_holds: u64,
    /// Distributions that got no percentile histogram because the budget was spent.
    pub histograms_refused: u64,
}

/// The sync graph.
#[derive(Debug)]
pub struct SyncGraph {
    limits: Limits,
    budget: HistogramBudget,
    threads: HashMap<ThreadKey, ThreadNode>,
    pids: HashSet<u32>,
    objects: HashMap<ObjectKey, u64>,
    edges: HashMap<EdgeKey, EdgeStats>,
    held: HashMap<ObjectKey, Holder>,
    counters: ModelCounters,
}

/// What applying an event revealed, so the caller can look things up while they exist.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Applied {
    /// The event came from a thread not seen before.
    pub new_thread: Option<ThreadKey>,
    /// The event came from a process not seen before.
    pub new_process: Option<u32>,
}

impl SyncGraph {
    /// An empty graph with the given caps.
    pub fn new(limits: Limits) -> Self {
        Self {
            limits,
            budget: HistogramBudget::new(limits.max_histograms),
            threads: HashMap::new(),
            pids: HashSet::new(),
            objects: HashMap::new(),
            edges: HashMap::new(),
            held: HashMap::new(),
            counters: ModelCounters::default(),
        }
    }

    /// Applies one decoded event.
    pub fn apply(&mut self, event: &Event) -> Applied {
        self.counters.events += 1;
        match event {
            Event::Sync(s) => self.apply_sync(s),
        }
    }

    fn apply_sync(&mut self, s: &SyncRecord) -> Applied {
        let h = &s.raw.header;
        let thread = ThreadKey {
            pid: h.pid,
            tid: h.tid,
        };
        let mut applied = Applied::default();
        if !self.threads.contains_key(&thread) {
            if self.threads.len() >= self.limits.max_threads {
                self.counters.dropped_over_limits += 1;
                return applied;
            }
            if self.pids.insert(thread.pid) {
                applied.new_process = Some(thread.pid);
            }
            self.threads.insert(
                thread,
                ThreadNode {
                    first_event_ns: h.ts_ns,
                    ..Default::default()
                },
            );
            applied.new_thread = Some(thread);
        }
        let node = self.threads.get_mut(&thread).expect("inserted above");
        node.last_event_ns = node.last_event_ns.max(h.ts_ns);

        let object = ObjectKey {
            pid: h.pid,
            primitive: s.primitive,
            addr: s.raw.object,
        };
        if s.op == SyncOp::Unlock {
            self.release(object, h.ts_ns);
            return applied;
        }
        if !self.objects.contains_key(&object) {
            if self.objects.len() >= self.limits.max_objects {
                self.counters.dropped_over_limits += 1;
                return applied;
            }
            self.objects.insert(object, h.ts_ns);
        }
        let key = EdgeKey { thread, object };
        if !self.edges.contains_key(&key) && self.edges.len() >= self.limits.max_edges {
            self.counters.dropped_over_limits += 1;
            return applied;
        }
        let edge = self.edges.entry(key).or_default();
        let contended = s.raw.flags & SYNC_FLAG_CONTENDED != 0;
        let acquired = match (s.op, s.raw.ret) {
            (_, 0 | EOWNERDEAD) => true,
            (SyncOp::TryLock, EBUSY) => {
                edge.counts.failed_trylocks += 1;
                false
            }
            (SyncOp::TimedLock, ETIMEDOUT) => {
                edge.counts.timeouts += 1;
                edge.wait.record(s.raw.wait_ns, &mut self.budget);
                false
            }
            _ => {
                edge.counts.errors += 1;
                false
            }
        };
        if !acquired {
            return applied;
        }
        edge.counts.acquisitions += 1;
        if contended {
            edge.counts.contended += 1;
            edge.counts.contended_wait_ns += s.raw.wait_ns;
        }
        if s.op != SyncOp::TryLock {
            edge.wait.record(s.raw.wait_ns, &mut self.budget);
        }
        match self.held.get_mut(&object) {
            Some(holder) if holder.tid == thread.tid => holder.depth += 1,
            Some(holder) => {
                self.counters.interrupted_holds += 1;
                *holder = Holder {
                    tid: thread.tid,
                    since_ns: h.ts_ns,
                    depth: 1,
                };
            }
            None => {
                self.held.insert(
                    object,
                    Holder {
                        tid: thread.tid,
                        since_ns: h.ts_ns,
                        depth: 1,
                    },
                );
            }
        }
        applied
    }

    fn release(&mut self, object: ObjectKey, ts_ns: u64) {
        let Some(holder) = self.held.get_mut(&object) else {
            self.counters.unmatched_releases += 1;
            return;
        };
        if holder.depth > 1 {
            holder.depth -= 1;
            return;
        }
        let holder = *holder;
        self.held.remove(&object);
        let key = EdgeKey {
            thread: ThreadKey {
                pid: object.pid,
                tid: holder.tid,
            },
            object,
        };
        if let Some(edge) = self.edges.get_mut(&key) {
            edge.hold
                .record(ts_ns.saturating_sub(holder.since_ns), &mut self.budget);
        }
    }

    /// Records what was learnt about a thread outside the event stream (/proc).
    pub fn set_thread_info(&mut self, key: ThreadKey, name: Option<String>, start_ns: Option<u64>) {
        if let Some(node) = self.threads.get_mut(&key) {
            if name.is_some() {
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

    /// The threads seen so far.
    pub fn threads(&self) -> impl Iterator<Item = (&ThreadKey, &ThreadNode)> {
        self.threads.iter()
    }

    /// The objects seen so far, with the timestamp of their first acquisition attempt.
    pub fn objects(&self) -> impl Iterator<Item = (&ObjectKey, &u64)> {
        self.objects.iter()
    }

    /// The edges.
    pub fn edges(&self) -> impl Iterator<Item = (&EdgeKey, &EdgeStats)> {
        self.edges.iter()
    }

    /// Counters of incomplete attribution, histogram budget included.
    pub fn counters(&self) -> ModelCounters {
        ModelCounters {
            histograms_refused: self.budget.refused,
            ..self.counters
        }
    }
}

#[cfg(test)]
mod tests;
