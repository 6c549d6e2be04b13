//! The user stacks of a contended futex wait, copied at its wake (contention mode): the
//! waker's, in its own context, and the waiter's, asleep in the same process (threads
//! share their memory, and a sleeping thread's stack does not change). Only waits that
//! slept and were woken pay for it: the uncontended path and waits that returned
//! without sleeping never come here. Userspace unwinds the copies.

use aya_ebpf::{
    helpers::{
        bpf_get_current_task_btf, bpf_get_smp_processor_id, bpf_task_pt_regs,
        generated::bpf_probe_read_user,
    },
    maps::{RingBuf, ring_buf::RingBufBytes},
};
use rtm_common::{
    EventHeader, LossCounter, STACK_MISSING_OTHER_PROCESS, STACK_MISSING_UNREADABLE, StackRegs,
    StacksHead,
};

use crate::{
    emit::wakeup_flags_for,
    maps::{EVENTS, EVENTS_1, EVENTS_2, EVENTS_3, STACK_BYTES, SYNC_RING_MASK, count_loss},
};

/// Offsets in x86-64 `struct pt_regs`.
const REGS_BP: usize = 32;
const REGS_IP: usize = 128;
const REGS_SP: usize = 152;

/// The user registers of `task` (a BTF task pointer) at its system call.
///
/// # Safety
/// `task` is a BTF task pointer.
#[inline(always)]
unsafe fn user_regs(task: *const u8) -> StackRegs {
    // SAFETY: the helper returns the task's saved user registers as a BTF pointer; the
    // verifier checks each field against the kernel's BTF.
    unsafe {
        let regs = bpf_task_pt_regs(task as *mut _) as *const u8;
        let at = |offset: usize| core::ptr::read_volatile(regs.add(offset).cast::<u64>());
        StackRegs {
            ip: at(REGS_IP),
            sp: at(REGS_SP),
            bp: at(REGS_BP),
            len: 0,
            missing: 0,
        }
    }
}

/// Copies up to `n` bytes of the current process's memory from `sp` to `dst`: `n`,
/// else `n/2`, else `n/4` (a copy past the top of the stack's mapping fails whole).
/// Returns the bytes copied.
///
/// # Safety
/// `dst` has room for `n` bytes.
#[inline(always)]
unsafe fn copy_stack(dst: *mut u8, sp: u64, n: u32) -> u32 {
    for size in [n, n / 2, n / 4] {
        // SAFETY: see above; the helper fails cleanly on an unreadable address.
        if size != 0 && unsafe { bpf_probe_read_user(dst.cast(), size, sp as *const _) } == 0 {
            return size;
        }
    }
    0
}

/// Reserves a stacks record of `size` bytes on `ring`, with the flags to submit it.
#[inline(always)]
fn reserve(ring: &'static RingBuf, size: usize) -> Option<(RingBufBytes<'static>, u64)> {
    let entry = ring.reserve_bytes(size, 0)?;
    Some((entry, wakeup_flags_for(ring, size as u64)))
}

/// The stacks of the wait of `waiter` (a BTF task pointer; `head` says which wait)
/// ended by the current thread's wake. `same_process`: the current thread shares the
/// waiter's memory.
#[inline(always)]
pub fn capture(waiter: *const u8, mut head: StacksHead, same_process: bool) {
    // A constant to the verifier (read-only globals are frozen at load).
    let n = STACK_BYTES.load();
    if n == 0 {
        return;
    }
    let size = core::mem::size_of::<StacksHead>() + 2 * n as usize;
    // SAFETY: helper without preconditions.
    let cpu = unsafe { bpf_get_smp_processor_id() };
    // Branches, not a table of maps: each reservation names its map.
    let reserved = match cpu & SYNC_RING_MASK.load() {
        0 => reserve(&EVENTS, size),
        1 => reserve(&EVENTS_1, size),
        2 => reserve(&EVENTS_2, size),
        _ => reserve(&EVENTS_3, size),
    };
    let Some((mut entry, flags)) = reserved else {
        count_loss(LossCounter::RingFull);
        return;
    };
    let base = entry.as_mut_ptr();
    // SAFETY: `waiter` is the tracepoint's BTF task pointer; the current task's comes
    // from the helper. The record has room for the head and `n` bytes of each stack.
    unsafe {
        head.waiter_regs = user_regs(waiter);
        head.waker_regs = user_regs(bpf_get_current_task_btf() as *const u8);
        let body = base.add(core::mem::size_of::<StacksHead>());
        if same_process {
            head.waiter_regs.len = copy_stack(body, head.waiter_regs.sp, n);
            if head.waiter_regs.len == 0 {
                head.waiter_regs.missing = STACK_MISSING_UNREADABLE;
            }
        } else {
            head.waiter_regs.missing = STACK_MISSING_OTHER_PROCESS;
        }
        head.waker_regs.len = copy_stack(body.add(n as usize), head.waker_regs.sp, n);
        if head.waker_regs.len == 0 {
            head.waker_regs.missing = STACK_MISSING_UNREADABLE;
        }
        core::ptr::write_unaligned(base.cast::<StacksHead>(), head);
    }
    entry.submit(flags);
}

/// The head of a stacks record for a wait of `pid_tgid` on `uaddr`, woken at `ts` by
/// `waker` of process `waker_pid` after `wait_ns`.
#[inline(always)]
pub fn head(
    header: EventHeader,
    uaddr: u64,
    wait_ns: u64,
    waker_pid: u32,
    waker: u32,
) -> StacksHead {
    StacksHead {
        header,
        uaddr,
        wait_ns,
        waker_pid,
        waker,
        waiter_regs: StackRegs::default(),
        waker_regs: StackRegs::default(),
    }
}
