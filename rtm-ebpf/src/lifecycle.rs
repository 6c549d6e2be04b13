//! Thread and process lifecycle from the task and sched tracepoints: who created whom,
//! exits and execs. Processes forked by a process traced with `TRACED_FOLLOW` join the
//! filter with the same value, before the child runs.

use aya_ebpf::helpers::{bpf_get_current_pid_tgid, bpf_get_current_task, bpf_probe_read_kernel};
use aya_ebpf::{helpers::bpf_get_current_comm, macros::tracepoint, programs::TracePointContext};
use rtm_common::{
    CLONE_THREAD, EventKind, LifecycleEvent, LifecycleOp, Primitive, SyncOp, TRACED_EXITED,
    TRACED_FOLLOW, TRACED_NOW,
};

use crate::{
    emit::{self, header, now},
    filter::{self, traced_pid_tgid},
    maps::{SIGNAL_LIVE, TASK_SIGNAL, forget_thread, innermost},
};

/// task/task_newtask fields.
const NEW_PID: usize = 8;
const NEW_COMM: usize = 12;
const NEW_FLAGS: usize = 32;
/// sched/sched_process_exit fields.
const EXIT_COMM: usize = 8;
const EXIT_GROUP_DEAD: usize = 32;

fn send(pid_tgid: u64, op: LifecycleOp, child: u32, clone_flags: u64, comm: [u8; 16]) {
    let urgent = matches!(op, LifecycleOp::Exec)
        || (op == LifecycleOp::Spawn && clone_flags & CLONE_THREAD == 0);
    emit::lifecycle(
        LifecycleEvent {
            header: header(EventKind::Lifecycle, pid_tgid, now()),
            op: op as u32,
            child,
            clone_flags,
            comm,
        },
        urgent,
    );
}

/// task_newtask: runs in the parent, before the child is scheduled.
#[tracepoint]
pub fn lifecycle_new(ctx: TracePointContext) -> u32 {
    let pid_tgid = bpf_get_current_pid_tgid();
    let value = filter::traced_value((pid_tgid >> 32) as u32);
    if value == 0 {
        return 0;
    }
    // SAFETY: offsets of the tracepoint's fixed fields.
    let child = unsafe { ctx.read_at::<i32>(NEW_PID) }.unwrap_or(0) as u32;
    // SAFETY: as above.
    let flags = unsafe { ctx.read_at::<u64>(NEW_FLAGS) }.unwrap_or(0);
    // SAFETY: as above.
    let comm = unsafe { ctx.read_at::<[u8; 16]>(NEW_COMM) }.unwrap_or([0; 16]);
    if flags & CLONE_THREAD == 0 && value == TRACED_FOLLOW && child != 0 {
        filter::trace(child, TRACED_FOLLOW);
    }
    if let Some(call) = innermost(pid_tgid) {
        // SAFETY: this thread's own entry; only this thread writes it.
        let c = rtm_common::Cookie::unpack(unsafe { (*call).cookie });
        if c.primitive == Primitive::Thread as u32 && c.op == SyncOp::Create as u32 {
            // SAFETY: as above.
            unsafe { (*call).extra = child };
        }
    }
    send(pid_tgid, LifecycleOp::Spawn, child, flags, comm);
    0
}

/// Whether the current thread's process has no thread left that is not exiting: its
/// `signal->live`, which do_exit decrements before this tracepoint. False when the
/// kernel's BTF gave no offsets.
#[inline(always)]
fn group_dead() -> bool {
    let (signal_at, live_at) = (TASK_SIGNAL.load(), SIGNAL_LIVE.load());
    if signal_at == 0 || live_at == 0 {
        return false;
    }
    // SAFETY: helper without preconditions; the reads below are fault-safe.
    let task = unsafe { bpf_get_current_task() } as *const u8;
    // SAFETY: probe reads of kernel memory at the BTF offsets; a failed read is "no".
    let Ok(signal) = (unsafe { bpf_probe_read_kernel(task.add(signal_at as usize).cast::<u64>()) })
    else {
        return false;
    };
    if signal == 0 {
        return false;
    }
    // SAFETY: as above.
    unsafe { bpf_probe_read_kernel((signal as *const u8).add(live_at as usize).cast::<i32>()) }
        .is_ok_and(|live| live == 0)
}

/// sched_process_exit: a thread exits (`child` is 1 when it was the last one, on
/// kernels whose tracepoint says so).
///
/// PID reuse: the process's last thread takes it out of the filter here (its value
/// becomes TRACED_EXITED). Its pid is freed only later, when it is reaped, so a process
/// that gets the pid next is never traced as this one, whatever userspace is doing;
/// and the hot paths pay nothing for it (they test the same byte as before). Threads
/// of the group that exit concurrently and come here after that still clean up their
/// per-thread state, but send no exit (a later process with the pid finds the same
/// value and must send nothing either).
#[tracepoint]
pub fn lifecycle_exit(ctx: TracePointContext) -> u32 {
    let pid_tgid = bpf_get_current_pid_tgid();
    let tgid = (pid_tgid >> 32) as u32;
    let value = filter::traced_value(tgid);
    if value == 0 {
        return 0;
    }
    // The thread's last waits go before its exit.
    crate::futex_done::send_done(pid_tgid);
    crate::waking::count_early_at_exit(pid_tgid);
    crate::futex::send_last_unslept(pid_tgid);
    crate::func::send_kept(pid_tgid);
    forget_thread(pid_tgid);
    if value & TRACED_NOW == 0 {
        return 0;
    }
    // SAFETY: offsets of the tracepoint's fixed fields.
    let comm = unsafe { ctx.read_at::<[u8; 16]>(EXIT_COMM) }.unwrap_or([0; 16]);
    // SAFETY: as above.
    let group_dead = unsafe { ctx.read_at::<u8>(EXIT_GROUP_DEAD) }.unwrap_or(0);
    send(pid_tgid, LifecycleOp::Exit, group_dead as u32, 0, comm);
    if self::group_dead() {
        filter::trace(tgid, TRACED_EXITED);
    }
    0
}

/// sched_process_exec: the process runs a new program.
#[tracepoint]
pub fn lifecycle_exec(_ctx: TracePointContext) -> u32 {
    let Some(pid_tgid) = traced_pid_tgid() else {
        return 0;
    };
    let comm = bpf_get_current_comm().unwrap_or([0; 16]);
    send(pid_tgid, LifecycleOp::Exec, pid_tgid as u32, 0, comm);
    0
}
