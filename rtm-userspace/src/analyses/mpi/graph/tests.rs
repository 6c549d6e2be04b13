use rtm_common::{EventHeader, EventKind, MpiEvent, decode::Event, decode::decode, decode::encode};

use super::*;

fn rec(pid: u32, start: u64, end: u64, op: MpiOp, f: impl FnOnce(&mut MpiEvent)) -> MpiRecord {
    let mut raw = MpiEvent {
        header: EventHeader {
            kind: EventKind::Mpi as u32,
            cpu: 0,
            ts_ns: end,
            pid,
            tid: pid,
        },
        start_ns: start,
        status_bytes: BYTES_UNKNOWN,
        op: op as u32,
        peer: RANK_UNKNOWN,
        peer_world: RANK_UNKNOWN,
        count: -1,
        comm_id: 0,
        peer2: RANK_UNKNOWN,
        peer2_world: RANK_UNKNOWN,
        status_source: RANK_UNKNOWN,
        status_source_world: RANK_UNKNOWN,
        implementation: MpiImpl::OpenMpi as u32,
        self_world: (pid - 100) as i32,
        ..Default::default()
    };
    f(&mut raw);
    match decode(encode(&raw)).expect("valid") {
        Event::Mpi(m) => m,
        other => panic!("{other:?}"),
    }
}

#[test]
fn blocking_and_nonblocking_messages_count_on_both_sides() {
    let mut g = RankGraph::default();
    // Rank 0 (pid 100) sends 8 doubles to rank 1 twice: once blocking, once with Isend.
    g.apply(&rec(100, 0, 50, MpiOp::Send, |e| {
        (e.peer, e.peer_world, e.count, e.dtype_size) = (1, 1, 8, 8);
    }));
    g.apply(&rec(100, 100, 110, MpiOp::Isend, |e| {
        (e.peer, e.peer_world, e.count, e.dtype_size, e.request) = (1, 1, 8, 8, 0xaa);
    }));
    g.apply(&rec(100, 120, 140, MpiOp::Waitall, |e| e.total = 1));
    g.apply(&rec(100, 120, 140, MpiOp::Waitall, |e| {
        (e.total, e.request, e.flags) = (1, 0xaa, MPI_FLAG_COMPLETION);
    }));
    // Rank 1 receives one blocking, one with a wildcard Irecv completed by Wait.
    g.apply(&rec(101, 0, 60, MpiOp::Recv, |e| {
        (e.peer, e.peer_world, e.count, e.dtype_size) = (0, 0, 8, 8);
        (e.status_source, e.status_source_world, e.status_bytes) = (0, 0, 64);
    }));
    g.apply(&rec(101, 100, 105, MpiOp::Irecv, |e| {
        (e.peer, e.count, e.dtype_size, e.request) = (-1, 100, 8, 0xbb);
    }));
    g.apply(&rec(101, 110, 150, MpiOp::Wait, |e| {
        (e.total, e.request, e.flags) = (1, 0xbb, MPI_FLAG_COMPLETION);
        (e.status_source, e.status_source_world, e.status_bytes) = (0, 0, 64);
    }));

    let sent = g
        .sent()
        .find(|(k, _)| **k == (100, Peer::World(1)))
        .unwrap()
        .1;
    assert_eq!((sent.messages, sent.bytes, sent.unknown_size), (2, 128, 0));
    assert_eq!(sent.time_ns, 50 + 10 + 20);
    assert_eq!(sent.sizes[7], 2, "64 bytes fall in [64, 128)");
    let recv = g
        .received()
        .find(|(k, _)| **k == (101, Peer::World(0)))
        .unwrap()
        .1;
    assert_eq!((recv.messages, recv.bytes), (2, 128));
    assert_eq!(recv.time_ns, 60 + 5 + 40);
    assert_eq!(g.open_requests(), 0);
    assert_eq!(g.counters().unknown_source, 0);
    let r0 = g.ranks().find(|(p, _)| **p == 100).unwrap().1;
    assert_eq!(r0.world_rank, Some(0));
    assert_eq!(r0.total_calls(), 3, "a completion record is not a call");
}

#[test]
fn wildcards_without_status_proc_null_and_unmatched_requests_are_counted() {
    let mut g = RankGraph::default();
    g.apply(&rec(100, 0, 10, MpiOp::Recv, |e| {
        (e.peer, e.count, e.dtype_size, e.flags) = (-1, 4, 4, MPI_FLAG_STATUS_IGNORED);
    }));
    g.apply(&rec(100, 20, 30, MpiOp::Send, |e| {
        (e.peer, e.count, e.dtype_size) = (-2, 1, 4)
    }));
    g.apply(&rec(100, 40, 50, MpiOp::Wait, |e| {
        (e.total, e.request, e.flags) = (1, 0xcc, MPI_FLAG_COMPLETION);
    }));
    let c = g.counters();
    assert_eq!(
        (c.unknown_source, c.proc_null, c.unmatched_completions),
        (1, 1, 1)
    );
    let unknown = g.received().find(|(k, _)| k.1 == Peer::Unknown).unwrap().1;
    assert_eq!((unknown.messages, unknown.bytes), (1, 16));
}

#[test]
fn collective_instances_line_up_across_ranks() {
    let mut g = RankGraph::default();
    for (pid, start) in [(100, 1_000), (101, 1_500), (102, 4_000)] {
        g.apply(&rec(pid, start, 5_000, MpiOp::Allreduce, |e| {
            (e.comm_id, e.count, e.dtype_size) = (0, 10, 8)
        }));
    }
    g.apply(&rec(100, 6_000, 7_000, MpiOp::Allreduce, |e| e.comm_id = 0));
    let (_, inst) = g.instances().next().unwrap();
    assert_eq!(inst.len(), 2);
    assert_eq!(inst[0].len(), 3);
    assert_eq!(inst[1].len(), 1);
    let c = g.collectives().find(|(k, _)| k.0 == 100).unwrap().1;
    assert_eq!((c.calls, c.bytes), (2, 80));
}

/// An MPICH record: integer handles, no kernel translation outside MPI_COMM_WORLD.
fn mpich(pid: u32, start: u64, op: MpiOp, f: impl FnOnce(&mut MpiEvent)) -> MpiRecord {
    rec(pid, start, start + 10, op, |e| {
        e.implementation = MpiImpl::Mpich as u32;
        e.self_world = RANK_UNKNOWN;
        e.comm = MPICH_COMM_WORLD;
        f(e)
    })
}

#[test]
fn mpich_split_communicators_translate_once_every_member_is_seen() {
    use crate::{analyses::mpi::RankGraphView, proc::process::RankEnv};
    let mut g = RankGraph::default();
    let half = 0x8400_0000u64;
    // 4 ranks learn their world rank from MPI_Comm_rank, then split with color
    // rank / 2 and key -rank: {1, 0} and {3, 2}, the same handle in every process.
    for r in 0..4u32 {
        g.apply(&mpich(100 + r, 10, MpiOp::CommRank, |e| {
            e.request = u64::from(r)
        }));
        g.apply(&mpich(100 + r, 20, MpiOp::CommSplit, |e| {
            (e.count, e.tag, e.request) = (r as i32 / 2, -(r as i32), half)
        }));
    }
    // Local rank 0 sends 5 ints to local rank 1 in each half: world 1 -> 0 and 3 -> 2.
    for (sender, receiver) in [(101u32, 100u32), (103, 102)] {
        g.apply(&mpich(sender, 30, MpiOp::Send, |e| {
            (e.comm, e.peer, e.count, e.dtype_size) = (half, 1, 5, 4)
        }));
        g.apply(&mpich(receiver, 30, MpiOp::Recv, |e| {
            (e.comm, e.peer, e.count, e.dtype_size) = (half, 0, 5, 4);
            (e.status_source, e.status_bytes) = (0, 20);
        }));
        g.apply(&mpich(sender, 40, MpiOp::Barrier, |e| e.comm = half));
    }
    let env: std::collections::HashMap<u32, RankEnv> = (0..4)
        .map(|r| {
            (
                100 + r,
                RankEnv {
                    job: None,
                    rank: None,
                    size: Some(4),
                },
            )
        })
        .collect();
    let v = RankGraphView::build(&g, &env, "h");
    let pairs: Vec<_> = v
        .edges
        .iter()
        .map(|e| {
            let s = e.sent.as_ref().map(|t| (t.messages, t.bytes));
            let r = e.received.as_ref().map(|t| (t.messages, t.bytes));
            (e.src, e.dst, s, r)
        })
        .collect();
    assert!(
        pairs.contains(&(Some(1), Some(0), Some((1, 20)), Some((1, 20)))),
        "{pairs:?}"
    );
    assert!(
        pairs.contains(&(Some(3), Some(2), Some((1, 20)), Some((1, 20)))),
        "{pairs:?}"
    );
    assert_eq!(pairs.len(), 2, "{pairs:?}");
    assert_eq!(v.counters.untranslated_peer, 0);
    // The two halves' barriers are different communicators despite the same handle.
    let barriers: Vec<_> = v
        .collectives
        .iter()
        .filter(|c| c.function == MpiOp::Barrier)
        .collect();
    assert_eq!(barriers.len(), 2);
    assert!(barriers.iter().all(|c| c.comm_id != 0 && c.ranks == 1));
    // Without rank 3's split the order of {3, 2} cannot be known: counted, not guessed.
    let mut g2 = RankGraph::default();
    for r in 0..3u32 {
        g2.apply(&mpich(100 + r, 10, MpiOp::CommRank, |e| {
            e.request = u64::from(r)
        }));
        g2.apply(&mpich(100 + r, 20, MpiOp::CommSplit, |e| {
            (e.count, e.tag, e.request) = (r as i32 / 2, -(r as i32), half)
        }));
    }
    g2.apply(&mpich(101, 30, MpiOp::Send, |e| {
        (e.comm, e.peer, e.count, e.dtype_size) = (half, 1, 5, 4)
    }));
    let v2 = RankGraphView::build(&g2, &env, "h");
    assert_eq!(v2.counters.untranslated_peer, 1);
    assert_eq!(v2.edges.len(), 1);
    assert_eq!((v2.edges[0].src, v2.edges[0].dst), (Some(1), None));
    let r = v2.ranks.iter().find(|r| r.pid == 101).expect("rank 1");
    assert_eq!(
        r.sent_to,
        [crate::analyses::mpi::view::SentTo {
            dst: None,
            messages: 1,
            bytes: 20
        }]
    );
}

/// Two processes with world rank 0 (two jobs on one node): the edges join them by
/// world rank, each rank's own `sent_to` keeps what it sent; a destination not
/// translated is None there.
#[test]
fn each_rank_keeps_what_it_sent_by_destination() {
    use crate::analyses::mpi::{RankGraphView, view::SentTo};
    let mut g = RankGraph::default();
    for _ in 0..2 {
        g.apply(&rec(100, 0, 50, MpiOp::Send, |e| {
            (e.peer, e.peer_world, e.count, e.dtype_size) = (1, 1, 8, 8);
        }));
    }
    for _ in 0..3 {
        g.apply(&rec(200, 0, 50, MpiOp::Send, |e| {
            (e.peer, e.peer_world, e.count, e.dtype_size) = (1, 1, 2, 4);
            e.self_world = 0;
        }));
    }
    let v = RankGraphView::build(&g, &Default::default(), "h");
    assert_eq!(v.edges.len(), 1);
    assert_eq!(v.edges[0].sent.as_ref().map(|t| t.messages), Some(5));
    let sent = |pid: u32| {
        v.ranks
            .iter()
            .find(|r| r.pid == pid)
            .map(|r| r.sent_to.clone())
    };
    let to = |messages, bytes| SentTo {
        dst: Some(1),
        messages,
        bytes,
    };
    assert_eq!(sent(100), Some(vec![to(2, 128)]));
    assert_eq!(sent(200), Some(vec![to(3, 24)]));
    // Written in the section, and read back from it (the published summary reads it
    // there).
    let json = serde_json::to_value(&v).unwrap();
    let back: RankGraphView = serde_json::from_value(json).unwrap();
    assert_eq!(back.ranks[0].sent_to, v.ranks[0].sent_to);
    assert_eq!(back.ranks[1].sent_to, v.ranks[1].sent_to);
}
