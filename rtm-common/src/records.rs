//! Event layouts. Every record starts with an [`EventHeader`]; `header.kind` says which
//! payload follows. Layouts are `#[repr(C)]` with explicit padding and no `bool`, and
//! their sizes are checked at compile time so both sides agree byte for byte.

use core::mem::size_of;

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
    /// in the waiter's context ([`mutex_holder`](crate::mutex_holder)); 0 when the word
    /// is no mutex's (a condition variable, barrier, semaphore, join or custom futex) or
    /// it is unknown.
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

/// `ret` of a futex wait that was still asleep when the trace ended (-EINPROGRESS): its
/// record, made by userspace then, holds its wait so far and no waker.
pub const WAIT_IN_PROGRESS: i32 = -115;

/// Bit of a futex wait record's op (the low 32 bits of its `aux`; futex ops use the low
/// 9): full mode saw no probed pthread call in flight on the thread when the wait began
/// (a language runtime's or a library's own lock: Rust's std, Go, glibc's internal
/// locks), so no pthread object stands for it. A pthread_mutex_lock probed at its entry
/// only is not in flight either: userspace tells its waits by their word.
pub const FUTEX_OP_OUTSIDE_CALL: u32 = 1 << 31;

/// `ret` of a futex wait that a futex wake did not end and whose deadline had not come
/// (-EINTR): a signal, or the kernel (contention mode, where waits end at their wake).
pub const WAIT_INTERRUPTED: i32 = -4;

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
    unsafe impl aya::Pod for LifecycleEvent {}
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{futex_cmd_waits, futex_cmd_wakes};

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
