//! Uprobes on MPI entry points: the arguments are saved at entry and the record is sent at
//! return, with what only the target's memory can tell while it is alive: datatype sizes,
//! peers as world ranks, request handles, and the statuses of completed receives.
//!
//! Which arguments a function has comes from `MpiOp::shape` (shared with userspace);
//! how to read the library's handles from the `MPI_LAYOUT` map userspace fills.

use aya_ebpf::{
    EbpfContext as _,
    cty::c_void,
    helpers::{bpf_get_attach_cookie, bpf_get_current_pid_tgid, bpf_loop, bpf_probe_read_user},
    macros::{map, uprobe, uretprobe},
    maps::PerCpuArray,
    programs::{ProbeContext, RetProbeContext},
};
use rtm_common::{
    BYTES_UNKNOWN, COMM_ID_UNKNOWN, EventKind, LossCounter, MAX_MPI_REQS, MPI_FLAG_COMPLETION,
    MPI_FLAG_NOT_DONE, MPI_FLAG_REQS_TRUNCATED, MPI_FLAG_STATUS_IGNORED, MpiEvent, MpiImpl,
    MpiLayout, MpiOp, MpiPending, MpiShape, NO_ARG, RANK_UNKNOWN,
    arch::{CALL_REGISTER_ARGS, STACK_ARGS_AT_SP},
    mpi_cookie_parts,
};

use crate::{
    bounds::masked,
    emit::{self, header, now},
    filter::{entry_was_kept, traced_in_context, traced_pid_tgid},
    maps::{MPI_LAYOUT, MPI_PENDING, count_loss},
    regs::probe_sp,
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

/// Per CPU, the return probe's records in the making, off the BPF stack (the record and
/// the loop's state would take 6.12's verifier past its 512-byte stack).
#[map(name = "MPI_SCRATCH")]
static MPI_SCRATCH: PerCpuArray<Completions> = PerCpuArray::with_max_entries(1, 0);

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
    // The arguments in registers, then those on the stack.
    const _: () = assert!(CALL_REGISTER_ARGS == 6);
    p.args[0] = ctx.arg(0).unwrap_or(0);
    p.args[1] = ctx.arg(1).unwrap_or(0);
    p.args[2] = ctx.arg(2).unwrap_or(0);
    p.args[3] = ctx.arg(3).unwrap_or(0);
    p.args[4] = ctx.arg(4).unwrap_or(0);
    p.args[5] = ctx.arg(5).unwrap_or(0);
    // Userspace places MPI probes where the stack pointer is still the entry's.
    let sp = probe_sp(&ctx);
    // SAFETY: bpf_probe_read_user checks the user address itself.
    let stack: [u64; 6] =
        unsafe { bpf_probe_read_user((sp + STACK_ARGS_AT_SP) as *const [u64; 6]) }
            .unwrap_or([0; 6]);
    p.args[CALL_REGISTER_ARGS..].copy_from_slice(&stack);
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
    let Some(c) = MPI_SCRATCH.get_ptr_mut(0) else {
        return 0;
    };
    // SAFETY: this CPU's scratch; a uretprobe does not nest on one CPU.
    let c = unsafe { &mut *c };
    let e = &mut c.e;
    e.header = header(EventKind::Mpi, pid_tgid, ts);
    e.start_ns = p.start_ns;
    e.comm = comm;
    e.request = 0;
    e.status_bytes = BYTES_UNKNOWN;
    e.op = op;
    e.ret = ret as i32;
    e.peer = RANK_UNKNOWN;
    e.peer_world = RANK_UNKNOWN;
    e.tag = arg(p, shape.tag) as i32;
    e.count = -1;
    e.dtype_size = 0;
    e.comm_id = COMM_ID_UNKNOWN;
    e.peer2 = RANK_UNKNOWN;
    e.peer2_world = RANK_UNKNOWN;
    e.count2 = -1;
    e.dtype2_size = 0;
    e.status_source = RANK_UNKNOWN;
    e.status_source_world = RANK_UNKNOWN;
    e.index = 0;
    e.total = 0;
    e.implementation = imp;
    e.flags = 0;
    e.self_world = RANK_UNKNOWN;
    e.pad = 0;
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
        emit::mpi(e);
        return 0;
    }
    if shape.requests == NO_ARG {
        if shape.status != NO_ARG {
            read_status(e, layout, imp, arg(p, shape.status));
        }
        emit::mpi(e);
        return 0;
    }
    completions(c, p, &shape, layout, imp);
    0
}

/// The record in the making and what the completion loop needs (`bpf_loop`'s callback
/// reads it from the scratch map).
#[repr(C)]
struct Completions {
    /// The record sent for each request, filled in per request.
    e: MpiEvent,
    /// Waitsome/Testsome: the completed positions.
    indices: u64,
    statuses: u64,
    status_size: u64,
    /// Waitany/Testany: the one position completed.
    only: u64,
    imp: u32,
    /// 1: one position (`only`); 2: positions listed in `indices`; 0: every one.
    which: u32,
    /// 1: one status for all (Wait, Test, Waitany, Testany, or statuses ignored).
    single: u32,
    pad: u32,
}

/// Sends the wait or test call's record (`c.e`), then one record per request it
/// completed.
#[inline(always)]
fn completions(
    c: &mut Completions,
    p: &MpiPending,
    shape: &MpiShape,
    layout: &MpiLayout,
    imp: u32,
) {
    let given = if shape.nreqs == NO_ARG {
        1
    } else {
        arg(p, shape.nreqs) as u32
    };
    let statuses = arg(p, shape.status);
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
    c.e.total = given;
    if done as usize > MAX_MPI_REQS {
        c.e.flags |= MPI_FLAG_REQS_TRUNCATED;
    }
    emit::mpi(&c.e);
    c.e.flags |= MPI_FLAG_COMPLETION;
    c.indices = arg(p, shape.indices);
    c.statuses = statuses;
    c.status_size = layout.status_size as u64;
    c.only = u64::from(only);
    c.imp = imp;
    c.which = if any {
        1
    } else if some {
        2
    } else {
        0
    };
    c.single = u32::from(
        statuses == 0 || statuses == layout.status_ignore || shape.nreqs == NO_ARG || any,
    );
    // One pass per request through bpf_loop (Linux 5.17+): the verifier checks the body
    // once, where an unrolled loop of 16 passes, each with its reads and record, took
    // 6.1's verifier past its million-instruction limit.
    // The callback finds `c` in the scratch map itself (bpf_loop passes only a pointer
    // to the stack).
    // SAFETY: the callback is a static function of this object.
    unsafe {
        bpf_loop(
            done.min(MAX_MPI_REQS as u32),
            completion as *mut c_void,
            core::ptr::null_mut(),
            0,
        )
    };
}

/// One request of a wait or test call: its record.
#[inline(never)]
extern "C" fn completion(k: u64, _ctx: *mut c_void) -> i64 {
    let Some(c) = MPI_SCRATCH.get_ptr_mut(0) else {
        return 1;
    };
    // SAFETY: this CPU's scratch, filled by the return probe that runs the loop.
    let c = unsafe { &mut *c };
    // The caller's map values, found again (a map value's address cannot be kept in
    // another map).
    let pid_tgid = bpf_get_current_pid_tgid();
    let (Some(p), Some(layout)) = (MPI_PENDING.get_ptr(pid_tgid), MPI_LAYOUT.get(c.imp)) else {
        return 1;
    };
    // SAFETY: this thread's own entry, which only it writes.
    let p = unsafe { &*p };
    let i: u64 = match c.which {
        1 => c.only,
        2 => u64::from(read_u32(c.indices + 4 * k).unwrap_or(u32::MAX)),
        _ => k,
    };
    if i >= MAX_MPI_REQS as u64 {
        return 0;
    }
    let e = &mut c.e;
    e.index = i as u32;
    e.request = p.reqs[masked(i as usize, MAX_MPI_REQS - 1)];
    e.status_source = RANK_UNKNOWN;
    e.status_source_world = RANK_UNKNOWN;
    e.status_bytes = BYTES_UNKNOWN;
    e.flags &= !MPI_FLAG_STATUS_IGNORED;
    let status = if c.single != 0 {
        c.statuses
    } else {
        c.statuses + i * c.status_size
    };
    read_status(e, layout, c.imp, status);
    emit::mpi(e);
    0
}
