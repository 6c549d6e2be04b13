//! User call stacks of contended futex waits (contention mode): the registers and the
//! top of the user stack of the waiter and of the thread whose wake ended its wait,
//! copied in the waker's context at the wake and unwound in userspace.

use core::mem::size_of;

use crate::records::EventHeader;

/// The user registers an unwinder needs and how much of the stack above `sp` was
/// copied.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StackRegs {
    /// Instruction pointer at the system call (user space).
    pub ip: u64,
    /// Stack pointer.
    pub sp: u64,
    /// Frame pointer (rbp), for frames that keep one.
    pub bp: u64,
    /// Bytes copied from `sp` up; 0 when none could be read.
    pub len: u32,
    /// [`STACK_MISSING_*`] reason when `len` is 0.
    pub missing: u32,
    /// The return addresses that full mode's return probes swapped for the kernel's
    /// uretprobe trampoline, innermost first (`slot` 0: none). Userspace reads `ret`
    /// where the copy has the trampoline's address at `slot`.
    pub fixes: [StackFix; STACK_FIXES],
}
const _: () = assert!(size_of::<StackRegs>() == 32 + 16 * STACK_FIXES);

/// The probed calls in flight whose return addresses a stack record restores.
pub const STACK_FIXES: usize = 2;

/// A return address on the user stack that a return probe replaced (full mode): the
/// probed call's entry saw `ret` at `slot`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StackFix {
    /// The stack address of the return address (the stack pointer at the call's entry
    /// probe).
    pub slot: u64,
    /// The caller's return address it held before the return probe.
    pub ret: u64,
}

/// [`StackRegs::missing`]: it was copied.
pub const STACK_PRESENT: u32 = 0;
/// [`StackRegs::missing`]: the waiter's memory is another process's than the waker's,
/// which the wake's context cannot read (and it was not taken at its sleep).
pub const STACK_MISSING_OTHER_PROCESS: u32 = 1;
/// [`StackRegs::missing`]: no size of copy could be read (pages not resident).
pub const STACK_MISSING_UNREADABLE: u32 = 2;
/// [`StackRegs::missing`]: the wake reached the wait before its thread went to sleep, in
/// a context now gone (the waker's side of such a wait is never taken).
pub const STACK_MISSING_WAKE_BEFORE_SLEEP: u32 = 3;

/// [`StacksHead::sides`] bit: the record has the waiter's stack.
pub const STACK_SIDE_WAITER: u32 = 1;
/// [`StacksHead::sides`] bit: the record has the waker's stack.
pub const STACK_SIDE_WAKER: u32 = 2;

/// The fixed part of a stacks record (kind [`crate::EventKind::Stacks`]), followed by
/// one copy of `N` bytes for each side it has (the waiter's first), where `N` is the
/// body's length over the sides. A wait's waiter stack is taken when it goes to sleep
/// (a record with the waiter's side only), and the waker's at the wake that ends it (a
/// record with the waker's side, and the waiter's too when the waiter had not left its
/// CPU yet): `(header.pid, header.tid, start_ns)` joins them.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StacksHead {
    /// Common header: the waiting thread; `ts_ns` is when the record was made (the
    /// sleep, or the wake).
    pub header: EventHeader,
    /// The futex word waited on.
    pub uaddr: u64,
    /// When the wait started (its futex call's entry): the wait's identity.
    pub start_ns: u64,
    /// A wake's record: nanoseconds from the start of the wait to the wake; 0 otherwise.
    pub wait_ns: u64,
    /// The waking thread's process (0 in a sleep's record).
    pub waker_pid: u32,
    /// The waking thread (0 in a sleep's record).
    pub waker: u32,
    /// `STACK_SIDE_*` bits: which copies follow.
    pub sides: u32,
    /// How many waits this one stands for, in thousandths (stacks are sampled, each
    /// with the inverse of its chance of being taken); 0 means 1000 (one wait).
    pub weight_milli: u32,
    /// The waiter's registers and copy.
    pub waiter_regs: StackRegs,
    /// The waker's registers and copy.
    pub waker_regs: StackRegs,
}
const _: () = assert!(size_of::<StacksHead>() == 64 + 2 * size_of::<StackRegs>());

/// A stacks record with both sides, `N` bytes of each stack, as the kernel writes it.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct StacksEvent<const N: usize> {
    /// The fixed part.
    pub head: StacksHead,
    /// The top of the waiter's stack, from its `sp` up.
    pub waiter: [u8; N],
    /// The top of the waker's stack.
    pub waker: [u8; N],
}

/// The sizes of stack copy the eBPF programs can make (`--stack-bytes`).
pub const STACK_SIZES: [u32; 5] = [1024, 2048, 4096, 8192, 16384];

/// Per CPU, the waiters' stacks taken this tenth of a second
/// ([`crate::names::MAP_STACK_SAMPLER`]): each sleeping wait is sampled with probability
/// `chance / 2^32`, set each tenth of a second to the rate wanted over the waits seen in
/// the tenth before, and a sample stands for `2^32 / chance` waits, so per-stack totals
/// are unbiased estimates.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct StackSampler {
    /// When this window began (bpf_ktime_get_ns).
    pub window_ns: u64,
    /// Waits seen this window.
    pub seen: u64,
    /// Stacks taken this window.
    pub taken: u64,
    /// The chance a wait's stacks are taken, out of 2^32 (0 in the first window: every
    /// wait, up to the cap).
    pub chance: u64,
    /// Waits passed over by the cap (thousandths), added to the next stack taken on this
    /// CPU so that the weights still sum to the waits seen.
    pub carry_milli: u64,
}
