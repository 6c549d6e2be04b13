use rtm_common::MpiImpl;

use super::*;
use crate::analyses::mpi::view::{RankView, TrafficEdge, TrafficView};

fn rank(rank: i32, host: &str, job: &str) -> RankView {
    RankView {
        rank: Some(rank),
        pid: 1000 + rank as u32,
        host: host.into(),
        job: Some(job.into()),
        world_size: Some(4),
        implementation: Some(MpiImpl::OpenMpi),
        calls: 10,
        time_in_mpi_ns: 100,
        span_ns: 1000,
        mpi_share: 0.1,
        calls_per_sec: 1e7,
        functions: Vec::new(),
        sent_to: Vec::new(),
    }
}

fn traffic(messages: u64, bytes: u64) -> TrafficView {
    TrafficView {
        messages,
        bytes,
        unknown_size: 0,
        time_ns: 1000,
        bandwidth_mb_s: Some(bytes as f64),
        sizes: vec![(64, messages)],
    }
}

/// Node `host` traced `ranks`; every rank sends 10 x 80 B to the next of 4 and received
/// the same from the previous.
fn part(name: &str, host: &str, job: &str, ranks: &[i32]) -> Part {
    let mut edges = Vec::new();
    for &r in ranks {
        edges.push(TrafficEdge {
            src: Some(r),
            dst: Some((r + 1) % 4),
            sent: Some(traffic(10, 800)),
            received: None,
        });
        edges.push(TrafficEdge {
            src: Some((r + 3) % 4),
            dst: Some(r),
            sent: None,
            received: Some(traffic(10, 800)),
        });
    }
    Part {
        name: name.into(),
        version: 1,
        view: RankGraphView {
            ranks: ranks.iter().map(|&r| rank(r, host, job)).collect(),
            edges,
            collectives: vec![CollectiveView {
                comm_id: 0,
                function: MpiOp::Barrier,
                ranks: ranks.len(),
                calls: 3 * ranks.len() as u64,
                bytes: 0,
                time_ns: 500,
                root: None,
                instances: 3,
                mean_spread_ns: 100,
                max_spread_ns: 200,
                most_often_last: Some((Some(ranks[0]), 3)),
            }],
            open_requests: 1,
            counters: RankGraphCounters {
                unknown_source: 1,
                ..Default::default()
            },
        },
    }
}

#[test]
fn two_nodes_join_into_the_whole_ring() {
    let a = part("a.json", "n1", "job7", &[0, 1]);
    let b = part("b.json", "n2", "job7", &[2, 3]);
    // Alone, each part has half-known edges.
    assert!(a.view.edges.iter().any(|e| e.received.is_none()));
    let m = merge(&[a, b], 1).expect("merges");
    let ranks: Vec<_> = m.ranks.iter().map(|r| (r.rank, r.host.as_str())).collect();
    assert_eq!(
        ranks,
        [
            (Some(0), "n1"),
            (Some(1), "n1"),
            (Some(2), "n2"),
            (Some(3), "n2")
        ]
    );
    assert_eq!(m.edges.len(), 4, "{:?}", m.edges);
    for e in &m.edges {
        let (s, r) = (e.sent.as_ref().unwrap(), e.received.as_ref().unwrap());
        assert_eq!((s.messages, s.bytes), (10, 800));
        assert_eq!((r.messages, r.bytes), (10, 800));
        assert_eq!(e.dst, e.src.map(|s| (s + 1) % 4));
    }
    let c = &m.collectives[0];
    assert_eq!((c.ranks, c.calls, c.instances), (4, 12, 3));
    assert_eq!((c.mean_spread_ns, c.max_spread_ns), (100, 200));
    assert_eq!(c.most_often_last, None, "not comparable across nodes");
    assert_eq!((m.open_requests, m.counters.unknown_source), (2, 2));
}

#[test]
fn mismatched_parts_are_refused() {
    let a = part("a.json", "n1", "job7", &[0, 1]);
    let other_job = part("b.json", "n2", "job8", &[2, 3]);
    assert!(matches!(
        merge(&[a.clone(), other_job], 1),
        Err(MergeError::Jobs { .. })
    ));
    let twice = part("c.json", "n2", "job7", &[1, 2]);
    assert_eq!(
        merge(&[a.clone(), twice], 1).unwrap_err(),
        (MergeError::DuplicateRank {
            rank: 1,
            a: "a.json".into(),
            b: "c.json".into()
        })
    );
    let mut newer = part("d.json", "n2", "job7", &[2, 3]);
    newer.version = 2;
    assert!(matches!(
        merge(&[a.clone(), newer], 1),
        Err(MergeError::Version { found: 2, .. })
    ));
    let mut bigger = part("e.json", "n2", "job7", &[2, 3]);
    for r in &mut bigger.view.ranks {
        r.world_size = Some(8);
    }
    assert!(matches!(
        merge(&[a.clone(), bigger], 1),
        Err(MergeError::WorldSize { .. })
    ));
    assert_eq!(merge(&[a], 1).unwrap_err(), MergeError::TooFew);
}
