//! What the published summary carries of MPI, for the agent's series and the live view:
//! each traced rank's figures, and the traffic between ranks.

use serde::Serialize;

use super::view::{RankGraphView, SentTo, TrafficEdge};

/// A traced process's MPI figures (when its MPI library is probed).
#[derive(Debug, Clone, Serialize, Default, PartialEq, Eq)]
pub struct RankSummary {
    /// Its rank in MPI_COMM_WORLD, when known (as `merge` names it: from the library,
    /// else the launcher's environment).
    pub rank: Option<i32>,
    /// Its job, when the launcher's environment says (as `merge` checks it).
    pub job: Option<String>,
    /// MPI calls.
    pub calls: u64,
    /// Time inside them, ns.
    pub time_ns: u64,
    /// Point-to-point messages it sent, and their bytes (the sums of `sent_to`).
    pub messages_sent: u64,
    /// Bytes of those.
    pub bytes_sent: u64,
    /// Messages it received, and their bytes.
    pub messages_received: u64,
    /// Bytes of those.
    pub bytes_received: u64,
    /// What it sent, by destination world rank (the unknown last).
    pub sent_to: Vec<SentTo>,
}

/// Each rank's figures, by process: what it sent (its own side, whatever other process
/// has its world rank) and what its world rank received.
pub(crate) fn ranks(view: &RankGraphView) -> impl Iterator<Item = (u32, RankSummary)> + '_ {
    view.ranks.iter().map(|r| {
        let mut m = RankSummary {
            rank: r.rank,
            job: r.job.clone(),
            calls: r.calls,
            time_ns: r.time_in_mpi_ns,
            sent_to: r.sent_to.clone(),
            ..RankSummary::default()
        };
        for s in &r.sent_to {
            m.messages_sent = m.messages_sent.saturating_add(s.messages);
            m.bytes_sent = m.bytes_sent.saturating_add(s.bytes);
        }
        if r.rank.is_some() {
            for e in &view.edges {
                if let (true, Some(s)) = (e.dst == r.rank, &e.received) {
                    m.messages_received = m.messages_received.saturating_add(s.messages);
                    m.bytes_received = m.bytes_received.saturating_add(s.bytes);
                }
            }
        }
        (r.pid, m)
    })
}

/// The traffic between ranks, most bytes first (at most `top` edges), and the MPI
/// calls of all ranks.
pub(crate) fn traffic(view: &RankGraphView, top: usize) -> (Vec<TrafficEdge>, u64) {
    (
        view.edges.iter().take(top).cloned().collect(),
        view.ranks.iter().map(|r| r.calls).sum(),
    )
}
