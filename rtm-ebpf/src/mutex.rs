//! pthread_mutex_{lock,trylock,timedlock,unlock}.
//!
//! Entry probes remember the call per thread; the shared return probe emits one
//! `SyncEvent` with the time spent in the call. The cookie set at attach time says which
//! function an entry probe is on (a `SyncOp`). Contention is read at entry from the
//! mutex's lock word (glibc's `__lock`, the first field): nonzero means held.

use aya_ebpf::{
    EbpfContext as _,
    helpers::{
        bpf_get_attach_cookie, bpf_get_smp_processor_id, bpf_ktime_get_ns, bpf_probe_read_user,
    },
    macros::{uprobe, uretprobe},
    programs::{ProbeContext, RetProbeContext},
};
use rtm_common::{
    EventHeader, EventKind, LossCounter, PendingCall, Primitive, SYNC_FLAG_CONTENDED, SyncEvent,
    SyncOp,
};

use crate::{
    filter::traced_pid_tgid,
    maps::{EVENTS, PENDING, count_loss},
};

/// Reads the return address at the top of the stack: valid at a function's first
/// instruction, before anything is pushed.
#[inline(always)]
fn caller(ctx: &ProbeContext) -> u64 {
    // SAFETY: regs points at the probed task's saved registers.
    let sp = unsafe { (*ctx.regs).rsp };
    // SAFETY: bpf_probe_read_user checks the user address itself.
    unsafe { bpf_probe_read_user(sp as *const u64) }.unwrap_or(0)
}

#[inline(always)]
fn emit(pid_tgid: u64, ts_ns: u64, call: &PendingCall, wait_ns: u64, ret: i32) {
    let Some(mut entry) = EVENTS.reserve::<SyncEvent>(0) else {
        count_loss(LossCounter::RingFull);
        return;
    };
    entry.write(SyncEvent {
        header: EventHeader {
            kind: EventKind::Sync as u32,
            // SAFETY: helper without preconditions.
            cpu: unsafe { bpf_get_smp_processor_id() },
            ts_ns,
            pid: (pid_tgid >> 32) as u32,
            tid: pid_tgid as u32,
        },
        object: call.object,
        caller: call.caller,
        wait_ns,
        primitive: Primitive::Mutex as u32,
        op: call.op,
        ret,
        flags: call.flags,
    });
    entry.submit(0);
}

/// Entry of pthread_mutex_lock / _trylock / _timedlock; the cookie is the `SyncOp`.
#[uprobe]
pub fn mutex_lock_enter(ctx: ProbeContext) -> u32 {
    let Some(pid_tgid) = traced_pid_tgid() else {
        return 0;
    };
    let object: u64 = ctx.arg(0).unwrap_or(0);
    // SAFETY: bpf_probe_read_user checks the user address itself.
    let word = unsafe { bpf_probe_read_user(object as *const i32) }.unwrap_or(0);
    let call = PendingCall {
        object,
        caller: caller(&ctx),
        // SAFETY: helper without preconditions.
        start_ns: unsafe { bpf_ktime_get_ns() },
        // SAFETY: helper without preconditions; the cookie is set by userspace at attach.
        op: unsafe { bpf_get_attach_cookie(ctx.as_ptr()) } as u32,
        flags: if word != 0 { SYNC_FLAG_CONTENDED } else { 0 },
    };
    if PENDING.insert(pid_tgid, call, 0).is_err() {
        count_loss(LossCounter::PendingFull);
    }
    0
}

/// Return of pthread_mutex_lock / _trylock / _timedlock.
#[uretprobe]
pub fn mutex_lock_return(ctx: RetProbeContext) -> u32 {
    let Some(pid_tgid) = traced_pid_tgid() else {
        return 0;
    };
    // SAFETY: the value is copied out before the entry is removed.
    let Some(call) = (unsafe { PENDING.get(pid_tgid) }).copied() else {
        count_loss(LossCounter::MissedEntry);
        return 0;
    };
    let _ = PENDING.remove(pid_tgid);
    // SAFETY: helper without preconditions.
    let now = unsafe { bpf_ktime_get_ns() };
    let ret: i32 = ctx.ret();
    emit(pid_tgid, now, &call, now.saturating_sub(call.start_ns), ret);
    0
}

/// Entry of pthread_mutex_unlock.
#[uprobe]
pub fn mutex_unlock_enter(ctx: ProbeContext) -> u32 {
    let Some(pid_tgid) = traced_pid_tgid() else {
        return 0;
    };
    // SAFETY: helper without preconditions.
    let now = unsafe { bpf_ktime_get_ns() };
    let call = PendingCall {
        object: ctx.arg(0).unwrap_or(0),
        caller: caller(&ctx),
        start_ns: now,
        op: SyncOp::Unlock as u32,
        flags: 0,
    };
    emit(pid_tgid, now, &call, 0, 0);
    0
}
