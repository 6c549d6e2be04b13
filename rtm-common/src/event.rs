//! Event layouts. Every record starts with an [`EventHeader`]; `header.kind` says which
//! payload follows. Layouts are `#[repr(C)]` with explicit padding and no `bool`, and
//! their sizes are checked at compile time so both sides agree byte for byte.

use core::mem::size_of;

/// Discriminant of a record, stored in [`EventHeader::kind`].
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "user", derive(serde::Serialize))]
pub enum EventKind {
    /// A [`SyncEvent`]: an operation on a synchronization object.
    Sync = 1,
}

impl EventKind {
    /// Every kind, for exhaustive tests and documentation.
    pub const ALL: [EventKind; 1] = [EventKind::Sync];

    /// Converts a raw discriminant; `None` for a kind this build does not know.
    pub const fn from_u32(v: u32) -> Option<Self> {
        match v {
            1 => Some(EventKind::Sync),
            _ => None,
        }
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

/// Which kind of synchronization object a [`SyncEvent`] is about.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "user", derive(serde::Serialize))]
#[cfg_attr(feature = "user", serde(rename_all = "snake_case"))]
pub enum Primitive {
    /// pthread_mutex_t.
    Mutex = 1,
}

impl Primitive {
    /// Converts a raw discriminant; `None` for a primitive this build does not know.
    pub const fn from_u32(v: u32) -> Option<Self> {
        match v {
            1 => Some(Primitive::Mutex),
            _ => None,
        }
    }
}

/// The operation a [`SyncEvent`] records. Blocking operations are reported once, at
/// return, with the time spent inside the call in [`SyncEvent::wait_ns`].
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "user", derive(serde::Serialize))]
#[cfg_attr(feature = "user", serde(rename_all = "snake_case"))]
pub enum SyncOp {
    /// A blocking acquire (pthread_mutex_lock).
    Lock = 1,
    /// A non-blocking attempt (pthread_mutex_trylock); `ret` is EBUSY when it failed.
    TryLock = 2,
    /// An acquire with a deadline (pthread_mutex_timedlock); `ret` is ETIMEDOUT on timeout.
    TimedLock = 3,
    /// A release (pthread_mutex_unlock), recorded at entry.
    Unlock = 4,
}

impl SyncOp {
    /// Converts a raw discriminant; `None` for an operation this build does not know.
    pub const fn from_u32(v: u32) -> Option<Self> {
        match v {
            1 => Some(SyncOp::Lock),
            2 => Some(SyncOp::TryLock),
            3 => Some(SyncOp::TimedLock),
            4 => Some(SyncOp::Unlock),
            _ => None,
        }
    }
}

/// [`SyncEvent::flags`] bit: the object was already held when the call started.
pub const SYNC_FLAG_CONTENDED: u32 = 1;

/// An operation on a synchronization object (kind [`EventKind::Sync`]).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SyncEvent {
    /// Common header; `ts_ns` is when the call returned (or, for releases, was entered).
    pub header: EventHeader,
    /// Address of the object in the traced process (e.g. the pthread_mutex_t).
    pub object: u64,
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
}
const _: () = assert!(size_of::<SyncEvent>() == 64);

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
    /// A return probe fired without a remembered entry (a call in flight at attach time).
    MissedEntry = 2,
}

impl LossCounter {
    /// Number of counters; the size of the loss map.
    pub const COUNT: u32 = 3;
    /// Every counter, in index order.
    pub const ALL: [LossCounter; 3] = [
        LossCounter::RingFull,
        LossCounter::PendingFull,
        LossCounter::MissedEntry,
    ];
}

/// What an entry probe remembers until the matching return probe fires.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct PendingCall {
    /// Object address (first argument).
    pub object: u64,
    /// Return address of the call.
    pub caller: u64,
    /// bpf_ktime_get_ns at entry.
    pub start_ns: u64,
    /// A [`SyncOp`] discriminant.
    pub op: u32,
    /// `SYNC_FLAG_*` bits observed at entry.
    pub flags: u32,
}
const _: () = assert!(size_of::<PendingCall>() == 32);

#[cfg(feature = "user")]
mod user_impls {
    use super::*;
    // SAFETY: plain-old-data, #[repr(C)], every bit pattern valid, no padding.
    unsafe impl aya::Pod for EventHeader {}
    unsafe impl aya::Pod for SyncEvent {}
    unsafe impl aya::Pod for PendingCall {}

    impl core::fmt::Display for Primitive {
        fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
            f.write_str(match self {
                Primitive::Mutex => "mutex",
            })
        }
    }

    impl core::fmt::Display for LossCounter {
        fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
            f.write_str(match self {
                LossCounter::RingFull => "ring buffer full",
                LossCounter::PendingFull => "pending-call map full",
                LossCounter::MissedEntry => "return without entry (call in flight at attach)",
            })
        }
    }
}
