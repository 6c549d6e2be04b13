//! Layouts of the eBPF maps' values shared with userspace: the process filter's values,
//! the loss counters, the calls and futex waits in flight, the ended waits left to send
//! and the last-waker table. `#[repr(C)]`, sizes checked at compile time.

use core::mem::size_of;

use crate::{EventHeader, FutexWaitEvent};

/// A process's value in the in-kernel filter (its byte in the TRACED array, its value
/// in TRACED_TGIDS): traced.
pub const TRACED_ON: u8 = 1;
/// Traced, and the processes it forks are traced from birth with this same value.
pub const TRACED_FOLLOW: u8 = 2;
/// Was traced, and its last thread has exited: set by the exit program before the pid
/// can be freed, so a process that gets the pid next is not traced (PID reuse). Only
/// the exit program acts on it (the dying group's other threads still clean up).
pub const TRACED_EXITED: u8 = 4;
/// The bits of a filter value that mean "traced now".
pub const TRACED_NOW: u8 = TRACED_ON | TRACED_FOLLOW;

/// Indexes into the per-CPU loss counter map ([`crate::names::MAP_LOSSES`]).
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "user", derive(serde::Serialize))]
#[cfg_attr(feature = "user", serde(rename_all = "snake_case"))]
pub enum LossCounter {
    /// A record could not be reserved: the ring buffer was full.
    RingFull = 0,
    /// The per-thread pending-call map was full: an entry could not be remembered.
    PendingFull = 1,
    /// A call in flight when the probes attached: a return probe fired without a
    /// remembered entry, or an entry's return was never probed (a later call from the
    /// same frame found it).
    MissedEntry = 2,
    /// Not a loss: a futex wait sent as a record because the map that sums them was
    /// full ([`crate::names::MAP_FUTEX_AGG`]).
    AggFull = 3,
}

impl LossCounter {
    /// Number of counters; the size of the loss map.
    pub const COUNT: u32 = 4;
    /// Every counter, in index order.
    pub const ALL: [LossCounter; 4] = [
        LossCounter::RingFull,
        LossCounter::PendingFull,
        LossCounter::MissedEntry,
        LossCounter::AggFull,
    ];
}

/// What an entry probe remembers until the matching return probe fires.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct PendingCall {
    /// Object address (first argument).
    pub object: u64,
    /// Second argument when the operation needs it (the cond wait's mutex, the
    /// pthread_t pointer of pthread_create).
    pub aux: u64,
    /// Return address of the call.
    pub caller: u64,
    /// bpf_ktime_get_ns at entry.
    pub start_ns: u64,
    /// The probe's cookie (see [`Cookie`](crate::Cookie)).
    pub cookie: u64,
    /// `SYNC_FLAG_*` bits observed so far.
    pub flags: u32,
    /// Filled in while the call runs: threads woken, or the created thread's tid.
    pub extra: u32,
    /// Stack pointer at the probe: with `caller`, identifies the call's frame.
    pub sp: u64,
    /// Extra hits of the entry probe by the same call (a function that loops back to its
    /// probed instruction, as pthread_spin_lock's retry loop does); that many return-probe
    /// firings belong to them and are swallowed.
    pub rehits: u32,
    /// 1 when this entry replaced one of the same frame, object and return address whose
    /// return was never probed (see `call_enter`): the replaced ones were counted once.
    pub replaced: u32,
}
const _: () = assert!(size_of::<PendingCall>() == 64);

/// Deepest nesting of probed calls remembered per thread (pthread_create calls
/// pthread_mutex_lock, for one).
pub const MAX_CALL_DEPTH: usize = 4;

/// The probed calls in flight on one thread, innermost last: one map value per thread,
/// so entry and return each cost one map lookup.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ThreadCalls {
    /// How many of `calls` are in flight (64 bits wide so the eBPF verifier can follow
    /// bounds checks on it without a zero-extension in between).
    pub depth: u64,
    /// The calls, outermost first.
    pub calls: [PendingCall; MAX_CALL_DEPTH],
}
const _: () = assert!(size_of::<ThreadCalls>() == 8 + 64 * MAX_CALL_DEPTH);

/// A futex wait in flight, between the entry and the return of a futex call.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct PendingFutex {
    /// The futex word's user address.
    pub uaddr: u64,
    /// bpf_ktime_get_ns at entry.
    pub start_ns: u64,
    /// When a timed wait times out, on bpf_ktime_get_ns's clock (0: untimed, or the
    /// timeout could not be read).
    pub deadline_ns: u64,
    /// Full mode: the thread whose wake ended the wait, as `tgid << 32 | tid`, recorded
    /// at the wake (0: none yet); the record is made at the return.
    pub waker: u64,
    /// The futex op (with its flags).
    pub op: u32,
    /// The value the caller expected in the word (for pthread_join: the joined tid).
    pub val: u32,
    /// [`PENDING_TIMED`] when the call has a timeout.
    pub flags: u32,
    /// Contention mode: waits on this word before this one that returned without
    /// sleeping, not yet sent ([`FutexWaitEvent::unslept`]).
    pub unslept: u32,
    /// The mutex's holder when the wait began ([`FutexWaitEvent::holder`]).
    pub holder: u32,
    /// A sampled wait's weight, thousandths of a wait (see `StacksHead::weight_milli`).
    pub pad: u32,
    /// Contention mode from the sleep: the word of a wait a wake reached before the
    /// thread went to sleep (the wake counted it once the thread's next event tells
    /// whether its sleep still came), 0 for none.
    pub early_word: u64,
    /// When that wake came (0: none).
    pub early_ns: u64,
    /// Who made it, `tgid << 32 | tid`.
    pub early_waker: u64,
    /// Contention mode on the kernel's futex functions: when a thread's wake marked the
    /// wait (`waker` says whose; 0: no wake yet).
    pub wake_ns: u64,
}
const _: () = assert!(size_of::<PendingFutex>() == 88);
// `flags` and `unslept` are exchanged together, as one aligned 8-byte word.
const _: () = assert!(core::mem::offset_of!(PendingFutex, flags) % 8 == 0);
const _: () = assert!(
    core::mem::offset_of!(PendingFutex, unslept) == core::mem::offset_of!(PendingFutex, flags) + 4
);

impl PendingFutex {
    /// The `aux` of the wait's record: the op in the low 32 bits, the value expected in
    /// the word in the high 32.
    pub const fn aux(&self) -> u64 {
        self.op as u64 | (self.val as u64) << 32
    }

    /// The record of this wait, which returned without sleeping (-EAGAIN, no wait time,
    /// no waker), standing also for `earlier` such waits before it on the same word.
    pub const fn unslept_record(&self, header: EventHeader, earlier: u32) -> FutexWaitEvent {
        FutexWaitEvent {
            header,
            uaddr: self.uaddr,
            aux: self.aux(),
            wait_ns: 0,
            ret: -11,
            waker: 0,
            unslept: earlier,
            waker_pid: 0,
            runnable_ns: 0,
            holder: self.holder,
        }
    }
}

/// [`PendingFutex::flags`]: the wait has a timeout (a wake from no thread ends it as
/// timed out).
pub const PENDING_TIMED: u32 = 1;
/// [`PendingFutex::flags`] bit: the waiter's call stack of this wait was taken (at its
/// sleep, or at its wake when it had not left its CPU yet); set by whoever takes it,
/// atomically, so it is taken once.
pub const PENDING_STACKED: u32 = 2;
/// [`PendingFutex::flags`] bit: this wait's call stacks are taken (it was sampled, see
/// [`crate::stack::StackSampler`]); it is then sent as a record, not summed.
pub const PENDING_SAMPLED: u32 = 4;

/// A thread's last futex wait that ended, waiting in its slot to be sent (contention
/// mode, `names::MAP_FUTEX_DONE`), with what it needs to be finished. The waker's CPU
/// records the wait at the wake; the woken thread's first switch-in after it
/// (`names::PROG_FUTEX_SWITCH`, on sched_switch) ends it, so the time the thread then
/// spent getting a CPU (waking an idle one, queueing behind others) is the wait's, and
/// nothing after (a preemption later in its critical section) is.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FutexDone {
    /// The wait, ended at its wake; `header.kind` and `header.cpu` (its first 8 bytes)
    /// are the mark of a record not yet sent.
    pub wait: FutexWaitEvent,
    /// When the woken thread was first switched in after the wake; 0 until then (and
    /// for good when it was woken before it had left its CPU).
    pub ran_ns: u64,
    /// 1 when the wait ended at its system call's return (full mode, kernels without
    /// BTF): nothing to add.
    pub at_return: u64,
}
const _: () = assert!(size_of::<FutexDone>() == 88);

impl FutexDone {
    /// The wait, ended when its thread got a CPU: at its first switch-in after the
    /// wake. A thread woken before it had left its CPU, or not run yet, ends at the
    /// wake.
    pub fn finished(&self) -> FutexWaitEvent {
        let mut w = self.wait;
        let woken = w.header.ts_ns;
        if self.at_return & DONE_AT_RETURN == 0 && self.ran_ns > woken {
            let runnable = self.ran_ns - woken;
            w.wait_ns += runnable;
            w.header.ts_ns = self.ran_ns;
            w.runnable_ns = if runnable > u32::MAX as u64 {
                u32::MAX
            } else {
                runnable as u32
            };
        }
        w
    }
}

/// [`FutexDone::at_return`] bit: the wait ended at its return (no run time to add).
pub const DONE_AT_RETURN: u64 = 1;
/// [`FutexDone::at_return`] bit: the wait's stacks were taken: it goes out as a record
/// (its stacks records are joined with it), not into the sums.
pub const DONE_SAMPLED: u64 = 2;

/// A slot of the last-waker table: who last woke waiters on a futex word, and when.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct FutexWaker {
    /// The futex word's user address (with `tgid`, the slot's key).
    pub uaddr: u64,
    /// bpf_ktime_get_ns when the wake was entered.
    pub ts_ns: u64,
    /// The word's process.
    pub tgid: u32,
    /// The waking thread.
    pub tid: u32,
    /// Pads a slot to 32 bytes.
    pub pad: u64,
}
const _: () = assert!(size_of::<FutexWaker>() == 32);

#[cfg(feature = "user")]
mod user_impls {
    use super::*;
    // SAFETY: plain-old-data, #[repr(C)], every bit pattern valid, no padding.
    unsafe impl aya::Pod for PendingFutex {}
    // SAFETY: as above.
    unsafe impl aya::Pod for PendingCall {}
    // SAFETY: as above.
    unsafe impl aya::Pod for ThreadCalls {}

    impl core::fmt::Display for LossCounter {
        fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
            f.write_str(match self {
                LossCounter::RingFull => "ring buffer full",
                LossCounter::PendingFull => "pending-call map full",
                LossCounter::MissedEntry => "return without entry (call in flight at attach)",
                LossCounter::AggFull => "futex sums map full (waits sent one by one)",
            })
        }
    }
}
