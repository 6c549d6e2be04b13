//! Maps and globals shared by every program. Names and sizes come from `rtm_common::names`.

use aya_ebpf::{
    Global,
    macros::map,
    maps::{HashMap, LruHashMap, PerCpuArray, RingBuf},
};
use rtm_common::{
    FutexKey, FutexWaker, LossCounter, PendingCall, PendingFutex,
    names::{DEFAULT_RING_BYTES, MAX_PENDING, MAX_TRACED_TGIDS, MAX_WAKERS},
};

/// Events to userspace. Userspace may resize it at load time.
#[map(name = "EVENTS")]
pub static EVENTS: RingBuf = RingBuf::with_byte_size(DEFAULT_RING_BYTES, 0);

/// tgid -> 1 for each traced process.
#[map(name = "TRACED_TGIDS")]
pub static TRACED_TGIDS: HashMap<u32, u32> = HashMap::with_max_entries(MAX_TRACED_TGIDS, 0);

/// (pid_tgid, depth) -> the probed call in flight on that thread at that nesting depth
/// (pthread_create calls pthread_mutex_lock, for one).
#[map(name = "PENDING")]
pub static PENDING: HashMap<u64, PendingCall> = HashMap::with_max_entries(MAX_PENDING, 0);

/// pid_tgid -> how many probed calls are in flight on that thread.
#[map(name = "DEPTH")]
pub static DEPTH: HashMap<u64, u32> = HashMap::with_max_entries(MAX_PENDING, 0);

/// Deepest nesting of probed calls remembered per thread.
pub const MAX_DEPTH: u32 = 4;

/// The PENDING key of a thread's call at `depth`.
#[inline(always)]
pub fn pending_key(pid_tgid: u64, depth: u32) -> u64 {
    // pid_tgid uses at most 54 bits (pid_max is 2^22).
    pid_tgid | ((depth as u64) << 60)
}

/// The innermost call in flight on the thread, if any.
#[inline(always)]
pub fn innermost(pid_tgid: u64) -> Option<*mut PendingCall> {
    // SAFETY: the value is copied at once.
    let depth = unsafe { DEPTH.get(pid_tgid) }.copied().unwrap_or(0);
    if depth == 0 {
        return None;
    }
    PENDING.get_ptr_mut(pending_key(pid_tgid, depth - 1))
}

/// Forgets everything in flight on an exiting thread.
#[inline(always)]
pub fn forget_thread(pid_tgid: u64) {
    let _ = DEPTH.remove(pid_tgid);
    for d in 0..MAX_DEPTH {
        let _ = PENDING.remove(pending_key(pid_tgid, d));
    }
    let _ = PENDING_FUTEX.remove(pid_tgid);
}

/// pid_tgid -> the futex call in flight on that thread.
#[map(name = "PENDING_FUTEX")]
pub static PENDING_FUTEX: HashMap<u64, PendingFutex> = HashMap::with_max_entries(MAX_PENDING, 0);

/// (tgid, futex word) -> the thread that last woke waiters on it.
#[map(name = "WAKERS")]
pub static WAKERS: LruHashMap<FutexKey, FutexWaker> = LruHashMap::with_max_entries(MAX_WAKERS, 0);

/// Loss counters, indexed by `LossCounter`.
#[map(name = "LOSSES")]
pub static LOSSES: PerCpuArray<u64> = PerCpuArray::with_max_entries(LossCounter::COUNT, 0);

/// 1: processes forked by a traced process are traced too (set by userspace at load).
#[unsafe(no_mangle)]
pub static FOLLOW_FORKS: Global<u32> = Global::new(0);

/// Counts one loss of the given kind.
#[inline(always)]
pub fn count_loss(which: LossCounter) {
    if let Some(p) = LOSSES.get_ptr_mut(which as u32) {
        // SAFETY: per-CPU slot, not shared with another CPU; programs do not nest on one CPU
        // for uprobes and tracepoints.
        unsafe { *p += 1 };
    }
}
