//! The futex syscall tracepoints: contended waits and the wakes that end them.
//!
//! The uncontended paths of glibc's primitives never enter the kernel, so these
//! programs cost nothing there. A wait is reported at its exit with the thread whose
//! FUTEX_WAKE on the same word (in the same process) came last before it returned: the
//! releaser the waiter was waiting for. A blocking uprobed call in flight on the thread
//! is marked as having blocked, and a wake inside pthread_cond_signal/broadcast adds the
//! threads it woke to that call.

use aya_ebpf::{EbpfContext, macros::tracepoint, programs::TracePointContext};
use rtm_common::{
    EventKind, FUTEX_CMD_MASK, FutexKey, FutexWaker, LossCounter, PendingFutex, Primitive,
    SYNC_FLAG_BLOCKED, SyncEvent, SyncOp, futex_cmd_waits, futex_cmd_wakes,
};

use crate::{
    emit::{self, header, now},
    filter::traced_pid_tgid,
    maps::{COUNT_WAKES, PENDING_FUTEX, WAKERS, count_loss, innermost},
};

/// Offsets in syscalls/sys_enter_futex and sys_exit_futex (stable syscall ABI layout).
const ENTER_UADDR: usize = 16;
const ENTER_OP: usize = 24;
const ENTER_VAL: usize = 32;
const EXIT_RET: usize = 16;

/// Reads an 8-byte field of the tracepoint record straight from the context (the verifier
/// allows aligned loads there; a bpf_probe_read_kernel call costs more on this hot path).
#[inline(always)]
fn field(ctx: &TracePointContext, offset: usize) -> u64 {
    // SAFETY: `offset` is an aligned offset of a fixed 8-byte field of the syscall
    // tracepoints' records, which the context points to.
    unsafe { core::ptr::read_volatile(ctx.as_ptr().cast::<u8>().add(offset).cast::<u64>()) }
}

/// sys_enter_futex.
#[tracepoint]
pub fn futex_enter(ctx: TracePointContext) -> u32 {
    let Some(pid_tgid) = traced_pid_tgid() else {
        return 0;
    };
    let uaddr = field(&ctx, ENTER_UADDR);
    let op = field(&ctx, ENTER_OP) as u32;
    let cmd = op & FUTEX_CMD_MASK;
    let ts = now();
    // Full mode (uprobes on the pthread functions) is when wakes are counted.
    let full = COUNT_WAKES.load() != 0;
    if futex_cmd_waits(cmd) {
        if full && let Some(call) = innermost(pid_tgid) {
            // SAFETY: this thread's own entry; only this thread writes it.
            unsafe { (*call).flags |= SYNC_FLAG_BLOCKED };
        }
    } else if futex_cmd_wakes(cmd) {
        let key = FutexKey {
            tgid: (pid_tgid >> 32) as u32,
            pad: 0,
            uaddr,
        };
        let waker = FutexWaker {
            ts_ns: ts,
            tid: pid_tgid as u32,
            pad: 0,
        };
        // Written in place when the word has a waker already: an LRU insert pops and
        // pushes free-list nodes, the dearest part of this program.
        match WAKERS.get_ptr_mut(key) {
            // SAFETY: a map value; a racing writer can only leave another recent waker.
            Some(w) => unsafe { *w = waker },
            None => {
                let _ = WAKERS.insert(key, waker, 0);
            }
        }
        if !full {
            // Contention mode: the waker is all a wait needs; skip the return.
            return 0;
        }
    } else {
        return 0;
    }
    let pending = PendingFutex {
        uaddr,
        start_ns: ts,
        op,
        val: field(&ctx, ENTER_VAL) as u32,
    };
    // The thread's entry is reused from call to call (start_ns 0: none in flight) and
    // removed when the thread exits.
    match PENDING_FUTEX.get_ptr_mut(pid_tgid) {
        // SAFETY: this thread's own entry; only this thread writes it.
        Some(p) => unsafe { *p = pending },
        None => {
            if PENDING_FUTEX.insert(pid_tgid, pending, 0).is_err() {
                count_loss(LossCounter::PendingFull);
            }
        }
    }
    0
}

/// sys_exit_futex.
#[tracepoint]
pub fn futex_exit(ctx: TracePointContext) -> u32 {
    let Some(pid_tgid) = traced_pid_tgid() else {
        return 0;
    };
    let Some(p) = PENDING_FUTEX.get_ptr_mut(pid_tgid) else {
        return 0;
    };
    // SAFETY: this thread's own entry; only this thread writes it.
    let f = unsafe { *p };
    if f.start_ns == 0 {
        return 0;
    }
    // SAFETY: as above.
    unsafe { (*p).start_ns = 0 };
    let ret = field(&ctx, EXIT_RET) as i64;
    let ts = now();
    let cmd = f.op & FUTEX_CMD_MASK;
    if !futex_cmd_waits(cmd) {
        // A wake in full mode: credit the threads it woke to the call in flight.
        if ret > 0
            && let Some(call) = innermost(pid_tgid)
        {
            // SAFETY: this thread's own entry; only this thread writes it.
            unsafe { (*call).extra = (*call).extra.saturating_add(ret as u32) };
        }
        return 0;
    }
    let key = FutexKey {
        tgid: (pid_tgid >> 32) as u32,
        pad: 0,
        uaddr: f.uaddr,
    };
    // SAFETY: the value is copied out at once.
    let waker = match unsafe { WAKERS.get(key) } {
        Some(w) if w.ts_ns >= f.start_ns && w.tid != pid_tgid as u32 => w.tid,
        _ => 0,
    };
    emit::sync(SyncEvent {
        header: header(EventKind::Sync, pid_tgid, ts),
        object: f.uaddr,
        aux: (f.op as u64) | ((f.val as u64) << 32),
        caller: 0,
        wait_ns: ts.saturating_sub(f.start_ns),
        primitive: Primitive::Futex as u32,
        op: SyncOp::Wait as u32,
        ret: ret as i32,
        flags: 0,
        extra: waker,
        pad: 0,
    });
    0
}
