//! The user stacks of contended futex waits. The waiter's is taken when it goes to
//! sleep (sched_switch, in its own context), and the waker's at the wake that ends the
//! wait (sched_waking, in the waker's context); when the waiter had not left its CPU
//! yet, the wake takes the waiter's too (threads of one process share their memory, and
//! a sleeping thread's stack does not change). A flag in the wait's entry, set
//! atomically, makes sure the waiter's is taken once. Only waits that sleep pay for it:
//! the uncontended path and waits that returned without sleeping never come here.
//! Userspace joins the two records of a wait and unwinds the copies.

use aya_ebpf::{
    helpers::{
        bpf_get_current_task_btf, bpf_get_prandom_u32, bpf_get_smp_processor_id,
        generated::bpf_probe_read_user,
    },
    maps::{RingBuf, ring_buf::RingBufBytes},
};
use core::intrinsics::AtomicOrdering;

use rtm_common::{
    EventKind, FUTEX_CMD_MASK, LossCounter, MAX_CALL_DEPTH, PENDING_SAMPLED, PENDING_STACKED,
    PENDING_TIMED, PendingFutex, STACK_FIXES, STACK_MISSING_OTHER_PROCESS,
    STACK_MISSING_UNREADABLE, STACK_MISSING_WAKE_BEFORE_SLEEP, STACK_SIDE_WAITER, STACK_SIDE_WAKER,
    StackFix, StackRegs, StacksHead,
    arch::{SYS_FUTEX, pt_regs},
    futex_cmd_waits,
};

use crate::{
    emit::{header, now, wakeup_flags_for},
    filter::is_traced,
    futex::{deadline, holder_of},
    futex_done::{send_done, task_field},
    maps::{
        EVENTS, EVENTS_1, EVENTS_2, EVENTS_3, PENDING, PENDING_FUTEX, READ_HOLDERS, SLEEP_ENTRY,
        STACK_BYTES, STACK_RATE, STACK_SAMPLER, SYNC_RING_MASK, TASK_PID, TASK_STATE, TASK_TGID,
        count_loss, futex_entry,
    },
    regs::{self, saved, syscall_of},
};

/// The sampler's window: its chance is set again this often, ns.
const SAMPLE_WINDOW_NS: u64 = 100_000_000;

/// Whether this wait's stacks are taken: each wait on this CPU with a chance set, every
/// tenth of a second, from the rate wanted over the waits seen in the tenth before
/// (every wait in the first). Returns the waits the sample stands for (the inverse of
/// its chance), in thousandths: per-stack totals are then unbiased estimates. A burst
/// past four times the window's share (and 16) takes no more stacks until the next
/// window, bounding the cost; the waits it passed over are added to the weight of the
/// next stack taken on the CPU, so that totals stay unbiased.
#[inline(always)]
pub fn sample(now: u64) -> Option<u32> {
    let rate = STACK_RATE.load();
    if rate == 0 || STACK_BYTES.load() == 0 {
        return None;
    }
    if rate == u32::MAX {
        return Some(1000);
    }
    let s = STACK_SAMPLER.get_ptr_mut(0)?;
    // SAFETY: this CPU's element; programs do not nest on one CPU here.
    let s = unsafe { &mut *s };
    // Stacks wanted a window, in thousandths (a rate of 1 a second is 100 a window).
    let want_milli = u64::from(rate) * 100;
    if now.saturating_sub(s.window_ns) >= SAMPLE_WINDOW_NS {
        // chance = want / seen, out of 2^32 (0: every wait).
        s.chance = if s.window_ns == 0 || s.seen == 0 {
            0
        } else {
            // No division the compiler cannot prove safe: a panic path is refused.
            (want_milli << 32)
                .checked_div(s.seen.min(1 << 40) * 1000)
                .unwrap_or(1 << 32)
                .min(1 << 32)
        };
        s.window_ns = now;
        s.seen = 0;
        s.taken = 0;
    }
    s.seen += 1;
    if s.taken * 1000 >= 4 * want_milli + 16_000 {
        // Each wait passed over stands for itself: it rides on the next stack taken.
        s.carry_milli = (s.carry_milli + 1000).min(u64::from(u32::MAX));
        return None;
    }
    let all = s.chance == 0 || s.chance >= 1 << 32;
    // SAFETY: helper without preconditions.
    if !all && u64::from(unsafe { bpf_get_prandom_u32() }) >= s.chance {
        return None;
    }
    s.taken += 1;
    let weight = if all {
        1000
    } else {
        (1000u64 << 32).checked_div(s.chance).unwrap_or(1000)
    };
    let weight = (weight + s.carry_milli).min(u64::from(u32::MAX));
    s.carry_milli = 0;
    Some(weight as u32)
}

/// The user registers of `task` (a BTF task pointer) at its system call.
///
/// # Safety
/// `task` is a BTF task pointer.
#[inline(always)]
unsafe fn user_regs(task: *const u8) -> StackRegs {
    // SAFETY: the task's saved user registers as a BTF pointer; the verifier checks each
    // field against the kernel's BTF.
    unsafe {
        let regs = regs::of_task(task);
        StackRegs {
            ip: saved(regs, pt_regs::IP),
            sp: saved(regs, pt_regs::SP),
            bp: saved(regs, pt_regs::FP),
            len: 0,
            missing: 0,
            fixes: [StackFix::default(); STACK_FIXES],
        }
    }
}

/// The return addresses of the thread's probed calls in flight (full mode), innermost
/// first: each call's return probe put the kernel's trampoline in its place on the
/// stack, where an unwinder would stop.
#[inline(always)]
fn call_fixes(pid_tgid: u64) -> [StackFix; STACK_FIXES] {
    let mut out = [StackFix::default(); STACK_FIXES];
    let Some(tc) = PENDING.get_ptr(pid_tgid) else {
        return out;
    };
    // SAFETY: a map value, read field by field (its thread may change it meanwhile: a
    // torn read gives a wrong pair, which userspace applies only over the trampoline).
    let depth = unsafe { (*tc).depth } as usize;
    for (i, fix) in out.iter_mut().enumerate() {
        if depth <= i || depth > MAX_CALL_DEPTH {
            break;
        }
        // SAFETY: as above; the index is masked in bounds.
        let call =
            unsafe { &(*tc).calls[crate::bounds::masked(depth - 1 - i, MAX_CALL_DEPTH - 1)] };
        *fix = StackFix {
            slot: call.sp,
            ret: call.caller,
        };
    }
    out
}

/// Copies up to `n` bytes of the current process's memory from `sp` to `dst`: `n`,
/// else `n/2`, else `n/4` (a copy past the top of the stack's mapping fails whole).
/// Returns the bytes copied.
///
/// # Safety
/// `dst` has room for `n` bytes.
#[inline(always)]
unsafe fn copy_stack(dst: *mut u8, sp: u64, n: u32) -> u32 {
    for size in [n, n / 2, n / 4] {
        // SAFETY: see above; the helper fails cleanly on an unreadable address.
        if size != 0 && unsafe { bpf_probe_read_user(dst.cast(), size, sp as *const _) } == 0 {
            return size;
        }
    }
    0
}

/// Reserves a stacks record of `size` bytes on `ring`, with the flags to submit it.
#[inline(always)]
fn reserve(ring: &'static RingBuf, size: usize) -> Option<(RingBufBytes<'static>, u64)> {
    let entry = ring.reserve_bytes(size, 0)?;
    Some((entry, wakeup_flags_for(ring, size as u64)))
}

/// Claims the taking of the waiter's stack of the wait in `slot` (whose copy is `f`):
/// true for the first caller only.
///
/// # Safety
/// `slot` is a thread's futex entry (a map value).
#[inline(always)]
unsafe fn claim(slot: *mut PendingFutex, f: &PendingFutex, sampled: bool) -> bool {
    if f.flags & PENDING_STACKED != 0 {
        return false;
    }
    // The BPF target exchanges 8 bytes at a time: `flags` and `unslept` together (8-byte
    // aligned, checked in rtm-common), `unslept` as it was.
    let before = u64::from(f.flags) | (u64::from(f.unslept) << 32);
    let after = before
        | u64::from(PENDING_STACKED)
        | if sampled {
            u64::from(PENDING_SAMPLED)
        } else {
            0
        };
    // SAFETY: an aligned 8-byte field pair of a map value; the exchange fails when
    // another program claimed it first (or the thread moved on to another call).
    let (_, ours) = unsafe {
        core::intrinsics::atomic_cxchg::<u64, { AtomicOrdering::SeqCst }, { AtomicOrdering::SeqCst }>(
            core::ptr::addr_of_mut!((*slot).flags).cast::<u64>(),
            before,
            after,
        )
    };
    ours
}

/// Writes a stacks record: `head`, then a copy of the current process's memory from
/// each side's stack pointer (`waiter`, `waker`: BTF task pointers of threads of the
/// current process, or the current one; `waiter_id`, `waker_id`: their pid_tgid).
#[inline(always)]
fn emit(
    mut head: StacksHead,
    (waiter, waiter_id): (Option<*const u8>, u64),
    (waker, waker_id): (Option<*const u8>, u64),
) {
    // A constant to the verifier (read-only globals are frozen at load).
    let n = STACK_BYTES.load();
    if n == 0 {
        return;
    }
    let two = waiter.is_some() && waker.is_some();
    let size = core::mem::size_of::<StacksHead>() + if two { 2 } else { 1 } * n as usize;
    // SAFETY: helper without preconditions.
    let cpu = unsafe { bpf_get_smp_processor_id() };
    // Branches, not a table of maps: each reservation names its map.
    let reserved = match cpu & SYNC_RING_MASK.load() {
        0 => reserve(&EVENTS, size),
        1 => reserve(&EVENTS_1, size),
        2 => reserve(&EVENTS_2, size),
        _ => reserve(&EVENTS_3, size),
    };
    let Some((mut entry, flags)) = reserved else {
        count_loss(LossCounter::RingFull);
        return;
    };
    let base = entry.as_mut_ptr();
    // SAFETY: the task pointers are BTF task pointers; the record has room for the head
    // and `n` bytes for each side present.
    unsafe {
        let mut body = base.add(core::mem::size_of::<StacksHead>());
        let mut take = |task: *const u8, regs: &mut StackRegs, id: u64| {
            *regs = user_regs(task);
            regs.fixes = call_fixes(id);
            regs.len = copy_stack(body, regs.sp, n);
            if regs.len == 0 {
                regs.missing = STACK_MISSING_UNREADABLE;
            }
            body = body.add(n as usize);
        };
        if let Some(t) = waiter {
            head.sides |= STACK_SIDE_WAITER;
            take(t, &mut head.waiter_regs, waiter_id);
        }
        if let Some(t) = waker {
            head.sides |= STACK_SIDE_WAKER;
            take(t, &mut head.waker_regs, waker_id);
        }
        core::ptr::write_unaligned(base.cast::<StacksHead>(), head);
    }
    entry.submit(flags);
}

/// A thread of a traced process (`prev`, the current task; `pid_tgid`) leaves its CPU to
/// sleep inside a futex wait (contention mode without system call programs), or enters
/// the kernel's futex_wait (on the futex functions): its wait begins now. With
/// `choose_stack` its stacks are sampled now; otherwise at its wake, or at its end when
/// no thread woke it (a wait that turns out not to sleep is not sampled). The thread's last ended wait goes into the sums first (time it spends
/// waiting anyway), then the mutex's holder is read and, when sampled, its stack taken.
#[inline(always)]
pub fn begin_sleep(prev: *const u8, pid_tgid: u64, choose_stack: bool) {
    // SAFETY: prev is a BTF task pointer.
    let (id, word, op, _) = unsafe { syscall_of(prev) };
    let op = op as u32;
    if id != SYS_FUTEX || !futex_cmd_waits(op & FUTEX_CMD_MASK) {
        return;
    }
    // SAFETY: fields of the task's saved registers (BTF-checked).
    let (val, timeout) = unsafe {
        let regs = regs::of_task(prev);
        (
            saved(regs, pt_regs::SYSCALL_ARG2) as u32,
            saved(regs, pt_regs::SYSCALL_ARG3),
        )
    };
    send_done(pid_tgid);
    let ts = now();
    let slot = futex_entry(pid_tgid);
    let weight = if choose_stack { sample(ts) } else { None };
    // Only a mutex's waits can have a holder: glibc's sleep with the value 2 (or, robust,
    // the owner with the waiters bit), priority-inheritance ones with their own ops.
    let cmd = op & FUTEX_CMD_MASK;
    let mutex_like = val == 2 || val & 0x8000_0000 != 0 || cmd == 6 || cmd == 13;
    let holder = if READ_HOLDERS.load() != 0 && mutex_like {
        holder_of(word, cmd)
    } else {
        0
    };
    let flags = if timeout != 0 { PENDING_TIMED } else { 0 }
        // Sampled or not, the choice is made: the wake does not choose again.
        | if choose_stack { PENDING_STACKED } else { 0 }
        | if weight.is_some() { PENDING_SAMPLED } else { 0 };
    match slot {
        // SAFETY: the thread's own entry, written field by field (a wake may be marking
        // an early wake in it), its start last: a wake matches a wait by its start.
        Some(p) => unsafe {
            (*p).uaddr = word;
            (*p).deadline_ns = deadline(op, timeout, ts);
            (*p).waker = 0;
            (*p).wake_ns = 0;
            (*p).op = op;
            (*p).val = val;
            (*p).flags = flags;
            (*p).unslept = 0;
            (*p).holder = holder;
            (*p).pad = weight.unwrap_or(0);
            core::ptr::write_volatile(core::ptr::addr_of_mut!((*p).start_ns), ts);
        },
        None => {
            let pending = PendingFutex {
                uaddr: word,
                start_ns: ts,
                deadline_ns: deadline(op, timeout, ts),
                op,
                val,
                flags,
                holder,
                pad: weight.unwrap_or(0),
                ..PendingFutex::default()
            };
            if PENDING_FUTEX.insert(pid_tgid, pending, 0).is_err() {
                count_loss(LossCounter::PendingFull);
                return;
            }
        }
    }
    if let Some(w) = weight {
        let head = StacksHead {
            header: header(EventKind::Stacks, pid_tgid, ts),
            uaddr: word,
            start_ns: ts,
            weight_milli: w,
            ..StacksHead::default()
        };
        emit(head, (Some(prev), pid_tgid), (None, 0));
    }
}

/// Contention mode on the futex functions: the wait `f` of the current thread (`task`,
/// `pid_tgid`) ended at `ts` with no thread's wake (a timeout, a signal) and no stack
/// chosen: it is sampled now, and its waiter's stack taken (the same as at its call: the
/// thread has not left the kernel). Returns whether it was.
#[inline(always)]
pub fn at_unwoken_end(f: &PendingFutex, task: *const u8, pid_tgid: u64, ts: u64) -> bool {
    if STACK_BYTES.load() == 0 || f.flags & PENDING_STACKED != 0 {
        return false;
    }
    let Some(weight) = sample(ts) else {
        return false;
    };
    let head = StacksHead {
        header: header(EventKind::Stacks, pid_tgid, ts),
        uaddr: f.uaddr,
        start_ns: f.start_ns,
        weight_milli: weight,
        ..StacksHead::default()
    };
    emit(head, (Some(task), pid_tgid), (None, 0));
    true
}

/// sched_switch's `prev` (a BTF task pointer, the current task) goes to sleep, not
/// preempted: when it is a thread of a traced process asleep in a futex wait, the holder
/// of the mutex it waits on is read now (in its own context, as its wait begins to
/// sleep: only waits that sleep pay), and its stack is taken if it was sampled and not
/// taken yet. Where no program runs on system calls, its wait begins here.
#[inline(always)]
pub fn at_sleep(prev: *const u8) {
    let sleep_entry = SLEEP_ENTRY.load() != 0;
    let holders = READ_HOLDERS.load() != 0;
    let stacks = STACK_BYTES.load() != 0;
    if !sleep_entry && !holders && !stacks {
        return;
    }
    if sleep_entry {
        // Asleep: TASK_INTERRUPTIBLE or TASK_UNINTERRUPTIBLE. A thread still runnable
        // (a yield) or being woken (TASK_WAKING: its wake came first, and counted it as
        // woken before it slept) is not beginning a wait: told before any lookup, as
        // most switches of a busy machine are of this kind.
        // SAFETY: a task_struct field at an offset from the kernel's BTF.
        if unsafe { task_field::<u32>(prev, TASK_STATE.load()) } & 3 == 0 {
            return;
        }
    }
    // SAFETY: task_struct fields at offsets from the kernel's BTF.
    let tgid = unsafe { task_field::<i32>(prev, TASK_TGID.load()) } as u32;
    if !is_traced(tgid) {
        return;
    }
    // SAFETY: as above.
    let pid = unsafe { task_field::<i32>(prev, TASK_PID.load()) } as u32;
    let pid_tgid = (u64::from(tgid) << 32) | u64::from(pid);
    if sleep_entry {
        return begin_sleep(prev, pid_tgid, true);
    }
    let Some(slot) = futex_entry(pid_tgid) else {
        return;
    };
    // SAFETY: the thread's own entry, copied out; it is the current thread.
    let f = unsafe { *slot };
    if f.start_ns == 0 || (!holders && f.flags & PENDING_STACKED != 0) {
        return;
    }
    // The thread is inside that wait's futex call (not sleeping elsewhere, nor in a
    // wake of the same word after a wait that did not sleep).
    // SAFETY: prev is a BTF task pointer.
    let (id, word, op, _) = unsafe { syscall_of(prev) };
    if id != SYS_FUTEX || word != f.uaddr || !futex_cmd_waits(op as u32 & FUTEX_CMD_MASK) {
        return;
    }
    if holders && f.holder == 0 {
        let h = holder_of(f.uaddr, f.op & FUTEX_CMD_MASK);
        if h != 0 {
            // SAFETY: the thread's own entry; the wake that reads it comes after this
            // sleep.
            unsafe { (*slot).holder = h };
        }
    }
    if !stacks || f.flags & PENDING_STACKED != 0 {
        return;
    }
    let weight = sample(now());
    // The choice, sampled or not, is made once (the wake does not choose again).
    // SAFETY: slot is the thread's entry.
    if !unsafe { claim(slot, &f, weight.is_some()) } {
        return;
    }
    let Some(weight) = weight else {
        return;
    };
    // SAFETY: the thread's own entry.
    unsafe { (*slot).pad = weight };
    let mut head = StacksHead {
        header: header(EventKind::Stacks, pid_tgid, now()),
        uaddr: f.uaddr,
        start_ns: f.start_ns,
        weight_milli: weight,
        ..StacksHead::default()
    };
    head.sides = 0;
    emit(head, (Some(prev), pid_tgid), (None, 0));
}

/// The end of a sampled wait whose wake came before its sleep (`f`; `pid_tgid`, at
/// `ts`, after `wait_ns`, woken by `waker`): its waiter's stack was taken at the sleep;
/// its waker's side is said to be missing, so the two records still make one wait.
#[inline(always)]
pub fn at_raced_wake(f: &PendingFutex, pid_tgid: u64, ts: u64, wait_ns: u64, waker: (u32, u32)) {
    if STACK_BYTES.load() == 0 || f.flags & PENDING_SAMPLED == 0 {
        return;
    }
    let mut head = StacksHead {
        header: header(EventKind::Stacks, pid_tgid, ts),
        uaddr: f.uaddr,
        start_ns: f.start_ns,
        wait_ns,
        waker_pid: waker.0,
        waker: waker.1,
        weight_milli: f.pad,
        ..StacksHead::default()
    };
    head.waker_regs.missing = STACK_MISSING_WAKE_BEFORE_SLEEP;
    // No copy follows: the record is its head alone.
    let reserved = match bpf_get_smp_processor_id_safe() & SYNC_RING_MASK.load() {
        0 => reserve(&EVENTS, core::mem::size_of::<StacksHead>()),
        1 => reserve(&EVENTS_1, core::mem::size_of::<StacksHead>()),
        2 => reserve(&EVENTS_2, core::mem::size_of::<StacksHead>()),
        _ => reserve(&EVENTS_3, core::mem::size_of::<StacksHead>()),
    };
    let Some((mut entry, flags)) = reserved else {
        count_loss(LossCounter::RingFull);
        return;
    };
    // SAFETY: the record has room for the head.
    unsafe { core::ptr::write_unaligned(entry.as_mut_ptr().cast::<StacksHead>(), head) };
    entry.submit(flags);
}

#[inline(always)]
fn bpf_get_smp_processor_id_safe() -> u32 {
    // SAFETY: helper without preconditions.
    unsafe { bpf_get_smp_processor_id() }
}

/// The wake of the wait in `slot` (whose copy is `f`) of `waiter` (a BTF task pointer;
/// `pid_tgid`) by the current thread (`waker`, of process `waker_pid`) at `ts`, after
/// `wait_ns`: the waker's stack, and the waiter's when it was not taken at its sleep and
/// the waker shares its memory (`same_process`).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub fn at_wake(
    slot: *mut PendingFutex,
    f: &PendingFutex,
    waiter: *const u8,
    pid_tgid: u64,
    ts: u64,
    wait_ns: u64,
    (waker_pid, waker): (u32, u32),
    same_process: bool,
) -> bool {
    if STACK_BYTES.load() == 0 {
        return false;
    }
    // Chosen at its sleep, or now for a wait that had not slept.
    let sampled = f.flags & PENDING_SAMPLED != 0;
    let (weight, waiter_too) = if sampled {
        (f.pad, false)
    } else if f.flags & PENDING_STACKED != 0 {
        return false;
    } else {
        let Some(w) = sample(ts) else {
            return false;
        };
        // SAFETY: slot is the waiter's entry.
        let took = same_process && unsafe { claim(slot, f, true) };
        if same_process && !took {
            return false;
        }
        (w, took)
    };
    let mut head = StacksHead {
        header: header(EventKind::Stacks, pid_tgid, ts),
        uaddr: f.uaddr,
        start_ns: f.start_ns,
        wait_ns,
        waker_pid,
        waker,
        weight_milli: weight,
        ..StacksHead::default()
    };
    if !same_process && !sampled {
        head.waiter_regs.missing = STACK_MISSING_OTHER_PROCESS;
    }
    // SAFETY: helper without preconditions; its result is a BTF task pointer.
    let current = unsafe { bpf_get_current_task_btf() } as *const u8;
    let waker_id = (u64::from(waker_pid) << 32) | u64::from(waker);
    emit(
        head,
        (waiter_too.then_some(waiter), pid_tgid),
        (Some(current), waker_id),
    );
    true
}
