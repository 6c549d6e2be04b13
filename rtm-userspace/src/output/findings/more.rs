//! Findings from outside the sync graph: an MPI collective that waits for one rank, and
//! CPUs so busy that waits include queueing for a CPU.

use super::{Confidence, Finding, LAGGARD_SHARE, pct};
use crate::format::ns;
use crate::model::{Snapshot, system::thresholds::TroubleKind};

/// A collective waits for a laggard when one rank arrived last in at least
/// [`LAGGARD_SHARE`] of three or more instances.
pub(super) fn laggard_ranks(snap: &Snapshot) -> Vec<Finding> {
    let Some(tasks) = crate::analyses::mpi::of(&snap.sections) else {
        return Vec::new();
    };
    tasks
        .collectives
        .iter()
        .filter_map(|c| {
            let (rank, last) = c.most_often_last?;
            let rank = rank?;
            if c.instances < 3 || (last as f64) < LAGGARD_SHARE * c.instances as f64 {
                return None;
            }
            Some(Finding {
                kind: "laggard".into(),
                title: format!(
                    "MPI_{:?} on communicator {} waits for rank {rank}: it arrived last in \
                     {last} of {} instances",
                    c.function, c.comm_id, c.instances
                ),
                evidence: vec![format!(
                    "the first arrival waited {} on average for the last, {} at most; {} in \
                     the collective over {} ranks",
                    ns(c.mean_spread_ns),
                    ns(c.max_spread_ns),
                    ns(c.time_ns),
                    c.ranks
                )],
                location: None,
                confidence: Confidence::High,
                not_seen: Some(format!(
                    "why rank {rank} is late (more work, a slower node, its own waits): its \
                     own trace or a profile of it says"
                )),
                share: last as f64 / c.instances as f64 * 0.5,
                what_if: None,
            })
        })
        .collect()
}

/// The CPUs were saturated (or the run queue longer than the CPUs) in some intervals.
pub(super) fn saturated_cpus(snap: &Snapshot) -> Option<Finding> {
    let a = snap.ambient.as_ref()?;
    let t = a
        .troubles
        .iter()
        .filter(|t| matches!(t.kind, TroubleKind::CpuSaturated | TroubleKind::RunQueue))
        .max_by_key(|t| t.intervals)?;
    let of = a.summary.intervals.max(t.intervals);
    // The traced processes' own share of the machine's CPU time.
    let cpus = a
        .intervals
        .first()
        .map_or(1, |i| i.per_cpu_busy.len().max(1));
    let own: f64 = a
        .processes
        .iter()
        .map(|p| (p.usage.user_pct + p.usage.system_pct) / 100.0)
        .sum::<f64>()
        / cpus as f64;
    let busy = a.summary.cpu_busy_pct.mean / 100.0;
    let whose = if own >= 0.5 * busy {
        "mostly by the traced program itself"
    } else {
        "mostly by other processes"
    };
    Some(Finding {
        kind: "cpu".into(),
        title: format!(
            "the CPUs were busy, {whose}: {} in {} of {} intervals: waits include time \
             queueing for a CPU, and a wake reaches its waiter late",
            t.kind.describe(),
            t.intervals,
            of
        ),
        evidence: vec![format!(
            "CPU busy {} on average, {} of it the traced processes' ({} CPUs), run queue \
             {:.1} on average (system statistics)",
            pct(busy),
            pct((own / busy.max(1e-9)).min(1.0)),
            cpus,
            a.summary.procs_running.mean
        )],
        location: None,
        confidence: Confidence::Medium,
        not_seen: Some(
            "which processes took the CPUs: the system statistics section lists the traced \
             ones; top or a system-wide profile says the rest"
                .into(),
        ),
        share: t.intervals as f64 / of.max(1) as f64 * 0.25,
        what_if: None,
    })
}
