//! Timed functions (`--func`): an entry and a return probe on each chosen function of
//! the targets. The return keeps each finished call in its thread's slot, and sends
//! them [`FUNC_BATCH`] at a time (one ring reservation for several calls: it was a
//! quarter of what a timed call cost the kernel's two probes), or sooner when the
//! oldest has waited [`FUNC_FLUSH_NS`]; a thread's exit sends what it kept, and
//! userspace takes the rest when the trace ends.

use core::mem::size_of;

use crate::records::EventHeader;

/// One finished call of a timed function.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FuncCall {
    /// When the call entered the function (CLOCK_MONOTONIC ns).
    pub start_ns: u64,
    /// When it returned.
    pub end_ns: u64,
    /// The function's index in userspace's table (the probes' cookie).
    pub function: u32,
    /// Calls of timed functions the thread was inside when this one started (0: none).
    pub depth: u16,
    /// Of those, calls of the same function (a recursive call's outer calls).
    pub recursion: u16,
}
const _: () = assert!(size_of::<FuncCall>() == 24);

/// Finished calls sent together.
pub const FUNC_BATCH: usize = 8;
/// A finished call is sent at the latest at its thread's next return this long after it
/// (or at the thread's exit, or the trace's end).
pub const FUNC_FLUSH_NS: u64 = 100_000_000;

/// Finished calls of one thread (kind [`crate::EventKind::Func`]); `ts_ns` in the header
/// is when they were sent.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FuncEvent {
    /// Common header: the calling thread, and when the calls were sent.
    pub header: EventHeader,
    /// How many of `calls` hold calls (at most [`FUNC_BATCH`]).
    pub count: u32,
    /// Padding.
    pub pad: u32,
    /// The calls, oldest first.
    pub calls: [FuncCall; FUNC_BATCH],
}
const _: () = assert!(size_of::<FuncEvent>() == 32 + 24 * FUNC_BATCH);

impl FuncEvent {
    /// The calls it holds.
    pub fn calls(&self) -> &[FuncCall] {
        &self.calls[..(self.count as usize).min(FUNC_BATCH)]
    }
}

/// [`crate::names::GLOBAL_CONTEXT_FILTER`] bit: only the threads of `--tid`.
pub const CONTEXT_TIDS: u32 = 1;
/// [`crate::names::GLOBAL_CONTEXT_FILTER`] bit: only on the CPUs of `--cpu`.
pub const CONTEXT_CPUS: u32 = 2;

/// Timed calls in flight remembered per thread: a call nested deeper is not timed (and
/// is counted as not remembered).
pub const MAX_FUNC_DEPTH: usize = 32;

/// A timed call in flight.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FuncFrame {
    /// When it entered.
    pub start_ns: u64,
    /// The stack pointer at its entry probe (where its return address is): identifies
    /// the call, and tells a live call from one left by a longjmp or an exception.
    pub sp: u64,
    /// The function's index.
    pub function: u32,
    /// Padding.
    pub pad: u32,
}
const _: () = assert!(size_of::<FuncFrame>() == 24);

/// The timed calls in flight on one thread, innermost last: the thread's slot in
/// [`crate::names::MAP_FUNC_SLOTS`], or its entry in
/// [`crate::names::MAP_FUNC_PENDING`].
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct FuncStack {
    /// The thread (pid_tgid) that holds the slot, claimed atomically from 0 at its first
    /// timed call and given back at its exit (unused in FUNC_PENDING).
    pub owner: u64,
    /// How many of `frames` are in flight (64 bits for the verifier's bounds checks).
    pub depth: u64,
    /// The calls.
    pub frames: [FuncFrame; MAX_FUNC_DEPTH],
    /// How many of `finished` hold calls not sent yet.
    pub done: u64,
    /// Finished calls not sent yet, oldest first.
    pub finished: [FuncCall; FUNC_BATCH],
}
const _: () = assert!(size_of::<FuncStack>() == 24 + 24 * MAX_FUNC_DEPTH + 24 * FUNC_BATCH);

impl FuncStack {
    /// No call in flight (a constant: the eBPF side inserts it from read-only memory,
    /// being too large for its stack).
    pub const EMPTY: Self = Self {
        owner: 0,
        depth: 0,
        frames: [FuncFrame {
            start_ns: 0,
            sp: 0,
            function: 0,
            pad: 0,
        }; MAX_FUNC_DEPTH],
        done: 0,
        finished: [FuncCall {
            start_ns: 0,
            end_ns: 0,
            function: 0,
            depth: 0,
            recursion: 0,
        }; FUNC_BATCH],
    };
}

impl Default for FuncStack {
    fn default() -> Self {
        Self::EMPTY
    }
}
