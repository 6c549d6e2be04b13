//! Tracepoints and kernel-function hooks: the lifecycle tracepoints of every mode, and
//! where futex calls are seen (the kernel's futex functions through fentry/fexit, the
//! scheduler's and system calls' tracepoints as BTF tracepoints, or the fallback
//! without BTF).

use aya::{
    Ebpf,
    programs::{BtfTracePoint, FEntry, FExit, RawTracePoint, TracePoint},
};
use rtm_common::names;

use super::{
    error::{ProbeError, program},
    layout,
};

/// Futex calls are seen through the sys_enter tracepoint, and their waits end at the
/// sys_exit tracepoint or, with `waking` (contention mode), at sched_waking, in the
/// waker's context, so that nothing runs on the woken thread's way back to its lock
/// nor at the end of every other system call. All are attached raw, as BTF tracepoints:
/// the programs read the saved registers with plain loads. The per-syscall tracepoints
/// (syscalls/sys_enter_futex, sys_exit_futex) fill a perf record for each call before
/// the program runs, which on contended locks costs the traced program more than the
/// program does. Returns a description for --verbose.
fn attach_futex_btf(
    ebpf: &mut Ebpf,
    btf: &aya::Btf,
    waking: bool,
    note_waker: bool,
    stacks: bool,
    sleep_entry: bool,
) -> Result<&'static str, ProbeError> {
    let enter = (names::PROG_FUTEX_ENTER, "raw_syscalls", "sys_enter");
    let waking_prog = (names::PROG_FUTEX_WAKING, "sched", "sched_waking");
    let exit = (names::PROG_FUTEX_EXIT, "raw_syscalls", "sys_exit");
    let switch = (names::PROG_FUTEX_SWITCH, "sched", "sched_switch");
    // A wake from a timer's callback is a timeout (or a timer's signal), whatever thread
    // the timer interrupted.
    // The exit first: an entry never goes without its exit.
    let timers = [
        (names::PROG_TIMER_EXIT, "timer", "hrtimer_expire_exit"),
        (names::PROG_TIMER_ENTER, "timer", "hrtimer_expire_entry"),
    ];
    let programs = if waking && sleep_entry {
        let mut p = vec![waking_prog, switch];
        p.extend(timers);
        p
    } else if waking {
        let mut p = vec![enter, waking_prog, switch];
        p.extend(timers);
        p
    } else if note_waker && stacks {
        // The waiters' call stacks are taken as they go to sleep.
        vec![
            enter,
            waking_prog,
            exit,
            (names::PROG_FUTEX_SWITCH, "sched", "sched_switch"),
        ]
    } else if note_waker {
        vec![enter, waking_prog, exit]
    } else {
        vec![enter, exit]
    };
    for (name, category, event) in programs {
        let prog: &mut BtfTracePoint = program(ebpf, name)?;
        prog.load(event, btf)
            .map_err(|source| ProbeError::Program { name, source })?;
        prog.attach().map_err(|source| ProbeError::Tracepoint {
            category,
            event,
            source,
        })?;
    }
    Ok(if waking && sleep_entry {
        "sched_switch (waits begin as their thread sleeps: no program on system calls), \
         sched_waking and hrtimer expiry as BTF tracepoints (waits end when the woken thread \
         gets a CPU)"
    } else if waking {
        "sys_enter, sched_waking, sched_switch and hrtimer expiry as BTF tracepoints (waits \
         end when the woken thread gets a CPU)"
    } else if note_waker {
        "sys_enter, sched_waking (names the waker, in any process) and sys_exit as BTF \
         tracepoints"
    } else {
        "sys_enter and sys_exit as BTF tracepoints"
    })
}

/// Environment variable: `sched` keeps contention mode on the scheduler's tracepoints
/// even where the kernel's futex functions can be hooked (for comparison and tests).
pub const HOOKS_ENV: &str = "RTM_TRACE_HOOKS";

/// Contention mode on the kernel's futex functions: fentry/fexit on `futex_wait` and
/// `futex_lock_pi`, fentry on `wake_q_add_safe` (the waker). Nothing then runs on any
/// context switch, wakeup or system call but these, so processes not traced pay only on
/// their own futex waits. Needs BPF trampolines (x86-64, 5.5+), bpf_get_func_ret (5.17+)
/// and those functions in the kernel's BTF (not inlined away); on failure every program
/// it attached is detached again and the scheduler's tracepoints are used.
fn attach_futex_fn(ebpf: &mut Ebpf, btf: &aya::Btf) -> Result<&'static str, ProbeError> {
    let attached = (|| {
        for (name, function, exit) in names::FUTEX_FN_PROGRAMS {
            if exit {
                let prog: &mut FExit = program(ebpf, name)?;
                prog.load(function, btf)
                    .map_err(|source| ProbeError::Program { name, source })?;
                prog.attach()
                    .map_err(|source| ProbeError::Program { name, source })?;
            } else {
                let prog: &mut FEntry = program(ebpf, name)?;
                prog.load(function, btf)
                    .map_err(|source| ProbeError::Program { name, source })?;
                prog.attach()
                    .map_err(|source| ProbeError::Program { name, source })?;
            }
        }
        Ok(())
    })();
    if let Err(e) = attached {
        unload_futex_fn(ebpf);
        return Err(e);
    }
    Ok(
        "the kernel's futex_wait and futex_lock_pi (fentry/fexit: waits begin as the kernel \
         takes them, end at their return) and wake_q_add_safe (fentry: the waker); no program \
         on context switches or other system calls",
    )
}

/// Detaches and unloads every program of [`attach_futex_fn`].
fn unload_futex_fn(ebpf: &mut Ebpf) {
    for (name, _, exit) in names::FUTEX_FN_PROGRAMS {
        if exit {
            if let Ok(p) = program::<FExit>(ebpf, name) {
                let _ = p.unload();
            }
        } else if let Ok(p) = program::<FEntry>(ebpf, name) {
            let _ = p.unload();
        }
    }
}

/// The same without BTF: the entry as a raw tracepoint that reads the registers through
/// a helper, the return from syscalls/sys_exit_futex.
fn attach_futex_fallback(ebpf: &mut Ebpf) -> Result<&'static str, ProbeError> {
    let name = names::PROG_FUTEX_ENTER_RAW;
    let prog: &mut RawTracePoint = program(ebpf, name)?;
    prog.load()
        .map_err(|source| ProbeError::Program { name, source })?;
    prog.attach("sys_enter")
        .map_err(|source| ProbeError::Tracepoint {
            category: "raw_syscalls",
            event: "sys_enter",
            source,
        })?;
    let name = names::PROG_FUTEX_EXIT_TP;
    let prog: &mut TracePoint = program(ebpf, name)?;
    prog.load()
        .map_err(|source| ProbeError::Program { name, source })?;
    prog.attach("syscalls", "sys_exit_futex")
        .map_err(|source| ProbeError::Tracepoint {
            category: "syscalls",
            event: "sys_exit_futex",
            source,
        })?;
    Ok("raw_syscalls/sys_enter and syscalls/sys_exit_futex")
}

/// Tracepoints attached for every mode: (program, category, event).
const TRACEPOINTS: [(&str, &str, &str); 3] = [
    (names::PROG_LIFECYCLE_NEW, "task", "task_newtask"),
    (names::PROG_LIFECYCLE_EXIT, "sched", "sched_process_exit"),
    (names::PROG_LIFECYCLE_EXEC, "sched", "sched_process_exec"),
];

/// How futex calls are seen, as [`attach`] set it up.
pub(super) struct FutexHooks {
    /// Where futex calls are seen (for --verbose).
    pub(super) entry: String,
    /// Whether futex waits begin at their sleep (no program on system calls).
    pub(super) sleep_entry: bool,
    /// Whether contention mode runs on the kernel's futex functions.
    pub(super) futex_fn: bool,
}

/// Attaches the tracepoints of every mode, then the futex programs: on the kernel's
/// futex functions where contention mode can use them, else as BTF tracepoints, else
/// the fallback without BTF. `btf` (None: fallbacks forced) is dropped once they are
/// attached. The flags are the globals the object was loaded with.
pub(super) fn attach<E: std::fmt::Display>(
    ebpf: &mut Ebpf,
    btf: Option<Result<aya::Btf, E>>,
    waking: u32,
    note_waker: u32,
    stack_bytes: u32,
    sleep_entry: u32,
) -> Result<FutexHooks, ProbeError> {
    for (name, category, event) in TRACEPOINTS {
        let prog: &mut TracePoint = program(ebpf, name)?;
        prog.load()
            .map_err(|source| ProbeError::Program { name, source })?;
        // Tracepoints see every process; the in-kernel filter keeps the traced ones.
        prog.attach(category, event)
            .map_err(|source| ProbeError::Tracepoint {
                category,
                event,
                source,
            })?;
    }
    let want_fn =
        waking != 0 && sleep_entry != 0 && std::env::var(HOOKS_ENV).map_or(true, |v| v != "sched");
    let mut fn_refused = None;
    let fn_hooks = match &btf {
        Some(Ok(btf)) if want_fn => attach_futex_fn(ebpf, btf)
            .inspect_err(|e| {
                log::info!("contention mode on the scheduler's tracepoints: {e}");
                // The first line: the kernel's reason, without the verifier's log.
                let why = e.to_string();
                let why = why.split(". Verifier output").next().unwrap_or("");
                fn_refused = Some(why.lines().next().unwrap_or("").to_owned());
            })
            .ok(),
        _ => None,
    };
    let futex_fn = fn_hooks.is_some();
    let attached = match &btf {
        _ if let Some(how) = fn_hooks => Ok(how),
        None => Err(format!("{} is set", layout::FALLBACKS_ENV)),
        Some(Ok(btf)) => attach_futex_btf(
            ebpf,
            btf,
            waking != 0,
            note_waker != 0,
            stack_bytes != 0,
            sleep_entry != 0,
        )
        .map_err(|e| e.to_string()),
        Some(Err(e)) => Err(format!("cannot read the kernel's BTF: {e}")),
    };
    drop(btf);
    let sleep_entry = sleep_entry != 0 && attached.is_ok();
    let futex_entry = match attached {
        Ok(how) => match fn_refused {
            Some(why) => format!(
                "{how} (the kernel's futex functions could not be hooked, which would \
                 spare context switches: {why})"
            ),
            None => how.to_string(),
        },
        Err(why) => {
            // A program attached before the failure would see every call twice.
            for name in [
                names::PROG_FUTEX_ENTER,
                names::PROG_FUTEX_EXIT,
                names::PROG_FUTEX_WAKING,
                names::PROG_FUTEX_SWITCH,
                names::PROG_TIMER_ENTER,
                names::PROG_TIMER_EXIT,
            ] {
                if let Ok(p) = program::<BtfTracePoint>(ebpf, name) {
                    let _ = p.unload();
                }
            }
            let how = attach_futex_fallback(ebpf)?;
            format!("{how} (no BTF tracepoints: {why})")
        }
    };
    Ok(FutexHooks {
        entry: futex_entry,
        sleep_entry,
        futex_fn,
    })
}
