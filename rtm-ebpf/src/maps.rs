//! Maps and globals shared by every program. Names and sizes come from `rtm_common::names`.

use aya_ebpf::{
    Global,
    macros::map,
    maps::{Array, HashMap, LruHashMap, PerCpuArray, RingBuf},
};
use rtm_common::{
    FutexKey, FutexWaker, LossCounter, MAX_CALL_DEPTH, MpiLayout, MpiPending, PendingCall,
    PendingFutex, ThreadCalls,
    names::{DEFAULT_RING_BYTES, MAX_PENDING, MAX_TRACED_TGIDS, MAX_WAKERS},
};

/// Events to userspace. Userspace may resize it at load time.
#[map(name = "EVENTS")]
pub static EVENTS: RingBuf = RingBuf::with_byte_size(DEFAULT_RING_BYTES, 0);

/// tgid -> 1 for each traced process.
#[map(name = "TRACED_TGIDS")]
pub static TRACED_TGIDS: HashMap<u32, u32> = HashMap::with_max_entries(MAX_TRACED_TGIDS, 0);

/// pid_tgid -> the probed calls in flight on that thread.
#[map(name = "PENDING")]
pub static PENDING: HashMap<u64, ThreadCalls> = HashMap::with_max_entries(MAX_PENDING, 0);

/// The thread's call stack, created empty on first use; `None` when the map is full.
#[inline(always)]
pub fn thread_calls(pid_tgid: u64) -> Option<*mut ThreadCalls> {
    if let Some(p) = PENDING.get_ptr_mut(pid_tgid) {
        return Some(p);
    }
    let empty = ThreadCalls::default();
    PENDING.insert(pid_tgid, empty, 0).ok()?;
    PENDING.get_ptr_mut(pid_tgid)
}

/// The innermost call in flight on the thread, if any.
#[inline(always)]
pub fn innermost(pid_tgid: u64) -> Option<*mut PendingCall> {
    let tc = PENDING.get_ptr_mut(pid_tgid)?;
    // SAFETY: this thread's own entry; only this thread writes it.
    let tc = unsafe { &mut *tc };
    let d = tc.depth as usize;
    if d == 0 || d > MAX_CALL_DEPTH {
        return None;
    }
    // Masked so the verifier sees the index in bounds.
    tc.calls
        .get_mut((d - 1) & (MAX_CALL_DEPTH - 1))
        .map(|c| c as *mut PendingCall)
}

/// Forgets everything in flight on an exiting thread.
#[inline(always)]
pub fn forget_thread(pid_tgid: u64) {
    let _ = PENDING.remove(pid_tgid);
    let _ = PENDING_FUTEX.remove(pid_tgid);
    let _ = MPI_PENDING.remove(pid_tgid);
}

/// pid_tgid -> the MPI call in flight on that thread.
#[map(name = "MPI_PENDING")]
pub static MPI_PENDING: HashMap<u64, MpiPending> = HashMap::with_max_entries(MAX_PENDING, 0);

/// How to read each MPI implementation's handles, indexed by `MpiImpl` (set by userspace).
#[map(name = "MPI_LAYOUT")]
pub static MPI_LAYOUT: Array<MpiLayout> = Array::with_max_entries(4, 0);

/// pid_tgid -> the futex call in flight on that thread.
#[map(name = "PENDING_FUTEX")]
pub static PENDING_FUTEX: HashMap<u64, PendingFutex> = HashMap::with_max_entries(MAX_PENDING, 0);

/// (tgid, futex word) -> the thread that last woke waiters on it.
#[map(name = "WAKERS")]
pub static WAKERS: LruHashMap<FutexKey, FutexWaker> = LruHashMap::with_max_entries(MAX_WAKERS, 0);

/// Loss counters, indexed by `LossCounter`.
#[map(name = "LOSSES")]
pub static LOSSES: PerCpuArray<u64> = PerCpuArray::with_max_entries(LossCounter::COUNT, 0);

/// 1: follow futex wakes to their return, to count the threads a signal woke (full mode).
#[unsafe(no_mangle)]
pub static COUNT_WAKES: Global<u32> = Global::new(0);

/// 1: processes forked by a traced process are traced too (set by userspace at load).
#[unsafe(no_mangle)]
pub static FOLLOW_FORKS: Global<u32> = Global::new(0);

/// Bytes waiting in EVENTS before a record wakes the reader (set by userspace at load).
#[unsafe(no_mangle)]
pub static WAKEUP_BYTES: Global<u64> = Global::new(1 << 20);

/// Counts one loss of the given kind.
#[inline(always)]
pub fn count_loss(which: LossCounter) {
    if let Some(p) = LOSSES.get_ptr_mut(which as u32) {
        // SAFETY: per-CPU slot, not shared with another CPU; programs do not nest on one CPU
        // for uprobes and tracepoints.
        unsafe { *p += 1 };
    }
}
