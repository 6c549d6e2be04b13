//! The loaded eBPF object: process filter, attachments per process, loss counters.

use std::{
    collections::{HashMap, HashSet},
    num::NonZeroU32,
    os::fd::OwnedFd,
    path::Path,
};

use crate::target::process;

/// The maps that hold the threads' ended futex waits not yet sent (contention mode),
/// taken out of the object for the reader to map.
pub struct LeftWaitMaps {
    /// FUTEX_DONE: each slot's last ended wait.
    pub done: MapData,
    /// FUTEX_SLOTS: each slot's wait in progress.
    pub entries: MapData,
    /// PENDING_FUTEX: waits of threads without a slot.
    pub pending: MapData,
    /// Slots in each array (a power of two).
    pub slots: u32,
}
use aya::{
    Ebpf, EbpfLoader,
    maps::{Array, HashMap as BpfHashMap, MapData, MapError, PerCpuArray},
    programs::{
        BtfTracePoint, FEntry, FExit, ProgramError, RawTracePoint, TracePoint, UProbe,
        uprobe::{UProbeAttachLocation, UProbeAttachPoint, UProbeLinkId, UProbeScope},
    },
};
use iced_x86::Register;
use rtm_common::{Cookie, LossCounter, MpiLayout, mpi_cookie, names};

use super::{
    kernel_btf,
    layout::{self, Layout},
    mpi,
    multi_uprobe::MultiPrograms,
    placement,
    pthread::{self, FULL_PROBES, LibraryError, ProbeKind, ProbeSpec, PthreadLibrary},
    traced::{Traced, TracedBytes},
};

const UPROBES: [&str; 7] = [
    names::PROG_CALL_ENTER,
    names::PROG_CALL_RETURN,
    names::PROG_CALL_MARK,
    names::PROG_MPI_ENTER,
    names::PROG_MPI_RETURN,
    names::PROG_FUNC_ENTER,
    names::PROG_FUNC_RETURN,
];

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

/// Errors loading or attaching probes.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    /// The kernel refused the eBPF object.
    #[error(
        "cannot load the eBPF programs: {source}\n  rtm-trace needs root (or CAP_BPF and \
         CAP_PERFMON) and a kernel with BPF and uprobes (CONFIG_BPF_SYSCALL, CONFIG_UPROBE_EVENTS)"
    )]
    Load {
        /// Why.
        #[source]
        source: aya::EbpfError,
    },
    /// A program of the object could not be loaded into the kernel.
    #[error(
        "cannot load eBPF program {name}: {source}\n  (`rtm-trace check` says which features \
         this kernel can run, and what each needs)"
    )]
    Program {
        /// Program name.
        name: &'static str,
        /// Why.
        #[source]
        source: ProgramError,
    },
    /// This binary was built without its eBPF programs (bpf-linker was missing).
    #[error(
        "this rtm-trace was built without its eBPF programs (bpf-linker was not on PATH at \
         build time): run `cargo xtask build` (or `cargo xtask setup` and build again)"
    )]
    NoObject,
    /// The object lacks a program or map this binary expects (build mismatch).
    #[error("the eBPF object has no {0}: rebuild rtm-trace")]
    Missing(&'static str),
    /// A map could not be mapped into memory.
    #[error("cannot map eBPF map {name} into memory: {source}")]
    Mmap {
        /// Which map.
        name: &'static str,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A map operation failed.
    #[error("eBPF map {name}: {source}")]
    Map {
        /// Map name.
        name: &'static str,
        /// Why.
        #[source]
        source: MapError,
    },
    /// No pthread library was found in the process.
    #[error(transparent)]
    Library(#[from] LibraryError),
    /// Attaching a tracepoint failed.
    #[error(
        "cannot attach to tracepoint {category}/{event}: {source}\n  rtm-trace needs tracefs \
         (mount -t tracefs nodev /sys/kernel/tracing) and a kernel with syscall tracepoints \
         (CONFIG_FTRACE_SYSCALLS)"
    )]
    Tracepoint {
        /// Category.
        category: &'static str,
        /// Event.
        event: &'static str,
        /// Why.
        #[source]
        source: ProgramError,
    },
    /// Attaching a timed function's probe failed.
    #[error("cannot attach to {what} (--func): {source}")]
    AttachFunc {
        /// The function and its file.
        what: String,
        /// Why.
        #[source]
        source: ProgramError,
    },
    /// Attaching a uprobe failed.
    #[error("cannot attach to {function} in {path} for PID {pid}: {source}")]
    Attach {
        /// Function.
        function: &'static str,
        /// Library.
        path: String,
        /// Process.
        pid: u32,
        /// Why.
        #[source]
        source: ProgramError,
    },
}

/// Where one probe went, for `--verbose`.
#[derive(Debug, Clone)]
pub struct Placed {
    /// Function.
    pub function: &'static str,
    /// Entry and return, or entry only.
    pub kind: ProbeKind,
    /// File offset of the function.
    pub function_offset: u64,
    /// Where in the function, and why.
    pub placement: placement::Placement,
}

/// Which processes a set of full-mode probes serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProbeScope {
    /// The one process: its children do not inherit them.
    Process,
    /// Every process that maps the library, left to the in-kernel filter: the children a
    /// traced process forks are covered from their first instruction (and, after an
    /// exec, as long as they run the same library). Other processes pay the trap
    /// (~0.8 us) on the probed functions while the trace runs.
    Library,
}

/// What attaching to one process did.
#[derive(Debug)]
pub struct AttachReport {
    /// The library probed (path inside the process's namespace).
    pub library: std::path::PathBuf,
    /// Probes added: false when the library's every process was already covered.
    pub added: bool,
    /// Probes placed.
    pub placed: Vec<Placed>,
    /// Functions the library does not define (e.g. an old libc without timedlock).
    pub missing: Vec<&'static str>,
    /// Functions not probed because nothing in the program imports them.
    pub unused: Vec<&'static str>,
}

/// The scope of uprobes for one process. The kernel matches a uprobe to a process by
/// the address space of the task it was opened for: the process's own id while its main
/// thread lives, a live thread's once the main thread has called pthread_exit (its
/// zombie has no address space left to match).
fn one_process(pid: u32) -> UProbeScope {
    let task = process::live_task(pid).unwrap_or(pid);
    NonZeroU32::new(task)
        .or(NonZeroU32::new(pid))
        .map_or(UProbeScope::AllProcesses, UProbeScope::OneProcess)
}

/// How to load the programs.
#[derive(Debug, Clone, Default)]
pub struct LoadOptions {
    /// Bytes of each ring buffer.
    pub ring_bytes: u32,
    /// Full mode: futex waits are counted with their wakes.
    pub count_wakes: bool,
    /// Bytes of each user stack copied for a contended wait (0: none).
    pub stack_bytes: u32,
    /// Whether `--func` times functions (their per-thread map is sized for it).
    pub timed_functions: bool,
    /// Whether each futex wait's entry reads its mutex's holder.
    pub read_holders: bool,
    /// `--tid`: only these threads (empty: all).
    pub tids: Vec<u32>,
    /// `--cpu`: only on these CPUs (empty: all).
    pub cpus: Vec<u32>,
    /// Contention mode: ended waits are summed in the kernel (not sent one by one).
    pub aggregate: bool,
    /// Contention mode: waits also seen at their system call's entry (`--unslept`: the
    /// ones that return without sleeping are counted; every system call on the machine
    /// pays for it). Otherwise a wait begins where its thread goes to sleep.
    pub syscall_entry: bool,
    /// Waiters' stacks taken per CPU per second at most (u32::MAX: all).
    pub stack_rate: u32,
    /// Entries of the map that sums waits (0: the default).
    pub agg_entries: u32,
}

/// Fills the `--tid` and `--cpu` maps.
fn fill_context(ebpf: &mut Ebpf, tids: &[u32], cpus: &[u32]) -> Result<(), ProbeError> {
    let map_err = |name| move |source| ProbeError::Map { name, source };
    if !tids.is_empty() {
        let map = ebpf
            .map_mut(names::MAP_TID_FILTER)
            .ok_or(ProbeError::Missing(names::MAP_TID_FILTER))?;
        let mut m: aya::maps::HashMap<_, u32, u8> =
            aya::maps::HashMap::try_from(map).map_err(map_err(names::MAP_TID_FILTER))?;
        for &t in tids {
            m.insert(t, 1, 0).map_err(map_err(names::MAP_TID_FILTER))?;
        }
    }
    if !cpus.is_empty() {
        let map = ebpf
            .map_mut(names::MAP_CPU_FILTER)
            .ok_or(ProbeError::Missing(names::MAP_CPU_FILTER))?;
        let mut m: aya::maps::Array<_, u64> =
            aya::maps::Array::try_from(map).map_err(map_err(names::MAP_CPU_FILTER))?;
        let mut words = vec![0u64; (names::MAX_FILTER_CPUS / 64) as usize];
        for &c in cpus {
            if let Some(w) = words.get_mut((c / 64) as usize) {
                *w |= 1 << (c % 64);
            }
        }
        for (i, w) in words.iter().enumerate().filter(|(_, w)| **w != 0) {
            m.set(i as u32, w, 0)
                .map_err(map_err(names::MAP_CPU_FILTER))?;
        }
    }
    Ok(())
}

/// The loaded eBPF object.
pub struct Probes {
    ebpf: Ebpf,
    links: HashMap<u32, Vec<(&'static str, UProbeLinkId)>>,
    /// Uprobe programs loaded so far.
    loaded: std::collections::HashSet<&'static str>,
    /// The fast process filter, which mirrors TRACED_TGIDS.
    traced: TracedBytes,
    /// How futex calls are seen.
    futex_entry: String,
    /// Rings in use (MAP_EVENTS, then MAP_SYNC_RINGS).
    rings: u32,
    /// The uprobe programs loaded for uprobe_multi links (None: the kernel has none).
    multi: Option<MultiPrograms>,
    /// uprobe_multi links per process (0: every process), each many uprobes.
    multi_links: HashMap<u32, Vec<(OwnedFd, usize)>>,
    /// Libraries (device, inode) probed for every process that maps them.
    library_wide: HashMap<(u64, u64), HashSet<&'static str>>,
    /// Slots of MAP_FUTEX_SLOTS and MAP_FUTEX_DONE.
    slots: u32,
    /// Whether ended futex waits are summed in MAP_FUTEX_AGG.
    aggregate: bool,
    /// Whether futex waits begin at their sleep (no program on system calls).
    sleep_entry: bool,
    /// Whether contention mode runs on the kernel's futex functions (not the scheduler's
    /// tracepoints).
    futex_fn: bool,
}

fn map_err(name: &'static str) -> impl FnOnce(MapError) -> ProbeError {
    move |source| ProbeError::Map { name, source }
}

/// The object's program `name`, as the program type `T` it must be.
fn program<'a, T>(ebpf: &'a mut Ebpf, name: &'static str) -> Result<&'a mut T, ProbeError>
where
    &'a mut T: TryFrom<&'a mut aya::programs::Program, Error = ProgramError>,
{
    ebpf.program_mut(name)
        .ok_or(ProbeError::Missing(name))?
        .try_into()
        .map_err(|source| ProbeError::Program { name, source })
}

impl Probes {
    /// Loads the object with a ring buffer of `ring_bytes` and loads every program.
    /// `count_wakes` follows futex wakes to their return (full mode: threads woken per
    /// condition-variable signal). `stack_bytes`: bytes of each user stack copied at a
    /// contended wake (contention mode; 0 for none).
    pub fn load(object: &[u8], options: &LoadOptions) -> Result<Self, ProbeError> {
        let LoadOptions {
            ring_bytes,
            count_wakes,
            stack_bytes,
            timed_functions,
            read_holders,
            ref tids,
            ref cpus,
            aggregate,
            syscall_entry,
            stack_rate,
            agg_entries,
        } = *options;
        let read_holders = u32::from(read_holders);
        if object.is_empty() {
            return Err(ProbeError::NoObject);
        }
        let wakes: u32 = count_wakes.into();
        let layout = Layout::new(ring_bytes, !count_wakes);
        let ring_mask = layout.rings - 1;
        let slot_mask = layout.slots - 1;
        // Wake the reader when an eighth of a ring is used; it drains on a timer too.
        let wakeup = u64::from(layout.per_ring / 8);
        // The BTF tracepoints need the kernel's BTF (~16 ms and ~19 MiB at its peak to
        // parse). The loader parses its own copy when made and cannot share it; the
        // object has no CO-RE relocations for it, so that copy is dropped at once and
        // ours parsed straight after, on this thread, into the memory the first one
        // freed. Two copies at once, or one parsed later or on another thread (another
        // malloc arena), raised the tracer's peak memory by 10-17 MiB.
        let mut loader = EbpfLoader::new();
        loader.btf(None);
        // Contention mode ends waits at their wake when the kernel's BTF gives the
        // task_struct offsets that needs (read first, its copy of the file dropped).
        // Full mode uses them to name the waker of each wait, in any process.
        let task = if layout.fallbacks {
            None
        } else {
            kernel_btf::task_offsets()
                .inspect_err(|e| log::info!("futex waits end at their return: {e}"))
                .ok()
        };
        let waking = u32::from(task.is_some() && !count_wakes);
        let note_waker = u32::from(task.is_some() && count_wakes);
        // Waits begin at their sleep (sched_switch) where the scheduler's programs see
        // them, and then no program runs on any system call of the machine.
        let sleep_entry = u32::from(waking != 0 && !syscall_entry);
        // Summed in the kernel where each wait's record is not wanted, in contention mode
        // (full mode's records stay in order with its uprobe records).
        let aggregate = u32::from(aggregate && !count_wakes);
        // Absolute realtime deadlines of futex waits are turned into the monotonic
        // clock with the offset now (an NTP step during the trace moves it a little;
        // DEADLINE_SLACK_NS covers that).
        let realtime_offset = crate::target::process::clock_ns(libc::CLOCK_REALTIME)
            .saturating_sub(crate::target::process::monotonic_ns());
        let task = task.unwrap_or_default();
        let btf = (!layout.fallbacks).then(aya::Btf::from_sys_fs);
        loader.map_max_entries(names::MAP_EVENTS, layout.per_ring);
        loader.map_max_entries(
            names::MAP_FUTEX_AGG,
            if aggregate != 0 {
                if agg_entries == 0 {
                    names::DEFAULT_AGG_ENTRIES
                } else {
                    agg_entries
                }
            } else {
                1
            },
        );
        // Per-thread stacks of timed calls, 984 bytes each: none without --func.
        let (func_threads, func_slots) = if timed_functions {
            (names::MAX_FUNC_THREADS, names::MAX_FUNC_SLOTS)
        } else {
            (1, 1)
        };
        loader.map_max_entries(names::MAP_FUNC_PENDING, func_threads);
        loader.map_max_entries(names::MAP_FUNC_SLOTS, func_slots);
        let func_slot_mask = func_slots - 1;
        let context = if tids.is_empty() {
            0
        } else {
            rtm_common::CONTEXT_TIDS
        } | if cpus.is_empty() {
            0
        } else {
            rtm_common::CONTEXT_CPUS
        };
        for (name, bytes) in layout.sync_ring_bytes() {
            loader.map_max_entries(name, bytes);
        }
        let mut ebpf = loader
            .map_max_entries(names::MAP_TRACED, layout.words)
            .map_max_entries(names::MAP_FUTEX_SLOTS, layout.slots)
            .map_max_entries(names::MAP_FUTEX_DONE, layout.slots)
            .override_global(names::GLOBAL_FUTEX_SLOT_MASK, &slot_mask, true)
            .override_global(names::GLOBAL_SYNC_RING_MASK, &ring_mask, true)
            .override_global(names::GLOBAL_WAKEUP_BYTES, &wakeup, true)
            .override_global(names::GLOBAL_COUNT_WAKES, &wakes, true)
            .override_global(names::GLOBAL_WAKING, &waking, true)
            .override_global(names::GLOBAL_NOTE_WAKER, &note_waker, true)
            .override_global(names::GLOBAL_REALTIME_OFFSET, &realtime_offset, true)
            .override_global(names::GLOBAL_TASK_PID, &task.pid, true)
            .override_global(names::GLOBAL_TASK_TGID, &task.tgid, true)
            .override_global(names::GLOBAL_STACK_BYTES, &stack_bytes, true)
            .override_global(names::GLOBAL_CONTEXT_FILTER, &context, true)
            .override_global(names::GLOBAL_READ_HOLDERS, &read_holders, true)
            .override_global(names::GLOBAL_FUNC_SLOT_MASK, &func_slot_mask, true)
            .override_global(names::GLOBAL_AGGREGATE, &aggregate, true)
            .override_global(names::GLOBAL_SLEEP_ENTRY, &sleep_entry, true)
            .override_global(names::GLOBAL_STACK_RATE, &stack_rate, true)
            .override_global(names::GLOBAL_TASK_STATE, &task.state, true)
            .override_global(names::GLOBAL_TASK_SIGNAL, &task.signal, true)
            .override_global(names::GLOBAL_SIGNAL_LIVE, &task.signal_live, true)
            .load(object)
            .map_err(|source| ProbeError::Load { source })?;
        fill_context(&mut ebpf, tids, cpus)?;
        // Uprobe programs are verified when first attached (`uprobe`): a run that probes
        // no MPI library, or no pthread function, does not wait for their verification
        // (the MPI return program alone takes the verifier about 0.4 s).
        for (name, category, event) in TRACEPOINTS {
            let prog: &mut TracePoint = program(&mut ebpf, name)?;
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
        let want_fn = waking != 0
            && sleep_entry != 0
            && std::env::var(HOOKS_ENV).map_or(true, |v| v != "sched");
        let mut fn_refused = None;
        let fn_hooks = match &btf {
            Some(Ok(btf)) if want_fn => attach_futex_fn(&mut ebpf, btf)
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
                &mut ebpf,
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
                    if let Ok(p) = program::<BtfTracePoint>(&mut ebpf, name) {
                        let _ = p.unload();
                    }
                }
                let how = attach_futex_fallback(&mut ebpf)?;
                format!("{how} (no BTF tracepoints: {why})")
            }
        };
        // Before any map is taken out: the programs for uprobe_multi links are relocated
        // against all of them.
        let multi = if std::env::var_os(layout::FALLBACKS_ENV).is_some() {
            None
        } else {
            MultiPrograms::load(object, &ebpf, &UPROBES)
                .inspect_err(|e| log::info!("uprobes one by one (no uprobe_multi): {e}"))
                .ok()
        };
        // (Relocated now, loaded into the kernel when first attached.)
        let traced = match ebpf.take_map(names::MAP_TRACED) {
            Some(aya::maps::Map::Array(data)) => {
                TracedBytes::new(data, layout.words).map_err(|source| ProbeError::Mmap {
                    name: names::MAP_TRACED,
                    source,
                })?
            }
            _ => return Err(ProbeError::Missing(names::MAP_TRACED)),
        };
        Ok(Self {
            ebpf,
            links: HashMap::new(),
            loaded: Default::default(),
            traced,
            futex_entry,
            multi,
            multi_links: HashMap::new(),
            library_wide: HashMap::new(),
            rings: layout.rings,
            slots: layout.slots,
            aggregate: aggregate != 0,
            sleep_entry,
            futex_fn,
        })
    }

    /// The uprobe program `name`, loaded into the kernel on first use.
    fn uprobe(&mut self, name: &'static str) -> Result<&mut UProbe, ProbeError> {
        debug_assert!(UPROBES.contains(&name));
        let first = self.loaded.insert(name);
        let prog: &mut UProbe = program(&mut self.ebpf, name)?;
        if first {
            prog.load()
                .map_err(|source| ProbeError::Program { name, source })?;
        }
        Ok(prog)
    }

    /// Whether futex waits begin at their sleep, with no program on system calls (so
    /// waits that return without sleeping are not seen).
    pub fn sleep_entry(&self) -> bool {
        self.sleep_entry
    }

    /// Whether contention mode runs on the kernel's futex functions (fentry/fexit), with
    /// no program on context switches.
    pub fn futex_fn(&self) -> bool {
        self.futex_fn
    }

    /// Whether ended futex waits are summed in the kernel.
    pub fn aggregates(&self) -> bool {
        self.aggregate
    }

    /// Where futex calls are seen (for --verbose).
    pub fn futex_entry(&self) -> &str {
        &self.futex_entry
    }

    /// Takes the maps of the ended futex waits not yet sent (once).
    pub fn take_left_wait_maps(&mut self) -> Result<LeftWaitMaps, ProbeError> {
        let mut take = |name: &'static str| {
            self.ebpf
                .take_map(name)
                .ok_or(ProbeError::Missing(name))
                .map(|m| match m {
                    aya::maps::Map::Array(data) | aya::maps::Map::HashMap(data) => Ok(data),
                    _ => Err(ProbeError::Missing(name)),
                })?
        };
        let done = take(names::MAP_FUTEX_DONE)?;
        let entries = take(names::MAP_FUTEX_SLOTS)?;
        let pending = take(names::MAP_PENDING_FUTEX)?;
        Ok(LeftWaitMaps {
            done,
            entries,
            pending,
            slots: self.slots,
        })
    }

    /// Takes the map of summed futex waits (once), when waits are summed.
    pub fn take_futex_sums(&mut self) -> Option<MapData> {
        if !self.aggregate {
            return None;
        }
        match self.ebpf.take_map(names::MAP_FUTEX_AGG) {
            Some(aya::maps::Map::HashMap(data)) => Some(data),
            _ => None,
        }
    }

    /// Takes the event rings in use (once): MAP_EVENTS first.
    pub fn take_rings(&mut self) -> Result<Vec<MapData>, ProbeError> {
        let used = std::iter::once(names::MAP_EVENTS)
            .chain(names::MAP_SYNC_RINGS)
            .take(self.rings as usize);
        used.map(|name| match self.ebpf.take_map(name) {
            Some(aya::maps::Map::RingBuf(data)) => Ok(data),
            _ => Err(ProbeError::Missing(name)),
        })
        .collect()
    }

    /// Adds or removes a process from the in-kernel filter.
    pub fn set_traced(&mut self, pid: u32, traced: Traced) -> Result<(), ProbeError> {
        let map = self
            .ebpf
            .map_mut(names::MAP_TRACED_TGIDS)
            .ok_or(ProbeError::Missing(names::MAP_TRACED_TGIDS))?;
        let mut tgids: BpfHashMap<_, u32, u32> =
            BpfHashMap::try_from(map).map_err(map_err(names::MAP_TRACED_TGIDS))?;
        // The byte goes in after the set entry and out before it: the array never says
        // traced where the set does not.
        let value = traced.value();
        if value != 0 {
            tgids
                .insert(pid, u32::from(value), 0)
                .map_err(map_err(names::MAP_TRACED_TGIDS))?;
            self.traced.set(pid, value);
            Ok(())
        } else {
            self.traced.set(pid, 0);
            match tgids.remove(&pid) {
                Err(MapError::KeyNotFound) => Ok(()),
                r => r,
            }
            .map_err(map_err(names::MAP_TRACED_TGIDS))
        }
    }

    /// The loaded object.
    pub(crate) fn ebpf(&self) -> &Ebpf {
        &self.ebpf
    }

    /// The loaded object, to change its maps.
    pub(crate) fn ebpf_mut(&mut self) -> &mut Ebpf {
        &mut self.ebpf
    }

    /// Whether the in-kernel filter traces `pid` (it adds followed children itself).
    pub fn is_traced(&self, pid: u32) -> bool {
        self.ebpf
            .map(names::MAP_TRACED_TGIDS)
            .and_then(|m| BpfHashMap::<_, u32, u32>::try_from(m).ok())
            .is_some_and(|m| m.get(&pid, 0).is_ok())
    }

    /// Attaches the full-mode probes for `pid` to the pthread library `probe_pid` maps.
    /// The two differ in launch mode, where the child has not exec'd yet and the tracer's
    /// own libc stands in for the one the program will load. Only functions in `used`
    /// are probed (None: all of them).
    pub fn attach_pthread(
        &mut self,
        pid: u32,
        probe_pid: u32,
        used: Option<&HashSet<&'static str>>,
        scope: ProbeScope,
    ) -> Result<AttachReport, ProbeError> {
        let lib = pthread::find(probe_pid)?;
        self.attach_library(pid, &lib, used, scope)
    }

    /// Attaches the full-mode probes for `pid` to a statically linked executable.
    pub fn attach_static(
        &mut self,
        pid: u32,
        exe: &Path,
        scope: ProbeScope,
    ) -> Result<AttachReport, ProbeError> {
        let lib = pthread::from_file(pid, exe)?;
        self.attach_library(pid, &lib, None, scope)
    }

    /// Where each probe of `lib` goes.
    fn placements(
        lib: &PthreadLibrary,
    ) -> Result<Vec<(ProbeSpec, u64, placement::Placement)>, ProbeError> {
        let bytes = &lib.bytes;
        let mut out = Vec::new();
        for spec in FULL_PROBES {
            let Some(offset) = lib.symbols.function_offset(spec.function) else {
                continue;
            };
            let size = lib.symbols.function_size(spec.function).unwrap_or(0) as usize;
            let start = offset as usize;
            let code = bytes
                .get(start..start.saturating_add(size).min(bytes.len()))
                .unwrap_or(&[]);
            let keep = &[Register::RDI, Register::RSI][..spec.args as usize];
            let pass_stores = spec.check_at_entry != spec.check_further_in;
            let p = placement::place(code, offset, keep, pass_stores);
            out.push((*spec, offset, p));
        }
        Ok(out)
    }

    fn attach_library(
        &mut self,
        pid: u32,
        lib: &PthreadLibrary,
        used: Option<&HashSet<&'static str>>,
        probe_scope: ProbeScope,
    ) -> Result<AttachReport, ProbeError> {
        let mut report = AttachReport {
            library: lib.path.clone(),
            added: true,
            placed: Vec::new(),
            missing: Vec::new(),
            unused: Vec::new(),
        };
        // Probes for every process that maps the library go in once per function: a
        // process that uses functions not probed yet (a child that exec'd another
        // program) adds only those.
        let (scope, links_of, covered) = match probe_scope {
            ProbeScope::Process => (one_process(pid), pid, HashSet::new()),
            ProbeScope::Library => (
                UProbeScope::AllProcesses,
                0,
                self.library_wide.get(&lib.id).cloned().unwrap_or_default(),
            ),
        };
        for spec in FULL_PROBES {
            if lib.symbols.function_offset(spec.function).is_none() {
                report.missing.push(spec.function);
            }
        }
        // Program -> (offset, cookie, function) of each probe to attach.
        let mut points: std::collections::BTreeMap<&'static str, Vec<(u64, u64, &'static str)>> =
            Default::default();
        for (spec, offset, place) in Self::placements(lib)? {
            if used.is_some_and(|u| !u.contains(spec.function)) {
                report.unused.push(spec.function);
                continue;
            }
            if covered.contains(spec.function) {
                continue;
            }
            let check = if place.offset == 0 {
                spec.check_at_entry
            } else {
                spec.check_further_in
            };
            let cookie = Cookie::pack(spec.primitive, spec.op, check);
            let programs: &[&'static str] = match spec.kind {
                ProbeKind::Call => &[names::PROG_CALL_ENTER, names::PROG_CALL_RETURN],
                ProbeKind::Mark | ProbeKind::Begin => &[names::PROG_CALL_MARK],
            };
            for &name in programs {
                points.entry(name).or_default().push((
                    offset + place.offset,
                    cookie,
                    spec.function,
                ));
            }
            report.placed.push(Placed {
                function: spec.function,
                kind: spec.kind,
                function_offset: offset,
                placement: place,
            });
        }
        // One uprobe_multi link per program where the kernel has them, else one perf
        // event per probe.
        let multi_pid = (probe_scope == ProbeScope::Process).then_some(pid);
        for (name, pts) in points {
            let pairs: Vec<(u64, u64)> = pts.iter().map(|p| (p.0, p.1)).collect();
            if self.attach_multi(name, Path::new(&lib.host_path), &pairs, multi_pid) {
                continue;
            }
            for (at, cookie, function) in pts {
                let path = Path::new(&lib.host_path);
                self.attach_one(name, path, (at, cookie), scope, links_of, |source| {
                    ProbeError::Attach {
                        function,
                        path: lib.path.display().to_string(),
                        pid,
                        source,
                    }
                })?;
            }
        }
        if probe_scope == ProbeScope::Library {
            let set = self.library_wide.entry(lib.id).or_default();
            set.extend(report.placed.iter().map(|p| p.function));
        }
        report.added = !report.placed.is_empty();
        Ok(report)
    }

    /// Attaches the MPI entry and return probes to `lib`, for `pid` only or (None) for
    /// every process that maps it, left to the in-kernel filter (launch mode: ranks
    /// forked by the launcher are traced from their first instruction). Tells the
    /// programs how to read this implementation's handles. Returns the functions probed.
    pub fn attach_mpi(
        &mut self,
        pid: Option<u32>,
        lib: &mpi::MpiLibrary,
    ) -> Result<Vec<(&'static str, placement::Placement)>, ProbeError> {
        let map = self
            .ebpf
            .map_mut(names::MAP_MPI_LAYOUT)
            .ok_or(ProbeError::Missing(names::MAP_MPI_LAYOUT))?;
        let mut layouts: Array<_, MpiLayout> =
            Array::try_from(map).map_err(map_err(names::MAP_MPI_LAYOUT))?;
        layouts
            .set(lib.implementation as u32, lib.layout, 0)
            .map_err(map_err(names::MAP_MPI_LAYOUT))?;
        let scope = match pid {
            Some(p) => one_process(p),
            None => UProbeScope::AllProcesses,
        };
        let bytes = &lib.bytes;
        let keep = [
            Register::RDI,
            Register::RSI,
            Register::RDX,
            Register::RCX,
            Register::R8,
            Register::R9,
        ];
        let mut probed = Vec::new();
        let mut points: Vec<(u64, u64, &'static str)> = Vec::new();
        for &(function, op) in mpi::MPI_FUNCTIONS {
            let Some(offset) = lib.symbols.function_offset(function) else {
                continue;
            };
            let size = lib.symbols.function_size(function).unwrap_or(0) as usize;
            let start = offset as usize;
            let code = bytes
                .get(start..start.saturating_add(size).min(bytes.len()))
                .unwrap_or(&[]);
            let place = placement::place(code, offset, &keep, false);
            points.push((
                offset + place.offset,
                mpi_cookie(op, lib.implementation),
                function,
            ));
            probed.push((function, place));
        }
        for name in [names::PROG_MPI_ENTER, names::PROG_MPI_RETURN] {
            let pairs: Vec<(u64, u64)> = points.iter().map(|p| (p.0, p.1)).collect();
            if self.attach_multi(name, Path::new(&lib.host_path), &pairs, pid) {
                continue;
            }
            for &(at, cookie, function) in &points {
                let path = Path::new(&lib.host_path);
                let owner = pid.unwrap_or(0);
                self.attach_one(name, path, (at, cookie), scope, owner, |source| {
                    ProbeError::Attach {
                        function,
                        path: lib.path.display().to_string(),
                        pid: owner,
                        source,
                    }
                })?;
            }
        }
        Ok(probed)
    }

    /// Stops event collection for `pids` at once: the in-kernel filter drops them, so the
    /// programs return before doing any work. The breakpoints stay until
    /// [`Probes::release`].
    pub fn stop(&mut self, pids: &[u32]) {
        for pid in pids {
            if let Err(e) = self.set_traced(*pid, Traced::No) {
                log::debug!("untracing {pid}: {e}");
            }
        }
    }

    /// Whether the file (device, inode) has probes for every process that maps it.
    pub fn covers(&self, id: (u64, u64)) -> bool {
        self.library_wide.get(&id).is_some_and(|f| !f.is_empty())
    }

    /// Detaches the uprobes attached for processes `pids` alone (they have exited): a
    /// daemon whose targets come and go does not keep them until it releases
    /// everything. Probes on a library for every process stay.
    pub fn forget(&mut self, pids: &[u32]) {
        for pid in pids {
            // Closing a uprobe_multi link detaches its uprobes.
            self.multi_links.remove(pid);
            for (name, link) in self.links.remove(pid).unwrap_or_default() {
                match program::<UProbe>(&mut self.ebpf, name) {
                    Ok(p) => {
                        if let Err(e) = p.detach(link) {
                            log::debug!("detaching {name} of {pid}: {e}");
                        }
                    }
                    Err(e) => log::debug!("detaching {name} of {pid}: {e}"),
                }
            }
        }
    }

    /// Entries in the process filter (TRACED_TGIDS) and its capacity.
    pub fn filter_fill(&self) -> Option<(usize, u32)> {
        let map = self.ebpf.map(names::MAP_TRACED_TGIDS)?;
        let capacity = match map {
            aya::maps::Map::HashMap(data) => data.info().ok()?.max_entries(),
            _ => return None,
        };
        let tgids: BpfHashMap<_, u32, u32> = BpfHashMap::try_from(map).ok()?;
        Some((tgids.keys().count(), capacity))
    }

    /// The uprobe programs loaded for uprobe_multi links, by name.
    pub fn multi_programs(&self) -> Vec<(&'static str, std::rc::Rc<OwnedFd>)> {
        self.multi
            .as_ref()
            .map(|m| m.programs())
            .unwrap_or_default()
    }

    /// Loads uprobe program `name` into the kernel now, as its first attach would
    /// (`rtm-trace check`), and says whether uprobe_multi links take it: Ok when they
    /// do, the reason when the perf-event path (one uprobe at a time) must serve.
    pub fn load_uprobe(&mut self, name: &'static str) -> Result<Result<(), String>, ProbeError> {
        self.uprobe(name)?;
        Ok(match &self.multi {
            Some(m) => m.links_work(name),
            None => Err("the programs could not be prepared for uprobe_multi".into()),
        })
    }

    /// The uprobe programs of the object.
    pub fn uprobe_names() -> &'static [&'static str] {
        &UPROBES
    }

    /// Uprobes attached.
    pub fn uprobe_count(&self) -> usize {
        self.links.values().map(Vec::len).sum::<usize>()
            + self
                .multi_links
                .values()
                .flatten()
                .map(|(_, n)| n)
                .sum::<usize>()
    }

    /// Attaches the entry and return probes of timed functions (`--func`): each at its
    /// file and offset, its index the cookie; for `pid` only, or (None) for every
    /// process that maps the file, left to the in-kernel filter. Returns the probes.
    pub fn attach_funcs(
        &mut self,
        pid: Option<u32>,
        funcs: &[(&Path, u64, u64, &str)],
    ) -> Result<usize, ProbeError> {
        let mut files: Vec<&Path> = funcs.iter().map(|f| f.0).collect();
        files.sort();
        files.dedup();
        let scope = pid.map_or(UProbeScope::AllProcesses, one_process);
        for file in files {
            let here: Vec<_> = funcs.iter().filter(|f| f.0 == file).collect();
            let pairs: Vec<(u64, u64)> = here.iter().map(|f| (f.1, f.2)).collect();
            for name in [names::PROG_FUNC_ENTER, names::PROG_FUNC_RETURN] {
                if self.attach_multi(name, file, &pairs, pid) {
                    continue;
                }
                for &&(_, at, cookie, function) in &here {
                    let owner = pid.unwrap_or(0);
                    self.attach_one(name, file, (at, cookie), scope, owner, |source| {
                        ProbeError::AttachFunc {
                            what: format!("{function} in {}", file.display()),
                            source,
                        }
                    })?;
                }
            }
        }
        Ok(funcs.len() * 2)
    }

    /// Attaches program `name` at (offset, cookie) `point` of `path` through a link of
    /// its own, kept with `owner`'s (a pid, or 0 for probes of every process).
    fn attach_one(
        &mut self,
        name: &'static str,
        path: &Path,
        (at, cookie): (u64, u64),
        scope: UProbeScope,
        owner: u32,
        err: impl FnOnce(ProgramError) -> ProbeError,
    ) -> Result<(), ProbeError> {
        let point = UProbeAttachPoint {
            location: UProbeAttachLocation::AbsoluteOffset(at),
            cookie: Some(cookie),
        };
        let link = self.uprobe(name)?.attach(point, path, scope).map_err(err)?;
        self.links.entry(owner).or_default().push((name, link));
        Ok(())
    }

    /// Attaches program `name` at `points` (offset, cookie) of `path` through one
    /// uprobe_multi link, for `pid` (its live task) or every process; false when the
    /// kernel refused it (the caller attaches one by one).
    fn attach_multi(
        &mut self,
        name: &'static str,
        path: &Path,
        points: &[(u64, u64)],
        pid: Option<u32>,
    ) -> bool {
        let Some(multi) = &self.multi else {
            return false;
        };
        if points.is_empty() {
            return true;
        }
        let offsets: Vec<u64> = points.iter().map(|p| p.0).collect();
        let cookies: Vec<u64> = points.iter().map(|p| p.1).collect();
        let ret = matches!(
            name,
            names::PROG_CALL_RETURN | names::PROG_MPI_RETURN | names::PROG_FUNC_RETURN
        );
        let task = pid.map(|p| process::live_task(p).unwrap_or(p));
        match multi.attach(name, path, &offsets, &cookies, task, ret) {
            Ok(link) => {
                self.multi_links
                    .entry(pid.unwrap_or(0))
                    .or_default()
                    .push((link, points.len()));
                true
            }
            Err(e) => {
                log::info!("uprobe_multi link for {name} refused ({e}): uprobes one by one");
                self.multi = None;
                false
            }
        }
    }

    /// Releases every program, map and probe, without waiting for the kernel.
    ///
    /// The kernel removes uprobes one at a time, each after an RCU grace period (about
    /// 0.1 s per probe here, and serialized: closing them from several threads does not
    /// help), so a run with 60 probes would take 6 s to exit. Instead a background
    /// process (a grandchild, so nobody has to reap it) takes over the descriptors and
    /// lets them go after this process has dropped its own: rtm-trace exits at once, and
    /// the probes, which already do nothing (the filter is empty), disappear a few
    /// seconds later, even if either process is killed. Returns that process's pid, or
    /// None when there were no uprobes (tracepoints go at once) or it could not be
    /// started (then the release happens here, slowly).
    pub fn release(self) -> Option<u32> {
        if self.uprobe_count() == 0 {
            drop(self);
            return None;
        }
        // `go`: rtm-trace to the background process (release now); `told`: its pid back.
        let (mut go, mut told) = ([0i32; 2], [0i32; 2]);
        // SAFETY: valid two-element arrays for the two new descriptors each.
        let made = unsafe {
            libc::pipe2(go.as_mut_ptr(), libc::O_CLOEXEC) == 0
                && libc::pipe2(told.as_mut_ptr(), libc::O_CLOEXEC) == 0
        };
        if !made {
            drop(self);
            return None;
        }
        let [read_end, write_end] = go;
        // SAFETY: fork in a process whose other threads (if any) do not hold locks the
        // children need: they only make raw system calls before _exit.
        let child = unsafe { libc::fork() };
        if child == 0 {
            // SAFETY: async-signal-safe calls only.
            unsafe {
                let grandchild = libc::fork();
                if grandchild != 0 {
                    libc::write(told[1], (&raw const grandchild).cast(), 4);
                    libc::_exit(0);
                }
                libc::close(told[0]);
                libc::close(told[1]);
                // Off the terminal: no output, and a Ctrl-C meant for the next command
                // does not reach it (were it killed, its exit would release all the same).
                libc::setsid();
                for fd in 0..3 {
                    libc::close(fd);
                }
                libc::close(write_end);
                // This process's copies of the descriptors are released when it exits,
                // once rtm-trace dropped its own (a byte) or exited (end of file).
                let mut b = 0u8;
                while libc::read(read_end, (&raw mut b).cast(), 1) < 0
                    && *libc::__errno_location() == libc::EINTR
                {}
                libc::_exit(0);
            }
        }
        // SAFETY: closing our copies of the ends we do not use.
        unsafe {
            libc::close(read_end);
            libc::close(told[1]);
        }
        let mut helper = None;
        if child > 0 {
            let (mut status, mut pid) = (0, 0i32);
            // SAFETY: reading 4 bytes into a valid i32, then reaping the intermediate
            // child, which exits at once.
            unsafe {
                if libc::read(told[0], (&raw mut pid).cast(), 4) == 4 && pid > 0 {
                    helper = Some(pid as u32);
                }
                libc::waitpid(child, &mut status, 0);
            }
        }
        // SAFETY: our read end of `told`.
        unsafe { libc::close(told[0]) };
        // Our copies go now; the background process still holds the files open.
        drop(self);
        let b = 1u8;
        // SAFETY: one byte from a valid buffer, then our end closes.
        unsafe {
            libc::write(write_end, (&raw const b).cast(), 1);
            libc::close(write_end);
        }
        helper
    }

    /// Current loss counters, summed over CPUs, in `LossCounter` order.
    pub fn losses(&self) -> Result<[u64; LossCounter::COUNT as usize], ProbeError> {
        let map = self
            .ebpf
            .map(names::MAP_LOSSES)
            .ok_or(ProbeError::Missing(names::MAP_LOSSES))?;
        let arr: PerCpuArray<_, u64> =
            PerCpuArray::try_from(map).map_err(map_err(names::MAP_LOSSES))?;
        let mut out = [0u64; LossCounter::COUNT as usize];
        for c in LossCounter::ALL {
            let values = arr
                .get(&(c as u32), 0)
                .map_err(map_err(names::MAP_LOSSES))?;
            out[c as usize] = values.iter().sum();
        }
        Ok(out)
    }
}
