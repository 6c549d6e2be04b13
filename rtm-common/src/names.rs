//! Names of maps and programs in the eBPF object, shared so neither side spells them twice.

/// Ring buffer carrying every [`crate::records`] record to userspace (ring 0).
pub const MAP_EVENTS: &str = "EVENTS";
/// Further rings for sync records in contention mode: a CPU's records go to ring
/// `cpu & GLOBAL_SYNC_RING_MASK` (MAP_EVENTS is ring 0), so CPUs do not contend for one
/// ring's lock and positions. Unused rings are one page.
pub const MAP_SYNC_RINGS: [&str; MAX_RINGS as usize - 1] = ["EVENTS_1", "EVENTS_2", "EVENTS_3"];
/// Most rings.
pub const MAX_RINGS: u32 = 4;
/// Global in the eBPF object: rings for sync records minus one (0: all in MAP_EVENTS).
pub const GLOBAL_SYNC_RING_MASK: &str = "SYNC_RING_MASK";
/// Process filter: tgid -> 1 for every traced process.
pub const MAP_TRACED_TGIDS: &str = "TRACED_TGIDS";
/// Per-thread state between a blocking call's entry and its return.
pub const MAP_PENDING: &str = "PENDING";
/// Per-CPU loss counters, indexed by [`crate::LossCounter`].
pub const MAP_LOSSES: &str = "LOSSES";

/// Process filter read on every hot path: one byte per tgid, nonzero when the process
/// is traced (eight tgids to an 8-byte element). It mirrors [`MAP_TRACED_TGIDS`] for
/// tgids below its length; userspace writes its bytes through a shared mapping, so no
/// writer ever rewrites another tgid's byte.
pub const MAP_TRACED: &str = "TRACED";
/// Per-thread futex wait between the entry and the return of a futex call, for threads
/// whose tid fits the table (`tid <= GLOBAL_FUTEX_SLOT_MASK`); an array slot costs a
/// fraction of a hash lookup.
pub const MAP_FUTEX_SLOTS: &str = "FUTEX_SLOTS";
/// Per-thread the thread's last futex wait that ended, not yet sent (same slots as
/// [`MAP_FUTEX_SLOTS`]; mappable, read by userspace; values are `FutexDone`). The wait's
/// record is sent when the thread next starts to wait or exits, not on the way out of
/// the wait, where it would delay the woken thread; userspace takes the waits left when
/// the trace ends, and older ones while it runs. A nonzero `header.kind` marks a wait
/// not yet sent; whoever swaps it to zero sends it. In contention mode the waker's CPU
/// writes it ([`PROG_FUTEX_WAKING`]); otherwise the wait's return.
pub const MAP_FUTEX_DONE: &str = "FUTEX_DONE";
/// The same for threads with larger tids.
pub const MAP_PENDING_FUTEX: &str = "PENDING_FUTEX";
/// The thread that last woke each futex word: a direct-mapped table indexed by a hash of
/// (tgid, word); a word whose slot another word took has no waker until it is woken again.
/// Used where waits end at their return (full mode, or no BTF); contention mode names
/// the waker at the wake itself.
pub const MAP_WAKERS: &str = "WAKERS";

/// Per-thread MPI call between its entry and return probes.
pub const MAP_MPI_PENDING: &str = "MPI_PENDING";
/// MPI library layouts, indexed by `MpiImpl`.
pub const MAP_MPI_LAYOUT: &str = "MPI_LAYOUT";
/// Per CPU: the MPI return probe's record in the making (off the 512-byte BPF stack).
pub const MAP_MPI_SCRATCH: &str = "MPI_SCRATCH";
/// Contention mode: ended futex waits summed per (waiter, word, waker, outcome)
/// ([`crate::agg`]); userspace sizes it and reads it every interval.
pub const MAP_FUTEX_AGG: &str = "FUTEX_AGG";
/// Default entries of [`MAP_FUTEX_AGG`] (~0.7 KiB each).
pub const DEFAULT_AGG_ENTRIES: u32 = 8192;
/// Per CPU: how many waiters' call stacks were taken this second, and the chance a
/// stack is taken now ([`crate::stack::StackSampler`]).
pub const MAP_STACK_SAMPLER: &str = "STACK_SAMPLER";
/// Per CPU: nonzero while a high-resolution timer's callbacks run
/// (`timer:hrtimer_expire_entry` to `_exit`), so a wake made there is a timer's.
pub const MAP_IN_TIMER: &str = "IN_TIMER";
/// Entry uprobe of every MPI function (the cookie says which).
pub const PROG_MPI_ENTER: &str = "mpi_enter";
/// Return uprobe of every MPI function.
pub const PROG_MPI_RETURN: &str = "mpi_return";

/// Entry uprobe shared by every blocking call (the cookie says which).
pub const PROG_CALL_ENTER: &str = "call_enter";
/// Return uprobe shared by the same functions.
pub const PROG_CALL_RETURN: &str = "call_return";
/// Entry uprobe of calls recorded at once, with no return probe (unlock, post).
pub const PROG_CALL_MARK: &str = "call_mark";
/// Uprobe on a timed function's entry (`--func`); its cookie is the function's index.
pub const PROG_FUNC_ENTER: &str = "func_enter";
/// Uretprobe on a timed function, at the same place as [`PROG_FUNC_ENTER`].
pub const PROG_FUNC_RETURN: &str = "func_return";
/// pid_tgid -> the timed calls in flight on that thread ([`crate::FuncStack`]), for a
/// thread whose slot in [`MAP_FUNC_SLOTS`] another holds; sized by userspace at load
/// ([`MAX_FUNC_THREADS`] with `--func`, else 1).
pub const MAP_FUNC_PENDING: &str = "FUNC_PENDING";
/// Array of [`crate::FuncStack`]: each thread's timed calls in flight, at
/// [`func_slot_index`] (an array element is found without hashing: the programs' own
/// cost per call is what `--func` adds). Sized by userspace at load
/// ([`MAX_FUNC_SLOTS`] with `--func`, else 1).
pub const MAP_FUNC_SLOTS: &str = "FUNC_SLOTS";
/// Global in the eBPF object: slots in [`MAP_FUNC_SLOTS`] minus one (a power of two
/// minus one).
pub const GLOBAL_FUNC_SLOT_MASK: &str = "FUNC_SLOT_MASK";
/// Slots in [`MAP_FUNC_SLOTS`] with `--func` (984 bytes each).
pub const MAX_FUNC_SLOTS: u32 = 1024;

/// The slot of thread `tid` in [`MAP_FUNC_SLOTS`] of `mask + 1` slots: consecutive tids
/// take distinct slots.
pub const fn func_slot_index(tid: u32, mask: u32) -> u32 {
    tid.wrapping_mul(FUTEX_SLOT_SPREAD) & mask
}
/// sys_enter as a BTF tracepoint (futex calls).
pub const PROG_FUTEX_ENTER: &str = "futex_enter";
/// raw_syscalls/sys_enter (futex calls), for kernels without BTF.
pub const PROG_FUTEX_ENTER_RAW: &str = "futex_enter_raw";
/// sys_exit as a BTF tracepoint (futex calls).
pub const PROG_FUTEX_EXIT: &str = "futex_exit";
/// sched_waking as a BTF tracepoint: in contention mode, ends a traced thread's futex
/// wait at its wake, in the waker's context (no program runs at the syscall's return).
pub const PROG_FUTEX_WAKING: &str = "futex_waking";
/// sched_switch as a BTF tracepoint, with [`PROG_FUTEX_WAKING`]: when the woken thread
/// of a wait first got a CPU after its wake (`FutexDone::ran_ns`).
pub const PROG_FUTEX_SWITCH: &str = "futex_switch";
/// syscalls/sys_exit_futex, for kernels without BTF.
pub const PROG_FUTEX_EXIT_TP: &str = "futex_exit_tp";
/// task/task_newtask.
pub const PROG_LIFECYCLE_NEW: &str = "lifecycle_new";
/// sched/sched_process_exit.
pub const PROG_LIFECYCLE_EXIT: &str = "lifecycle_exit";
/// sched/sched_process_exec.
pub const PROG_LIFECYCLE_EXEC: &str = "lifecycle_exec";
/// fentry on the kernel's `futex_wait`: a traced thread's futex wait begins (contention
/// mode on the futex functions, no program on context switches or system calls).
pub const PROG_FUTEX_FN_WAIT: &str = "futex_fn_wait";
/// fexit on `futex_wait`: the wait ends, with the function's return value.
pub const PROG_FUTEX_FN_WAIT_EXIT: &str = "futex_fn_wait_exit";
/// fentry on `futex_lock_pi`: a priority-inheritance mutex's wait begins.
pub const PROG_FUTEX_FN_LOCK_PI: &str = "futex_fn_lock_pi";
/// fexit on `futex_lock_pi`.
pub const PROG_FUTEX_FN_LOCK_PI_EXIT: &str = "futex_fn_lock_pi_exit";
/// fentry on `wake_q_add_safe`: the futex code queues a waiter to be woken, in its
/// waker's context.
pub const PROG_FUTEX_FN_WAKE: &str = "futex_fn_wake";
/// The futex functions' programs: (program, kernel function, fexit), the ends first
/// (a wait never begins without its end attached).
pub const FUTEX_FN_PROGRAMS: [(&str, &str, bool); 5] = [
    (PROG_FUTEX_FN_WAIT_EXIT, "futex_wait", true),
    (PROG_FUTEX_FN_LOCK_PI_EXIT, "futex_lock_pi", true),
    (PROG_FUTEX_FN_WAKE, "wake_q_add_safe", false),
    (PROG_FUTEX_FN_WAIT, "futex_wait", false),
    (PROG_FUTEX_FN_LOCK_PI, "futex_lock_pi", false),
];
/// timer:hrtimer_expire_entry as a BTF tracepoint: marks the CPU as in a timer.
pub const PROG_TIMER_ENTER: &str = "timer_enter";
/// timer:hrtimer_expire_exit as a BTF tracepoint: the timer's callbacks are done.
pub const PROG_TIMER_EXIT: &str = "timer_exit";

/// Global in the eBPF object: 1 to follow futex wakes to their return (full mode: the
/// threads a pthread_cond_signal/broadcast woke); 0 skips that work.
pub const GLOBAL_COUNT_WAKES: &str = "COUNT_WAKES";
/// Global in the eBPF object: bytes waiting in the ring buffer before a record wakes the
/// reader (which otherwise drains on a timer).
pub const GLOBAL_WAKEUP_BYTES: &str = "WAKEUP_BYTES";

/// Global in the eBPF object: 1 when contention mode ends futex waits at their wake
/// ([`PROG_FUTEX_WAKING`], which needs the `GLOBAL_TASK_*` offsets) rather than at the
/// system call's return.
pub const GLOBAL_WAKING: &str = "WAKING";
/// Global in the eBPF object: 1 when [`PROG_FUTEX_WAKING`] runs only to note which thread
/// woke each futex wait (full mode, whose waits end at their return).
pub const GLOBAL_NOTE_WAKER: &str = "NOTE_WAKER";
/// Global in the eBPF object: CLOCK_REALTIME minus CLOCK_MONOTONIC at load, in ns, to
/// turn a futex wait's absolute realtime deadline into bpf_ktime_get_ns's clock.
pub const GLOBAL_REALTIME_OFFSET: &str = "REALTIME_OFFSET";
/// Globals in the eBPF object: offsets in the kernel's `struct task_struct` of `pid`,
/// `tgid`, `sched_info.pcount` and `sched_info.run_delay`, read from its BTF at load
/// (the verifier checks each access against the same BTF). 0: unknown, and
/// [`PROG_FUTEX_WAKING`] is not used.
pub const GLOBAL_TASK_PID: &str = "TASK_PID";
/// See [`GLOBAL_TASK_PID`].
pub const GLOBAL_TASK_TGID: &str = "TASK_TGID";

/// Global in the eBPF object: bytes of each user stack copied at a contended wake
/// (one of [`crate::STACK_SIZES`]; 0: no stacks). See [`crate::StacksHead`].
pub const GLOBAL_STACK_BYTES: &str = "STACK_BYTES";

/// Global in the eBPF object: the size of [`MAP_FUTEX_SLOTS`] minus one (a power of two
/// minus one); threads with a larger tid use [`MAP_PENDING_FUTEX`].
pub const GLOBAL_FUTEX_SLOT_MASK: &str = "FUTEX_SLOT_MASK";

/// The slot of thread `tid` in [`MAP_FUTEX_SLOTS`] and [`MAP_FUTEX_DONE`], whose size
/// minus one is `mask` (a power of two minus one): `tid * FUTEX_SLOT_SPREAD & mask`, one
/// slot per tid up to `mask` (an odd multiplier is a bijection modulo a power of two),
/// and threads with neighbouring tids far apart, so two threads never write one cache
/// line. None for a tid past the table.
#[inline(always)]
pub const fn futex_slot_index(tid: u32, mask: u32) -> Option<u32> {
    if mask == 0 || tid & !mask != 0 {
        return None;
    }
    Some(tid.wrapping_mul(FUTEX_SLOT_SPREAD) & mask)
}

/// The multiplier of [`futex_slot_index`].
pub const FUTEX_SLOT_SPREAD: u32 = 0x9E37_79B1;

/// Most slots in [`MAP_FUTEX_SLOTS`] (32 bytes each): the table covers tids up to
/// pid_max or this, whichever is smaller.
pub const MAX_FUTEX_SLOTS: u32 = 65536;
/// Elements of [`MAP_TRACED`] in the object; userspace sizes it to pid_max at load.
pub const DEFAULT_TRACED_WORDS: u32 = 4096;

/// Capacity of the process filter map.
pub const MAX_TRACED_TGIDS: u32 = 4096;
/// Capacity of the per-thread maps (threads with a call or a futex wait in flight).
pub const MAX_PENDING: u32 = 16384;
/// `--tid`: most threads a trace may be limited to ([`MAP_TID_FILTER`]).
pub const MAX_FILTER_TIDS: u32 = 1024;
/// `--cpu`: CPUs [`MAP_CPU_FILTER`] covers (0 to this minus one).
pub const MAX_FILTER_CPUS: u32 = 4096;
/// tid -> 1 for each thread `--tid` keeps.
pub const MAP_TID_FILTER: &str = "TID_FILTER";
/// A bit per CPU `--cpu` keeps, 64 to an element.
pub const MAP_CPU_FILTER: &str = "CPU_FILTER";
/// Global in the eBPF object: [`crate::CONTEXT_TIDS`] | [`crate::CONTEXT_CPUS`], the
/// context filters in use (0: none).
pub const GLOBAL_CONTEXT_FILTER: &str = "CONTEXT_FILTER";

/// Global in the eBPF object: 1 when each futex wait's entry reads the holder of the
/// mutex it waits on ([`crate::mutex_holder`]; `[deadlocks] detect`).
pub const GLOBAL_READ_HOLDERS: &str = "READ_HOLDERS";
/// Global: 1 when ended futex waits are summed in [`MAP_FUTEX_AGG`] rather than sent
/// one by one (contention mode without a timeline).
pub const GLOBAL_AGGREGATE: &str = "AGGREGATE";
/// Global: 1 when a futex wait begins where its thread goes to sleep (sched_switch), with
/// no program on any system call; 0 when it begins at the call's entry (sys_enter).
pub const GLOBAL_SLEEP_ENTRY: &str = "SLEEP_ENTRY";
/// Global: waiters' call stacks taken per CPU per second at most (u32::MAX: every one).
pub const GLOBAL_STACK_RATE: &str = "STACK_RATE";
/// Global: the offset of `__state` (or `state`) in `struct task_struct`.
pub const GLOBAL_TASK_STATE: &str = "TASK_STATE";
/// Global: the offset of `signal` in `struct task_struct` (0: unknown; the exit
/// program then cannot tell a process's last thread, and userspace takes an exited
/// process out of the filter when it sees the exit).
pub const GLOBAL_TASK_SIGNAL: &str = "TASK_SIGNAL";
/// Global: the offset of `live` (threads not yet exiting) in `struct signal_struct`.
pub const GLOBAL_SIGNAL_LIVE: &str = "SIGNAL_LIVE";

/// Threads with timed calls in flight at once whose slot another holds
/// ([`MAP_FUNC_PENDING`], 984 bytes each).
pub const MAX_FUNC_THREADS: u32 = 4096;
/// Slots of the last-waker table (a power of two; 32 bytes each).
pub const MAX_WAKERS: u32 = 32768;
/// Default ring buffer size in bytes (a power of two, a multiple of the page size).
pub const DEFAULT_RING_BYTES: u32 = 8 * 1024 * 1024;

/// Every map the loader asks the object for by name (the sync rings are listed in
/// [`MAP_SYNC_RINGS`]).
pub const ALL_MAPS: &[&str] = &[
    MAP_EVENTS,
    MAP_TRACED_TGIDS,
    MAP_PENDING,
    MAP_LOSSES,
    MAP_TRACED,
    MAP_FUTEX_SLOTS,
    MAP_FUTEX_DONE,
    MAP_PENDING_FUTEX,
    MAP_WAKERS,
    MAP_MPI_PENDING,
    MAP_MPI_LAYOUT,
    MAP_MPI_SCRATCH,
    MAP_FUTEX_AGG,
    MAP_STACK_SAMPLER,
    MAP_IN_TIMER,
    MAP_FUNC_PENDING,
    MAP_FUNC_SLOTS,
    MAP_TID_FILTER,
    MAP_CPU_FILTER,
];
/// Every program the loader asks the object for by name.
pub const ALL_PROGRAMS: &[&str] = &[
    PROG_MPI_ENTER,
    PROG_MPI_RETURN,
    PROG_CALL_ENTER,
    PROG_CALL_RETURN,
    PROG_CALL_MARK,
    PROG_FUNC_ENTER,
    PROG_FUNC_RETURN,
    PROG_FUTEX_ENTER,
    PROG_FUTEX_ENTER_RAW,
    PROG_FUTEX_EXIT,
    PROG_FUTEX_WAKING,
    PROG_FUTEX_SWITCH,
    PROG_FUTEX_EXIT_TP,
    PROG_LIFECYCLE_NEW,
    PROG_LIFECYCLE_EXIT,
    PROG_LIFECYCLE_EXEC,
    PROG_TIMER_ENTER,
    PROG_TIMER_EXIT,
];
/// Every global the loader sets at load.
pub const ALL_GLOBALS: &[&str] = &[
    GLOBAL_SYNC_RING_MASK,
    GLOBAL_COUNT_WAKES,
    GLOBAL_WAKEUP_BYTES,
    GLOBAL_WAKING,
    GLOBAL_NOTE_WAKER,
    GLOBAL_REALTIME_OFFSET,
    GLOBAL_TASK_PID,
    GLOBAL_TASK_TGID,
    GLOBAL_FUTEX_SLOT_MASK,
    GLOBAL_CONTEXT_FILTER,
    GLOBAL_READ_HOLDERS,
    GLOBAL_AGGREGATE,
    GLOBAL_SLEEP_ENTRY,
    GLOBAL_STACK_RATE,
    GLOBAL_TASK_STATE,
    GLOBAL_TASK_SIGNAL,
    GLOBAL_SIGNAL_LIVE,
    GLOBAL_FUNC_SLOT_MASK,
];
