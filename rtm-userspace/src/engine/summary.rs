//! The engine's published state: an owned, bounded summary made on every tick from a
//! snapshot and sent through a `tokio::sync::watch` channel, so that readers outside
//! the loop (a metrics endpoint, a terminal view) never touch the model. Its size does
//! not grow with the trace: the top rows of each view, totals, losses, the latest
//! system interval.

use serde::Serialize;

use super::{processes::ProcessSummary, source::KernelState};
use crate::{
    analyses::{
        mpi::{RankGraphView, TrafficEdge},
        system::interval::Interval,
    },
    config::Mode,
    model::{Snapshot, ThreadView, WaitsForView, sync::ModelCounters},
    output::{RunInfo, TargetInfo},
    readers::{Losses, ReaderStats, bpf_stats::BpfStats},
};

/// Most targets listed (the rest are counted).
const MAX_TARGETS: usize = 256;

/// One object among the most waited on.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ObjectSummary {
    /// Process id.
    pub pid: u32,
    /// Kind of object ("mutex", "condvar", "futex" ...).
    pub kind: String,
    /// Address in the process.
    pub addr: u64,
    /// Symbol name when it is a global or static variable.
    pub name: Option<String>,
    /// Threads that used it.
    pub threads: usize,
    /// Acquisitions.
    pub acquisitions: u64,
    /// Acquisitions that found it held.
    pub contended: u64,
    /// Time waited for it, ns.
    pub wait_ns: u64,
    /// Longest wait, ns.
    pub wait_max_ns: Option<u64>,
    /// 99th percentile wait, ns.
    pub wait_p99_ns: Option<u64>,
    /// Time it was held, ns (full mode).
    pub hold_ns: u64,
}

/// The summary of a trace so far. Bounded: at most `top` rows per list.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Summary {
    /// Ticks published so far (0: nothing traced yet).
    pub seq: u64,
    /// Time traced, ns.
    pub elapsed_ns: u64,
    /// What was traced.
    pub mode: Mode,
    /// The traced processes (at most 256).
    pub targets: Vec<TargetInfo>,
    /// Targets beyond those listed.
    pub more_targets: usize,
    /// Processes followed (forked by targets) and traced now.
    pub followed: usize,
    /// Threads seen.
    pub threads: usize,
    /// What the model counted (events applied, drops over limits, waits without waker).
    pub model: ModelCounters,
    /// Records the kernel side lost.
    pub losses: Losses,
    /// What the reader decoded.
    pub reader: ReaderStats,
    /// Objects, most time waited first.
    pub objects: Vec<ObjectSummary>,
    /// Threads, most time waiting first.
    pub top_threads: Vec<ThreadView>,
    /// Waiter -> waker edges, most time first.
    pub waits_for: Vec<WaitsForView>,
    /// MPI traffic between ranks, most bytes first.
    pub traffic: Vec<TrafficEdge>,
    /// MPI calls in all ranks.
    pub mpi_calls: u64,
    /// The last closed interval of the system statistics.
    pub system: Option<Interval>,
    /// Each traced process (when the engine publishes them).
    pub processes: Vec<ProcessSummary>,
    /// The kernel side now (when the engine publishes processes).
    pub kernel: KernelState,
    /// The eBPF programs' and maps' statistics (with `bpf_stats`).
    pub bpf: Option<BpfStats>,
    /// What limits the traced work so far: the first finding's sentence (the live
    /// view's header; not made for a metrics agent, which shows none).
    pub finding: Option<String>,
}

impl Summary {
    /// The summary of `snap` (`mpi`: its rank graph, read back from its section) with at
    /// most `top` rows per list.
    pub fn build(
        seq: u64,
        run: &RunInfo,
        snap: &Snapshot,
        mpi: Option<&RankGraphView>,
        followed: usize,
        system: Option<Interval>,
        top: usize,
    ) -> Self {
        let objects = snap
            .objects
            .iter()
            .take(top)
            .map(|o| ObjectSummary {
                pid: o.pid,
                kind: o.kind.to_string(),
                addr: o.addr,
                name: o.name.clone(),
                threads: o.threads,
                acquisitions: o.counts.acquisitions,
                contended: o.counts.contended,
                wait_ns: o.wait.total_ns,
                wait_max_ns: o.wait.max_ns,
                wait_p99_ns: o.wait.p99_ns,
                hold_ns: o.hold.total_ns,
            })
            .collect();
        let (traffic, mpi_calls) = mpi.map_or((Vec::new(), 0), |t| {
            crate::analyses::mpi::series::traffic(t, top)
        });
        Self {
            seq,
            elapsed_ns: snap.window.end_ns.saturating_sub(snap.window.start_ns),
            mode: run.mode,
            targets: run.targets.iter().take(MAX_TARGETS).cloned().collect(),
            more_targets: run.targets.len().saturating_sub(MAX_TARGETS),
            followed,
            threads: snap.threads.len(),
            model: snap.model,
            losses: run.losses,
            reader: run.reader,
            objects,
            top_threads: snap.threads.iter().take(top).cloned().collect(),
            waits_for: snap.waits_for.iter().take(top).collect(),
            traffic,
            mpi_calls,
            system,
            processes: Vec::new(),
            kernel: KernelState::default(),
            bpf: None,
            finding: None,
        }
    }
}
