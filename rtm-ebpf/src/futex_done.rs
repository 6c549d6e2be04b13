//! Each thread's last ended futex wait, kept in its slot of `FUTEX_DONE` until the
//! thread next starts to wait or exits (time it would spend waiting anyway), or until
//! userspace takes it. The first 8 bytes of a slot (the header's kind and cpu) mark a
//! record not yet sent: whoever swaps them to zero, a program or userspace, sends it,
//! once.

use core::intrinsics::AtomicOrdering;

use rtm_common::{
    AggOutcome, DONE_AT_RETURN, DONE_SAMPLED, EventHeader, FutexDone, FutexWaitEvent,
    WAIT_INTERRUPTED,
};

use crate::{
    agg, emit,
    maps::{AGGREGATE, futex_done},
};

/// -ETIMEDOUT.
const ETIMEDOUT: i32 = -110;

/// Sends an ended wait on its way: into the sums (contention mode), or as a record when
/// it must be seen alone (its stacks were taken; a wake by no thread that did not time
/// out, which may be a joined thread's exit, matched in userspace; a timeline wants
/// every wait) or the sums are full.
#[inline(always)]
pub fn finish(wait: &FutexWaitEvent, sampled: bool) {
    if AGGREGATE.load() != 0 && !sampled {
        let outcome = match wait.ret {
            0 if wait.waker != 0 => Some(AggOutcome::Woken),
            ETIMEDOUT => Some(AggOutcome::TimedOut),
            WAIT_INTERRUPTED => Some(AggOutcome::Interrupted),
            _ => None,
        };
        if let Some(outcome) = outcome {
            let h = &wait.header;
            let pid_tgid = (u64::from(h.pid) << 32) | u64::from(h.tid);
            let op = wait.aux as u32;
            // A run of waits before it that did not sleep: each counted, with no time.
            let mut unslept = wait.unslept;
            if unslept != 0 {
                let k = agg::key(pid_tgid, wait.uaddr, op, (0, 0), 0, AggOutcome::NotSlept);
                if agg::add_waits(&k, u64::from(unslept), 0, 0) {
                    unslept = 0;
                }
            }
            let k = agg::key(
                pid_tgid,
                wait.uaddr,
                op,
                (wait.waker_pid, wait.waker),
                wait.holder,
                outcome,
            );
            if agg::add_waits(&k, 1, wait.wait_ns, u64::from(wait.runnable_ns)) {
                if unslept != 0 {
                    emit::futex_wait(wait.unslept_only(unslept));
                }
                return;
            }
            if unslept != wait.unslept {
                emit::futex_wait(FutexWaitEvent { unslept, ..*wait });
                return;
            }
        }
    }
    emit::futex_wait(*wait);
}

/// A field of a `struct task_struct` at an offset from the kernel's BTF.
///
/// # Safety
/// `task` is a BTF task pointer (a BTF tracepoint's argument or
/// bpf_get_current_task_btf), and `offset` one of the TASK_* globals, a constant the
/// verifier checks against that BTF.
#[inline(always)]
pub unsafe fn task_field<T: Copy>(task: *const u8, offset: u32) -> T {
    // SAFETY: see above; the JIT makes the load fault-safe.
    unsafe { core::ptr::read_volatile(task.add(offset as usize).cast::<T>()) }
}

/// Sends the thread's last ended wait if it is still in its slot, finished at the
/// thread's first switch-in after its wake.
#[inline(always)]
pub fn send_done(pid_tgid: u64) {
    let Some(d) = futex_done(pid_tgid as u32) else {
        return;
    };
    // SAFETY: the thread's slot, 8-byte aligned; its fields are written only while the
    // mark is zero. The swap is atomic against userspace's and other programs'.
    unsafe {
        let mark = d.cast::<u64>();
        if core::ptr::read_volatile(mark) == 0 {
            return;
        }
        // The BPF target has no atomic types; the intrinsic compiles to BPF_XCHG.
        let taken = core::intrinsics::atomic_xchg::<u64, { AtomicOrdering::SeqCst }>(mark, 0);
        if taken == 0 {
            return;
        }
        let done = *d;
        let mut wait = done.finished();
        wait.header.kind = taken as u32;
        wait.header.cpu = (taken >> 32) as u32;
        finish(&wait, done.at_return & DONE_SAMPLED != 0);
    }
}

/// Leaves `wait` in its thread's slot, or sends it when the thread has none. `at_wake`:
/// it ended at its wake (the thread's first switch-in after it ends it), not at its
/// return.
#[inline(always)]
pub fn keep_done(wait: FutexWaitEvent, at_wake: bool, sampled: bool) {
    let pid_tgid = (u64::from(wait.header.pid) << 32) | u64::from(wait.header.tid);
    let Some(d) = futex_done(pid_tgid as u32) else {
        return finish(&wait, sampled);
    };
    // A record the thread has not sent yet (a wake that raced its next wait) goes first.
    send_done(pid_tgid);
    // SAFETY: the thread's slot, its mark zero (sent or taken above). The mark goes
    // last, so a reader that sees it nonzero sees the whole record (stores keep their
    // order on x86).
    unsafe {
        core::ptr::write_volatile(
            d,
            FutexDone {
                wait: FutexWaitEvent {
                    header: EventHeader {
                        kind: 0,
                        cpu: 0,
                        ..wait.header
                    },
                    ..wait
                },
                ran_ns: 0,
                at_return: if at_wake { 0 } else { DONE_AT_RETURN }
                    | if sampled { DONE_SAMPLED } else { 0 },
            },
        );
        let h = &wait.header;
        core::ptr::write_volatile(
            d.cast::<u64>(),
            u64::from(h.kind) | (u64::from(h.cpu) << 32),
        );
    }
}
