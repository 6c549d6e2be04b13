//! Findings from outside the sync graph: an MPI collective that waits for one rank, and
//! CPUs so busy that waits include queueing for a CPU (busy with other processes' work,
//! they make the what-if estimates wrong, and none is made).

use super::{Confidence, Finding, LAGGARD_SHARE, pct};
use crate::format::ns;
use crate::{analyses::system::thresholds::TroubleKind, model::Snapshot};

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
                what_if_withheld: None,
            })
        })
        .collect()
}

/// Intervals in which other processes saturated the CPUs, as a share of all of them,
/// from which the what-if estimates are withheld.
const WITHHOLD_SHARE: f64 = 0.25;

/// The CPUs were saturated (or the run queue longer than the CPUs) in some intervals:
/// by whom, and for how long.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct BusyCpus {
    /// The kind of trouble flagged in the most intervals.
    pub kind: TroubleKind,
    /// Intervals it was flagged in.
    pub intervals: u64,
    /// Intervals in all.
    pub of: u64,
    /// CPUs.
    pub cpus: usize,
    /// The machine's mean busy share, 0 to 1.
    pub busy: f64,
    /// The traced processes' mean share of the machine's CPU time, 0 to 1.
    pub own: f64,
    /// The mean run queue.
    pub run_queue: f64,
}

impl BusyCpus {
    /// What the system statistics say, when they flagged busy CPUs.
    pub(super) fn of(snap: &Snapshot) -> Option<Self> {
        let a = &crate::analyses::system::of(&snap.sections)?;
        let t = a
            .troubles
            .iter()
            .filter(|t| matches!(t.kind, TroubleKind::CpuSaturated | TroubleKind::RunQueue))
            .max_by_key(|t| t.intervals)?;
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
        Some(Self {
            kind: t.kind,
            intervals: t.intervals,
            of: a.summary.intervals.max(t.intervals),
            cpus,
            busy: a.summary.cpu_busy_pct.mean / 100.0,
            own,
            run_queue: a.summary.procs_running.mean,
        })
    }

    /// Whether other processes, not the traced ones, took most of the busy CPU time.
    pub(super) fn by_others(&self) -> bool {
        self.own < 0.5 * self.busy
    }

    /// Why no what-if estimate is made, when other processes kept the CPUs saturated in
    /// at least [`WITHHOLD_SHARE`] of the intervals: the threads' time outside the lock
    /// was then largely queueing for a CPU, which shorter holds (less CPU work) shorten
    /// too, and the model holds it fixed.
    pub(super) fn withholds_what_ifs(&self) -> Option<String> {
        (self.by_others() && self.intervals as f64 >= WITHHOLD_SHARE * self.of.max(1) as f64).then(
            || {
                format!(
                    "not estimated: other processes kept the CPUs busy ({} of the busy time \
                     theirs, in {} of {} intervals), so the time outside the lock was largely \
                     queueing for a CPU, which the model holds fixed; trace the program with \
                     the CPUs to itself for an estimate",
                    pct((1.0 - self.own / self.busy.max(1e-9)).clamp(0.0, 1.0)),
                    self.intervals,
                    self.of
                )
            },
        )
    }

    /// The finding.
    pub(super) fn finding(&self) -> Finding {
        let whose = if self.by_others() {
            "mostly by other processes"
        } else {
            "mostly by the traced program itself"
        };
        Finding {
            kind: "cpu".into(),
            title: format!(
                "the CPUs were busy, {whose}: {} in {} of {} intervals: waits include time \
                 queueing for a CPU, and a wake reaches its waiter late",
                self.kind.describe(),
                self.intervals,
                self.of
            ),
            evidence: vec![format!(
                "CPU busy {} on average, {} of it the traced processes' ({} CPUs), run queue \
                 {:.1} on average (system statistics)",
                pct(self.busy),
                pct((self.own / self.busy.max(1e-9)).min(1.0)),
                self.cpus,
                self.run_queue
            )],
            location: None,
            confidence: Confidence::Medium,
            not_seen: Some(
                "which processes took the CPUs: the system statistics section lists the \
                 traced ones; top or a system-wide profile says the rest"
                    .into(),
            ),
            share: self.intervals as f64 / self.of.max(1) as f64 * 0.25,
            what_if: None,
            what_if_withheld: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn busy(own: f64, intervals: u64, of: u64) -> BusyCpus {
        BusyCpus {
            kind: TroubleKind::RunQueue,
            intervals,
            of,
            cpus: 2,
            busy: 1.0,
            own,
            run_queue: 7.0,
        }
    }

    #[test]
    fn a_hog_beside_the_program_withholds_the_estimates() {
        // The lock-bound what-if program under `stress-ng --cpu 4` on 2 CPUs: 27% of the
        // machine its own, the run queue 7 in its one interval.
        let b = busy(0.27, 1, 1);
        assert!(b.by_others());
        let why = b.withholds_what_ifs().expect("withheld");
        assert!(
            why.contains("73.0% of the busy time theirs, in 1 of 1"),
            "{why}"
        );
        assert!(b.finding().title.contains("mostly by other processes"));
    }

    #[test]
    fn a_program_that_saturates_the_cpus_itself_keeps_them() {
        let b = busy(0.95, 3, 3);
        assert!(!b.by_others());
        assert_eq!(b.withholds_what_ifs(), None);
        assert!(b.finding().title.contains("by the traced program itself"));
    }

    #[test]
    fn a_short_burst_of_other_work_keeps_them() {
        assert_eq!(busy(0.2, 1, 10).withholds_what_ifs(), None);
        assert!(busy(0.2, 3, 10).withholds_what_ifs().is_some());
    }
}
