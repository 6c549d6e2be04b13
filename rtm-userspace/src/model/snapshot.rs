//! A snapshot: the model turned into sorted, named, serializable views that every output
//! (text report, JSON) reads. Building one does not change the model.

use std::collections::HashMap;

use rtm_common::Primitive;
use serde::Serialize;

use super::{
    barrier::{self, Round},
    dist::{Dist, DistSummary},
    sync_graph::{Counts, ModelCounters, ObjectKey, Role, SyncGraph, ThreadKey},
};

/// Most call sites listed (by time waited).
const MAX_CALL_SITES: usize = 500;

/// Most barrier rounds listed per barrier (the summary covers all of them).
const MAX_ROUNDS_LISTED: usize = 1_000;

/// Serializes an address as a hex string, the way people read them.
fn hex<S: serde::Serializer>(v: &u64, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&format!("{v:#x}"))
}

fn hex_opt<S: serde::Serializer>(v: &Option<u64>, s: S) -> Result<S::Ok, S::Error> {
    match v {
        Some(v) => s.serialize_str(&format!("{v:#x}")),
        None => s.serialize_none(),
    }
}

/// A thread and what it spent waiting.
#[derive(Debug, Clone, Serialize)]
pub struct ThreadView {
    /// Process id.
    pub pid: u32,
    /// Thread id.
    pub tid: u32,
    /// Thread name, when known.
    pub name: Option<String>,
    /// The thread that created it, when that was seen (`pid`/`tid`).
    pub parent: Option<ThreadKey>,
    /// Whether it exited during the trace.
    pub exited: bool,
    /// Acquisitions across all objects.
    pub acquisitions: u64,
    /// Acquisitions that found the object held.
    pub contended: u64,
    /// Time inside blocking acquisitions, all objects.
    pub wait: DistSummary,
    /// Time holding objects, all objects.
    pub hold: DistSummary,
    /// How long the thread was observed: its life within the trace window, ns.
    pub observed_ns: u64,
    /// wait.total_ns / observed_ns.
    pub wait_share: f64,
}

/// A synchronization object and its totals over every thread that used it.
#[derive(Debug, Clone, Serialize)]
pub struct ObjectView {
    /// Process id.
    pub pid: u32,
    /// Kind of object.
    pub kind: Primitive,
    /// Address in the process.
    #[serde(serialize_with = "hex")]
    pub addr: u64,
    /// Symbol name (`name` or `name+0x10`) when the object is a global or static variable.
    pub name: Option<String>,
    /// Threads that used it.
    pub threads: usize,
    /// Operation counts over every thread that used it.
    #[serde(flatten)]
    pub counts: Counts,
    /// Time inside blocking calls.
    pub wait: DistSummary,
    /// Time held.
    pub hold: DistSummary,
    /// Condition variable: the mutex its waits released.
    #[serde(serialize_with = "hex_opt", skip_serializing_if = "Option::is_none")]
    pub mutex: Option<u64>,
    /// Thread handle: the thread's id.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub thread_tid: Option<u32>,
    /// Barrier: its rounds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub barrier: Option<BarrierView>,
}

/// A barrier's rounds.
#[derive(Debug, Clone, Serialize)]
pub struct BarrierView {
    /// Rounds seen.
    pub rounds: u64,
    /// Spread between first and last arrival per round: the load imbalance.
    pub spread: DistSummary,
    /// How often each thread arrived last: (tid, rounds), most first.
    pub last_arrivals: Vec<(u32, u64)>,
    /// Calls that returned PTHREAD_BARRIER_SERIAL_THREAD.
    pub serial_returns: u64,
    /// The rounds, oldest first (at most 1000, the latest).
    pub round_list: Vec<Round>,
}

/// Where in the program an object was waited on.
#[derive(Debug, Clone, Serialize)]
pub struct CallSiteView {
    /// Process id.
    pub pid: u32,
    /// Kind of object.
    pub kind: Primitive,
    /// Object address.
    #[serde(serialize_with = "hex")]
    pub object: u64,
    /// The call's return address.
    #[serde(serialize_with = "hex")]
    pub site: u64,
    /// `function+0xOFF (file:line)` when the file has symbols (and debug info), else
    /// `file+0xOFF`.
    pub location: Option<String>,
    /// Blocking calls made from there.
    pub calls: u64,
    /// Those that found the object busy or slept.
    pub contended: u64,
    /// Time inside them, ns.
    pub wait_ns: u64,
}

/// A waiter -> waker edge: `waiter` slept on a futex word until `waker` woke it.
#[derive(Debug, Clone, Serialize)]
pub struct WaitsForView {
    /// Process id.
    pub pid: u32,
    /// The waiting thread.
    pub waiter: u32,
    /// The thread whose wake ended the waits.
    pub waker: u32,
    /// The futex word (for a glibc mutex, the mutex).
    #[serde(serialize_with = "hex")]
    pub object: u64,
    /// Its symbol name, when it is a global or static variable.
    pub object_name: Option<String>,
    /// Waits ended by this waker.
    pub count: u64,
    /// Their lengths.
    pub wait: DistSummary,
    /// The waits ended when the waker exited (the kernel's wake for pthread_join), not
    /// by a FUTEX_WAKE it made.
    pub at_exit: bool,
}

impl ObjectView {
    /// The name if known, else the address.
    pub fn label(&self) -> String {
        self.name
            .clone()
            .unwrap_or_else(|| format!("{:#x}", self.addr))
    }
}

/// One thread -> object edge.
#[derive(Debug, Clone, Serialize)]
pub struct EdgeView {
    /// Process id.
    pub pid: u32,
    /// Thread id.
    pub tid: u32,
    /// Kind of object.
    pub kind: Primitive,
    /// Object address.
    #[serde(serialize_with = "hex")]
    pub object: u64,
    /// How the thread used it: `read` or `write` for rwlocks, `use` otherwise.
    pub role: Role,
    /// Operation counts of this thread on this object.
    #[serde(flatten)]
    pub counts: Counts,
    /// Time inside blocking acquisitions.
    pub wait: DistSummary,
    /// Time held.
    pub hold: DistSummary,
}

/// The trace window a snapshot covers (CLOCK_MONOTONIC ns).
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Window {
    /// Probes live.
    pub start_ns: u64,
    /// Snapshot taken (or tracing ended).
    pub end_ns: u64,
}

/// Everything the outputs need.
#[derive(Debug, Clone, Serialize)]
pub struct Snapshot {
    /// The window covered.
    pub window: Window,
    /// Threads, most time waiting first.
    pub threads: Vec<ThreadView>,
    /// Objects, most contended wait first.
    pub objects: Vec<ObjectView>,
    /// Edges, most wait first.
    pub edges: Vec<EdgeView>,
    /// Waiter -> waker edges, most wait first.
    pub waits_for: Vec<WaitsForView>,
    /// Call sites, most wait first (at most 500).
    pub call_sites: Vec<CallSiteView>,
    /// What the model could not attribute.
    pub model: ModelCounters,
    /// The MPI task graph, when MPI calls were traced (written beside the sync graph).
    #[serde(skip)]
    pub tasks: Option<super::TaskView>,
    /// The system and the traced processes over time (written beside the sync graph).
    #[serde(skip)]
    pub ambient: Option<super::ambient::AmbientView>,
    /// Performance counters (written beside the sync graph).
    #[serde(skip)]
    pub counters: Option<super::counters::CountersView>,
}

#[derive(Default)]
struct Totals {
    threads: usize,
    counts: Counts,
    wait: Dist,
    hold: Dist,
}

impl Snapshot {
    /// Builds the views. `name_of` names objects that are global or static variables.
    pub fn build(
        graph: &SyncGraph,
        window: Window,
        name_of: &mut dyn FnMut(&ObjectKey) -> Option<String>,
        locate: &mut dyn FnMut(u32, u64) -> Option<String>,
    ) -> Snapshot {
        let mut sites: Vec<_> = graph.call_sites().collect();
        sites.sort_by(|a, b| b.1.wait_ns.cmp(&a.1.wait_ns).then(a.0.cmp(b.0)));
        let call_sites = sites
            .into_iter()
            .take(MAX_CALL_SITES)
            .map(|((obj, site), c)| CallSiteView {
                pid: obj.pid,
                kind: obj.primitive,
                object: obj.addr,
                site: *site,
                location: locate(obj.pid, *site),
                calls: c.calls,
                contended: c.contended,
                wait_ns: c.wait_ns,
            })
            .collect();
        let mut per_thread: HashMap<ThreadKey, Totals> = HashMap::new();
        let mut per_object: HashMap<ObjectKey, Totals> = HashMap::new();
        let mut edges = Vec::new();
        for (key, e) in graph.edges() {
            for t in [
                per_thread.entry(key.thread).or_default(),
                per_object.entry(key.object).or_default(),
            ] {
                t.threads += 1;
                t.counts.add(&e.counts);
                t.wait.merge(&e.wait);
                t.hold.merge(&e.hold);
            }
            edges.push(EdgeView {
                pid: key.thread.pid,
                tid: key.thread.tid,
                kind: key.object.primitive,
                object: key.object.addr,
                role: key.role,
                counts: e.counts,
                wait: e.wait.summary(),
                hold: e.hold.summary(),
            });
        }
        edges.sort_by(|a, b| {
            b.wait
                .total_ns
                .cmp(&a.wait.total_ns)
                .then((a.pid, a.tid, a.object, a.role).cmp(&(b.pid, b.tid, b.object, b.role)))
        });

        let mut waits_for: Vec<WaitsForView> = graph
            .waits_for()
            .map(|(k, w)| WaitsForView {
                pid: k.pid,
                waiter: k.waiter,
                waker: k.waker,
                object: k.object,
                object_name: name_of(&ObjectKey {
                    pid: k.pid,
                    primitive: Primitive::Futex,
                    addr: k.object,
                }),
                count: w.count,
                wait: w.wait.summary(),
                at_exit: false,
            })
            .collect();
        let exits = exit_waits(graph);
        for ((pid, waiter, waker, object), w) in &exits {
            waits_for.push(WaitsForView {
                pid: *pid,
                waiter: *waiter,
                waker: *waker,
                object: *object,
                object_name: Some(format!("exit of thread {waker}")),
                count: w.count(),
                wait: w.summary(),
                at_exit: true,
            });
        }
        waits_for.sort_by(|a, b| {
            b.wait.total_ns.cmp(&a.wait.total_ns).then(
                (a.pid, a.waiter, a.waker, a.object).cmp(&(b.pid, b.waiter, b.waker, b.object)),
            )
        });

        let mut threads: Vec<ThreadView> = graph
            .threads()
            .map(|(key, node)| {
                let t = per_thread.remove(key).unwrap_or_default();
                let start = node
                    .start_ns
                    .unwrap_or(node.first_event_ns)
                    .max(window.start_ns);
                let end = node.exited_ns.unwrap_or(window.end_ns).min(window.end_ns);
                let observed_ns = end.saturating_sub(start);
                let wait = t.wait.summary();
                ThreadView {
                    pid: key.pid,
                    tid: key.tid,
                    name: node.name.clone(),
                    parent: node.parent,
                    exited: node.exited_ns.is_some_and(|e| e <= window.end_ns),
                    acquisitions: t.counts.acquisitions,
                    contended: t.counts.contended,
                    wait_share: if observed_ns > 0 {
                        (wait.total_ns as f64 / observed_ns as f64).min(1.0)
                    } else {
                        0.0
                    },
                    wait,
                    hold: t.hold.summary(),
                    observed_ns,
                }
            })
            .collect();
        threads.sort_by(|a, b| {
            b.wait
                .total_ns
                .cmp(&a.wait.total_ns)
                .then((a.pid, a.tid).cmp(&(b.pid, b.tid)))
        });

        let mut objects: Vec<ObjectView> = graph
            .objects()
            .map(|(key, meta)| {
                let t = per_object.remove(key).unwrap_or_default();
                let name = match key.primitive {
                    Primitive::Thread => meta.tid.map(|tid| format!("thread {tid}")),
                    _ => name_of(key).or_else(|| {
                        exits
                            .keys()
                            .find(|k| k.0 == key.pid && k.3 == key.addr)
                            .map(|k| format!("exit of thread {}", k.2))
                    }),
                };
                ObjectView {
                    pid: key.pid,
                    kind: key.primitive,
                    addr: key.addr,
                    name,
                    threads: t.threads,
                    counts: t.counts,
                    wait: t.wait.summary(),
                    hold: t.hold.summary(),
                    mutex: meta.mutex,
                    thread_tid: meta.tid,
                    barrier: (key.primitive == Primitive::Barrier)
                        .then(|| barrier_view(&meta.barrier_calls, meta.serial)),
                }
            })
            .collect();
        objects.sort_by(|a, b| {
            (
                b.counts.contended_wait_ns,
                b.wait.total_ns,
                b.counts.acquisitions,
            )
                .cmp(&(
                    a.counts.contended_wait_ns,
                    a.wait.total_ns,
                    a.counts.acquisitions,
                ))
                .then((a.pid, a.addr).cmp(&(b.pid, b.addr)))
        });

        Snapshot {
            window,
            threads,
            objects,
            edges,
            waits_for,
            call_sites,
            model: ModelCounters {
                waits_without_waker: graph.counters().waits_without_waker
                    - exits.values().map(Dist::count).sum::<u64>(),
                ..graph.counters()
            },
            tasks: None,
            ambient: None,
            counters: None,
        }
    }
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
    let mut budget = super::HistogramBudget::new(64);
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

fn barrier_view(calls: &[barrier::Arrival], serial: u64) -> BarrierView {
    let rounds = barrier::rounds(calls);
    let mut spread = Dist::default();
    let mut budget = super::HistogramBudget::new(1);
    let mut last: HashMap<u32, u64> = HashMap::new();
    for r in &rounds {
        spread.record(r.spread_ns, &mut budget);
        *last.entry(r.last_tid).or_default() += 1;
    }
    let mut last_arrivals: Vec<(u32, u64)> = last.into_iter().collect();
    last_arrivals.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let skip = rounds.len().saturating_sub(MAX_ROUNDS_LISTED);
    BarrierView {
        rounds: rounds.len() as u64,
        spread: spread.summary(),
        last_arrivals,
        serial_returns: serial,
        round_list: rounds.into_iter().skip(skip).collect(),
    }
}
