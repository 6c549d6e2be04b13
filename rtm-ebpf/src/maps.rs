//! Maps and globals shared by every program. Names and sizes come from `rtm_common::names`.

use core::intrinsics::AtomicOrdering;

use aya_ebpf::{
    Global,
    macros::map,
    maps::{Array, HashMap, PerCpuArray, RingBuf},
};
use rtm_common::{
    FuncStack, FutexDone, FutexWaker, LossCounter, MAX_CALL_DEPTH, MpiLayout, MpiPending,
    PendingCall, PendingFutex, StackSampler, ThreadCalls,
    names::{
        DEFAULT_RING_BYTES, DEFAULT_TRACED_WORDS, MAX_FILTER_CPUS, MAX_FILTER_TIDS, MAX_FUNC_SLOTS,
        MAX_FUNC_THREADS, MAX_FUTEX_SLOTS, MAX_PENDING, MAX_TRACED_TGIDS, MAX_WAKERS,
        func_slot_index, futex_slot_index,
    },
};

/// BPF_F_MMAPABLE: userspace may map the array's values.
const BPF_F_MMAPABLE: u32 = 1 << 10;

/// Events to userspace (ring 0). Userspace sizes every ring at load time.
#[map(name = "EVENTS")]
pub static EVENTS: RingBuf = RingBuf::with_byte_size(DEFAULT_RING_BYTES, 0);

/// Rings 1-3, for sync records in contention mode (see emit::sync).
#[map(name = "EVENTS_1")]
pub static EVENTS_1: RingBuf = RingBuf::with_byte_size(4096, 0);
#[map(name = "EVENTS_2")]
pub static EVENTS_2: RingBuf = RingBuf::with_byte_size(4096, 0);
#[map(name = "EVENTS_3")]
pub static EVENTS_3: RingBuf = RingBuf::with_byte_size(4096, 0);

/// Rings for sync records minus one, a power of two minus one (set by userspace at
/// load; 0 sends every record to EVENTS).
#[unsafe(no_mangle)]
pub static SYNC_RING_MASK: Global<u32> = Global::new(0);

/// One byte per tgid, nonzero for a traced process (TRACED_FOLLOW: its forks are traced
/// too), eight to an element: the filter every
/// hot path reads (an array element costs a fraction of a hash lookup). Userspace sizes
/// it to pid_max and writes its bytes through a shared mapping; programs write only the
/// byte of a tgid they add. A tgid past its end falls back to TRACED_TGIDS.
#[map(name = "TRACED")]
pub static TRACED: Array<u64> = Array::with_max_entries(DEFAULT_TRACED_WORDS, BPF_F_MMAPABLE);

/// tgid -> its filter value for each traced process: the whole set, which TRACED mirrors.
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
        .get_mut(crate::bounds::masked(d - 1, MAX_CALL_DEPTH - 1))
        .map(|c| c as *mut PendingCall)
}

/// 1: ended futex waits are summed in FUTEX_AGG, not sent one by one (set by userspace
/// at load: contention mode without a timeline).
#[unsafe(no_mangle)]
pub static AGGREGATE: Global<u32> = Global::new(0);

/// 1: a futex wait begins where its thread goes to sleep (sched_switch) and no program
/// runs on system calls (set by userspace at load).
#[unsafe(no_mangle)]
pub static SLEEP_ENTRY: Global<u32> = Global::new(0);

/// Waiters' stacks taken per CPU per second at most (u32::MAX: every wait's).
#[unsafe(no_mangle)]
pub static STACK_RATE: Global<u32> = Global::new(u32::MAX);

/// Offset of `__state` in `struct task_struct` (from the kernel's BTF, set at load).
#[unsafe(no_mangle)]
pub static TASK_STATE: Global<u32> = Global::new(0);

/// Per CPU: the stacks sampler's state this second.
#[map(name = "STACK_SAMPLER")]
pub static STACK_SAMPLER: PerCpuArray<StackSampler> = PerCpuArray::with_max_entries(1, 0);

/// Per CPU: nonzero while high-resolution timer callbacks run there.
#[map(name = "IN_TIMER")]
pub static IN_TIMER: PerCpuArray<u32> = PerCpuArray::with_max_entries(1, 0);

/// 1: each futex wait's entry reads its mutex's holder (set by userspace at load).
#[unsafe(no_mangle)]
pub static READ_HOLDERS: Global<u32> = Global::new(1);

/// `CONTEXT_*` bits: which of `--tid` and `--cpu` filter (set by userspace at load).
#[unsafe(no_mangle)]
pub static CONTEXT_FILTER: Global<u32> = Global::new(0);

/// `--tid`: the threads traced (value unused).
#[map(name = "TID_FILTER")]
pub static TID_FILTER: HashMap<u32, u8> = HashMap::with_max_entries(MAX_FILTER_TIDS, 0);

/// `--cpu`: a bit per CPU, 64 to an element.
#[map(name = "CPU_FILTER")]
pub static CPU_FILTER: Array<u64> = Array::with_max_entries(MAX_FILTER_CPUS / 64, 0);

/// pid_tgid -> the timed calls (`--func`) in flight on a thread whose slot in
/// FUNC_SLOTS another thread holds.
#[map(name = "FUNC_PENDING")]
pub static FUNC_PENDING: HashMap<u64, FuncStack> = HashMap::with_max_entries(MAX_FUNC_THREADS, 0);

/// Each thread's timed calls in flight, at `func_slot_index` (a slot is claimed by one
/// thread at a time; its `owner`).
#[map(name = "FUNC_SLOTS")]
pub static FUNC_SLOTS: Array<FuncStack> = Array::with_max_entries(MAX_FUNC_SLOTS, 0);

/// Slots in FUNC_SLOTS minus one (set by userspace at load).
#[unsafe(no_mangle)]
pub static FUNC_SLOT_MASK: Global<u32> = Global::new(0);

/// What a thread's first timed call inserts (too large for the BPF stack).
static NO_FUNC_CALLS: FuncStack = FuncStack::EMPTY;

/// The thread's slot in FUNC_SLOTS, whoever holds it.
#[inline(always)]
fn func_slot(pid_tgid: u64) -> Option<*mut FuncStack> {
    FUNC_SLOTS.get_ptr_mut(func_slot_index(pid_tgid as u32, FUNC_SLOT_MASK.load()))
}

/// The thread's own slot, when it holds it.
#[inline(always)]
fn own_func_slot(pid_tgid: u64) -> Option<*mut FuncStack> {
    // SAFETY: reads a field of a map value.
    func_slot(pid_tgid).filter(|&p| unsafe { (*p).owner } == pid_tgid)
}

/// The thread's timed calls in flight, where a new call goes: its slot (claimed when
/// free), else its FUNC_PENDING entry (created empty); `None` when both are taken.
/// Calls in flight or kept unsent in FUNC_PENDING stay there until they are done.
#[inline(always)]
pub fn func_stack(pid_tgid: u64) -> Option<*mut FuncStack> {
    if let Some(p) = own_func_slot(pid_tgid) {
        return Some(p);
    }
    let pending = FUNC_PENDING.get_ptr_mut(pid_tgid);
    // SAFETY: reads fields of a map value.
    if let Some(h) = pending.filter(|&h| unsafe { (*h).depth > 0 || (*h).done > 0 }) {
        return Some(h);
    }
    if let Some(p) = func_slot(pid_tgid) {
        // SAFETY: an aligned u64 of a map value; the exchange fails when another
        // thread holds the slot (or claimed it first).
        let (_, claimed) = unsafe {
            core::intrinsics::atomic_cxchg::<
                u64,
                { AtomicOrdering::SeqCst },
                { AtomicOrdering::SeqCst },
            >(core::ptr::addr_of_mut!((*p).owner), 0, pid_tgid)
        };
        if claimed {
            // SAFETY: the slot is this thread's now.
            unsafe {
                (*p).depth = 0;
                (*p).done = 0;
            }
            if pending.is_some() {
                let _ = FUNC_PENDING.remove(pid_tgid);
            }
            return Some(p);
        }
    }
    if pending.is_some() {
        return pending;
    }
    // By reference: a copy would not fit on the BPF stack.
    #[allow(clippy::needless_borrows_for_generic_args)]
    FUNC_PENDING.insert(pid_tgid, &NO_FUNC_CALLS, 0).ok()?;
    FUNC_PENDING.get_ptr_mut(pid_tgid)
}

/// The thread's timed calls in flight, where a return finds its call.
#[inline(always)]
pub fn func_stack_of(pid_tgid: u64) -> Option<*mut FuncStack> {
    own_func_slot(pid_tgid).or_else(|| FUNC_PENDING.get_ptr_mut(pid_tgid))
}

/// Forgets everything in flight on an exiting thread.
#[inline(always)]
pub fn forget_thread(pid_tgid: u64) {
    let _ = PENDING.remove(pid_tgid);
    let _ = FUNC_PENDING.remove(pid_tgid);
    if let Some(p) = own_func_slot(pid_tgid) {
        // SAFETY: this thread's own slot: emptied, then given back (an atomic store, so
        // a thread claiming it next finds it empty).
        unsafe {
            (*p).depth = 0;
            (*p).done = 0;
            core::intrinsics::atomic_xchg::<u64, { AtomicOrdering::SeqCst }>(
                core::ptr::addr_of_mut!((*p).owner),
                0,
            );
        }
    }
    match futex_slot(pid_tgid as u32) {
        // SAFETY: this thread's own slot; only this thread writes it while it lives.
        Some(p) => unsafe { (*p).start_ns = 0 },
        None => {
            let _ = PENDING_FUTEX.remove(pid_tgid);
        }
    }
    let _ = MPI_PENDING.remove(pid_tgid);
}

/// pid_tgid -> the MPI call in flight on that thread.
#[map(name = "MPI_PENDING")]
pub static MPI_PENDING: HashMap<u64, MpiPending> = HashMap::with_max_entries(MAX_PENDING, 0);

/// How to read each MPI implementation's handles, indexed by `MpiImpl` (set by userspace).
#[map(name = "MPI_LAYOUT")]
pub static MPI_LAYOUT: Array<MpiLayout> = Array::with_max_entries(4, 0);

/// The futex call in flight on each thread whose tid is at most FUTEX_SLOT_MASK, at
/// `futex_slot_index` (one slot per tid). Userspace sizes it (a power of two), and maps
/// it to read what contention mode still counts there when the trace ends.
#[map(name = "FUTEX_SLOTS")]
pub static FUTEX_SLOTS: Array<PendingFutex> =
    Array::with_max_entries(MAX_FUTEX_SLOTS, BPF_F_MMAPABLE);

/// Slots in FUTEX_SLOTS minus one (set by userspace at load; 0 leaves it unused).
#[unsafe(no_mangle)]
pub static FUTEX_SLOT_MASK: Global<u32> = Global::new(0);

/// The thread's futex slot, or None when its tid is past the table (PENDING_FUTEX).
#[inline(always)]
pub fn futex_slot(tid: u32) -> Option<*mut PendingFutex> {
    FUTEX_SLOTS.get_ptr_mut(futex_slot_index(tid, FUTEX_SLOT_MASK.load())?)
}

/// The thread's futex entry: its slot, or its PENDING_FUTEX entry when its tid is past
/// the table (None when it has none).
#[inline(always)]
pub fn futex_entry(pid_tgid: u64) -> Option<*mut PendingFutex> {
    match futex_slot(pid_tgid as u32) {
        Some(p) => Some(p),
        None => PENDING_FUTEX.get_ptr_mut(pid_tgid),
    }
}

/// Each thread's last futex wait that ended and is not yet sent, in the thread's slot
/// (see `names::MAP_FUTEX_DONE`). Mappable: userspace takes what is left.
#[map(name = "FUTEX_DONE")]
pub static FUTEX_DONE: Array<FutexDone> = Array::with_max_entries(MAX_FUTEX_SLOTS, BPF_F_MMAPABLE);

/// The thread's slot for its last wait, or None when its tid is past the table.
#[inline(always)]
pub fn futex_done(tid: u32) -> Option<*mut FutexDone> {
    FUTEX_DONE.get_ptr_mut(futex_slot_index(tid, FUTEX_SLOT_MASK.load())?)
}

/// pid_tgid -> the futex call in flight, for threads past FUTEX_SLOTS.
#[map(name = "PENDING_FUTEX")]
pub static PENDING_FUTEX: HashMap<u64, PendingFutex> = HashMap::with_max_entries(MAX_PENDING, 0);

/// Who last woke waiters on each futex word, in a direct-mapped table: a word's slot is a
/// hash of (tgid, word), and a word that hashes to a taken slot replaces the one there,
/// as an LRU map would evict it. An array slot costs a fraction of a hash lookup; the
/// slot's key fields say whose it is.
#[map(name = "WAKERS")]
pub static WAKERS: Array<FutexWaker> = Array::with_max_entries(MAX_WAKERS, 0);

/// The last-waker slot of the futex word `uaddr` of process `tgid`.
#[inline(always)]
pub fn waker_slot(tgid: u32, uaddr: u64) -> Option<*mut FutexWaker> {
    const _: () = assert!(MAX_WAKERS.is_power_of_two());
    // Multiplicative hashing: the high bits of the product mix every input bit.
    let h = (uaddr ^ (u64::from(tgid) << 47)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    WAKERS.get_ptr_mut((h >> 32) as u32 & (MAX_WAKERS - 1))
}

/// Loss counters, indexed by `LossCounter`.
#[map(name = "LOSSES")]
pub static LOSSES: PerCpuArray<u64> = PerCpuArray::with_max_entries(LossCounter::COUNT, 0);

/// 1: follow futex wakes to their return, to count the threads a signal woke (full mode).
#[unsafe(no_mangle)]
pub static COUNT_WAKES: Global<u32> = Global::new(0);

/// 1: contention mode ends futex waits at their wake (`futex_waking` on sched_waking)
/// instead of at the syscall's return; set by userspace at load, with the TASK_*
/// offsets.
#[unsafe(no_mangle)]
pub static WAKING: Global<u32> = Global::new(0);

/// 1: `futex_waking` only notes the thread that woke each futex wait, in its entry; the
/// wait ends at its return (full mode).
#[unsafe(no_mangle)]
pub static NOTE_WAKER: Global<u32> = Global::new(0);

/// CLOCK_REALTIME minus CLOCK_MONOTONIC at load (see `names::GLOBAL_REALTIME_OFFSET`).
#[unsafe(no_mangle)]
pub static REALTIME_OFFSET: Global<u64> = Global::new(0);

/// Offsets in `struct task_struct` (see `names::GLOBAL_TASK_PID`), set by userspace at
/// load from the kernel's BTF. Constants to the verifier (a frozen read-only map), so
/// loads through a BTF task pointer at these offsets are checked like fixed fields.
#[unsafe(no_mangle)]
pub static TASK_PID: Global<u32> = Global::new(0);
#[unsafe(no_mangle)]
pub static TASK_TGID: Global<u32> = Global::new(0);
/// Offsets of `task_struct.signal` and `signal_struct.live` (see
/// `names::GLOBAL_TASK_SIGNAL`; 0: unknown), read by the exit program only.
#[unsafe(no_mangle)]
pub static TASK_SIGNAL: Global<u32> = Global::new(0);
#[unsafe(no_mangle)]
pub static SIGNAL_LIVE: Global<u32> = Global::new(0);

/// Bytes of each user stack copied at a contended wake (`names::GLOBAL_STACK_BYTES`;
/// 0: none). A constant to the verifier, like the TASK_* offsets.
#[unsafe(no_mangle)]
pub static STACK_BYTES: Global<u32> = Global::new(0);

/// Bytes waiting in EVENTS before a record wakes the reader (set by userspace at load).
#[unsafe(no_mangle)]
pub static WAKEUP_BYTES: Global<u64> = Global::new(1 << 20);

/// Counts one loss of the given kind.
#[inline(always)]
pub fn count_loss(which: LossCounter) {
    count_losses(which, 1);
}

/// Counts `n` records lost for one reason.
#[inline(always)]
pub fn count_losses(which: LossCounter, n: u64) {
    if let Some(p) = LOSSES.get_ptr_mut(which as u32) {
        // SAFETY: per-CPU slot, not shared with another CPU; programs do not nest on one CPU
        // for uprobes and tracepoints.
        unsafe { *p += n };
    }
}
