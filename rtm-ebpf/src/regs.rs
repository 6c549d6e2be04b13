//! Reads of a task's saved user registers (`struct pt_regs`), at the offsets of
//! `rtm_common::arch::pt_regs` (x86-64 only; see that module for why they are constants
//! and not read from the kernel's BTF like `task_struct`'s).

use aya_ebpf::{EbpfContext, helpers::bpf_task_pt_regs};
use rtm_common::arch::pt_regs;

/// The register at `offset` in the saved registers at `regs`, with a plain load.
///
/// # Safety
/// `regs` is a BTF pointer to `struct pt_regs` (from bpf_task_pt_regs or a BTF
/// tracepoint's argument) and `offset` one of `arch::pt_regs`'s: the verifier checks
/// the load against the kernel's BTF and the JIT makes it fault-safe.
#[inline(always)]
pub unsafe fn saved(regs: *const u8, offset: usize) -> u64 {
    // SAFETY: see above.
    unsafe { core::ptr::read_volatile(regs.add(offset).cast::<u64>()) }
}

/// The saved registers of `task`, a BTF pointer for [`saved`].
///
/// # Safety
/// `task` is a BTF task pointer.
#[inline(always)]
pub unsafe fn of_task(task: *const u8) -> *const u8 {
    // SAFETY: the helper takes a BTF task pointer and returns its saved registers as a
    // BTF pointer.
    unsafe { bpf_task_pt_regs(task as *mut _) as *const u8 }
}

/// The system call a task is in (its saved registers): number, then the first, second
/// and fifth arguments (for a futex call: the word, the op, FUTEX_WAKE_OP's second word).
///
/// # Safety
/// `task` is a BTF task pointer.
#[inline(always)]
pub unsafe fn syscall_of(task: *const u8) -> (u64, u64, u64, u64) {
    // SAFETY: the task's saved registers as a BTF pointer, at arch::pt_regs offsets.
    unsafe {
        let regs = of_task(task);
        (
            saved(regs, pt_regs::SYSCALL_NR),
            saved(regs, pt_regs::SYSCALL_ARG0),
            saved(regs, pt_regs::SYSCALL_ARG1),
            saved(regs, pt_regs::SYSCALL_ARG4),
        )
    }
}

/// The user stack pointer at a uprobe or uretprobe.
#[inline(always)]
pub fn probe_sp<C: EbpfContext>(ctx: &C) -> u64 {
    // SAFETY: a probe's context points at the task's saved registers; the verifier
    // allows an aligned 8-byte load from it at a constant offset.
    unsafe { *ctx.as_ptr().cast::<u8>().add(pt_regs::SP).cast::<u64>() }
}
