//! The wake that ends a futex wait, in contention mode: sched_waking runs in the waker's
//! context (the thread releasing the lock, a thread exiting, or an interrupt for a
//! timeout), so the wait's record is made there, naming the thread that woke it, and no
//! program runs on the woken thread's way back to its lock. The wait ends when the woken
//! thread first gets a CPU after the wake (sched_switch), which the record is given.

use core::intrinsics::AtomicOrdering;

use aya_ebpf::{
    helpers::{bpf_get_current_pid_tgid, bpf_get_current_task_btf},
    macros::btf_tracepoint,
    programs::BtfTracePointContext,
};
use rtm_common::{
    AggOutcome, DEADLINE_SLACK_NS, EventKind, FUTEX_CMD_MASK, FUTEX_PRIVATE_FLAG, FutexWaitEvent,
    PENDING_SAMPLED, PENDING_TIMED, PendingFutex, WAIT_INTERRUPTED,
    arch::{SYS_FUTEX, pt_regs::SYSCALL_ARG2},
    futex_cmd_waits, futex_cmd_wakes,
};

use crate::{
    agg,
    emit::{self, header, now},
    filter::is_traced,
    futex_done::{keep_done, task_field},
    maps::{
        AGGREGATE, IN_TIMER, NOTE_WAKER, SLEEP_ENTRY, TASK_PID, TASK_TGID, futex_done, futex_entry,
        futex_slot,
    },
    regs::{self, saved, syscall_of},
    stacks,
};

/// -ETIMEDOUT.
const ETIMEDOUT: i32 = -110;

/// FUTEX_WAKE_OP: wakes on its first word and, by the operation's outcome, its second.
const FUTEX_WAKE_OP: u32 = 5;

/// Whether the current task's futex call (`word`, `op`, `word2`; in process `tgid`)
/// wakes the wait `f` of process `waiter_tgid`. A private word's wake comes from its own
/// process, at its address. A process-shared word may be mapped at another address in
/// the waker's process, but at the same offset in its page (the kernel keys it by page
/// and offset).
#[inline(always)]
fn wakes_it(word: u64, op: u32, word2: u64, tgid: u32, f: &PendingFutex, waiter_tgid: u32) -> bool {
    let cmd = op & FUTEX_CMD_MASK;
    if !futex_cmd_wakes(cmd) {
        return false;
    }
    let same = |w: u64| {
        if tgid == waiter_tgid {
            w == f.uaddr
        } else {
            f.op & FUTEX_PRIVATE_FLAG == 0 && w & 0xfff == f.uaddr & 0xfff
        }
    };
    same(word) || (cmd == FUTEX_WAKE_OP && same(word2))
}

/// sched_waking (p): `p` is being woken. When it is a thread of a traced process asleep
/// in a futex wait, the thread waking it is identified here, in its own context: a
/// thread of any process inside a futex call that wakes that word (a process-shared word
/// can be woken from another process, traced or not), or a thread of the same process
/// exiting (its joiners wait on its tid). Anything else (the timer of a timed wait, a
/// signal, the kernel) has no waker: a wait past its deadline timed out, others were
/// interrupted. In contention mode the wait ends here; in full mode (`NOTE_WAKER`) the
/// waker is noted in the thread's entry and the wait ends at its return.
#[btf_tracepoint(function = "sched_waking")]
pub fn futex_waking(ctx: BtfTracePointContext) -> i32 {
    let p: *const u8 = ctx.arg(0);
    // SAFETY: task_struct fields at offsets from the kernel's BTF.
    let tgid: u32 = unsafe { task_field::<i32>(p, TASK_TGID.load()) } as u32;
    if !is_traced(tgid) {
        return 0;
    }
    // SAFETY: as above.
    let pid: u32 = unsafe { task_field::<i32>(p, TASK_PID.load()) } as u32;
    let pid_tgid = (u64::from(tgid) << 32) | u64::from(pid);
    let sleep_entry = SLEEP_ENTRY.load() != 0;
    let slot = futex_entry(pid_tgid);
    // SAFETY: the woken thread's entry, copied out; the thread is asleep or about to be.
    let f = slot.map(|s| unsafe { *s }).unwrap_or_default();
    if f.start_ns == 0 {
        if sleep_entry {
            woken_before_sleep(p, pid_tgid);
        }
        return 0;
    }
    let Some(slot) = slot else {
        return 0;
    };
    // A wait recorded in the slot, and the thread still inside that futex call: any other
    // sleep of the thread (a wait that returned without sleeping leaves its entry) is not
    // this wait.
    // SAFETY: p is the tracepoint's BTF task pointer.
    let (id, word, _, _) = unsafe { syscall_of(p) };
    if id != SYS_FUTEX || word != f.uaddr {
        return 0;
    }
    if f.early_ns != 0 {
        // A wake marked earlier that this wait's own wake now shows was an earlier
        // wait's: that wait was woken before it slept.
        count_early(slot, pid_tgid);
    }
    let note_only = NOTE_WAKER.load() != 0;
    if !note_only {
        // SAFETY: an aligned field of the entry; the exchange fails when the thread has
        // already moved on to another call, whose entry is then left alone.
        let (_, ours) = unsafe {
            core::intrinsics::atomic_cxchg::<
                u64,
                { AtomicOrdering::SeqCst },
                { AtomicOrdering::SeqCst },
            >(core::ptr::addr_of_mut!((*slot).start_ns), f.start_ns, 0)
        };
        if !ours {
            return 0;
        }
    }
    let current = bpf_get_current_pid_tgid();
    let (cur_tgid, cur_tid) = ((current >> 32) as u32, current as u32);
    let (woke, exiting) = waker_of(pid, tgid, &f);
    if note_only {
        if woke {
            // SAFETY: the woken thread's entry; it reads this at its return, after this
            // wake.
            unsafe { core::ptr::write_volatile(core::ptr::addr_of_mut!((*slot).waker), current) };
            let ts = now();
            stacks::at_wake(
                slot,
                &f,
                p,
                pid_tgid,
                ts,
                ts.saturating_sub(f.start_ns),
                (cur_tgid, cur_tid),
                cur_tgid == tgid,
            );
        }
        return 0;
    }
    let ts = now();
    let ret = if woke || exiting {
        0
    } else if f.flags & PENDING_TIMED != 0
        && (f.deadline_ns == 0 || ts.saturating_add(DEADLINE_SLACK_NS) >= f.deadline_ns)
    {
        ETIMEDOUT
    } else {
        WAIT_INTERRUPTED
    };
    let sampled_before = f.flags & PENDING_SAMPLED != 0;
    let (waker, waker_pid) = if woke { (cur_tid, cur_tgid) } else { (0, 0) };
    let wait_ns = ts.saturating_sub(f.start_ns);
    let sampled = woke
        && stacks::at_wake(
            slot,
            &f,
            p,
            pid_tgid,
            ts,
            wait_ns,
            (cur_tgid, cur_tid),
            cur_tgid == tgid,
        );
    keep_done(
        FutexWaitEvent {
            header: header(EventKind::FutexWait, pid_tgid, ts),
            uaddr: f.uaddr,
            aux: f.aux(),
            wait_ns,
            ret,
            waker,
            unslept: f.unslept,
            waker_pid,
            runnable_ns: 0,
            holder: f.holder,
        },
        true,
        sampled || sampled_before,
    );
    0
}

/// Whether this CPU is running high-resolution timer callbacks (a wake from there is
/// a timer's: a timed wait's timeout, or a timer's signal), whatever thread it
/// interrupted.
#[inline(always)]
fn in_timer() -> bool {
    IN_TIMER.get(0).is_some_and(|v| *v != 0)
}

/// Who is waking thread `pid` of process `tgid` from its wait `f`: (a thread's futex
/// wake of that word, the exit of the thread it joins). A wake from a timer is neither,
/// whatever system call the thread it interrupted was in.
#[inline(always)]
fn waker_of(pid: u32, tgid: u32, f: &PendingFutex) -> (bool, bool) {
    let current = bpf_get_current_pid_tgid();
    let (cur_tgid, cur_tid) = ((current >> 32) as u32, current as u32);
    if cur_tid == pid || in_timer() {
        return (false, false);
    }
    // SAFETY: helper without preconditions; its result is a BTF task pointer.
    let (call, cur_word, cur_op, cur_word2) =
        unsafe { syscall_of(bpf_get_current_task_btf() as *const u8) };
    let woke = call == SYS_FUTEX && wakes_it(cur_word, cur_op as u32, cur_word2, cur_tgid, f, tgid);
    // A thread's exit wakes its joiners, whose word holds its tid: unnamed here, as
    // at the return; userspace matches such waits with the exits.
    (woke, !woke && cur_tgid == tgid && f.val == cur_tid)
}

/// A thread of a traced process (`p`) woken inside a futex wait it never slept in (it
/// had queued, not yet left its CPU; contention mode without system call programs, where
/// waits begin at their sleep): counted, with its waker, as a wait that did not sleep.
#[inline(always)]
fn woken_before_sleep(p: *const u8, pid_tgid: u64) {
    // SAFETY: p is the tracepoint's BTF task pointer.
    let (id, word, op, _) = unsafe { syscall_of(p) };
    let op = op as u32;
    if id != SYS_FUTEX || !futex_cmd_waits(op & FUTEX_CMD_MASK) {
        return;
    }
    // SAFETY: p's saved registers (BTF-checked): the value the wait expects.
    let val = unsafe { saved(regs::of_task(p), SYSCALL_ARG2) } as u32;
    let f = PendingFutex {
        uaddr: word,
        op,
        val,
        ..PendingFutex::default()
    };
    // A thread's futex wake, or the exit of the thread a join waits for (its joiner is
    // woken from the exit path, not a futex call), or a timer's expiry (its timeout,
    // marked with no thread: [`EARLY_TIMER`]). Anything else (a signal, or a wake of a sleep
    // before the wait's, such as a page fault's) may not end the wait and is left alone.
    let (woke, exiting) = waker_of(pid_tgid as u32, (pid_tgid >> 32) as u32, &f);
    let current = if woke || exiting {
        bpf_get_current_pid_tgid()
    } else if in_timer() {
        EARLY_TIMER
    } else {
        return;
    };
    // Marked, not counted yet: the thread's next event tells whether its sleep still
    // came (a wake racing the sleep, when the scheduler had taken the thread off its
    // run queue but not yet switched away) or not.
    if let Some(slot) = futex_slot(pid_tgid as u32) {
        // SAFETY: the thread's slot; marks are written by wakes and read by its events.
        unsafe {
            if (*slot).early_ns != 0 {
                count_early(slot, pid_tgid);
            }
            (*slot).early_word = word;
            (*slot).early_waker = current;
            core::ptr::write_volatile(core::ptr::addr_of_mut!((*slot).early_ns), now());
        }
        return;
    }
    count_woken_early(pid_tgid, word, op, val, current);
}

/// An early mark's waker for a timer's expiry (no thread: a timeout). A thread's is
/// `tgid << 32 | tid`, never 0.
const EARLY_TIMER: u64 = 0;

/// Counts a wait woken before it slept, by `waker` (`tgid << 32 | tid`, or
/// [`EARLY_TIMER`]).
#[inline(always)]
fn count_woken_early(pid_tgid: u64, word: u64, op: u32, val: u32, waker: u64) {
    if waker == EARLY_TIMER {
        // Ended before its sleep by its timer: a timeout of no time.
        let wait = FutexWaitEvent {
            header: header(EventKind::FutexWait, pid_tgid, now()),
            uaddr: word,
            aux: u64::from(op) | (u64::from(val) << 32),
            wait_ns: 0,
            ret: ETIMEDOUT,
            waker: 0,
            unslept: 0,
            waker_pid: 0,
            runnable_ns: 0,
            holder: 0,
        };
        crate::futex_done::finish(&wait, false);
        return;
    }
    let waker = ((waker >> 32) as u32, waker as u32);
    if AGGREGATE.load() != 0 {
        let k = agg::key(pid_tgid, word, op, waker, 0, AggOutcome::WokenBeforeSleep);
        if agg::add_waits(&k, 1, 0, 0) {
            return;
        }
    }
    // One by one: a wait of no time that did not sleep, with its waker.
    emit::futex_wait(FutexWaitEvent {
        header: header(EventKind::FutexWait, pid_tgid, now()),
        uaddr: word,
        aux: u64::from(op) | (u64::from(val) << 32),
        wait_ns: 0,
        ret: -11,
        waker: waker.1,
        unslept: 0,
        waker_pid: waker.0,
        runnable_ns: 0,
        holder: 0,
    });
}

/// Counts the wake marked in the thread's slot (`slot`, a map value) as a wait woken
/// before it slept, and clears the mark.
#[inline(always)]
fn count_early(slot: *mut PendingFutex, pid_tgid: u64) {
    // SAFETY: the thread's slot; the mark's fields are plain values.
    let (word, waker) = unsafe {
        let w = ((*slot).early_word, (*slot).early_waker);
        core::ptr::write_volatile(core::ptr::addr_of_mut!((*slot).early_ns), 0);
        w
    };
    // The op and value of that wait are not kept: a private wait (what a mark is made
    // for: glibc's waits are private) with no value.
    count_woken_early(pid_tgid, word, FUTEX_WAIT_PRIVATE, 0, waker);
}

/// At a thread's exit: a wake still marked in its slot was of a wait that never slept.
#[inline(always)]
pub fn count_early_at_exit(pid_tgid: u64) {
    if let Some(slot) = futex_slot(pid_tgid as u32) {
        // SAFETY: the thread's slot.
        if unsafe { (*slot).early_ns } != 0 {
            count_early(slot, pid_tgid);
        }
    }
}

/// FUTEX_WAIT | FUTEX_PRIVATE_FLAG.
const FUTEX_WAIT_PRIVATE: u32 = 128;

/// The thread of `slot` gets a CPU while a wait is still in its slot: the wait's wake
/// came before its sleep (marked then) and no other wake will come. The wait ends now,
/// woken by the marked thread; with no mark for its word, by none known.
#[inline(always)]
fn end_raced_sleep(slot: *mut PendingFutex, pid_tgid: u64) {
    // SAFETY: the thread's slot.
    let f = unsafe { *slot };
    if f.start_ns == 0 {
        return;
    }
    // SAFETY: as above; its start is cleared atomically, as a wake does.
    let (_, ours) = unsafe {
        core::intrinsics::atomic_cxchg::<u64, { AtomicOrdering::SeqCst }, { AtomicOrdering::SeqCst }>(
            core::ptr::addr_of_mut!((*slot).start_ns),
            f.start_ns,
            0,
        )
    };
    if !ours {
        return;
    }
    let ts = now();
    let (ret, waker) = if f.early_ns != 0 && f.early_word == f.uaddr {
        // SAFETY: as above.
        unsafe { core::ptr::write_volatile(core::ptr::addr_of_mut!((*slot).early_ns), 0) };
        let waker = ((f.early_waker >> 32) as u32, f.early_waker as u32);
        stacks::at_raced_wake(&f, pid_tgid, ts, ts.saturating_sub(f.start_ns), waker);
        if f.early_waker == EARLY_TIMER {
            (ETIMEDOUT, (0, 0))
        } else {
            (0, waker)
        }
    } else {
        // A sleep that ended with no wake tied to it: a timer's or a signal's that raced
        // the sleep, or a wake whose program could not tell it was this wait's. Counted,
        // with no waker: timed out when its deadline has passed, else woken by a thread
        // not known (never dropped: the kernel counts it).
        let timed_out = f.flags & PENDING_TIMED != 0
            && f.deadline_ns != 0
            && ts.saturating_add(DEADLINE_SLACK_NS) >= f.deadline_ns;
        (if timed_out { ETIMEDOUT } else { 0 }, (0, 0))
    };
    keep_done(
        FutexWaitEvent {
            header: header(EventKind::FutexWait, pid_tgid, ts),
            uaddr: f.uaddr,
            aux: f.aux(),
            wait_ns: ts.saturating_sub(f.start_ns),
            ret,
            waker: waker.1,
            unslept: f.unslept,
            waker_pid: waker.0,
            runnable_ns: 0,
            holder: f.holder,
        },
        false,
        f.flags & PENDING_SAMPLED != 0,
    );
}

/// timer:hrtimer_expire_entry: this CPU runs a timer's callback until the exit. Set
/// and cleared, not counted: an exit missed (the programs attached between an entry and
/// its exit) must not leave the CPU "in a timer" for good.
#[btf_tracepoint(function = "hrtimer_expire_entry")]
pub fn timer_enter(_ctx: BtfTracePointContext) -> i32 {
    if let Some(v) = IN_TIMER.get_ptr_mut(0) {
        // SAFETY: this CPU's element.
        unsafe { *v = 1 };
    }
    0
}

/// timer:hrtimer_expire_exit.
#[btf_tracepoint(function = "hrtimer_expire_exit")]
pub fn timer_exit(_ctx: BtfTracePointContext) -> i32 {
    if let Some(v) = IN_TIMER.get_ptr_mut(0) {
        // SAFETY: this CPU's element.
        unsafe { *v = 0 };
    }
    0
}

/// sched_switch (preempt, prev, next): `prev` leaves its CPU (a futex waiter going to
/// sleep has its call stack taken: `stacks::at_sleep`), and `next` gets a CPU. When
/// `next` is a thread of a traced process whose last wait's record waits in its slot
/// without a run time, this is
/// its first switch-in since that wait's wake: the wait ends here. Its later switch-ins
/// (a preemption in its critical section) are not the wait's. A thread woken before it
/// had left its CPU has no such switch-in; its wait ends at the wake.
#[btf_tracepoint(function = "sched_switch")]
pub fn futex_switch(ctx: BtfTracePointContext) -> i32 {
    // A thread that leaves its CPU to sleep (not preempted) may be a futex waiter whose
    // call stack is wanted.
    let preempt: u64 = ctx.arg(0);
    if preempt & 1 == 0 {
        stacks::at_sleep(ctx.arg(1));
    }
    let next: *const u8 = ctx.arg(2);
    // SAFETY: task_struct fields at offsets from the kernel's BTF.
    let tgid: u32 = unsafe { task_field::<i32>(next, TASK_TGID.load()) } as u32;
    if !is_traced(tgid) {
        return 0;
    }
    // SAFETY: as above.
    let pid: u32 = unsafe { task_field::<i32>(next, TASK_PID.load()) } as u32;
    if SLEEP_ENTRY.load() != 0
        && let Some(slot) = futex_slot(pid)
    {
        // A thread getting a CPU is asleep in no wait: one still in its slot began to
        // sleep after its wake had been seen.
        end_raced_sleep(slot, (u64::from(tgid) << 32) | u64::from(pid));
    }
    let Some(d) = futex_done(pid) else {
        return 0;
    };
    // SAFETY: the thread's slot: a nonzero mark is a record not yet sent, whose fields
    // were all written before it; only this program writes `ran_ns` after that, and
    // only for the slot's own thread (slots are shared by tids equal modulo their
    // number).
    unsafe {
        if core::ptr::read_volatile(d.cast::<u64>()) == 0
            || core::ptr::read_volatile(core::ptr::addr_of!((*d).wait.header.tid)) != pid
        {
            return 0;
        }
        let ran = core::ptr::addr_of_mut!((*d).ran_ns);
        if core::ptr::read_volatile(ran) == 0 {
            core::ptr::write_volatile(ran, now());
        }
    }
    0
}
