//! Per-pair MPI traffic: each rank's top N destinations (most bytes sent, sticky like
//! the top locks), the rest summed into `dst="(other)"` with the messages whose
//! destination's world rank is unknown, so a rank's series sum to what it sent.
//!
//! Counted on the sending side only, by the process that sent: each (job, source,
//! destination) is exported by the one agent that traces the source, and
//! `sum by (src, dst)` over every node's agent is the job's communication matrix.

use std::collections::{BTreeMap, HashMap};

use super::{ProcKey, ProcessSummary, TopN, Values};
use crate::analyses::mpi::RankSummary;

/// The `mpi_job` label of a rank whose launcher's environment names no job.
pub(super) const UNKNOWN_JOB: &str = "(unknown)";

/// A rank's `mpi_job` label.
pub(super) fn job_label(r: &RankSummary) -> String {
    r.job.clone().unwrap_or_else(|| UNKNOWN_JOB.to_owned())
}

/// A rank's world rank as a label (`rank`, `src`): a rank not known (no MPI call with
/// its communicator seen, no launcher variable) is named by its pid.
pub(super) fn rank_label(r: &RankSummary, pid: u32) -> String {
    r.rank
        .map_or_else(|| format!("pid {pid}"), |r| r.to_string())
}

/// Messages and bytes as the top-N's values: it ranks by the last (bytes), then the
/// one before (messages).
fn values(messages: u64, bytes: u64) -> Values {
    [0, 0, messages, bytes]
}

/// What a shown destination's values are: (messages, bytes).
pub(super) fn traffic(v: &Values) -> (u64, u64) {
    (v[2], v[3])
}

/// One rank's top destinations.
#[derive(Debug, Default)]
struct Rank {
    top: TopN<i32>,
    shown: (Vec<(i32, Values)>, Values),
}

/// The top destinations of a target's ranks, by process.
#[derive(Debug, Default)]
pub(super) struct Pairs {
    ranks: HashMap<ProcKey, Rank>,
}

impl Pairs {
    /// Takes the target's processes' latest summaries; a process no longer there is
    /// forgotten (its series go with its per-rank ones).
    pub fn update(&mut self, procs: &HashMap<ProcKey, ProcessSummary>, n: usize, sticky: u64) {
        self.ranks.retain(|k, _| procs.contains_key(k));
        for (key, p) in procs {
            let Some(r) = &p.mpi else {
                continue;
            };
            let mut groups: HashMap<i32, Values> = HashMap::new();
            let (mut messages, mut bytes) = (0u64, 0u64);
            for s in &r.sent_to {
                messages = messages.saturating_add(s.messages);
                bytes = bytes.saturating_add(s.bytes);
                if let Some(d) = s.dst {
                    groups.insert(d, values(s.messages, s.bytes));
                }
            }
            let rank = self.ranks.entry(*key).or_default();
            rank.shown = rank.top.update(&groups, values(messages, bytes), n, sticky);
        }
    }

    /// A process's shown destinations and the rest.
    pub fn shown(&self, key: &ProcKey) -> Option<&(Vec<(i32, Values)>, Values)> {
        self.ranks.get(key).map(|r| &r.shown)
    }
}

/// The rows of a target's pair series: (job, source, destination) -> (messages,
/// bytes). Ranks that land on the same labels (a job's rank run twice within the grace,
/// ranks of unknown job) are summed, so a scrape never holds one series twice.
pub(super) type PairRows = BTreeMap<(String, String, String), (u64, u64)>;

/// Adds one process's shown destinations to `rows`.
pub(super) fn add_rows(rows: &mut PairRows, pairs: &Pairs, key: &ProcKey, r: &RankSummary) {
    let Some((members, other)) = pairs.shown(key) else {
        return;
    };
    let job = job_label(r);
    let src = rank_label(r, key.0);
    let dsts = members
        .iter()
        .map(|(d, v)| (d.to_string(), traffic(v)))
        .chain(std::iter::once((
            crate::model::views::fold::OTHER.to_owned(),
            traffic(other),
        )));
    for (dst, (m, b)) in dsts {
        let e = rows.entry((job.clone(), src.clone(), dst)).or_default();
        e.0 = e.0.saturating_add(m);
        e.1 = e.1.saturating_add(b);
    }
}

#[cfg(test)]
mod tests;
