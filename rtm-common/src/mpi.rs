//! MPI records: one [`MpiEvent`] per traced MPI call (and per request a wait or test
//! completed), the per-function argument shapes the eBPF programs read, and the layout of
//! an MPI library's handles that userspace hands to them.

use core::mem::size_of;

use crate::records::EventHeader;

abi_enum! {
    /// A traced MPI entry point.
    pub enum MpiOp {
        /// MPI_Send.
        Send = 1,
        /// MPI_Ssend.
        Ssend = 2,
        /// MPI_Bsend.
        Bsend = 3,
        /// MPI_Rsend.
        Rsend = 4,
        /// MPI_Isend (posts; completes in a wait or test).
        Isend = 5,
        /// MPI_Issend.
        Issend = 6,
        /// MPI_Recv.
        Recv = 7,
        /// MPI_Irecv.
        Irecv = 8,
        /// MPI_Sendrecv.
        Sendrecv = 9,
        /// MPI_Sendrecv_replace.
        SendrecvReplace = 10,
        /// MPI_Probe.
        Probe = 11,
        /// MPI_Iprobe.
        Iprobe = 12,
        /// MPI_Wait.
        Wait = 13,
        /// MPI_Waitall.
        Waitall = 14,
        /// MPI_Waitany.
        Waitany = 15,
        /// MPI_Waitsome.
        Waitsome = 16,
        /// MPI_Test.
        Test = 17,
        /// MPI_Testall.
        Testall = 18,
        /// MPI_Testany.
        Testany = 19,
        /// MPI_Testsome.
        Testsome = 20,
        /// MPI_Barrier.
        Barrier = 21,
        /// MPI_Bcast.
        Bcast = 22,
        /// MPI_Reduce.
        Reduce = 23,
        /// MPI_Allreduce.
        Allreduce = 24,
        /// MPI_Gather.
        Gather = 25,
        /// MPI_Gatherv.
        Gatherv = 26,
        /// MPI_Scatter.
        Scatter = 27,
        /// MPI_Scatterv.
        Scatterv = 28,
        /// MPI_Allgather.
        Allgather = 29,
        /// MPI_Allgatherv.
        Allgatherv = 30,
        /// MPI_Alltoall.
        Alltoall = 31,
        /// MPI_Alltoallv.
        Alltoallv = 32,
        /// MPI_Reduce_scatter.
        ReduceScatter = 33,
        /// MPI_Reduce_scatter_block.
        ReduceScatterBlock = 34,
        /// MPI_Init.
        Init = 35,
        /// MPI_Init_thread.
        InitThread = 36,
        /// MPI_Finalize.
        Finalize = 37,
        /// MPI_Comm_rank: `request` carries the rank written at return.
        CommRank = 38,
        /// MPI_Comm_split: `count` is the color, `tag` the key, `request` the new
        /// communicator's handle.
        CommSplit = 39,
        /// MPI_Comm_dup: `request` is the new communicator's handle.
        CommDup = 40,
    }
}

abi_enum! {
    /// The MPI implementation a probe is in.
    pub enum MpiImpl {
        /// Open MPI: handles are pointers to structs.
        OpenMpi = 1,
        /// MPICH: handles are 32-bit integers.
        Mpich = 2,
    }
}

/// MPICH's MPI_COMM_WORLD handle.
pub const MPICH_COMM_WORLD: u64 = 0x4400_0000;
/// MPI_UNDEFINED (the same in Open MPI and MPICH): a split color that joins no group.
pub const MPI_UNDEFINED: i32 = -32766;

/// "No argument" in an [`MpiShape`].
pub const NO_ARG: u8 = 0xff;
/// A rank (peer or status source) that could not be read or translated.
pub const RANK_UNKNOWN: i32 = i32::MIN;
/// A communicator id that could not be read.
pub const COMM_ID_UNKNOWN: u32 = u32::MAX;
/// Bytes that could not be known (from a status).
pub const BYTES_UNKNOWN: u64 = u64::MAX;
/// Most requests of one Waitall/Waitsome/Testall/Testsome call followed; the rest are
/// counted in [`MPI_FLAG_REQS_TRUNCATED`].
pub const MAX_MPI_REQS: usize = 16;

/// [`MpiEvent::flags`]: the record is a request completed by a wait or test call
/// (`request`, `index` and the status fields describe it).
pub const MPI_FLAG_COMPLETION: u32 = 1;
/// [`MpiEvent::flags`]: the call completed more requests than were followed.
pub const MPI_FLAG_REQS_TRUNCATED: u32 = 2;
/// [`MpiEvent::flags`]: a test call found nothing complete.
pub const MPI_FLAG_NOT_DONE: u32 = 4;
/// [`MpiEvent::flags`]: the status was MPI_STATUS_IGNORE.
pub const MPI_FLAG_STATUS_IGNORED: u32 = 8;

/// Where a function's arguments are (argument index: the first
/// [`arch::CALL_REGISTER_ARGS`](crate::arch::CALL_REGISTER_ARGS) in registers, the rest on
/// the stack), [`NO_ARG`] when it has none of that kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MpiShape {
    /// Element count (send side).
    pub count: u8,
    /// Datatype (send side).
    pub dtype: u8,
    /// Destination, source or root (comm-local rank).
    pub peer: u8,
    /// Tag.
    pub tag: u8,
    /// Communicator.
    pub comm: u8,
    /// Receive count (Sendrecv; Gather/Allgather/Alltoall receive side is not used).
    pub count2: u8,
    /// Receive datatype (Sendrecv).
    pub dtype2: u8,
    /// Receive source (Sendrecv, Sendrecv_replace).
    pub peer2: u8,
    /// `MPI_Request *` written at return (Isend, Irecv).
    pub request_out: u8,
    /// `MPI_Request *` (Wait, Test) or request array (the *all/any/some calls).
    pub requests: u8,
    /// Number of requests in the array.
    pub nreqs: u8,
    /// `MPI_Status *` or status array.
    pub status: u8,
    /// `int *flag` of the Test family.
    pub flag: u8,
    /// `int *index` (Waitany/Testany) or `int *outcount` (Waitsome/Testsome).
    pub index: u8,
    /// `int *indices` (Waitsome/Testsome).
    pub indices: u8,
    /// Pad.
    pub pad: u8,
}

const fn shape() -> MpiShape {
    MpiShape {
        count: NO_ARG,
        dtype: NO_ARG,
        peer: NO_ARG,
        tag: NO_ARG,
        comm: NO_ARG,
        count2: NO_ARG,
        dtype2: NO_ARG,
        peer2: NO_ARG,
        request_out: NO_ARG,
        requests: NO_ARG,
        nreqs: NO_ARG,
        status: NO_ARG,
        flag: NO_ARG,
        index: NO_ARG,
        indices: NO_ARG,
        pad: 0,
    }
}

/// (count, dtype, peer, tag, comm) of a point-to-point call.
const fn p2p(count: u8, dtype: u8, peer: u8, tag: u8, comm: u8) -> MpiShape {
    MpiShape {
        count,
        dtype,
        peer,
        tag,
        comm,
        ..shape()
    }
}

/// (count, dtype, root, comm) of a collective.
const fn coll(count: u8, dtype: u8, root: u8, comm: u8) -> MpiShape {
    MpiShape {
        count,
        dtype,
        peer: root,
        comm,
        ..shape()
    }
}

impl MpiOp {
    /// Where this function's arguments are.
    pub const fn shape(self) -> MpiShape {
        use MpiOp::*;
        match self {
            Send | Ssend | Bsend | Rsend => p2p(1, 2, 3, 4, 5),
            Isend | Issend | Irecv => MpiShape {
                request_out: 6,
                ..p2p(1, 2, 3, 4, 5)
            },
            Recv => MpiShape {
                status: 6,
                ..p2p(1, 2, 3, 4, 5)
            },
            // (sbuf, scount, stype, dest, stag, rbuf, rcount, rtype, source, rtag, comm, status)
            Sendrecv => MpiShape {
                count2: 6,
                dtype2: 7,
                peer2: 8,
                status: 11,
                ..p2p(1, 2, 3, 4, 10)
            },
            // (buf, count, type, dest, stag, source, rtag, comm, status)
            SendrecvReplace => MpiShape {
                count2: 1,
                dtype2: 2,
                peer2: 5,
                status: 8,
                ..p2p(1, 2, 3, 4, 7)
            },
            // (source, tag, comm, status) / (source, tag, comm, flag, status)
            Probe => MpiShape {
                peer: 0,
                tag: 1,
                comm: 2,
                status: 3,
                ..shape()
            },
            Iprobe => MpiShape {
                peer: 0,
                tag: 1,
                comm: 2,
                flag: 3,
                status: 4,
                ..shape()
            },
            Wait => MpiShape {
                requests: 0,
                status: 1,
                ..shape()
            },
            Test => MpiShape {
                requests: 0,
                flag: 1,
                status: 2,
                ..shape()
            },
            Waitall => MpiShape {
                nreqs: 0,
                requests: 1,
                status: 2,
                ..shape()
            },
            Testall => MpiShape {
                nreqs: 0,
                requests: 1,
                flag: 2,
                status: 3,
                ..shape()
            },
            Waitany => MpiShape {
                nreqs: 0,
                requests: 1,
                index: 2,
                status: 3,
                ..shape()
            },
            Testany => MpiShape {
                nreqs: 0,
                requests: 1,
                index: 2,
                flag: 3,
                status: 4,
                ..shape()
            },
            Waitsome | Testsome => MpiShape {
                nreqs: 0,
                requests: 1,
                index: 2,
                indices: 3,
                status: 4,
                ..shape()
            },
            Barrier => coll(NO_ARG, NO_ARG, NO_ARG, 0),
            Bcast => coll(1, 2, 3, 4),
            Reduce => coll(2, 3, 5, 6),
            Allreduce | ReduceScatterBlock => coll(2, 3, NO_ARG, 5),
            // (sbuf, scount, stype, rbuf, rcount, rtype, root, comm)
            Gather | Scatter => coll(1, 2, 6, 7),
            // (sbuf, scount, stype, rbuf, rcounts, displs, rtype, root, comm)
            Gatherv => coll(1, 2, 7, 8),
            // (sbuf, scounts, displs, stype, rbuf, rcount, rtype, root, comm)
            Scatterv => coll(5, 6, 7, 8),
            // (sbuf, scount, stype, rbuf, rcount, rtype, comm)
            Allgather | Alltoall => coll(1, 2, NO_ARG, 6),
            // (sbuf, scount, stype, rbuf, rcounts, displs, rtype, comm)
            Allgatherv => coll(1, 2, NO_ARG, 7),
            // (sbuf, scounts, sdispls, stype, rbuf, rcounts, rdispls, rtype, comm)
            Alltoallv => coll(NO_ARG, 3, NO_ARG, 8),
            // (sbuf, rbuf, rcounts, type, op, comm)
            ReduceScatter => coll(NO_ARG, 3, NO_ARG, 5),
            Init | InitThread | Finalize => shape(),
            // (comm, int *rank): the rank is read like a handle written at return.
            CommRank => MpiShape {
                comm: 0,
                request_out: 1,
                ..shape()
            },
            // (comm, color, key, MPI_Comm *newcomm)
            CommSplit => MpiShape {
                comm: 0,
                count: 1,
                tag: 2,
                request_out: 3,
                ..shape()
            },
            // (comm, MPI_Comm *newcomm)
            CommDup => MpiShape {
                comm: 0,
                request_out: 1,
                ..shape()
            },
        }
    }

    /// Whether the call is a collective over its communicator.
    pub const fn is_collective(self) -> bool {
        (self as u32) >= (MpiOp::Barrier as u32)
            && (self as u32) <= (MpiOp::ReduceScatterBlock as u32)
    }

    /// Whether the call completes requests (the wait and test families).
    pub const fn completes_requests(self) -> bool {
        (self as u32) >= (MpiOp::Wait as u32) && (self as u32) <= (MpiOp::Testsome as u32)
    }
}

/// One MPI call, recorded at its return (kind [`crate::EventKind::Mpi`]); or, with
/// [`MPI_FLAG_COMPLETION`], one request a wait or test call completed.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MpiEvent {
    /// Common header; `ts_ns` is the return.
    pub header: EventHeader,
    /// Entry time.
    pub start_ns: u64,
    /// The communicator handle as passed (pointer or integer).
    pub comm: u64,
    /// Isend/Irecv: the request handle written at return; completions: the request.
    pub request: u64,
    /// Bytes received, from the status (completions, Recv, Sendrecv); [`BYTES_UNKNOWN`].
    pub status_bytes: u64,
    /// An [`MpiOp`] discriminant.
    pub op: u32,
    /// The call's return value.
    pub ret: i32,
    /// Destination, source or root as passed (comm-local).
    pub peer: i32,
    /// `peer` as a world rank, [`RANK_UNKNOWN`] when it could not be translated.
    pub peer_world: i32,
    /// Tag.
    pub tag: i32,
    /// Element count (send side); -1 when the call has none or passes arrays.
    pub count: i32,
    /// Bytes per element of the datatype; 0 when unknown.
    pub dtype_size: u32,
    /// The communicator's context id, the same in every rank; [`COMM_ID_UNKNOWN`].
    pub comm_id: u32,
    /// Sendrecv: the receive source (comm-local).
    pub peer2: i32,
    /// `peer2` as a world rank.
    pub peer2_world: i32,
    /// Sendrecv: receive count.
    pub count2: i32,
    /// Sendrecv: bytes per receive element.
    pub dtype2_size: u32,
    /// Source from the status (comm-local), [`RANK_UNKNOWN`] when none or ignored.
    pub status_source: i32,
    /// `status_source` as a world rank.
    pub status_source_world: i32,
    /// Completions: the request's position in the array passed.
    pub index: u32,
    /// Completions: how many requests the call was given.
    pub total: u32,
    /// An [`MpiImpl`] discriminant.
    pub implementation: u32,
    /// `MPI_FLAG_*` bits.
    pub flags: u32,
    /// The calling process's world rank, read from the communicator (Open MPI);
    /// [`RANK_UNKNOWN`] otherwise.
    pub self_world: i32,
    /// Pad.
    pub pad: u32,
}
const _: () = assert!(size_of::<MpiEvent>() == 136);

/// How to read one MPI library's handles, filled by userspace per implementation (map
/// [`crate::names::MAP_MPI_LAYOUT`], indexed by [`MpiImpl`]). Offsets are in bytes;
/// `valid` 0 means only call counts and times can be recorded.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MpiLayout {
    /// 1 when the offsets below are known for this build.
    pub valid: u32,
    /// Open MPI: communicator -> context id (u32).
    pub comm_cid: u32,
    /// Open MPI: communicator -> remote group pointer.
    pub comm_group: u32,
    /// Open MPI: group -> array of proc pointers.
    pub group_procs: u32,
    /// Open MPI: proc -> world rank (vpid, u32).
    pub proc_vpid: u32,
    /// Open MPI: datatype -> size (size_t).
    pub dtype_size: u32,
    /// Size of MPI_Status.
    pub status_size: u32,
    /// MPI_SOURCE's offset in MPI_Status.
    pub status_source: u32,
    /// Offset of the received byte count in MPI_Status (Open MPI size_t `_ucount`,
    /// MPICH int `count_lo`).
    pub status_count: u32,
    /// Bytes of that count (8 or 4).
    pub status_count_bytes: u32,
    /// MPI_ANY_SOURCE.
    pub any_source: i32,
    /// MPI_PROC_NULL.
    pub proc_null: i32,
    /// MPI_STATUS_IGNORE / MPI_STATUSES_IGNORE as a pointer.
    pub status_ignore: u64,
    /// MPICH: MPI_COMM_WORLD's handle (ranks in it are world ranks).
    pub comm_world: u64,
    /// Open MPI: communicator -> the caller's rank in it (i32).
    pub comm_rank: u32,
    /// Pad.
    pub pad: u32,
}
const _: () = assert!(size_of::<MpiLayout>() == 72);

/// An MPI call in flight on a thread, between its entry and return probes.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct MpiPending {
    /// Entry time; 0 when nothing is in flight.
    pub start_ns: u64,
    /// The probe's cookie (op and implementation).
    pub cookie: u64,
    /// The first 12 arguments.
    pub args: [u64; 12],
    /// Request handles read at entry (the wait and test families).
    pub reqs: [u64; MAX_MPI_REQS],
}

/// Packs an MPI probe's attach cookie.
pub const fn mpi_cookie(op: MpiOp, implementation: MpiImpl) -> u64 {
    (op as u64) | ((implementation as u64) << 32)
}

/// Unpacks an MPI probe's cookie into (op, implementation) discriminants.
pub const fn mpi_cookie_parts(cookie: u64) -> (u32, u32) {
    (cookie as u32, (cookie >> 32) as u32)
}

#[cfg(feature = "user")]
// SAFETY: plain-old-data with explicit layout and no padding.
unsafe impl aya::Pod for MpiLayout {}
#[cfg(feature = "user")]
// SAFETY: as above.
unsafe impl aya::Pod for MpiPending {}
#[cfg(feature = "user")]
// SAFETY: as above.
unsafe impl aya::Pod for MpiEvent {}
