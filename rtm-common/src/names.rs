//! Names of maps and programs in the eBPF object, shared so neither side spells them twice.

/// Ring buffer carrying every [`crate::event`] record to userspace.
pub const MAP_EVENTS: &str = "EVENTS";
/// Process filter: tgid -> 1 for every traced process.
pub const MAP_TRACED_TGIDS: &str = "TRACED_TGIDS";
/// Per-thread state between a blocking call's entry and its return.
pub const MAP_PENDING: &str = "PENDING";
/// Per-CPU loss counters, indexed by [`crate::LossCounter`].
pub const MAP_LOSSES: &str = "LOSSES";

/// Entry probe shared by pthread_mutex_lock, _trylock and _timedlock (the cookie says which).
pub const PROG_MUTEX_LOCK_ENTER: &str = "mutex_lock_enter";
/// Return probe shared by the same three functions.
pub const PROG_MUTEX_LOCK_RETURN: &str = "mutex_lock_return";
/// Entry probe of pthread_mutex_unlock.
pub const PROG_MUTEX_UNLOCK_ENTER: &str = "mutex_unlock_enter";

/// Capacity of the process filter map.
pub const MAX_TRACED_TGIDS: u32 = 4096;
/// Capacity of the per-thread pending-call map.
pub const MAX_PENDING: u32 = 65536;
/// Default ring buffer size in bytes (a power of two, a multiple of the page size).
pub const DEFAULT_RING_BYTES: u32 = 16 * 1024 * 1024;
