//! A snapshot: the model turned into sorted, named, serializable views that every output
//! (text report, JSON) reads. Building one does not change the model. The long lists
//! (objects, edges, waiter -> waker edges) refer to the model and become views one at a
//! time as they are read ([`super::rows`]), so a snapshot of a large graph costs tens of
//! bytes per object and edge, not copies of them.

use std::{
    borrow::Cow,
    collections::{HashMap, HashSet},
};

use rtm_common::Primitive;
use serde::Serialize;

use super::{
    CallSiteView, ThreadView, names,
    rows::{EdgeRow, Edges, Objects, WaitsForRow, WaitsFors, totals},
};
use crate::model::{
    dist::Dist,
    sync::{CallSite, ModelCounters, ObjectKey, SyncGraph, ThreadKey},
};

/// Most call sites listed (by time waited).
const MAX_CALL_SITES: usize = 500;

/// The trace window a snapshot covers (CLOCK_MONOTONIC ns).
#[derive(Debug, Clone, Copy, Default, Serialize, serde::Deserialize)]
pub struct Window {
    /// Probes live.
    pub start_ns: u64,
    /// Snapshot taken (or tracing ended).
    pub end_ns: u64,
}

/// The sections the analyses (`analyses/`) made for a document, by key, in the order
/// they were made. Serialized as a map: each a field of the document's top level.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Sections(Vec<(String, serde_json::Value)>);

impl Sections {
    /// The section `key`.
    pub fn get(&self, key: &str) -> Option<&serde_json::Value> {
        self.0.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    /// The section `key` read as `T`: None when absent or not of that shape.
    pub fn view<T: serde::de::DeserializeOwned>(&self, key: &str) -> Option<T> {
        T::deserialize(self.get(key)?).ok()
    }

    /// Adds (or replaces) the section `key`.
    pub fn insert(&mut self, key: &str, value: serde_json::Value) {
        match self.0.iter_mut().find(|(k, _)| k == key) {
            Some(slot) => slot.1 = value,
            None => self.0.push((key.to_owned(), value)),
        }
    }
}

impl Serialize for Sections {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(Some(self.0.len()))?;
        for (k, v) in &self.0 {
            m.serialize_entry(k, v)?;
        }
        m.end()
    }
}

/// Everything the outputs need.
#[derive(Debug, Serialize)]
pub struct Snapshot<'g> {
    /// The window covered.
    pub window: Window,
    /// Threads, most time waiting first.
    pub threads: Vec<ThreadView>,
    /// Objects, most contended wait first.
    pub objects: Objects<'g>,
    /// Edges, most wait first.
    pub edges: Edges<'g>,
    /// Waiter -> waker edges, most wait first.
    pub waits_for: WaitsFors<'g>,
    /// Call sites, most wait first (at most 500).
    pub call_sites: Vec<CallSiteView>,
    /// What the model could not attribute.
    pub model: ModelCounters,
    /// Contended waits by call stack (contention mode, when any were captured).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub stacks: Option<crate::model::stacks::StacksView>,
    /// Waiter -> the mutex's holder when each wait began (contention mode), most wait
    /// first (at most 500).
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub held_by: Vec<HeldByRow>,
    /// Locks taken in both orders (full mode, when any pair was).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub lock_order: Option<LockOrderView>,
    /// Deadlocks found while tracing.
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub deadlocks: Vec<crate::model::blocked::DeadlockView>,
    /// Threads found blocked while tracing where a deadlock cannot be ruled out: they
    /// wait to acquire something whose holder cannot be known.
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub cannot_tell: Vec<crate::model::blocked::Undecided>,
    /// The sections of the analyses in `analyses/` (written beside the sync graph,
    /// each under its key).
    #[serde(skip)]
    pub sections: Sections,
    /// Traced processes that run Go programs: their goroutines block in the Go runtime,
    /// not on futexes; their futex waits are the runtime's own.
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub go_processes: Vec<u32>,
}

impl<'g> Snapshot<'g> {
    /// Builds the views. `name_of` names objects that are global or static variables,
    /// or words on the heap by the code that waits on them; objects of a process that
    /// share a name are numbered (`names::unique`), the same in every view.
    pub fn build(
        graph: &'g SyncGraph,
        window: Window,
        name_of: &mut dyn FnMut(&ObjectKey) -> Option<String>,
        locate: &mut dyn FnMut(u32, u64) -> Option<String>,
    ) -> Snapshot<'g> {
        let exits = exit_waits(graph);
        let names = object_names(graph, &exits, name_of);
        let name_of = &mut |k: &ObjectKey| names.get(&(k.pid, k.addr)).cloned();
        let call_sites = top_call_sites(graph)
            .into_iter()
            .map(|((obj, site), c)| CallSiteView {
                pid: obj.pid,
                kind: obj.primitive,
                object: obj.addr,
                site,
                // A call site is a return address: its line is the call's, the byte before.
                location: locate(obj.pid, crate::model::stacks::call_address(1, site)),
                calls: c.calls,
                contended: c.contended,
                wait_ns: c.wait_ns,
            })
            .collect();
        let threads = thread_views(graph, window);

        let mut waits: Vec<WaitsForRow> = graph
            .waits_for()
            .map(|(k, w)| WaitsForRow {
                pid: k.pid,
                waiter: k.waiter,
                waker_pid: k.waker_pid,
                outside: !graph.is_traced(k.waker_pid),
                waker: k.waker,
                object: k.object,
                object_name: name_of(&ObjectKey {
                    pid: k.pid,
                    primitive: Primitive::Futex,
                    addr: k.object,
                }),
                count: w.count,
                wait: Cow::Borrowed(&w.wait),
                at_exit: false,
            })
            .collect();
        for ((pid, waiter, waker, object), w) in &exits {
            waits.push(WaitsForRow {
                pid: *pid,
                waiter: *waiter,
                waker_pid: *pid,
                outside: false,
                waker: *waker,
                object: *object,
                object_name: name_of(&ObjectKey {
                    pid: *pid,
                    primitive: Primitive::Futex,
                    addr: *object,
                })
                .or_else(|| Some(exit_name(*waker))),
                count: w.count(),
                wait: Cow::Owned(w.clone()),
                at_exit: true,
            });
        }
        let objects = Objects::new(graph, &mut |key, _| name_of(key));
        Snapshot {
            window,
            threads,
            objects,
            edges: Edges::new(graph),
            waits_for: WaitsFors::new(waits),
            call_sites,
            model: ModelCounters {
                waits_without_waker: graph
                    .counters()
                    .waits_without_waker
                    .saturating_sub(exits.values().map(Dist::count).sum::<u64>()),
                waits_woken_from_outside: graph
                    .waits_for()
                    .filter(|(k, _)| !graph.is_traced(k.waker_pid))
                    .map(|(_, w)| w.count)
                    .sum(),
                ..graph.counters()
            },
            stacks: None,
            held_by: held_by_rows(graph, name_of),
            lock_order: lock_order_view(graph, name_of, locate),
            deadlocks: Vec::new(),
            sections: Sections::default(),
            go_processes: Vec::new(),
            cannot_tell: Vec::new(),
        }
    }
}

/// The name of a word a joiner waited on until thread `tid` exited.
fn exit_name(tid: u32) -> String {
    format!("exit of thread {tid}")
}

/// Every object's name, by (process, address): its own (`name_of`), a joined thread's
/// ("thread TID"), or the exit a word's waits were for ("exit of thread TID"); those a
/// process's objects share numbered so that each names one object.
fn object_names(
    graph: &SyncGraph,
    exits: &HashMap<(u32, u32, u32, u64), Dist>,
    name_of: &mut dyn FnMut(&ObjectKey) -> Option<String>,
) -> HashMap<(u32, u64), String> {
    let exit_of: HashMap<(u32, u64), u32> = exits.keys().map(|k| ((k.0, k.3), k.2)).collect();
    let mut names: HashMap<(u32, u64), String> = HashMap::new();
    let mut add = |key: ObjectKey, tid: Option<u32>| {
        if names.contains_key(&(key.pid, key.addr)) {
            return;
        }
        let name = match key.primitive {
            Primitive::Thread => tid.map(|tid| format!("thread {tid}")),
            _ => name_of(&key).or_else(|| exit_of.get(&(key.pid, key.addr)).map(|t| exit_name(*t))),
        };
        if let Some(n) = name {
            names.insert((key.pid, key.addr), n);
        }
    };
    let futex = |pid, addr| ObjectKey {
        pid,
        primitive: Primitive::Futex,
        addr,
    };
    for (key, meta) in graph.objects() {
        add(*key, meta.tid());
    }
    for (k, _) in graph.waits_for() {
        add(futex(k.pid, k.object), None);
    }
    for (k, _) in graph.held_by() {
        add(futex(k.pid, k.object), None);
    }
    for k in exits.keys() {
        add(futex(k.0, k.3), None);
    }
    if graph.lock_order().pairs() > 0 {
        for i in graph.lock_order().inversions().into_iter().take(100) {
            for addr in [i.a, i.b] {
                add(
                    ObjectKey {
                        pid: i.pid,
                        primitive: Primitive::Mutex,
                        addr,
                    },
                    None,
                );
            }
        }
    }
    names::unique(names)
}

/// The call sites with the most wait, most first (ties by key), without sorting them
/// all: a graph of 100,000 objects has as many call sites.
fn top_call_sites(graph: &SyncGraph) -> Vec<((ObjectKey, u64), &CallSite)> {
    // Ordered so that the heap's greatest is the least wanted of those kept (keys are
    // unique, so the call site itself never decides).
    let mut heap = std::collections::BinaryHeap::with_capacity(MAX_CALL_SITES + 1);
    for (key, c) in graph.call_sites() {
        heap.push((std::cmp::Reverse(c.wait_ns), key, c));
        if heap.len() > MAX_CALL_SITES {
            heap.pop();
        }
    }
    heap.into_sorted_vec()
        .into_iter()
        .map(|(_, key, c)| (key, c))
        .collect()
}

/// Each thread's totals over its edges, most time waiting first. Groups the edges by
/// thread so that only one thread's merged distributions exist at a time.
fn thread_views(graph: &SyncGraph, window: Window) -> Vec<ThreadView> {
    let thread_of = |i: &u32| graph.edge_at(*i).0.thread();
    let mut by_thread: Vec<u32> = (0..graph.edge_count() as u32).collect();
    by_thread.sort_unstable_by_key(thread_of);
    let mut threads: Vec<ThreadView> = graph
        .threads()
        .map(|(key, node)| {
            let first = by_thread.partition_point(|i| thread_of(i) < *key);
            let len = by_thread[first..].partition_point(|i| thread_of(i) == *key);
            let (counts, wait, hold) = totals(by_thread[first..first + len].iter().map(|i| {
                let (key, stats) = graph.edge_at(*i);
                EdgeRow { key, stats }
            }));
            let start = node
                .start_ns
                .unwrap_or(node.first_event_ns)
                .max(window.start_ns);
            let end = node.exited_ns.unwrap_or(window.end_ns).min(window.end_ns);
            let observed_ns = end.saturating_sub(start);
            let wait = wait.summary();
            ThreadView {
                pid: key.pid,
                tid: key.tid,
                name: node.name.clone(),
                parent: node.parent,
                exited: node.exited_ns.is_some_and(|e| e <= window.end_ns),
                acquisitions: counts.acquisitions,
                contended: counts.contended,
                wait_share: if observed_ns > 0 {
                    (wait.total_ns as f64 / observed_ns as f64).min(1.0)
                } else {
                    0.0
                },
                wait,
                hold: hold.summary(),
                observed_ns,
                idle_wait_ns: 0,
            }
        })
        .collect();
    threads.sort_by(|a, b| {
        b.wait
            .total_ns
            .cmp(&a.wait.total_ns)
            .then((a.pid, a.tid).cmp(&(b.pid, b.tid)))
    });
    threads
}

/// How close a thread's exit must be to the end of a wait to have ended it.
const EXIT_MATCH_NS: u64 = 5_000_000;

/// Waits without a waker matched with the thread whose exit ended them: a wait whose
/// word held the tid of a thread that exited during it, or just after its end (the
/// kernel wakes joiners before the exit tracepoint fires). glibc's pthread_join sleeps on
/// the joined thread's tid word expecting its tid. Keyed (pid, waiter, exited thread,
/// futex word).
fn exit_waits(graph: &SyncGraph) -> HashMap<(u32, u32, u32, u64), Dist> {
    let exits: Vec<(ThreadKey, u64)> = graph
        .threads()
        .filter_map(|(k, n)| n.exited_ns.map(|e| (*k, e)))
        .collect();
    let mut budget = crate::model::HistogramBudget::new(64);
    let mut out: HashMap<(u32, u32, u32, u64), Dist> = HashMap::new();
    for w in graph.unwoken() {
        let best = exits
            .iter()
            .filter(|(k, e)| {
                k.pid == w.pid
                    && k.tid == w.val
                    && k.tid != w.tid
                    && *e >= w.start_ns
                    && *e <= w.end_ns + EXIT_MATCH_NS
            })
            .min_by_key(|(_, e)| e.abs_diff(w.end_ns));
        if let Some((k, _)) = best {
            out.entry((w.pid, w.tid, k.tid, w.addr))
                .or_default()
                .record(w.end_ns - w.start_ns, &mut budget);
        }
    }
    out
}

/// One order of an inversion, its call sites named.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct OrderView {
    /// How often it was taken in this order.
    pub count: u64,
    /// A thread that did.
    pub tid: u32,
    /// Where the first lock was taken (the lock call's return address, named).
    pub first_site: Option<String>,
    /// Where the second was taken while the first was held.
    pub then_site: Option<String>,
}

/// Two locks taken in both orders: a deadlock waiting to happen.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct InversionView {
    /// Process.
    pub pid: u32,
    /// One lock.
    #[serde(serialize_with = "super::hex", deserialize_with = "super::unhex")]
    pub a: u64,
    /// Its name, when it is a variable.
    pub a_name: Option<String>,
    /// The other.
    #[serde(serialize_with = "super::hex", deserialize_with = "super::unhex")]
    pub b: u64,
    /// Its name.
    pub b_name: Option<String>,
    /// `b` taken while holding `a`.
    pub a_then_b: OrderView,
    /// `a` taken while holding `b`.
    pub b_then_a: OrderView,
}

/// The lock-order graph's inversions (full mode).
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct LockOrderView {
    /// Ordered pairs seen (A held while taking B).
    pub pairs: usize,
    /// Orderings not kept (caps).
    pub over_cap: u64,
    /// Pairs taken in both orders, most taken first (at most 100).
    pub inversions: Vec<InversionView>,
}

fn lock_order_view(
    graph: &SyncGraph,
    name_of: &mut dyn FnMut(&ObjectKey) -> Option<String>,
    locate: &mut dyn FnMut(u32, u64) -> Option<String>,
) -> Option<LockOrderView> {
    let order = graph.lock_order();
    if order.pairs() == 0 {
        return None;
    }
    let mut name = |pid: u32, addr: u64| {
        name_of(&ObjectKey {
            pid,
            primitive: Primitive::Mutex,
            addr,
        })
    };
    let mut view = |pid: u32, o: &crate::model::sync::order::Ordering| OrderView {
        count: o.count,
        tid: o.tid,
        first_site: (o.first_site != 0)
            .then(|| locate(pid, crate::model::stacks::call_address(1, o.first_site)))
            .flatten(),
        then_site: (o.then_site != 0)
            .then(|| locate(pid, crate::model::stacks::call_address(1, o.then_site)))
            .flatten(),
    };
    let inversions = order
        .inversions()
        .into_iter()
        .take(100)
        .map(|i| InversionView {
            pid: i.pid,
            a: i.a,
            a_name: name(i.pid, i.a),
            b: i.b,
            b_name: name(i.pid, i.b),
            a_then_b: view(i.pid, &i.a_then_b),
            b_then_a: view(i.pid, &i.b_then_a),
        })
        .collect();
    Some(LockOrderView {
        pairs: order.pairs(),
        over_cap: order.over_cap,
        inversions,
    })
}

impl Snapshot<'_> {
    /// Each thread's time waiting for work or for other threads (on objects whose kind
    /// `WaitKind::is_idle`), and the threads ranked by the rest of their wait: the
    /// contention, or waits of unknown kind, most first. Run once the objects' kinds
    /// are known.
    pub fn rank_threads_by_contention(&mut self) {
        let idle: HashSet<ObjectKey> = self
            .objects
            .rows()
            .iter()
            .filter(|o| o.wait_kind.is_idle())
            .map(|o| *o.key)
            .collect();
        let mut by_thread: HashMap<ThreadKey, u64> = HashMap::new();
        for e in self.edges.rows() {
            if idle.contains(&e.key.object()) {
                let t = by_thread.entry(e.key.thread()).or_default();
                *t = t.saturating_add(e.stats.wait_total());
            }
        }
        for t in &mut self.threads {
            let key = ThreadKey {
                pid: t.pid,
                tid: t.tid,
            };
            t.idle_wait_ns = by_thread
                .get(&key)
                .copied()
                .unwrap_or(0)
                .min(t.wait.total_ns);
        }
        self.threads.sort_by(|a, b| {
            b.lock_wait_ns()
                .cmp(&a.lock_wait_ns())
                .then(b.wait.total_ns.cmp(&a.wait.total_ns))
                .then((a.pid, a.tid).cmp(&(b.pid, b.tid)))
        });
    }
}

/// Who held the mutex a thread waited on when its wait began.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct HeldByRow {
    /// Process.
    pub pid: u32,
    /// The waiting thread.
    pub waiter: u32,
    /// The holder when the waits began.
    pub holder: u32,
    /// The mutex's word.
    #[serde(serialize_with = "super::hex", deserialize_with = "super::unhex")]
    pub object: u64,
    /// Its name, when it is a variable.
    pub object_name: Option<String>,
    /// Waits that slept.
    pub count: u64,
    /// Their total time, ns.
    pub wait_ns: u64,
    /// Of them, still asleep when the trace ended.
    pub in_progress: u64,
}

fn held_by_rows(
    graph: &SyncGraph,
    name_of: &mut dyn FnMut(&ObjectKey) -> Option<String>,
) -> Vec<HeldByRow> {
    let mut rows: Vec<HeldByRow> = graph
        .held_by()
        .map(|(k, h)| HeldByRow {
            pid: k.pid,
            waiter: k.waiter,
            holder: k.holder,
            object: k.object,
            object_name: None,
            count: h.count,
            wait_ns: h.wait_ns,
            in_progress: h.in_progress,
        })
        .collect();
    rows.sort_by(|a, b| {
        b.wait_ns
            .cmp(&a.wait_ns)
            .then((a.pid, a.waiter, a.holder, a.object).cmp(&(b.pid, b.waiter, b.holder, b.object)))
    });
    rows.truncate(500);
    for r in &mut rows {
        r.object_name = name_of(&ObjectKey {
            pid: r.pid,
            primitive: Primitive::Futex,
            addr: r.object,
        });
    }
    rows
}
