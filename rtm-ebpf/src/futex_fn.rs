//! Contention mode on the kernel's own futex functions (fentry/fexit): a wait is the
//! time a thread spends in the kernel's `futex_wait` (or `futex_lock_pi`), which only
//! FUTEX_WAIT calls whose word still held the expected value reach past their first
//! check; the thread that woke it is the one that queues it for waking
//! (`wake_q_add_safe`, called by the futex code for each waiter it wakes, in the
//! waker's context). Nothing runs on a context switch, a wakeup or a system call other
//! than those: untraced processes pay only on their own futex waits, and a traced one
//! only on its waits and wakes.

use aya_ebpf::{
    helpers::{bpf_get_current_pid_tgid, bpf_get_current_task_btf},
    macros::{fentry, fexit},
    programs::{FEntryContext, FExitContext},
};
use core::intrinsics::AtomicOrdering;
use rtm_common::{
    EventKind, FutexWaitEvent, PENDING_SAMPLED, PENDING_STACKED, PendingFutex, WAIT_INTERRUPTED,
};

use crate::{
    emit::{header, now},
    filter::is_traced,
    futex_done::{finish, task_field},
    maps::{TASK_PID, TASK_TGID, futex_entry},
    regs::syscall_of,
    stacks,
};

/// -ETIMEDOUT.
const ETIMEDOUT: i32 = -110;
/// -EAGAIN (EWOULDBLOCK): the word no longer held the expected value.
const EAGAIN: i32 = -11;

/// The current thread, if it is of a traced process: (its BTF task pointer, pid_tgid).
#[inline(always)]
fn current_traced() -> Option<(*const u8, u64)> {
    let pid_tgid = bpf_get_current_pid_tgid();
    if !is_traced((pid_tgid >> 32) as u32) {
        return None;
    }
    // SAFETY: helper without preconditions; its result is a BTF task pointer.
    let task = unsafe { bpf_get_current_task_btf() } as *const u8;
    Some((task, pid_tgid))
}

/// A futex wait begins (`futex_wait`, `futex_lock_pi`): its word, op and expected
/// value are read from the system call's registers and the mutex's holder read. Its
/// stacks are sampled later, at its wake or its end, so that a call that returns at
/// once (the word had changed) is never sampled.
#[inline(always)]
fn begin() -> i32 {
    let Some((task, pid_tgid)) = current_traced() else {
        return 0;
    };
    stacks::begin_sleep(task, pid_tgid, false);
    0
}

#[fentry(function = "futex_wait")]
pub fn futex_fn_wait(_ctx: FEntryContext) -> i32 {
    begin()
}

#[fentry(function = "futex_lock_pi")]
pub fn futex_fn_lock_pi(_ctx: FEntryContext) -> i32 {
    begin()
}

/// The wait of the current thread ends with the kernel function's return value `ret`:
/// 0 woken (by the thread that marked it, when one did), -ETIMEDOUT, -EAGAIN (no wait:
/// the word had changed; not counted), anything else interrupted.
#[inline(always)]
fn end(ret: i32) -> i32 {
    let Some((task, pid_tgid)) = current_traced() else {
        return 0;
    };
    let Some(slot) = futex_entry(pid_tgid) else {
        return 0;
    };
    // SAFETY: the thread's own entry, copied out.
    let f: PendingFutex = unsafe { *slot };
    if f.start_ns == 0 {
        return 0;
    }
    // SAFETY: an aligned field of the entry; its start is cleared atomically, as a wake
    // reads it.
    let (_, ours) = unsafe {
        core::intrinsics::atomic_cxchg::<u64, { AtomicOrdering::SeqCst }, { AtomicOrdering::SeqCst }>(
            core::ptr::addr_of_mut!((*slot).start_ns),
            f.start_ns,
            0,
        )
    };
    if !ours || ret == EAGAIN {
        return 0;
    }
    let ts = now();
    let tgid = (pid_tgid >> 32) as u32;
    let (waker_pid, waker) = ((f.waker >> 32) as u32, f.waker as u32);
    // A thread's exit wakes its joiners, whose word holds its tid: unnamed here, as in
    // the scheduler's programs; userspace matches such waits with the exits.
    let exiting = f.waker != 0 && waker_pid == tgid && f.val == waker;
    let woken = ret == 0 && f.waker != 0 && !exiting;
    let ret = match ret {
        0 => 0,
        ETIMEDOUT => ETIMEDOUT,
        _ => WAIT_INTERRUPTED,
    };
    let sampled = f.flags & PENDING_SAMPLED != 0
        || (f.waker == 0 && stacks::at_unwoken_end(&f, task, pid_tgid, ts));
    let runnable_ns = if woken && f.wake_ns != 0 {
        ts.saturating_sub(f.wake_ns).min(u64::from(u32::MAX)) as u32
    } else {
        0
    };
    finish(
        &FutexWaitEvent {
            header: header(EventKind::FutexWait, pid_tgid, ts),
            uaddr: f.uaddr,
            aux: f.aux(),
            wait_ns: ts.saturating_sub(f.start_ns),
            ret,
            waker: if woken { waker } else { 0 },
            unslept: 0,
            waker_pid: if woken { waker_pid } else { 0 },
            runnable_ns,
            holder: f.holder,
        },
        sampled,
    );
    0
}

#[fexit(function = "futex_wait")]
pub fn futex_fn_wait_exit(ctx: FExitContext) -> i32 {
    end(ctx.ret::<i32>().unwrap_or(WAIT_INTERRUPTED))
}

#[fexit(function = "futex_lock_pi")]
pub fn futex_fn_lock_pi_exit(ctx: FExitContext) -> i32 {
    end(ctx.ret::<i32>().unwrap_or(WAIT_INTERRUPTED))
}

/// wake_q_add_safe(head, task): the futex code queues `task`, one of its waiters, to be
/// woken by the current thread. When `task` is in a traced wait, the current thread is
/// its waker (the first to mark it), and the waker's stack is taken when the wait was
/// sampled. A mark for another word of the same process (a wake that reached a thread
/// already gone on to its next wait) is not taken.
#[fentry(function = "wake_q_add_safe")]
pub fn futex_fn_wake(ctx: FEntryContext) -> i32 {
    let task: *const u8 = ctx.arg(1);
    // SAFETY: task_struct fields at offsets from the kernel's BTF.
    let tgid: u32 = unsafe { task_field::<i32>(task, TASK_TGID.load()) } as u32;
    if !is_traced(tgid) {
        return 0;
    }
    // SAFETY: as above.
    let pid: u32 = unsafe { task_field::<i32>(task, TASK_PID.load()) } as u32;
    let pid_tgid = (u64::from(tgid) << 32) | u64::from(pid);
    let Some(slot) = futex_entry(pid_tgid) else {
        return 0;
    };
    // SAFETY: the woken thread's entry, copied out.
    let f: PendingFutex = unsafe { *slot };
    let current = bpf_get_current_pid_tgid();
    let (cur_tgid, cur_tid) = ((current >> 32) as u32, current as u32);
    if f.start_ns == 0 || f.waker != 0 || cur_tid == pid {
        return 0;
    }
    if cur_tgid == tgid {
        // SAFETY: the helper's BTF task pointer.
        let (_, word, _, _) = unsafe { syscall_of(bpf_get_current_task_btf() as *const u8) };
        // A private word is woken at its own address (a requeue, which moves waiters to
        // another word, is not used by glibc); a thread's exit wakes its joiner from
        // no system call of its own.
        let exiting = f.val == cur_tid;
        if word != f.uaddr && !exiting {
            return 0;
        }
    }
    let ts = now();
    // SAFETY: the woken thread's entry; it reads these at its return, after this wake.
    unsafe {
        core::ptr::write_volatile(core::ptr::addr_of_mut!((*slot).wake_ns), ts);
        core::ptr::write_volatile(core::ptr::addr_of_mut!((*slot).waker), current);
    }
    let sampled = stacks::at_wake(
        slot,
        &f,
        task,
        pid_tgid,
        ts,
        ts.saturating_sub(f.start_ns),
        (cur_tgid, cur_tid),
        cur_tgid == tgid,
    );
    if sampled {
        // Its stacks went as a record: so must its wait, to be joined with them (a
        // waker in another process takes no claim on the entry). Nothing else writes
        // the flags of a wait in progress.
        // SAFETY: the woken thread's entry.
        unsafe {
            let flags = core::ptr::addr_of_mut!((*slot).flags);
            core::ptr::write_volatile(
                flags,
                core::ptr::read_volatile(flags) | PENDING_SAMPLED | PENDING_STACKED,
            );
        }
    }
    0
}
