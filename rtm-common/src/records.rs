//! Event layouts. Every record starts with an [`EventHeader`]; `header.kind` says which
//! payload follows. Layouts are `#[repr(C)]` with explicit padding and no `bool`, and
//! their sizes are checked at compile time so both sides agree byte for byte.

use core::mem::size_of;

/// Declares a `#[repr(u32)]` enum with explicit discriminants, `ALL` and a checked
/// `from_u32`, so a new variant cannot be forgotten in the conversion.
macro_rules! abi_enum {
    ($(#[$m:meta])* pub enum $name:ident { $($(#[$vm:meta])* $v:ident = $n:literal,)+ }) => {
        $(#[$m])*
        #[repr(u32)]
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[cfg_attr(feature = "user", derive(serde::Serialize, serde::Deserialize))]
        #[cfg_attr(feature = "user", serde(rename_all = "snake_case"))]
        pub enum $name { $($(#[$vm])* $v = $n,)+ }

        impl $name {
            /// Every variant, in discriminant order.
            pub const ALL: &'static [$name] = &[$($name::$v,)+];

            /// Converts a raw discriminant; `None` for a value this build does not know.
            pub const fn from_u32(v: u32) -> Option<Self> {
                match v {
                    $($n => Some($name::$v),)+
                    _ => None,
                }
            }
        }
    };
}

abi_enum! {
    /// Discriminant of a record, stored in [`EventHeader::kind`].
    pub enum EventKind {
        /// A [`SyncEvent`]: an operation on a synchronization object or a futex.
        Sync = 1,
        /// A [`LifecycleEvent`]: a thread or process was created, exited or exec'd.
        Lifecycle = 2,
        /// An [`crate::MpiEvent`]: an MPI call, or a request a wait or test completed.
        Mpi = 3,
        /// A [`FutexWaitEvent`]: a futex wait, in the compact form contention mode sends.
        FutexWait = 4,
        /// A [`crate::StacksHead`] and the two stack copies after it: the user stacks of a
        /// futex waiter and of the thread whose wake ended its wait.
        Stacks = 5,
        /// A [`crate::FuncEvent`]: finished calls of timed functions (`--func`) of a thread.
        Func = 6,
        /// Futex waits summed in the kernel ([`crate::agg`]), as userspace read them; never
        /// in a ring.
        FutexAgg = 7,
    }
}

/// The first 24 bytes of every record.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EventHeader {
    /// An [`EventKind`] discriminant.
    pub kind: u32,
    /// CPU the event was recorded on.
    pub cpu: u32,
    /// CLOCK_MONOTONIC nanoseconds (bpf_ktime_get_ns) when the operation completed.
    pub ts_ns: u64,
    /// Process id (tgid).
    pub pid: u32,
    /// Thread id.
    pub tid: u32,
}
const _: () = assert!(size_of::<EventHeader>() == 24);

abi_enum! {
    /// Which kind of object a [`SyncEvent`] is about.
    pub enum Primitive {
        /// pthread_mutex_t.
        Mutex = 1,
        /// pthread_rwlock_t.
        #[cfg_attr(feature = "user", serde(rename = "rwlock"))]
        RwLock = 2,
        /// pthread_spinlock_t.
        #[cfg_attr(feature = "user", serde(rename = "spinlock"))]
        Spin = 3,
        /// sem_t.
        #[cfg_attr(feature = "user", serde(rename = "semaphore"))]
        Sem = 4,
        /// pthread_cond_t.
        #[cfg_attr(feature = "user", serde(rename = "condvar"))]
        Cond = 5,
        /// pthread_barrier_t.
        Barrier = 6,
        /// A thread, as pthread_create and pthread_join see it (object = its pthread_t).
        Thread = 7,
        /// A futex word, seen from the futex syscall (object = its user address).
        Futex = 8,
    }
}

abi_enum! {
    /// The operation a [`SyncEvent`] records. Blocking operations are reported once, at
    /// return, with the time spent inside the call in [`SyncEvent::wait_ns`].
    pub enum SyncOp {
        /// A blocking acquire (pthread_mutex_lock, pthread_spin_lock).
        Lock = 1,
        /// A non-blocking attempt; `ret` is EBUSY when it failed.
        TryLock = 2,
        /// An acquire with a deadline; `ret` is ETIMEDOUT on timeout.
        TimedLock = 3,
        /// A release, recorded at entry.
        Unlock = 4,
        /// pthread_rwlock_rdlock.
        RdLock = 5,
        /// pthread_rwlock_tryrdlock.
        TryRdLock = 6,
        /// pthread_rwlock_timedrdlock / clockrdlock.
        TimedRdLock = 7,
        /// pthread_rwlock_wrlock.
        WrLock = 8,
        /// pthread_rwlock_trywrlock.
        TryWrLock = 9,
        /// pthread_rwlock_timedwrlock / clockwrlock.
        TimedWrLock = 10,
        /// A blocking wait: sem_wait, pthread_cond_wait, pthread_barrier_wait, FUTEX_WAIT.
        Wait = 11,
        /// sem_trywait; `ret` is -1 (errno EAGAIN) when it would have blocked.
        TryWait = 12,
        /// sem_timedwait, pthread_cond_timedwait / clockwait.
        TimedWait = 13,
        /// sem_post, recorded at entry.
        Post = 14,
        /// pthread_cond_signal; `extra` counts the threads its FUTEX_WAKE woke.
        Signal = 15,
        /// pthread_cond_broadcast; `extra` counts the threads its FUTEX_WAKE woke.
        Broadcast = 16,
        /// pthread_create: `object` is the new pthread_t, `extra` the new thread's tid.
        Create = 17,
        /// pthread_join: `object` is the joined pthread_t.
        Join = 18,
        /// A futex wake that woke `ret` threads.
        Wake = 19,
    }
}

/// [`SyncEvent::flags`] bit: the object was already held when the call started.
pub const SYNC_FLAG_CONTENDED: u32 = 1;
/// [`SyncEvent::flags`] bit: the call blocked in the kernel (a FUTEX_WAIT was seen in it).
pub const SYNC_FLAG_BLOCKED: u32 = 2;
/// [`SyncEvent::flags`] bit: the record marks the start of a call still in progress (a
/// condition-variable wait, which releases its mutex as it starts; a pthread_mutex_lock
/// probed at entry only, which ends when its thread next does anything else).
pub const SYNC_FLAG_BEGIN: u32 = 4;

/// An operation on a synchronization object (kind [`EventKind::Sync`]).
///
/// For [`Primitive::Futex`] waits, `aux` is the futex op in its low 32 bits and the value
/// the caller expected in the word in its high 32 bits, `extra` the tid whose
/// FUTEX_WAKE on the same word ended the wait (0 when unknown), and `caller` (a futex wait
/// has no call site) that thread's process id, which may be another process's for a
/// process-shared word (0 when unknown).
/// For [`Primitive::Cond`] waits, `aux` is the mutex the wait released.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SyncEvent {
    /// Common header; `ts_ns` is when the call returned (or, for releases, was entered).
    pub header: EventHeader,
    /// Address of the object in the traced process (e.g. the pthread_mutex_t).
    pub object: u64,
    /// A second address: see the type's documentation.
    pub aux: u64,
    /// Return address of the call: where in the program the operation was made.
    pub caller: u64,
    /// Nanoseconds spent inside the call (0 for releases).
    pub wait_ns: u64,
    /// A [`Primitive`] discriminant.
    pub primitive: u32,
    /// A [`SyncOp`] discriminant.
    pub op: u32,
    /// The call's return value (0 on success, an errno otherwise; 0 for releases).
    pub ret: i32,
    /// `SYNC_FLAG_*` bits.
    pub flags: u32,
    /// A count or thread id: see the type's documentation.
    pub extra: u32,
    /// Futex waits only: earlier waits by the thread on the same word that returned
    /// without sleeping, folded into this record ([`FutexWaitEvent::unslept`]); 0
    /// otherwise.
    pub repeats: u32,
}
const _: () = assert!(size_of::<SyncEvent>() == 80);

/// A futex wait (kind [`EventKind::FutexWait`]): the fields of a [`Primitive::Futex`]
/// [`SyncOp::Wait`] [`SyncEvent`] that such a wait fills, in 72 bytes, and the time it
/// spent runnable after its wake. Decoded as that
/// SyncEvent. A wait that returned without sleeping has `ret` -EAGAIN and no wait time;
/// contention mode folds a thread's run of them on one word into `unslept` of its next
/// record (one a contended lock would otherwise send per lock attempt).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FutexWaitEvent {
    /// Common header; `ts_ns` is when the wait returned.
    pub header: EventHeader,
    /// The futex word's user address.
    pub uaddr: u64,
    /// The futex op in the low 32 bits, the value expected in the word in the high 32.
    pub aux: u64,
    /// Nanoseconds in the call.
    pub wait_ns: u64,
    /// The call's return value.
    pub ret: i32,
    /// The tid whose FUTEX_WAKE on the word ended the wait (0 when unknown).
    pub waker: u32,
    /// Earlier waits by the thread on the same word, since its last record, that
    /// returned without sleeping (the word had changed before it could sleep).
    pub unslept: u32,
    /// The process (tgid) of the thread that woke it: the waiter's own, another traced
    /// process's, or one not traced at all (a process-shared word); 0 when unknown.
    pub waker_pid: u32,
    /// Of `wait_ns`, the time from the wake to the thread's first switch-in after it
    /// (runnable, waiting for a CPU), in contention mode; saturates at u32::MAX. 0 when
    /// the thread never left its CPU, and when the wake time is not known (full mode).
    pub runnable_ns: u32,
    /// The thread that held the word's mutex when the wait began, read from the mutex
    /// in the waiter's context ([`mutex_holder`]); 0 when the word is no mutex's (a
    /// condition variable, barrier, semaphore, join or custom futex) or it is unknown.
    pub holder: u32,
}
const _: () = assert!(size_of::<FutexWaitEvent>() == 72);

impl FutexWaitEvent {
    /// `n` waits (at least 1) of the same thread on the same word that returned without
    /// sleeping, as one record.
    pub const fn unslept_only(&self, n: u32) -> FutexWaitEvent {
        FutexWaitEvent {
            wait_ns: 0,
            ret: -11,
            waker: 0,
            unslept: n.saturating_sub(1),
            waker_pid: 0,
            runnable_ns: 0,
            ..*self
        }
    }

    /// The same wait as a [`SyncEvent`].
    pub fn to_sync(&self) -> SyncEvent {
        SyncEvent {
            header: EventHeader {
                kind: EventKind::Sync as u32,
                ..self.header
            },
            object: self.uaddr,
            aux: self.aux,
            caller: u64::from(self.waker_pid),
            wait_ns: self.wait_ns,
            primitive: Primitive::Futex as u32,
            op: SyncOp::Wait as u32,
            ret: self.ret,
            flags: 0,
            extra: self.waker,
            repeats: self.unslept,
        }
    }
}

abi_enum! {
    /// What a [`LifecycleEvent`] records.
    pub enum LifecycleOp {
        /// A thread (`CLONE_THREAD`) or a process was created; the header is the parent.
        Spawn = 1,
        /// A thread exited; the header is the thread.
        Exit = 2,
        /// A process exec'd a new program; the header is the process.
        Exec = 3,
    }
}

/// Linux `CLONE_THREAD`: a [`LifecycleOp::Spawn`] that created a thread, not a process.
pub const CLONE_THREAD: u64 = 0x0001_0000;

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

/// A thread or process lifecycle event from the sched/task tracepoints.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LifecycleEvent {
    /// Common header: the task the event happened in (the parent for a spawn).
    pub header: EventHeader,
    /// A [`LifecycleOp`] discriminant.
    pub op: u32,
    /// Spawn: the new task's id. Exit: 1 when the whole process is gone.
    pub child: u32,
    /// Spawn: the clone flags.
    pub clone_flags: u64,
    /// The new task's or the exiting task's name, NUL-padded.
    pub comm: [u8; 16],
}
const _: () = assert!(size_of::<LifecycleEvent>() == 56);

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
    /// The probe's cookie (see [`Cookie`]).
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

/// Bytes of a glibc `pthread_mutex_t` read at a futex wait's word to find its holder:
/// `int __lock; unsigned __count; int __owner; unsigned __nusers; int __kind`.
pub const MUTEX_HEAD_WORDS: usize = 5;

/// The holder of the glibc mutex whose head (`words`, read at the futex word) a thread
/// waits on with futex command `cmd` (`op & FUTEX_CMD_MASK`): every mutex type keeps its
/// owner's TID in `__owner`; a normal, recursive, error-checking or adaptive mutex's
/// waiters sleep on `__lock` with the value 2; a robust one's `__lock` holds the owner
/// (with the waiters bit); a priority-inheritance one is waited on with FUTEX_LOCK_PI
/// (or LOCK_PI2), its word holding the owner. 0 for anything else: not a mutex, or an
/// owner that died. An owner past the largest TID Linux gives (`PID_MAX_LIMIT`) is no
/// owner: glibc's stdio lock (`_IO_lock_t`) also sleeps on a word of 2, with a pointer
/// where a mutex has `__owner`. A locked glibc mutex also counts its user in `__nusers`
/// (set with `__owner`, cleared after it) and keeps `__count` 0 unless it is recursive
/// or robust:
/// a word that is no glibc mutex (a Rust `std::sync::Mutex`, whose protected value sits
/// where `__owner` would be) fails those and says no holder rather than inventing one.
/// The layout is checked against the installed glibc by a test.
pub const fn mutex_holder(cmd: u32, words: [u32; MUTEX_HEAD_WORDS]) -> u32 {
    const TID_MASK: u32 = 0x3fff_ffff;
    /// The kernel's PID_MAX_LIMIT on 64-bit: pid_max cannot be raised past it.
    const PID_MAX_LIMIT: u32 = 4 * 1024 * 1024;
    const KNOWN_KIND: u32 = 3 | 16 | 32 | 64 | 128 | 256 | 512;
    const KIND_ROBUST: u32 = 16;
    const KIND_PI_PP: u32 = 32 | 64;
    const LOCK_PI: u32 = 6;
    const LOCK_PI2: u32 = 13;
    const KIND_RECURSIVE: u32 = 1;
    let (lock, count, owner, users, kind) = (words[0], words[1], words[2], words[3], words[4]);
    if cmd == LOCK_PI || cmd == LOCK_PI2 {
        let tid = lock & TID_MASK;
        return if tid <= PID_MAX_LIMIT { tid } else { 0 };
    }
    if kind & !KNOWN_KIND != 0 || kind & KIND_PI_PP != 0 || owner == 0 || owner > PID_MAX_LIMIT {
        return 0;
    }
    // Held: one user at least (no more than there are threads), and a count only when
    // recursive or robust (glibc counts a robust mutex's one hold).
    let counted = kind & 3 == KIND_RECURSIVE || kind & KIND_ROBUST != 0;
    if users == 0 || users > PID_MAX_LIMIT || (!counted && count != 0) {
        return 0;
    }
    let fits = if kind & KIND_ROBUST != 0 {
        lock & TID_MASK == owner
    } else {
        lock == 2
    };
    if fits { owner } else { 0 }
}
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

/// `ret` of a futex wait that was still asleep when the trace ended (-EINPROGRESS): its
/// record, made by userspace then, holds its wait so far and no waker.
pub const WAIT_IN_PROGRESS: i32 = -115;

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

/// Bit of a futex wait record's op (the low 32 bits of its `aux`; futex ops use the low
/// 9): full mode saw no probed pthread call in flight on the thread when the wait began
/// (a language runtime's or a library's own lock: Rust's std, Go, glibc's internal
/// locks), so no pthread object stands for it. A pthread_mutex_lock probed at its entry
/// only is not in flight either: userspace tells its waits by their word.
pub const FUTEX_OP_OUTSIDE_CALL: u32 = 1 << 31;

/// `ret` of a futex wait that a futex wake did not end and whose deadline had not come
/// (-EINTR): a signal, or the kernel (contention mode, where waits end at their wake).
pub const WAIT_INTERRUPTED: i32 = -4;

/// How far before its deadline a wake still counts as the timeout (timers fire at or
/// after the deadline; this covers a realtime deadline's conversion).
pub const DEADLINE_SLACK_NS: u64 = 1_000_000;

/// Futex flag: the word is private to its process (its wakes come from that process).
pub const FUTEX_PRIVATE_FLAG: u32 = 128;
/// Futex flag: an absolute timeout is on CLOCK_REALTIME.
pub const FUTEX_CLOCK_REALTIME: u32 = 256;

/// How a futex wait's timeout argument is to be read: None for no timeout (or a command
/// without one), Some(true) when absolute on CLOCK_REALTIME, Some(false) when
/// absolute on CLOCK_MONOTONIC; relative timeouts (FUTEX_WAIT) are `Some(false)` with
/// [`futex_timeout_relative`].
pub const fn futex_timeout_realtime(op: u32) -> bool {
    let cmd = op & FUTEX_CMD_MASK;
    // FUTEX_LOCK_PI's timeout is always on CLOCK_REALTIME.
    cmd == 6 || op & FUTEX_CLOCK_REALTIME != 0
}

/// Whether a futex command's timeout is relative to the call (FUTEX_WAIT), not absolute.
pub const fn futex_timeout_relative(op: u32) -> bool {
    op & FUTEX_CMD_MASK == 0
}

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

abi_enum! {
    /// How an entry probe judges contention from the object's first word, read when the
    /// probe fires. Which check applies depends on where the probe sits in the function.
    pub enum Check {
        /// No contention check.
        None = 0,
        /// Contended when the word is nonzero (a glibc mutex or rwlock being written,
        /// a spinlock after its `lock decl`).
        NonZero = 1,
        /// Contended when the word is not 1 (a spinlock before its `lock decl`).
        NotOne = 2,
        /// Contended when the word has the writer-locked bit (a rwlock taken for reading).
        WriterBit = 3,
        /// Contended when the low 32 bits are 0 (a semaphore with no value left).
        Empty = 4,
        /// Contended when anything but the phase bit is set (a rwlock taken for writing:
        /// readers, a writer or waiters present).
        Busy = 5,
    }
}

/// The attach cookie of a uprobe: which primitive, operation and contention check the
/// shared programs are running for, packed into 64 bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cookie {
    /// The primitive.
    pub primitive: u32,
    /// The operation.
    pub op: u32,
    /// The [`Check`].
    pub check: u32,
}

impl Cookie {
    /// Packs the cookie.
    pub const fn pack(primitive: Primitive, op: SyncOp, check: Check) -> u64 {
        (primitive as u64) | ((op as u64) << 16) | ((check as u64) << 32)
    }

    /// Unpacks a cookie (no validation: the fields are checked where they are decoded).
    pub const fn unpack(v: u64) -> Self {
        Self {
            primitive: (v & 0xffff) as u32,
            op: ((v >> 16) & 0xffff) as u32,
            check: ((v >> 32) & 0xffff) as u32,
        }
    }
}

/// Futex commands (`op & FUTEX_CMD_MASK`) that put the caller to sleep.
pub const fn futex_cmd_waits(cmd: u32) -> bool {
    matches!(cmd, 0 | 6 | 9 | 11 | 13)
}

/// Futex commands that wake sleepers.
pub const fn futex_cmd_wakes(cmd: u32) -> bool {
    matches!(cmd, 1 | 3 | 4 | 5 | 7 | 10 | 12)
}

/// Masks the private and clock flags off a futex op.
pub const FUTEX_CMD_MASK: u32 = 0x7f;

#[cfg(feature = "user")]
mod user_impls {
    use super::*;
    // SAFETY: plain-old-data, #[repr(C)], every bit pattern valid, no padding.
    unsafe impl aya::Pod for EventHeader {}
    // SAFETY: as above.
    unsafe impl aya::Pod for SyncEvent {}
    // SAFETY: as above.
    unsafe impl aya::Pod for FutexWaitEvent {}
    // SAFETY: as above.
    unsafe impl aya::Pod for PendingFutex {}
    // SAFETY: as above.
    unsafe impl aya::Pod for LifecycleEvent {}
    // SAFETY: as above.
    unsafe impl aya::Pod for PendingCall {}
    // SAFETY: as above.
    unsafe impl aya::Pod for ThreadCalls {}
    // SAFETY: as above.
    unsafe impl aya::Pod for crate::FuncEvent {}
    // SAFETY: as above.
    unsafe impl aya::Pod for crate::FuncStack {}
    // SAFETY: repr(C), no padding (sizes asserted in agg.rs), any bit pattern valid.
    unsafe impl aya::Pod for crate::FutexAggKey {}
    // SAFETY: as above.
    unsafe impl aya::Pod for crate::FutexAgg {}

    impl Primitive {
        /// Its name in reports, JSON and metric labels.
        pub fn name(self) -> &'static str {
            match self {
                Primitive::Mutex => "mutex",
                Primitive::RwLock => "rwlock",
                Primitive::Spin => "spinlock",
                Primitive::Sem => "semaphore",
                Primitive::Cond => "condvar",
                Primitive::Barrier => "barrier",
                Primitive::Thread => "thread",
                Primitive::Futex => "futex",
            }
        }
    }

    impl core::fmt::Display for Primitive {
        fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
            f.write_str(self.name())
        }
    }

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cookie_round_trip() {
        let c = Cookie::unpack(Cookie::pack(
            Primitive::RwLock,
            SyncOp::TimedWrLock,
            Check::NonZero,
        ));
        assert_eq!(
            c,
            Cookie {
                primitive: Primitive::RwLock as u32,
                op: SyncOp::TimedWrLock as u32,
                check: Check::NonZero as u32
            }
        );
    }

    #[test]
    fn discriminants_round_trip() {
        for p in Primitive::ALL {
            assert_eq!(Primitive::from_u32(*p as u32), Some(*p));
        }
        for o in SyncOp::ALL {
            assert_eq!(SyncOp::from_u32(*o as u32), Some(*o));
        }
        assert_eq!(SyncOp::from_u32(0), None);
        assert!(futex_cmd_waits(0) && futex_cmd_wakes(1) && !futex_cmd_waits(1));
    }
}
