//! The rank graph's view for the outputs: ranks named by world rank, one edge per
//! (source rank, destination rank) with what each side saw, collectives with their
//! arrival spread.

use std::collections::{BTreeMap, HashMap};

use rtm_common::{MpiOp, RANK_UNKNOWN};
use serde::{Deserialize, Serialize};

use crate::proc::process::RankEnv;

use super::graph::{Arrival, Peer, RankGraph, RankGraphCounters, SIZE_BUCKETS, Traffic};

/// What one rank's process sent to one destination: its own side of an edge.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SentTo {
    /// The destination's world rank (None: not known, or not translated).
    pub dst: Option<i32>,
    /// Messages.
    pub messages: u64,
    /// Bytes (over messages of known size).
    pub bytes: u64,
}

/// One function's totals in one rank.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FunctionView {
    /// MPI function.
    pub function: MpiOp,
    /// Calls.
    pub calls: u64,
    /// Time inside (ns).
    pub time_ns: u64,
    /// Error returns.
    pub errors: u64,
}

/// A rank.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct RankView {
    /// World rank (null when neither the library nor the environment told).
    pub rank: Option<i32>,
    /// Process id.
    pub pid: u32,
    /// Host name.
    pub host: String,
    /// Job id.
    pub job: Option<String>,
    /// World size from the environment.
    pub world_size: Option<i32>,
    /// "open_mpi" or "mpich".
    pub implementation: Option<rtm_common::MpiImpl>,
    /// MPI calls.
    pub calls: u64,
    /// Time inside MPI (ns).
    pub time_in_mpi_ns: u64,
    /// From MPI_Init's return (or the first call) to MPI_Finalize (or the last return).
    pub span_ns: u64,
    /// time_in_mpi / span.
    pub mpi_share: f64,
    /// Calls per second over the span.
    pub calls_per_sec: f64,
    /// Per function, most time first.
    pub functions: Vec<FunctionView>,
    /// What this process sent, by destination (by world rank; the unknown last). Kept
    /// per process, so that two jobs traced by one engine (whose world ranks collide
    /// in the edges) stay apart. In the document's section, where the published
    /// summary and the agent's series read it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sent_to: Vec<SentTo>,
}

/// One side's view of the traffic on an edge.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct TrafficView {
    /// Messages.
    pub messages: u64,
    /// Bytes (over messages of known size).
    pub bytes: u64,
    /// Messages of unknown size.
    pub unknown_size: u64,
    /// Time in the calls (ns).
    pub time_ns: u64,
    /// bytes / time, MB/s (10^6 bytes); null when no time was spent.
    pub bandwidth_mb_s: Option<f64>,
    /// Message sizes: [lowest size in the bucket, messages], non-empty buckets only.
    pub sizes: Vec<(u64, u64)>,
}

impl From<&Traffic> for TrafficView {
    fn from(t: &Traffic) -> Self {
        let sizes = (0..SIZE_BUCKETS)
            .filter(|&i| t.sizes[i] > 0)
            .map(|i| (if i == 0 { 0 } else { 1u64 << (i - 1) }, t.sizes[i]))
            .collect();
        TrafficView {
            messages: t.messages,
            bytes: t.bytes,
            unknown_size: t.unknown_size,
            time_ns: t.time_ns,
            bandwidth_mb_s: (t.time_ns > 0).then(|| t.bytes as f64 * 1e3 / t.time_ns as f64),
            sizes,
        }
    }
}

/// Traffic from one rank to another.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct TrafficEdge {
    /// Sending world rank (null: unknown).
    pub src: Option<i32>,
    /// Receiving world rank (null: unknown).
    pub dst: Option<i32>,
    /// As the sender saw it (null when the sender was not traced).
    pub sent: Option<TrafficView>,
    /// As the receiver saw it.
    pub received: Option<TrafficView>,
}

/// A collective on a communicator.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CollectiveView {
    /// Communicator context id (0: MPI_COMM_WORLD in Open MPI).
    pub comm_id: u32,
    /// The function.
    pub function: MpiOp,
    /// Ranks that called it.
    pub ranks: usize,
    /// Calls over all ranks.
    pub calls: u64,
    /// Bytes contributed over all ranks.
    pub bytes: u64,
    /// Time inside over all ranks (ns).
    pub time_ns: u64,
    /// Root (rooted collectives).
    pub root: Option<i32>,
    /// Instances every calling rank arrived at.
    pub instances: usize,
    /// Mean and largest spread between the first and the last arrival (ns).
    pub mean_spread_ns: u64,
    /// Largest spread.
    pub max_spread_ns: u64,
    /// The rank that arrived last most often, and how often.
    pub most_often_last: Option<(Option<i32>, usize)>,
}

/// The rank graph view.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct RankGraphView {
    /// Ranks by world rank.
    pub ranks: Vec<RankView>,
    /// Edges, most bytes first.
    pub edges: Vec<TrafficEdge>,
    /// Collectives, most time first.
    pub collectives: Vec<CollectiveView>,
    /// Requests posted and not completed at the end.
    pub open_requests: usize,
    /// What could not be attributed.
    pub counters: RankGraphCounters,
}

fn rank_opt(r: i32) -> Option<i32> {
    (r != RANK_UNKNOWN && r >= 0).then_some(r)
}

impl RankGraphView {
    /// Builds the view; `env` is what each process's environment said, `host` this node.
    pub fn build(g: &RankGraph, env: &HashMap<u32, RankEnv>, host: &str) -> Self {
        let rank_of = |pid: u32| -> Option<i32> {
            g.ranks()
                .find(|(p, _)| **p == pid)
                .and_then(|(_, r)| r.world_rank)
                .or_else(|| env.get(&pid).and_then(|e| e.rank))
        };
        let mut ranks: Vec<RankView> = g
            .ranks()
            .map(|(&pid, r)| {
                let e = env.get(&pid).cloned().unwrap_or_default();
                let start = r.init_ns.unwrap_or(r.first_ns);
                let end = r.finalize_ns.unwrap_or(r.last_ns);
                let span = end.saturating_sub(start).max(1);
                let inside = r.time_in_mpi();
                let mut functions: Vec<FunctionView> = r
                    .calls
                    .iter()
                    .map(|(&function, c)| FunctionView {
                        function,
                        calls: c.calls,
                        time_ns: c.time_ns,
                        errors: c.errors,
                    })
                    .collect();
                functions
                    .sort_by(|a, b| b.time_ns.cmp(&a.time_ns).then(a.function.cmp(&b.function)));
                RankView {
                    rank: r.world_rank.or(e.rank),
                    pid,
                    host: host.to_owned(),
                    job: e.job,
                    world_size: e.size,
                    implementation: r.implementation,
                    calls: r.total_calls(),
                    time_in_mpi_ns: inside,
                    span_ns: span,
                    mpi_share: (inside as f64 / span as f64).min(1.0),
                    calls_per_sec: r.total_calls() as f64 * 1e9 / span as f64,
                    functions,
                    sent_to: Vec::new(),
                }
            })
            .collect();
        ranks.sort_by_key(|r| (r.rank.unwrap_or(i32::MAX), r.pid));

        let world_size = env.values().filter_map(|e| e.size).max();
        let members = g.comm_members(&rank_of, world_size);
        let mut counters = g.counters();
        // Peers in communicators the model followed become world ranks now that every
        // member's creation is in; the rest are counted as untranslated.
        let mut resolve = |p: Peer, t: &Traffic| match p {
            Peer::World(w) => rank_opt(w),
            Peer::InComm(c, r) => {
                let w = members.get(&c).and_then(|m| m.get(r as usize)).copied();
                if w.is_none() {
                    counters.untranslated_peer =
                        counters.untranslated_peer.saturating_add(t.messages);
                }
                w
            }
            Peer::Unknown => None,
        };
        let mut edges = EdgeMap::new();
        let mut sent_to: HashMap<u32, BTreeMap<Option<i32>, SentTo>> = HashMap::new();
        for (&(pid, dst), t) in g.sent() {
            let dst = resolve(dst, t);
            let s = sent_to.entry(pid).or_default().entry(dst).or_default();
            s.dst = dst;
            s.messages = s.messages.saturating_add(t.messages);
            s.bytes = s.bytes.saturating_add(t.bytes);
            add_side(&mut edge(&mut edges, rank_of(pid), dst).sent, t.into());
        }
        for r in &mut ranks {
            if let Some(m) = sent_to.remove(&r.pid) {
                // None sorts first in the map: the unknown destination goes last.
                let (unknown, known): (Vec<SentTo>, Vec<SentTo>) =
                    m.into_values().partition(|s| s.dst.is_none());
                r.sent_to = known.into_iter().chain(unknown).collect();
            }
        }
        for (&(pid, src), t) in g.received() {
            let src = resolve(src, t);
            add_side(&mut edge(&mut edges, src, rank_of(pid)).received, t.into());
        }
        let edges = sorted_edges(edges);

        let mut colls: BTreeMap<(u32, MpiOp), CollectiveView> = BTreeMap::new();
        for (&(_, cid, op), c) in g.collectives() {
            let v = colls.entry((cid, op)).or_insert_with(|| CollectiveView {
                comm_id: cid,
                function: op,
                ranks: 0,
                calls: 0,
                bytes: 0,
                time_ns: 0,
                root: None,
                instances: 0,
                mean_spread_ns: 0,
                max_spread_ns: 0,
                most_often_last: None,
            });
            v.ranks += 1;
            v.calls = v.calls.saturating_add(c.calls);
            v.bytes = v.bytes.saturating_add(c.bytes);
            v.time_ns = v.time_ns.saturating_add(c.time_ns);
            v.root = v.root.or(c.root);
        }
        for (&(cid, op), instances) in g.instances() {
            if let Some(v) = colls.get_mut(&(cid, op)) {
                spread(v, instances, &rank_of);
            }
        }
        let mut collectives: Vec<CollectiveView> = colls.into_values().collect();
        collectives.sort_by_key(|c| std::cmp::Reverse(c.time_ns));
        RankGraphView {
            ranks,
            edges,
            collectives,
            open_requests: g.open_requests(),
            counters,
        }
    }
}

pub(super) type EdgeMap = BTreeMap<(Option<i32>, Option<i32>), TrafficEdge>;

/// Adds `v` to one side of an edge (several keys, or several parts of a merged job, can
/// land on the same pair).
pub fn add_side(side: &mut Option<TrafficView>, v: TrafficView) {
    let Some(old) = side.as_mut() else {
        *side = Some(v);
        return;
    };
    old.messages = old.messages.saturating_add(v.messages);
    old.bytes = old.bytes.saturating_add(v.bytes);
    old.unknown_size = old.unknown_size.saturating_add(v.unknown_size);
    old.time_ns = old.time_ns.saturating_add(v.time_ns);
    old.bandwidth_mb_s = (old.time_ns > 0).then(|| old.bytes as f64 * 1e3 / old.time_ns as f64);
    // Merged in a map: a part read from a file may list any number of buckets.
    let mut sizes: std::collections::BTreeMap<_, u64> = std::mem::take(&mut old.sizes)
        .into_iter()
        .fold(Default::default(), |mut m, (lo, n)| {
            let e = m.entry(lo).or_default();
            *e = e.saturating_add(n);
            m
        });
    for (lo, n) in v.sizes {
        let e = sizes.entry(lo).or_default();
        *e = e.saturating_add(n);
    }
    old.sizes = sizes.into_iter().collect();
}

/// The edges, most bytes first.
pub(super) fn sorted_edges(edges: EdgeMap) -> Vec<TrafficEdge> {
    let mut edges: Vec<TrafficEdge> = edges.into_values().collect();
    let bytes = |e: &TrafficEdge| {
        e.sent
            .as_ref()
            .or(e.received.as_ref())
            .map(|t| t.bytes)
            .unwrap_or(0)
    };
    edges.sort_by_key(|e| std::cmp::Reverse(bytes(e)));
    edges
}

pub(super) fn edge(edges: &mut EdgeMap, src: Option<i32>, dst: Option<i32>) -> &mut TrafficEdge {
    edges.entry((src, dst)).or_insert_with(|| TrafficEdge {
        src,
        dst,
        sent: None,
        received: None,
    })
}

/// Fills the arrival spread over the instances every calling rank reached.
fn spread(
    v: &mut CollectiveView,
    instances: &[Vec<Arrival>],
    rank_of: &dyn Fn(u32) -> Option<i32>,
) {
    let mut total = 0u128;
    let mut n = 0usize;
    let mut last: HashMap<u32, usize> = HashMap::new();
    for inst in instances
        .iter()
        .filter(|i| i.len() == v.ranks && v.ranks > 1)
    {
        let first = inst.iter().map(|a| a.start_ns).min().unwrap_or(0);
        let Some(l) = inst.iter().max_by_key(|a| a.start_ns) else {
            continue;
        };
        let s = l.start_ns.saturating_sub(first);
        total += u128::from(s);
        n += 1;
        v.max_spread_ns = v.max_spread_ns.max(s);
        *last.entry(l.pid).or_default() += 1;
    }
    v.instances = n;
    v.mean_spread_ns = if n > 0 {
        u64::try_from(total / n as u128).unwrap_or(u64::MAX)
    } else {
        0
    };
    v.most_often_last = last
        .into_iter()
        .max_by_key(|&(pid, c)| (c, std::cmp::Reverse(pid)))
        .map(|(pid, c)| (rank_of(pid), c));
}
