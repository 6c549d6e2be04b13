//! Joins the rank graphs several nodes wrote for one MPI job into one cluster-wide graph.
//! Pure: fed the parts' views, no I/O.
//!
//! Each node sees its own ranks' sides of every message: the sender's side where the
//! sender ran, the receiver's where the receiver ran. Merging puts both sides of each
//! (source, destination) pair together. Parts must come from the same job and format
//! version and must not trace the same rank twice; anything else is refused, since a
//! sum over mismatched parts would look right and be wrong. Collective arrival spreads
//! stay per node: clocks of different nodes are not comparable.

use std::collections::{BTreeMap, BTreeSet};

use rtm_common::MpiOp;

use super::{
    RankGraphView,
    graph::RankGraphCounters,
    view::{CollectiveView, EdgeMap, add_side, edge, sorted_edges},
};

/// One node's part.
#[derive(Debug, Clone)]
pub struct Part {
    /// Where it came from (a file name), for messages.
    pub name: String,
    /// Its format version.
    pub version: u32,
    /// Its rank graph.
    pub view: RankGraphView,
}

/// Why parts cannot be merged.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum MergeError {
    /// Fewer than two parts.
    #[error("merge needs at least two parts (the JSON files written with --json on each node)")]
    TooFew,
    /// A part in another format version.
    #[error(
        "{name} is format version {found}, this rtm-trace reads version {supported}: \
         write every part with the same rtm-trace version"
    )]
    Version {
        /// The part.
        name: String,
        /// Its version.
        found: u32,
        /// The version this build writes.
        supported: u32,
    },
    /// Parts of different jobs.
    #[error(
        "{a} is job {job_a} but {b} is job {job_b}: parts of different MPI jobs cannot be \
         merged"
    )]
    Jobs {
        /// One part.
        a: String,
        /// Its job.
        job_a: String,
        /// Another part.
        b: String,
        /// Its job.
        job_b: String,
    },
    /// Parts that disagree on the world size.
    #[error("{a} has {size_a} ranks in its job but {b} has {size_b}: not the same job")]
    WorldSize {
        /// One part.
        a: String,
        /// Its world size.
        size_a: i32,
        /// Another part.
        b: String,
        /// Its world size.
        size_b: i32,
    },
    /// One rank in two parts.
    #[error(
        "rank {rank} is in both {a} and {b}: each rank must be traced on one node only \
         (was a node traced twice, or the same file given twice?)"
    )]
    DuplicateRank {
        /// The rank.
        rank: i32,
        /// One part.
        a: String,
        /// Another.
        b: String,
    },
}

/// Checks the parts belong together and joins them.
pub fn merge(parts: &[Part], supported: u32) -> Result<RankGraphView, MergeError> {
    if parts.len() < 2 {
        return Err(MergeError::TooFew);
    }
    check(parts, supported)?;
    let mut ranks = Vec::new();
    let mut edges = EdgeMap::new();
    let mut colls: BTreeMap<(u32, MpiOp), (CollectiveView, usize)> = BTreeMap::new();
    let mut counters = RankGraphCounters::default();
    let mut open_requests = 0;
    for p in parts {
        let v = &p.view;
        ranks.extend(v.ranks.iter().cloned());
        for e in &v.edges {
            let both = edge(&mut edges, e.src, e.dst);
            if let Some(s) = &e.sent {
                add_side(&mut both.sent, s.clone());
            }
            if let Some(r) = &e.received {
                add_side(&mut both.received, r.clone());
            }
        }
        for c in &v.collectives {
            match colls.get_mut(&(c.comm_id, c.function)) {
                None => {
                    colls.insert((c.comm_id, c.function), (c.clone(), 1));
                }
                Some((m, nodes)) => {
                    *nodes += 1;
                    let weighted = (m.mean_spread_ns as u128 * m.instances as u128)
                        .saturating_add(c.mean_spread_ns as u128 * c.instances as u128);
                    let n = (m.instances as u128 + c.instances as u128).max(1);
                    m.ranks = m.ranks.saturating_add(c.ranks);
                    m.calls = m.calls.saturating_add(c.calls);
                    m.bytes = m.bytes.saturating_add(c.bytes);
                    m.time_ns = m.time_ns.saturating_add(c.time_ns);
                    m.root = m.root.or(c.root);
                    m.instances = m.instances.max(c.instances);
                    m.mean_spread_ns = u64::try_from(weighted / n).unwrap_or(u64::MAX);
                    m.max_spread_ns = m.max_spread_ns.max(c.max_spread_ns);
                    // Who arrived last across nodes cannot be told from per-node clocks.
                    m.most_often_last = None;
                }
            }
        }
        add_counters(&mut counters, &v.counters);
        open_requests = usize::saturating_add(open_requests, v.open_requests);
    }
    ranks.sort_by_key(|r| (r.rank.unwrap_or(i32::MAX), r.host.clone(), r.pid));
    let mut collectives: Vec<CollectiveView> = colls.into_values().map(|(c, _)| c).collect();
    collectives.sort_by_key(|c| std::cmp::Reverse(c.time_ns));
    Ok(RankGraphView {
        ranks,
        edges: sorted_edges(edges),
        collectives,
        open_requests,
        counters,
    })
}

fn check(parts: &[Part], supported: u32) -> Result<(), MergeError> {
    if let Some(p) = parts.iter().find(|p| p.version != supported) {
        return Err(MergeError::Version {
            name: p.name.clone(),
            found: p.version,
            supported,
        });
    }
    let mut job: Option<(&str, &str)> = None;
    let mut size: Option<(&str, i32)> = None;
    let mut owner: BTreeMap<i32, &str> = BTreeMap::new();
    for p in parts {
        let mut here = BTreeSet::new();
        for r in &p.view.ranks {
            if let Some(j) = r.job.as_deref() {
                match job {
                    Some((a, ja)) if ja != j => {
                        return Err(MergeError::Jobs {
                            a: a.to_owned(),
                            job_a: ja.to_owned(),
                            b: p.name.clone(),
                            job_b: j.to_owned(),
                        });
                    }
                    Some(_) => {}
                    None => job = Some((&p.name, j)),
                }
            }
            if let Some(n) = r.world_size {
                match size {
                    Some((a, na)) if na != n => {
                        return Err(MergeError::WorldSize {
                            a: a.to_owned(),
                            size_a: na,
                            b: p.name.clone(),
                            size_b: n,
                        });
                    }
                    Some(_) => {}
                    None => size = Some((&p.name, n)),
                }
            }
            if let Some(rank) = r.rank {
                here.insert(rank);
            }
        }
        for rank in here {
            if let Some(a) = owner.insert(rank, &p.name) {
                return Err(MergeError::DuplicateRank {
                    rank,
                    a: a.to_owned(),
                    b: p.name.clone(),
                });
            }
        }
    }
    Ok(())
}

fn add_counters(a: &mut RankGraphCounters, b: &RankGraphCounters) {
    a.unknown_source = a.unknown_source.saturating_add(b.unknown_source);
    a.untranslated_peer = a.untranslated_peer.saturating_add(b.untranslated_peer);
    a.untracked_comms = a.untracked_comms.saturating_add(b.untracked_comms);
    a.proc_null = a.proc_null.saturating_add(b.proc_null);
    a.unmatched_completions = a
        .unmatched_completions
        .saturating_add(b.unmatched_completions);
    a.truncated_requests = a.truncated_requests.saturating_add(b.truncated_requests);
    a.dropped_over_limits = a.dropped_over_limits.saturating_add(b.dropped_over_limits);
}

#[cfg(test)]
mod tests;
