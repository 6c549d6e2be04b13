//! The futex system calls: contended waits and the wakes that end them.
//!
//! The uncontended paths of glibc's primitives never enter the kernel, so these
//! programs cost nothing there. In contention mode (with the kernel's BTF) a wait is
//! recorded at its entry here and ended at its wake (`waking`), which names the thread
//! that woke it; nothing runs at the system call's return. A wait whose entry is still
//! there at the thread's next wait returned without sleeping (the word had changed).
//! Otherwise (full mode, or no BTF) a wait is measured to its return, with the thread
//! whose FUTEX_WAKE on the same word (in the same process) came last before it
//! returned. A wait's record is kept in the thread's slot until the thread next waits or
//! exits (`futex_done`) rather than sent on its way back to its lock; full mode sends
//! it at once, in order with its uprobe records. A blocking uprobed call in flight on
//! the thread is marked as having blocked, and a wake inside
//! pthread_cond_signal/broadcast adds the threads it woke to that call.

use aya_ebpf::{
    EbpfContext,
    helpers::{bpf_get_current_pid_tgid, bpf_probe_read_kernel, bpf_probe_read_user},
    macros::{btf_tracepoint, raw_tracepoint, tracepoint},
    programs::{BtfTracePointContext, RawTracePointContext, TracePointContext},
};
use rtm_common::{
    AggOutcome, EventKind, FUTEX_CMD_MASK, FUTEX_OP_OUTSIDE_CALL, FutexWaitEvent, FutexWaker,
    LossCounter, MUTEX_HEAD_WORDS, PENDING_SAMPLED, PENDING_TIMED, PendingFutex, SYNC_FLAG_BLOCKED,
    arch::{
        SYS_FUTEX,
        pt_regs::{
            FIRST_SYSCALL_ARGS, FirstSyscallArgs, SYSCALL_ARG0, SYSCALL_ARG1, SYSCALL_ARG2,
            SYSCALL_ARG3, SYSCALL_NR,
        },
    },
    futex_cmd_waits, futex_cmd_wakes, futex_timeout_realtime, futex_timeout_relative, mutex_holder,
};

use crate::{
    agg,
    emit::{self, header, now},
    filter::{is_traced, traced_in_context},
    futex_done::{keep_done, send_done},
    maps::{
        AGGREGATE, COUNT_WAKES, PENDING_FUTEX, REALTIME_OFFSET, WAKING, count_loss, futex_entry,
        innermost, waker_slot,
    },
    regs::saved,
};

/// Most waits that returned without sleeping counted in a thread's entry before they
/// are sent: a thread that keeps finding the word changed still shows up live.
const UNSLEPT_BATCH: u32 = 1023;

/// A `struct timespec` in the traced program's memory.
#[repr(C)]
#[derive(Clone, Copy)]
struct Timespec {
    sec: i64,
    nsec: i64,
}

/// When a wait started at `start` with the timeout argument `timeout` (a user pointer)
/// times out, on bpf_ktime_get_ns's clock; 0 when unknown.
#[inline(always)]
pub fn deadline(op: u32, timeout: u64, start: u64) -> u64 {
    if timeout == 0 {
        return 0;
    }
    // SAFETY: a read of the traced program's memory through the helper, which fails
    // cleanly on a bad address.
    let Ok(t) = (unsafe { bpf_probe_read_user(timeout as *const Timespec) }) else {
        return 0;
    };
    // Seconds past 2^34 (the year 2514) are no deadline to wait for; below, the product
    // fits (a checked multiply needs a 128-bit helper the BPF target lacks).
    if !(0..1 << 34).contains(&t.sec) || !(0..1_000_000_000).contains(&t.nsec) {
        return 0;
    }
    let ns = t.sec as u64 * 1_000_000_000 + t.nsec as u64;
    if futex_timeout_relative(op) {
        start.saturating_add(ns)
    } else if futex_timeout_realtime(op) {
        ns.saturating_sub(REALTIME_OFFSET.load())
    } else {
        ns
    }
}

/// Reads part of the task's saved registers in one helper call.
#[inline(always)]
fn regs<T>(ctx: &RawTracePointContext, offset: usize) -> Option<T> {
    let regs: *const u8 = ctx.arg(0);
    // SAFETY: the task's saved registers (the tracepoint's first argument), read through
    // the kernel helper, which fails cleanly on a bad address.
    unsafe { bpf_probe_read_kernel(regs.add(offset).cast::<T>()) }.ok()
}

/// The current thread's pid_tgid when system call `id` is a futex call of a traced
/// process. Every system call of every process passes here, so the number is tested
/// first.
#[inline(always)]
fn traced_futex(id: u64) -> Option<u64> {
    if id != SYS_FUTEX {
        return None;
    }
    traced_in_context()
}

/// sys_enter (regs, id) as a BTF tracepoint. On contended locks a raw tracepoint costs
/// the traced program far less than syscalls/sys_enter_futex, which copies a perf record
/// for each call before the program runs (BENCHMARKS.md has both sides of the trade).
/// With the kernel's BTF the saved registers are read with plain loads, which the kernel
/// guards itself; the helper that reads them otherwise cost ~60 ns a call.
#[btf_tracepoint(function = "sys_enter")]
pub fn futex_enter(ctx: BtfTracePointContext) -> i32 {
    let Some(pid_tgid) = traced_futex(ctx.arg(1)) else {
        return 0;
    };
    let regs: *const u8 = ctx.arg(0);
    // SAFETY: fields of the task's saved registers (struct pt_regs, the tracepoint's first
    // argument), checked by the verifier against the kernel's BTF.
    let (r, timeout) = unsafe {
        (
            FirstSyscallArgs {
                arg2: saved(regs, SYSCALL_ARG2),
                arg1: saved(regs, SYSCALL_ARG1),
                arg0: saved(regs, SYSCALL_ARG0),
            },
            saved(regs, SYSCALL_ARG3),
        )
    };
    let waking = WAKING.load() != 0;
    enter(
        pid_tgid,
        r.arg0,
        r.arg1 as u32,
        r.arg2 as u32,
        timeout,
        waking,
    ) as i32
}

/// The same on a kernel without BTF: raw_syscalls sys_enter, the registers read through
/// a helper.
#[raw_tracepoint(tracepoint = "sys_enter")]
pub fn futex_enter_raw(ctx: RawTracePointContext) -> u32 {
    let Some(pid_tgid) = traced_futex(ctx.arg(1)) else {
        return 0;
    };
    let Some(r) = regs::<FirstSyscallArgs>(&ctx, FIRST_SYSCALL_ARGS) else {
        return 0;
    };
    // Waits end at their return here (sys_exit_futex), with the kernel's own result.
    enter(pid_tgid, r.arg0, r.arg1 as u32, r.arg2 as u32, 0, false)
}

/// The holder of the glibc mutex at `uaddr` a thread is about to wait on with `cmd`
/// (0: not a mutex, or unreadable).
#[inline(always)]
pub fn holder_of(uaddr: u64, cmd: u32) -> u32 {
    // SAFETY: bpf_probe_read_user checks the user address itself.
    match unsafe { bpf_probe_read_user(uaddr as *const [u32; MUTEX_HEAD_WORDS]) } {
        Ok(words) => mutex_holder(cmd, words),
        Err(_) => 0,
    }
}

/// A futex call's entry; `timeout` is its timeout argument (a user pointer, 0 for none).
/// `waking`: contention mode's waits end at their wake (`waking::futex_waking`), and
/// nothing runs at the return.
#[inline(always)]
fn enter(pid_tgid: u64, uaddr: u64, op: u32, val: u32, timeout: u64, waking: bool) -> u32 {
    let cmd = op & FUTEX_CMD_MASK;
    // Full mode (uprobes on the pthread functions) is when wakes are counted.
    let full = COUNT_WAKES.load() != 0;
    let waits = futex_cmd_waits(cmd);
    let wakes = !waits && futex_cmd_wakes(cmd);
    // In contention mode with `waking`, the woken threads' records name the waker.
    if !(waits || wakes) || (wakes && waking) {
        return 0;
    }
    let mut op = op;
    if waits {
        // The thread is about to wait: the time its last wait's record costs is time it
        // would spend waiting.
        send_done(pid_tgid);
        if full {
            match innermost(pid_tgid) {
                // SAFETY: this thread's own entry; only this thread writes it.
                Some(call) => unsafe { (*call).flags |= SYNC_FLAG_BLOCKED },
                None => op |= FUTEX_OP_OUTSIDE_CALL,
            }
        }
    }
    let ts = now();
    if wakes {
        let tgid = (pid_tgid >> 32) as u32;
        if let Some(w) = waker_slot(tgid, uaddr) {
            // SAFETY: a map value. Two CPUs waking the same word at once can leave a mix
            // of their two wakes, each a recent waker of it; words sharing the slot
            // would have to be written at the same instant to mix keys.
            unsafe {
                *w = FutexWaker {
                    uaddr,
                    ts_ns: ts,
                    tgid,
                    tid: pid_tgid as u32,
                    pad: 0,
                }
            };
        }
        if !full {
            // Contention mode: the waker is all a wait needs; skip the return.
            return 0;
        }
    }
    let timed = timeout != 0;
    let mut pending = PendingFutex {
        uaddr,
        start_ns: ts,
        // Contention mode tells a timeout from a signal by the deadline; at the return
        // the kernel's result says it.
        deadline_ns: if waking && waits && timed {
            deadline(op, timeout, ts)
        } else {
            0
        },
        waker: 0,
        op,
        val,
        flags: if timed { PENDING_TIMED } else { 0 },
        unslept: 0,
        // Read when the thread goes to sleep (`stacks::at_sleep`): only waits that
        // sleep pay.
        holder: 0,
        pad: 0,
        early_word: 0,
        early_ns: 0,
        early_waker: 0,
        wake_ns: 0,
    };
    // The thread's entry is reused from call to call (start_ns 0: none in flight) and
    // removed when the thread exits.
    let Some(p) = futex_entry(pid_tgid) else {
        if PENDING_FUTEX.insert(pid_tgid, pending, 0).is_err() {
            count_loss(LossCounter::PendingFull);
        }
        return 0;
    };
    if waking && waits {
        // SAFETY: this thread's own entry.
        let last = unsafe { *p };
        if last.start_ns != 0 {
            // No wake ended the thread's last wait: it returned without sleeping. A run
            // of them on one word goes out as one record, with the wait that ends it.
            if last.uaddr == uaddr && last.unslept < UNSLEPT_BATCH {
                pending.unslept = last.unslept + 1;
            } else {
                send_unslept(pid_tgid, &last);
            }
        }
    }
    // SAFETY: this thread's own entry; only this thread writes it while it lives (the
    // waker only clears start_ns, and only of a wait it ends).
    unsafe { *p = pending };
    0
}

/// At a thread's exit (contention mode): its last wait, if no wake ended it, returned
/// without sleeping; it and the run before it are sent.
#[inline(always)]
pub fn send_last_unslept(pid_tgid: u64) {
    if WAKING.load() == 0 {
        return;
    }
    let Some(p) = futex_entry(pid_tgid) else {
        return;
    };
    // SAFETY: this thread's own entry.
    let last = unsafe { *p };
    if last.start_ns != 0 {
        send_unslept(pid_tgid, &last);
    }
}

/// Sends the wait in `f`, which returned without sleeping, with the run of such waits
/// before it.
#[inline(always)]
fn send_unslept(pid_tgid: u64, f: &PendingFutex) {
    if AGGREGATE.load() != 0 {
        let k = agg::key(pid_tgid, f.uaddr, f.op, (0, 0), 0, AggOutcome::NotSlept);
        if agg::add_waits(&k, u64::from(f.unslept) + 1, 0, 0) {
            return;
        }
    }
    emit::futex_wait(f.unslept_record(
        header(EventKind::FutexWait, pid_tgid, f.start_ns),
        f.unslept,
    ));
}

/// Offset of `ret` in the syscalls/sys_exit_futex record.
const EXIT_RET: usize = 16;

/// sys_exit (regs, ret) as a BTF tracepoint. It runs at the end of every system call of
/// every process, like the entry, and reads the syscall number with a plain load. The
/// per-syscall syscalls/sys_exit_futex fills a perf record for each call before its
/// program runs, which costs the traced program more.
#[btf_tracepoint(function = "sys_exit")]
pub fn futex_exit(ctx: BtfTracePointContext) -> i32 {
    let regs: *const u8 = ctx.arg(0);
    // SAFETY: a field of the task's saved registers, checked by the verifier against the
    // kernel's BTF.
    let id = unsafe { saved(regs, SYSCALL_NR) };
    if id != SYS_FUTEX {
        return 0;
    }
    let ret: i64 = ctx.arg(1);
    exit(bpf_get_current_pid_tgid(), ret) as i32
}

/// syscalls/sys_exit_futex, on a kernel without BTF: a raw sys_exit would have to read
/// the syscall number through a helper at the end of every system call of every
/// process.
#[tracepoint]
pub fn futex_exit_tp(ctx: TracePointContext) -> u32 {
    // SAFETY: an aligned 8-byte field of the record the context points to (the verifier
    // allows loads there; a helper call costs more on this hot path).
    let ret =
        unsafe { core::ptr::read_volatile(ctx.as_ptr().cast::<u8>().add(EXIT_RET).cast::<i64>()) };
    exit(bpf_get_current_pid_tgid(), ret)
}

#[inline(always)]
fn exit(pid_tgid: u64, ret: i64) -> u32 {
    if !is_traced((pid_tgid >> 32) as u32) {
        return 0;
    }
    let Some(p) = futex_entry(pid_tgid) else {
        return 0;
    };
    // SAFETY: this thread's own entry; only this thread writes it.
    let f = unsafe { *p };
    if f.start_ns == 0 {
        return 0;
    }
    // SAFETY: as above.
    unsafe { (*p).start_ns = 0 };
    let ts = now();
    let cmd = f.op & FUTEX_CMD_MASK;
    if !futex_cmd_waits(cmd) {
        // A wake in full mode: credit the threads it woke to the call in flight.
        if ret > 0
            && let Some(call) = innermost(pid_tgid)
        {
            // SAFETY: this thread's own entry; only this thread writes it.
            unsafe { (*call).extra = (*call).extra.saturating_add(ret as u32) };
        }
        return 0;
    }
    let tgid = (pid_tgid >> 32) as u32;
    // The waker noted at the wake (`futex_waking`, with the kernel's BTF), in any
    // process; else the last FUTEX_WAKE on the word in this process.
    let (waker, waker_pid) = if f.waker != 0 {
        (f.waker as u32, (f.waker >> 32) as u32)
    } else {
        match waker_slot(tgid, f.uaddr) {
            // SAFETY: a map value, copied out at once.
            Some(w) => match unsafe { *w } {
                w if w.uaddr == f.uaddr
                    && w.tgid == tgid
                    && w.ts_ns >= f.start_ns
                    && w.tid != pid_tgid as u32 =>
                {
                    (w.tid, tgid)
                }
                _ => (0, 0),
            },
            None => (0, 0),
        }
    };
    let wait = FutexWaitEvent {
        header: header(EventKind::FutexWait, pid_tgid, ts),
        uaddr: f.uaddr,
        aux: f.aux(),
        wait_ns: ts.saturating_sub(f.start_ns),
        ret: ret as i32,
        waker,
        unslept: 0,
        waker_pid,
        runnable_ns: 0,
        holder: f.holder,
    };
    // The thread was just woken, and is on its way to the lock it waited for: in
    // contention mode the record waits in its slot until the thread next waits or exits,
    // or until userspace takes it. Writing the ring here delayed it enough to cost a
    // contended lock a tenth of its throughput (BENCHMARKS.md). Full mode's records must
    // stay in order with the thread's uprobe records: sent at once.
    if COUNT_WAKES.load() == 0 {
        keep_done(wait, false, f.flags & PENDING_SAMPLED != 0);
    } else {
        emit::futex_wait(wait);
    }
    0
}
