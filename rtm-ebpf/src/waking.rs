//! The wake that ends a futex wait, in contention mode: sched_waking runs in the waker's
//! context (the thread releasing the lock, a thread exiting, or an interrupt for a
//! timeout), so the wait's record is made there, naming the thread that woke it, and no
//! program runs on the woken thread's way back to its lock. The time the woken thread
//! then spends queued for a CPU is added when the record is sent (`futex_done`).

use core::intrinsics::AtomicOrdering;

use aya_ebpf::{
    helpers::{bpf_get_current_pid_tgid, bpf_get_current_task_btf, bpf_task_pt_regs},
    macros::btf_tracepoint,
    programs::BtfTracePointContext,
};
use rtm_common::{EventKind, FutexWaitEvent, PENDING_TIMED};

use crate::{
    emit::{header, now},
    filter::is_traced,
    futex::{ORIG_AX, REGS_DI, SYS_FUTEX},
    futex_done::{keep_done, task_field},
    maps::{TASK_PID, TASK_TGID, futex_done, futex_entry},
};

/// -ETIMEDOUT.
const ETIMEDOUT: i32 = -110;

/// The system call a task is in (its saved `orig_ax`) and its first argument.
///
/// # Safety
/// `task` is a BTF task pointer.
#[inline(always)]
unsafe fn syscall_of(task: *const u8) -> (u64, u64) {
    // SAFETY: the helper returns the task's saved registers as a BTF pointer; the
    // verifier checks both fields against the kernel's BTF.
    unsafe {
        let regs = bpf_task_pt_regs(task as *mut _) as *const u8;
        (
            core::ptr::read_volatile(regs.add(ORIG_AX).cast::<u64>()),
            core::ptr::read_volatile(regs.add(REGS_DI).cast::<u64>()),
        )
    }
}

/// sched_waking (p): `p` is being woken. When it is a thread of a traced process asleep
/// in a futex wait, its wait ends here.
#[btf_tracepoint(function = "sched_waking")]
pub fn futex_waking(ctx: BtfTracePointContext) -> i32 {
    let p: *const u8 = ctx.arg(0);
    // SAFETY: task_struct fields at offsets from the kernel's BTF.
    let tgid: u32 = unsafe { task_field::<i32>(p, TASK_TGID.load()) } as u32;
    if !is_traced(tgid) {
        return 0;
    }
    // SAFETY: as above.
    let pid: u32 = unsafe { task_field::<i32>(p, TASK_PID.load()) } as u32;
    let pid_tgid = (u64::from(tgid) << 32) | u64::from(pid);
    let Some(slot) = futex_entry(pid_tgid) else {
        return 0;
    };
    // SAFETY: the woken thread's entry, copied out; the thread is asleep or about to be.
    let f = unsafe { *slot };
    if f.start_ns == 0 {
        return 0;
    }
    // A wait recorded in the slot, and the thread still inside that futex call: any other
    // sleep of the thread (a wait that returned without sleeping leaves its entry) is not
    // this wait.
    // SAFETY: p is the tracepoint's BTF task pointer.
    let (id, word) = unsafe { syscall_of(p) };
    if id != SYS_FUTEX || word != f.uaddr {
        return 0;
    }
    // SAFETY: an aligned field of the entry; the exchange fails when the thread has
    // already moved on to another call, whose entry is then left alone.
    let (_, ours) = unsafe {
        core::intrinsics::atomic_cxchg::<u64, { AtomicOrdering::SeqCst }, { AtomicOrdering::SeqCst }>(
            core::ptr::addr_of_mut!((*slot).start_ns),
            f.start_ns,
            0,
        )
    };
    if !ours {
        return 0;
    }
    let current = bpf_get_current_pid_tgid();
    let cur_tid = current as u32;
    // The waker: a thread of the same process in a futex call (a wake). A thread's exit
    // also wakes its joiners (their word holds its tid), unnamed here as at the return:
    // userspace matches such waits with the exits. A timeout's timer interrupt runs on
    // whatever thread it interrupted, which is named only in the unlikely case that it
    // is a thread of the same process inside a futex call.
    let (waker, exiting) = if (current >> 32) as u32 == tgid && cur_tid != pid {
        // SAFETY: helper without preconditions; its result is a BTF task pointer.
        let (cur_call, _) = unsafe { syscall_of(bpf_get_current_task_btf() as *const u8) };
        (
            if cur_call == SYS_FUTEX { cur_tid } else { 0 },
            f.val == cur_tid,
        )
    } else {
        (0, false)
    };
    let ret = if waker == 0 && !exiting && f.flags & PENDING_TIMED != 0 {
        ETIMEDOUT
    } else {
        0
    };
    let ts = now();
    keep_done(
        FutexWaitEvent {
            header: header(EventKind::FutexWait, pid_tgid, ts),
            uaddr: f.uaddr,
            aux: f.aux(),
            wait_ns: ts.saturating_sub(f.start_ns),
            ret,
            waker,
            unslept: f.unslept,
            pad: 0,
        },
        p,
    );
    0
}

/// sched_wakeup (p): `p` was put on a run queue. When its last wait's record is waiting
/// in its slot without an enqueue time, this is the enqueue that followed that wait's
/// wake (it comes in the same wakeup, after sched_waking): the time goes in the record.
#[btf_tracepoint(function = "sched_wakeup")]
pub fn futex_wakeup(ctx: BtfTracePointContext) -> i32 {
    let p: *const u8 = ctx.arg(0);
    // SAFETY: task_struct fields at offsets from the kernel's BTF.
    let tgid: u32 = unsafe { task_field::<i32>(p, TASK_TGID.load()) } as u32;
    if !is_traced(tgid) {
        return 0;
    }
    // SAFETY: as above.
    let pid: u32 = unsafe { task_field::<i32>(p, TASK_PID.load()) } as u32;
    let Some(d) = futex_done(pid) else {
        return 0;
    };
    // SAFETY: the thread's slot: a nonzero mark is a record not yet sent, whose fields
    // were all written before it; only this program writes `queued_ns` after that.
    unsafe {
        if core::ptr::read_volatile(d.cast::<u64>()) == 0 {
            return 0;
        }
        let queued = core::ptr::addr_of_mut!((*d).queued_ns);
        if core::ptr::read_volatile(queued) == 0 {
            core::ptr::write_volatile(queued, now());
        }
    }
    0
}
