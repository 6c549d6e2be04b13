//! Uprobes on MPI entry points: the arguments are saved at entry and the record is sent at
//! return, with what only the target's memory can tell while it is alive: datatype sizes,
//! peers as world ranks, request handles, and the statuses of completed receives.
//!
//! Which arguments a function has comes from `MpiOp::shape` (shared with userspace);
//! how to read the library's handles from the `MPI_LAYOUT` map userspace fills.

use aya_ebpf::{
    EbpfContext as _,
    helpers::{bpf_get_attach_cookie, bpf_probe_read_user},
    macros::{uprobe, uretprobe},
    programs::{ProbeContext, RetProbeContext},
};
use rtm_common::{
    BYTES_UNKNOWN, COMM_ID_UNKNOWN, EventKind, LossCounter, MAX_MPI_REQS, MPI_FLAG_COMPLETION,
    MPI_FLAG_NOT_DONE, MPI_FLAG_REQS_TRUNCATED, MPI_FLAG_STATUS_IGNORED, MpiEvent, MpiImpl,
    MpiLayout, MpiOp, MpiPending, MpiShape, NO_ARG, RANK_UNKNOWN, mpi_cookie_parts,
};

use crate::{
    emit::{self, header, now},
    filter::{entry_was_kept, traced_in_context, traced_pid_tgid},
    maps::{MPI_LAYOUT, MPI_PENDING, count_loss},
};

#[inline(always)]
fn read_u64(addr: u64) -> Option<u64> {
    // SAFETY: bpf_probe_read_user checks the user address itself.
    unsafe { bpf_probe_read_user(addr as *const u64) }.ok()
}

#[inline(always)]
fn read_u32(addr: u64) -> Option<u32> {
    // SAFETY: as above.
    unsafe { bpf_probe_read_user(addr as *const u32) }.ok()
}

/// A handle stored in memory: a pointer in Open MPI, an int in MPICH.
#[inline(always)]
fn read_handle(addr: u64, imp: u32) -> u64 {
    if imp == MpiImpl::Mpich as u32 {
        read_u32(addr).map(u64::from).unwrap_or(0)
    } else {
        read_u64(addr).unwrap_or(0)
    }
}

#[inline(always)]
fn arg(p: &MpiPending, i: u8) -> u64 {
    if i == NO_ARG {
        return 0;
    }
    p.args.get(i as usize).copied().unwrap_or(0)
}

#[inline(always)]
fn shape_of(op: u32) -> Option<MpiShape> {
    MpiOp::from_u32(op).map(MpiOp::shape)
}

/// Bytes per element of a datatype handle; 0 when unknown.
#[inline(always)]
fn dtype_size(layout: &MpiLayout, imp: u32, dtype: u64) -> u32 {
    if imp == MpiImpl::Mpich as u32 {
        let h = dtype as u32;
        // Builtin MPICH datatypes carry their size in the handle.
        if h >> 30 == 1 && h & 0x3c00_0000 == 0x0c00_0000 {
            return (h >> 8) & 0xff;
        }
        return 0;
    }
    if layout.valid == 0 || dtype == 0 {
        return 0;
    }
    read_u64(dtype + layout.dtype_size as u64).unwrap_or(0) as u32
}

/// A comm-local rank as a world rank.
#[inline(always)]
fn world_rank(layout: &MpiLayout, imp: u32, comm: u64, rank: i32) -> i32 {
    if rank < 0 || layout.valid == 0 {
        return RANK_UNKNOWN;
    }
    if imp == MpiImpl::Mpich as u32 {
        return if comm == layout.comm_world {
            rank
        } else {
            RANK_UNKNOWN
        };
    }
    let Some(group) = read_u64(comm + layout.comm_group as u64) else {
        return RANK_UNKNOWN;
    };
    let Some(procs) = read_u64(group + layout.group_procs as u64) else {
        return RANK_UNKNOWN;
    };
    let Some(proc) = read_u64(procs + 8 * rank as u64) else {
        return RANK_UNKNOWN;
    };
    if proc & 1 == 1 {
        // A sentinel entry encodes the process name itself: the vpid is the high half.
        return (proc >> 32) as i32;
    }
    read_u32(proc + layout.proc_vpid as u64)
        .map(|v| v as i32)
        .unwrap_or(RANK_UNKNOWN)
}

#[inline(always)]
fn comm_id(layout: &MpiLayout, imp: u32, comm: u64) -> u32 {
    if imp == MpiImpl::Mpich as u32 {
        return comm as u32;
    }
    if layout.valid == 0 || comm == 0 {
        return COMM_ID_UNKNOWN;
    }
    read_u32(comm + layout.comm_cid as u64).unwrap_or(COMM_ID_UNKNOWN)
}

/// Fills the status fields from the status at `addr`.
#[inline(always)]
fn read_status(e: &mut MpiEvent, layout: &MpiLayout, imp: u32, addr: u64) {
    if addr == 0 || addr == layout.status_ignore || layout.valid == 0 {
        e.flags |= MPI_FLAG_STATUS_IGNORED;
        return;
    }
    if let Some(src) = read_u32(addr + layout.status_source as u64) {
        e.status_source = src as i32;
        e.status_source_world = world_rank(layout, imp, e.comm, src as i32);
    }
    let at = addr + layout.status_count as u64;
    e.status_bytes = if layout.status_count_bytes == 8 {
        read_u64(at).unwrap_or(BYTES_UNKNOWN)
    } else {
        read_u32(at).map(u64::from).unwrap_or(BYTES_UNKNOWN)
    };
}

/// Entry of an MPI function: save the arguments (and the request handles a wait or test
/// is given, which it overwrites).
#[uprobe]
pub fn mpi_enter(ctx: ProbeContext) -> u32 {
    let Some(pid_tgid) = traced_in_context() else {
        return 0;
    };
    // SAFETY: helper without preconditions; the cookie is set by userspace at attach.
    let cookie = unsafe { bpf_get_attach_cookie(ctx.as_ptr()) };
    let (op, imp) = mpi_cookie_parts(cookie);
    let Some(shape) = shape_of(op) else {
        return 0;
    };
    let p = match MPI_PENDING.get_ptr_mut(pid_tgid) {
        Some(p) => p,
        None => {
            if MPI_PENDING
                .insert(pid_tgid, MpiPending::default(), 0)
                .is_err()
            {
                count_loss(LossCounter::PendingFull);
                return 0;
            }
            match MPI_PENDING.get_ptr_mut(pid_tgid) {
                Some(p) => p,
                None => return 0,
            }
        }
    };
    // SAFETY: this thread's own entry; only this thread writes it.
    let p = unsafe { &mut *p };
    p.cookie = cookie;
    p.args[0] = ctx.arg(0).unwrap_or(0);
    p.args[1] = ctx.arg(1).unwrap_or(0);
    p.args[2] = ctx.arg(2).unwrap_or(0);
    p.args[3] = ctx.arg(3).unwrap_or(0);
    p.args[4] = ctx.arg(4).unwrap_or(0);
    p.args[5] = ctx.arg(5).unwrap_or(0);
    // SAFETY: regs points at the probed task's saved registers; userspace places MPI
    // probes where the stack pointer still points at the return address.
    let sp = unsafe { (*ctx.regs).rsp };
    // Arguments 7-12 are on the stack above the return address.
    // SAFETY: bpf_probe_read_user checks the user address itself.
    let stack: [u64; 6] =
        unsafe { bpf_probe_read_user((sp + 8) as *const [u64; 6]) }.unwrap_or([0; 6]);
    p.args[6..12].copy_from_slice(&stack);
    if shape.requests != NO_ARG {
        let base = arg(p, shape.requests);
        let n = if shape.nreqs == NO_ARG {
            1
        } else {
            arg(p, shape.nreqs) as u32 as usize
        };
        let step = if imp == MpiImpl::Mpich as u32 { 4 } else { 8 };
        for i in 0..MAX_MPI_REQS {
            if i >= n {
                break;
            }
            p.reqs[i] = read_handle(base + (i * step) as u64, imp);
        }
    }
    p.start_ns = now();
    0
}

/// Return of an MPI function: one record for the call, and one per request it completed.
#[uretprobe]
pub fn mpi_return(ctx: RetProbeContext) -> u32 {
    let Some(pid_tgid) = traced_pid_tgid() else {
        return 0;
    };
    let Some(p) = MPI_PENDING.get_ptr_mut(pid_tgid) else {
        if entry_was_kept() {
            count_loss(LossCounter::MissedEntry);
        }
        return 0;
    };
    // SAFETY: this thread's own entry; only this thread writes it.
    let p = unsafe { &mut *p };
    if p.start_ns == 0 {
        count_loss(LossCounter::MissedEntry);
        return 0;
    }
    let ts = now();
    let (op, imp) = mpi_cookie_parts(p.cookie);
    let Some(shape) = shape_of(op) else {
        return 0;
    };
    let Some(layout) = MPI_LAYOUT.get(imp) else {
        return 0;
    };
    let ret: i64 = ctx.ret();
    let comm = arg(p, shape.comm);
    let mut e = MpiEvent {
        header: header(EventKind::Mpi, pid_tgid, ts),
        start_ns: p.start_ns,
        comm,
        request: 0,
        status_bytes: BYTES_UNKNOWN,
        op,
        ret: ret as i32,
        peer: RANK_UNKNOWN,
        peer_world: RANK_UNKNOWN,
        tag: arg(p, shape.tag) as i32,
        count: -1,
        dtype_size: 0,
        comm_id: COMM_ID_UNKNOWN,
        peer2: RANK_UNKNOWN,
        peer2_world: RANK_UNKNOWN,
        count2: -1,
        dtype2_size: 0,
        status_source: RANK_UNKNOWN,
        status_source_world: RANK_UNKNOWN,
        index: 0,
        total: 0,
        implementation: imp,
        flags: 0,
        self_world: RANK_UNKNOWN,
        pad: 0,
    };
    p.start_ns = 0;
    if shape.comm != NO_ARG {
        e.comm_id = comm_id(layout, imp, comm);
        if imp == MpiImpl::OpenMpi as u32
            && layout.valid != 0
            && let Some(me) = read_u32(comm + layout.comm_rank as u64)
        {
            e.self_world = world_rank(layout, imp, comm, me as i32);
        }
    }
    if shape.peer != NO_ARG {
        e.peer = arg(p, shape.peer) as i32;
        e.peer_world = world_rank(layout, imp, comm, e.peer);
    }
    if shape.count != NO_ARG {
        e.count = arg(p, shape.count) as i32;
    }
    if shape.dtype != NO_ARG {
        e.dtype_size = dtype_size(layout, imp, arg(p, shape.dtype));
    }
    if shape.peer2 != NO_ARG {
        e.peer2 = arg(p, shape.peer2) as i32;
        e.peer2_world = world_rank(layout, imp, comm, e.peer2);
        e.count2 = arg(p, shape.count2) as i32;
        e.dtype2_size = dtype_size(layout, imp, arg(p, shape.dtype2));
    }
    if shape.request_out != NO_ARG {
        e.request = read_handle(arg(p, shape.request_out), imp);
    }
    if shape.flag != NO_ARG && read_u32(arg(p, shape.flag)).unwrap_or(0) == 0 {
        // A test or probe that found nothing.
        e.flags |= MPI_FLAG_NOT_DONE;
        emit::mpi(&e);
        return 0;
    }
    if shape.requests == NO_ARG {
        if shape.status != NO_ARG {
            read_status(&mut e, layout, imp, arg(p, shape.status));
        }
        emit::mpi(&e);
        return 0;
    }
    completions(p, &shape, layout, imp, e);
    0
}

/// Sends the wait or test call's record, then one record per request it completed.
#[inline(always)]
fn completions(p: &MpiPending, shape: &MpiShape, layout: &MpiLayout, imp: u32, mut e: MpiEvent) {
    let given = if shape.nreqs == NO_ARG {
        1
    } else {
        arg(p, shape.nreqs) as u32
    };
    let statuses = arg(p, shape.status);
    let status_size = layout.status_size as u64;
    // Which array positions completed: all of them (Wait, Waitall, Test, Testall), the
    // one at *index (Waitany, Testany), or *outcount positions listed in indices[]
    // (Waitsome, Testsome).
    let some = shape.indices != NO_ARG;
    let any = shape.index != NO_ARG && !some;
    let mut done = given;
    let mut only = 0u32;
    if any {
        only = read_u32(arg(p, shape.index)).unwrap_or(u32::MAX);
        done = if only as usize >= MAX_MPI_REQS { 0 } else { 1 };
    } else if some {
        done = read_u32(arg(p, shape.index)).unwrap_or(0);
        if done as i32 <= 0 {
            done = 0;
        }
    }
    e.total = given;
    if done as usize > MAX_MPI_REQS {
        e.flags |= MPI_FLAG_REQS_TRUNCATED;
    }
    emit::mpi(&e);
    e.flags |= MPI_FLAG_COMPLETION;
    let indices = arg(p, shape.indices);
    for k in 0..MAX_MPI_REQS {
        if k as u32 >= done {
            break;
        }
        // 64-bit throughout: a 32-bit index widened after its check loses its bound
        // for the verifier.
        let i: u64 = if any {
            u64::from(only)
        } else if some {
            u64::from(read_u32(indices + 4 * k as u64).unwrap_or(u32::MAX))
        } else {
            k as u64
        };
        if i >= MAX_MPI_REQS as u64 {
            continue;
        }
        // Masked after an opaque copy, so the compiler keeps the mask the verifier needs
        // (it would otherwise drop it as implied by the check above).
        // SAFETY: reads a local.
        let slot = unsafe { core::ptr::read_volatile(&i) } as usize & (MAX_MPI_REQS - 1);
        let request = p.reqs[slot];
        e.index = i as u32;
        e.request = request;
        e.status_source = RANK_UNKNOWN;
        e.status_source_world = RANK_UNKNOWN;
        e.status_bytes = BYTES_UNKNOWN;
        e.flags &= !MPI_FLAG_STATUS_IGNORED;
        // A single status for Wait/Test/Waitany/Testany, an array for the others.
        let single = statuses == 0 || statuses == layout.status_ignore;
        let status = if single || shape.nreqs == NO_ARG || any {
            statuses
        } else {
            statuses + i * status_size
        };
        read_status(&mut e, layout, imp, status);
        emit::mpi(&e);
    }
}
