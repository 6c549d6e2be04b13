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
    let mut g = TaskGraph::default();
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

    let sent = g.sent().find(|(k, _)| **k == (100, 1)).unwrap().1;
    assert_eq!((sent.messages, sent.bytes, sent.unknown_size), (2, 128, 0));
    assert_eq!(sent.time_ns, 50 + 10 + 20);
    assert_eq!(sent.sizes[7], 2, "64 bytes fall in [64, 128)");
    let recv = g.received().find(|(k, _)| **k == (101, 0)).unwrap().1;
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
    let mut g = TaskGraph::default();
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
    let unknown = g.received().find(|(k, _)| k.1 == RANK_UNKNOWN).unwrap().1;
    assert_eq!((unknown.messages, unknown.bytes), (1, 16));
}

#[test]
fn collective_instances_line_up_across_ranks() {
    let mut g = TaskGraph::default();
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
