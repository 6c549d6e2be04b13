//! Uprobes on the pthread and semaphore functions, shared through cookies.
//!
//! `call_enter` remembers a blocking call per thread; `call_return` emits one
//! `SyncEvent` with the time spent in it; `call_mark` emits releases and posts at once.
//! The cookie set at attach time says which primitive and operation a probe is on and
//! how to judge contention from the object's first word (which depends on where in the
//! function userspace placed the probe).

use aya_ebpf::{
    EbpfContext as _,
    helpers::{bpf_get_attach_cookie, bpf_probe_read_user},
    macros::{uprobe, uretprobe},
    programs::{ProbeContext, RetProbeContext},
};
use rtm_common::{
    Check, Cookie, EventKind, LossCounter, MAX_CALL_DEPTH, PendingCall, Primitive, SYNC_FLAG_BEGIN,
    SYNC_FLAG_CONTENDED, SyncEvent, SyncOp, arch::RETURN_ADDRESS_AT_SP,
};

use crate::{
    bounds::masked,
    emit::{self, header, now},
    filter::{entry_was_kept, traced_in_context, traced_pid_tgid},
    maps::{PENDING, count_loss, thread_calls},
    regs::probe_sp,
};

/// Reads the return address where a function's entry finds it (x86-64: the top of the
/// stack). Userspace only places probes where nothing has been pushed yet, so this is
/// the caller.
#[inline(always)]
fn caller(ctx: &ProbeContext) -> u64 {
    let at = probe_sp(ctx) + RETURN_ADDRESS_AT_SP;
    // SAFETY: bpf_probe_read_user checks the user address itself.
    unsafe { bpf_probe_read_user(at as *const u64) }.unwrap_or(0)
}

/// Applies the cookie's contention check to the object's first word.
#[inline(always)]
fn contended(check: u32, object: u64) -> bool {
    if check == Check::None as u32 {
        return false;
    }
    // SAFETY: bpf_probe_read_user checks the user address itself.
    let word = unsafe { bpf_probe_read_user(object as *const u32) }.unwrap_or(0);
    match check {
        c if c == Check::NonZero as u32 => word != 0,
        c if c == Check::NotOne as u32 => word != 1,
        c if c == Check::WriterBit as u32 => word & 2 != 0,
        c if c == Check::Empty as u32 => word == 0,
        c if c == Check::Busy as u32 => word & !1 != 0,
        _ => false,
    }
}

#[inline(always)]
fn cookie(ctx: &ProbeContext) -> u64 {
    // SAFETY: helper without preconditions; the cookie is set by userspace at attach.
    unsafe { bpf_get_attach_cookie(ctx.as_ptr()) }
}

/// Entry of a blocking call.
#[uprobe]
pub fn call_enter(ctx: ProbeContext) -> u32 {
    let Some(pid_tgid) = traced_in_context() else {
        return 0;
    };
    let raw = cookie(&ctx);
    let c = Cookie::unpack(raw);
    let object: u64 = ctx.arg(0).unwrap_or(0);
    let sp = probe_sp(&ctx);
    let ret_addr = caller(&ctx);
    let Some(tc) = thread_calls(pid_tgid) else {
        count_loss(LossCounter::PendingFull);
        return 0;
    };
    // SAFETY: this thread's own entry; only this thread writes it.
    let tc = unsafe { &mut *tc };
    let mut depth = tc.depth as usize;
    // Indexes are masked so the verifier sees them in bounds (MAX_CALL_DEPTH is a power
    // of two and the comparisons come first).
    if depth > 0
        && depth <= MAX_CALL_DEPTH
        && let Some(inner) = tc.calls.get_mut(masked(depth - 1, MAX_CALL_DEPTH - 1))
        && inner.sp == sp
        && inner.cookie == raw
        && inner.object == object
        && ret_addr != inner.caller
    {
        // The same call passed its probe again (a retry loop through it). The return
        // probe, at the same place, swapped its return address for the uretprobe
        // trampoline after the first hit, so the address differs now. The same frame
        // with the same return address is a new call: the entry before it never had its
        // return probed (it was in flight when the return probe attached), and is
        // dropped below.
        inner.rehits += 1;
        return 0;
    }
    // Entries at or below this frame are dead: a live outer call's frame is above it
    // (a higher stack pointer). Their returns will never be seen (the calls were in
    // flight when the return probe attached); left in place, every later call from
    // that frame would read as a repeat hit of theirs. Each is counted once: one of the
    // same frame, object and return address is the same call looping through its probe
    // before its return was probed, or the next call of a loop, and replacing it again
    // and again (each pass of a spin loop) counts nothing more.
    let mut replaced = 0;
    for _ in 0..MAX_CALL_DEPTH {
        if depth == 0 || depth > MAX_CALL_DEPTH {
            break;
        }
        match tc.calls.get(masked(depth - 1, MAX_CALL_DEPTH - 1)) {
            Some(inner) if inner.sp <= sp => {
                let same = inner.sp == sp && inner.cookie == raw && inner.object == object;
                if inner.replaced == 0 {
                    count_loss(LossCounter::MissedEntry);
                }
                if same {
                    replaced = 1;
                }
                depth -= 1;
                tc.depth = depth as u64;
            }
            _ => break,
        }
    }
    let ts = now();
    let call = PendingCall {
        object,
        aux: ctx.arg(1).unwrap_or(0),
        caller: ret_addr,
        start_ns: ts,
        cookie: raw,
        flags: if contended(c.check, object) {
            SYNC_FLAG_CONTENDED
        } else {
            0
        },
        extra: 0,
        sp,
        rehits: 0,
        replaced,
    };
    if c.primitive == Primitive::Cond as u32
        && (c.op == SyncOp::Wait as u32 || c.op == SyncOp::TimedWait as u32)
    {
        // The wait releases its mutex now: say so before anyone else can take it.
        emit::sync(SyncEvent {
            header: header(EventKind::Sync, pid_tgid, ts),
            object,
            aux: call.aux,
            caller: ret_addr,
            wait_ns: 0,
            primitive: c.primitive,
            op: c.op,
            ret: 0,
            flags: SYNC_FLAG_BEGIN,
            extra: 0,
            repeats: 0,
        });
    }
    if depth >= MAX_CALL_DEPTH {
        count_loss(LossCounter::PendingFull);
        return 0;
    }
    let Some(slot) = tc.calls.get_mut(masked(depth, MAX_CALL_DEPTH - 1)) else {
        return 0;
    };
    *slot = call;
    tc.depth = depth as u64 + 1;
    0
}

/// Return of a blocking call.
#[uretprobe]
pub fn call_return(ctx: RetProbeContext) -> u32 {
    let Some(pid_tgid) = traced_pid_tgid() else {
        return 0;
    };
    let Some(tc) = PENDING.get_ptr_mut(pid_tgid) else {
        if entry_was_kept() {
            count_loss(LossCounter::MissedEntry);
        }
        return 0;
    };
    // SAFETY: this thread's own entry; only this thread writes it.
    let tc = unsafe { &mut *tc };
    let depth = tc.depth as usize;
    if depth == 0 || depth > MAX_CALL_DEPTH {
        count_loss(LossCounter::MissedEntry);
        return 0;
    }
    let Some(slot) = tc.calls.get_mut(masked(depth - 1, MAX_CALL_DEPTH - 1)) else {
        count_loss(LossCounter::MissedEntry);
        return 0;
    };
    if slot.rehits > 0 {
        // A return instance of a repeated entry hit: the call has not returned yet as far
        // as its first hit is concerned.
        slot.rehits -= 1;
        return 0;
    }
    let call = *slot;
    tc.depth = depth as u64 - 1;
    let ts = now();
    let c = Cookie::unpack(call.cookie);
    let ret: i64 = ctx.ret();
    let (object, aux) = if c.primitive == Primitive::Thread as u32 && c.op == SyncOp::Create as u32
    {
        // pthread_create(pthread_t *out, ...): the new thread's handle is in *out now.
        // SAFETY: bpf_probe_read_user checks the user address itself.
        let handle = unsafe { bpf_probe_read_user(call.object as *const u64) }.unwrap_or(0);
        (handle, 0)
    } else {
        (call.object, call.aux)
    };
    emit::sync(SyncEvent {
        header: header(EventKind::Sync, pid_tgid, ts),
        object,
        aux,
        caller: call.caller,
        wait_ns: ts.saturating_sub(call.start_ns),
        primitive: c.primitive,
        op: c.op,
        ret: ret as i32,
        flags: call.flags,
        extra: call.extra,
        repeats: 0,
    });
    0
}

/// Entry of a call recorded at once: releases and posts, and pthread_mutex_lock, whose
/// record has the BEGIN flag (the acquisition ends when the thread next does anything
/// else; the futex waits in between are its wait), which saves a return probe's trap.
#[uprobe]
pub fn call_mark(ctx: ProbeContext) -> u32 {
    let Some(pid_tgid) = traced_in_context() else {
        return 0;
    };
    let c = Cookie::unpack(cookie(&ctx));
    let object: u64 = ctx.arg(0).unwrap_or(0);
    let mut flags = 0;
    if c.op == SyncOp::Lock as u32 {
        flags |= SYNC_FLAG_BEGIN;
    }
    if contended(c.check, object) {
        flags |= SYNC_FLAG_CONTENDED;
    }
    // A release's call site is not worth a user-memory read on every unlock.
    let site = if flags & SYNC_FLAG_BEGIN != 0 {
        caller(&ctx)
    } else {
        0
    };
    emit::sync(SyncEvent {
        header: header(EventKind::Sync, pid_tgid, now()),
        object,
        aux: 0,
        caller: site,
        wait_ns: 0,
        primitive: c.primitive,
        op: c.op,
        ret: 0,
        flags,
        extra: 0,
        repeats: 0,
    });
    0
}
