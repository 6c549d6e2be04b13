//! Barrier rounds from individual pthread_barrier_wait calls.
//!
//! Each call is known by its thread, its arrival (entry) and its departure (return).
//! A round's arrivals all precede its release, and a thread's next arrival follows its
//! own departure, which is no earlier than the round's first departure. So, sorting calls
//! by departure, a call belongs to the current round while it arrived no later than the
//! round's first departure and its thread is not in the round yet; otherwise it opens
//! the next round. This needs no knowledge of the barrier's count.

use serde::{Deserialize, Serialize};

/// One pthread_barrier_wait call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Arrival {
    /// The thread.
    pub tid: u32,
    /// When it entered pthread_barrier_wait (CLOCK_MONOTONIC ns).
    pub arrive_ns: u64,
    /// When it returned.
    pub depart_ns: u64,
}

/// One round of a barrier.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Round {
    /// First arrival (CLOCK_MONOTONIC ns).
    pub first_arrival_ns: u64,
    /// Last arrival minus first arrival: the load imbalance of the round.
    pub spread_ns: u64,
    /// The thread that arrived last (everyone else waited for it).
    pub last_tid: u32,
    /// The thread that arrived first.
    pub first_tid: u32,
    /// Threads in the round.
    pub threads: u32,
    /// Each thread's wait in this round: (tid, ns).
    pub waits: Vec<(u32, u64)>,
}

/// Splits a barrier's calls into rounds, in time order.
pub fn rounds(calls: &[Arrival]) -> Vec<Round> {
    let mut sorted = calls.to_vec();
    sorted.sort_by_key(|a| (a.depart_ns, a.arrive_ns, a.tid));
    let mut out = Vec::new();
    let mut current: Vec<Arrival> = Vec::new();
    for a in sorted {
        let fits = current
            .first()
            .is_some_and(|f| a.arrive_ns <= f.depart_ns && !current.iter().any(|c| c.tid == a.tid));
        if !fits && !current.is_empty() {
            out.push(close(&current));
            current.clear();
        }
        current.push(a);
    }
    if !current.is_empty() {
        out.push(close(&current));
    }
    out.sort_by_key(|r| r.first_arrival_ns);
    out
}

fn close(calls: &[Arrival]) -> Round {
    let first = calls
        .iter()
        .min_by_key(|a| (a.arrive_ns, a.tid))
        .expect("non-empty");
    let last = calls
        .iter()
        .max_by_key(|a| (a.arrive_ns, a.tid))
        .expect("non-empty");
    let mut waits: Vec<(u32, u64)> = calls
        .iter()
        .map(|a| (a.tid, a.depart_ns.saturating_sub(a.arrive_ns)))
        .collect();
    waits.sort_unstable();
    Round {
        first_arrival_ns: first.arrive_ns,
        spread_ns: last.arrive_ns.saturating_sub(first.arrive_ns),
        last_tid: last.tid,
        first_tid: first.tid,
        threads: calls.len() as u32,
        waits,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(tid: u32, arrive_ns: u64, depart_ns: u64) -> Arrival {
        Arrival {
            tid,
            arrive_ns,
            depart_ns,
        }
    }

    #[test]
    fn splits_rounds_and_finds_the_last_arriver() {
        // Round 1: threads 1,2,3 arrive at 0, 10, 50; released at 50.
        // Round 2: thread 1 leaves at 51 and arrives again at 60 before thread 3 has even
        // left round 1 (slow wake-up at 70); 2 and 3 arrive at 80 and 100.
        let calls = [
            a(1, 0, 51),
            a(2, 10, 55),
            a(3, 50, 70),
            a(1, 60, 101),
            a(2, 80, 102),
            a(3, 100, 100),
        ];
        let r = rounds(&calls);
        assert_eq!(r.len(), 2, "{r:?}");
        assert_eq!((r[0].last_tid, r[0].first_tid, r[0].spread_ns), (3, 1, 50));
        assert_eq!(r[0].waits, vec![(1, 51), (2, 45), (3, 20)]);
        assert_eq!((r[1].last_tid, r[1].spread_ns, r[1].threads), (3, 40, 3));
    }

    #[test]
    fn empty_input_has_no_rounds() {
        assert!(rounds(&[]).is_empty());
    }
}
