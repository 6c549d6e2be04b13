//! User call stacks of contended futex waits (contention mode): the registers and the
//! top of the user stack of the waiter and of the thread whose wake ended its wait,
//! copied in the waker's context at the wake and unwound in userspace.

use core::mem::size_of;

use crate::event::EventHeader;

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
}
const _: () = assert!(size_of::<StackRegs>() == 32);

/// [`StackRegs::missing`]: it was copied.
pub const STACK_PRESENT: u32 = 0;
/// [`StackRegs::missing`]: the waiter's memory is another process's than the waker's,
/// which the wake's context cannot read.
pub const STACK_MISSING_OTHER_PROCESS: u32 = 1;
/// [`StackRegs::missing`]: no size of copy could be read (pages not resident).
pub const STACK_MISSING_UNREADABLE: u32 = 2;

/// The fixed part of a stacks record (kind [`crate::EventKind::Stacks`]); the waiter's
/// bytes and then the waker's follow, `N` bytes each, where `N` is
/// `(record length - size_of::<StacksHead>()) / 2`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StacksHead {
    /// Common header: the waiting thread; `ts_ns` is the wake.
    pub header: EventHeader,
    /// The futex word waited on.
    pub uaddr: u64,
    /// Nanoseconds from the start of the wait to the wake.
    pub wait_ns: u64,
    /// The waking thread's process.
    pub waker_pid: u32,
    /// The waking thread.
    pub waker: u32,
    /// The waiter's registers and copy.
    pub waiter_regs: StackRegs,
    /// The waker's registers and copy.
    pub waker_regs: StackRegs,
}
const _: () = assert!(size_of::<StacksHead>() == 112);

/// A stacks record with `N` bytes of each stack, as the kernel writes it.
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
