//! The event loop: attach, read events into the model until told to stop, then stop
//! collection (instant, through the in-kernel filter), write the outputs, and detach.

use std::time::{SystemTime, UNIX_EPOCH};

use tokio::{
    signal::unix::{SignalKind, signal},
    sync::mpsc,
    time::{Instant, MissedTickBehavior},
};

use super::{
    SessionError, exits,
    full_probes::{self, attach_full},
    mpi_attach,
    sampler::{self, Sampler},
};
use crate::{
    EBPF_OBJECT,
    cli::{Cli, Mode},
    model::{RankEnv, Snapshot, SyncGraph, TaskGraph, TaskView, Window},
    output::{EndReason, RunInfo, TargetInfo, json, report, text::Shown},
    probes::Probes,
    readers::{EventReader, LeftWaits, Losses, MappingReader, MappingRecord, ring_map::MappedRing},
    symbolize::{CodeNamer, ObjectNamer},
    target::{
        elf::ElfSymbols,
        launch::{ChildExit, GatedChild, wait_child},
        process::{self, monotonic_ns},
    },
};

/// How often the reader drains the ring buffer without being woken.
const DRAIN_EVERY: std::time::Duration = std::time::Duration::from_millis(20);

/// A thread's last futex wait is sent when it next waits or exits; one that has not waited
/// again for this long has its last wait taken by the reader (when it samples).
const QUIET_WAIT_NS: u64 = 1_000_000_000;

/// Takes the ended futex waits the threads of `pids` have not sent: those older than
/// QUIET_WAIT_NS, or all of them (`all`, once the programs no longer run for them).
fn take_left(
    left: &mut Option<LeftWaits>,
    pids: impl Iterator<Item = u32>,
    all: bool,
    state: &mut State,
) {
    let Some(left) = left else {
        return;
    };
    let before = (!all).then(|| monotonic_ns().saturating_sub(QUIET_WAIT_NS));
    let threads = pids.flat_map(|p| process::thread_ids(p).into_iter().map(move |t| (p, t)));
    left.take(threads, before, &mut |ev| state.apply(ev));
}

/// Records decoded per wake-up before the loop looks at its other sources again.
const BATCH: usize = 16_384;

enum Wake {
    /// The ring has records: `backlog` when the kernel said a mark was crossed (or the
    /// last drain left records), not the drain timer.
    Events {
        backlog: bool,
    },
    Tick,
    Sample,
    Stop(EndReason),
    Exited(u32),
}

struct State {
    model: SyncGraph,
    tasks: TaskGraph,
    /// What each MPI process's environment said (read at its first MPI call).
    rank_env: std::collections::HashMap<u32, RankEnv>,
    namer: ObjectNamer,
    code: CodeNamer,
    /// Command names read when each process's first event arrived (after any exec).
    comms: std::collections::HashMap<u32, String>,
    /// Processes forked by traced processes, not yet handled by the loop, with when.
    spawned: Vec<(u32, u64)>,
    /// Traced processes that exec'd, not yet handled by the loop, with when.
    execd: Vec<(u32, u64)>,
    /// Followed processes that exited, not yet dropped from the filter.
    gone: Vec<u32>,
    /// Processes that exec'd or were forked: their maps are read at their next sync
    /// event (after the loader has mapped the libraries).
    stale_maps: std::collections::HashSet<u32>,
    /// Read a new process's maps at once: no mapping records follow its fork.
    eager_maps: bool,
    /// Followed processes, and full mode's probing of them.
    follow: full_probes::Follow,
    /// System statistics and performance counters.
    sampler: Sampler,
}

impl State {
    /// The threads of an attached process, idle or not: each counts from the attach.
    fn add_threads(&mut self, pid: u32, now_ns: u64) {
        for tid in process::thread_ids(pid) {
            let key = crate::model::sync_graph::ThreadKey { pid, tid };
            let a = self.model.thread_seen(key, now_ns);
            if a.new_process.is_some() {
                // Its maps now, while it lives (names resolve after it exits); its
                // events will not say it is new any more.
                self.namer.remember(pid);
                if let Some(c) = process::comm(pid) {
                    self.comms.insert(pid, c);
                }
            }
            if a.new_thread.is_some() {
                self.model.set_thread_info(
                    key,
                    process::thread_name(pid, tid),
                    process::thread_start_ns(pid, tid),
                );
            }
        }
    }

    fn apply(&mut self, ev: &rtm_common::decode::Event) {
        if let rtm_common::decode::Event::Mpi(m) = ev {
            let pid = m.raw.header.pid;
            self.rank_env
                .entry(pid)
                .or_insert_with(|| process::mpi_env(pid));
            self.tasks.apply(m);
        }
        let a = self.model.apply(ev);
        let ts = ev.header().ts_ns;
        self.spawned.extend(a.spawned_process.map(|p| (p, ts)));
        if let Some(pid) = a.process_exited {
            self.stale_maps.remove(&pid);
            self.namer.exited(pid);
        }
        self.gone.extend(a.process_exited);
        if let Some(pid) = a.exec {
            self.execd.push((pid, ts));
            // A rank's environment names its job and rank; read it while the process
            // is young (a short rank may be gone by the time its MPI records are read).
            let env = process::mpi_env(pid);
            if env.rank.is_some() {
                self.rank_env.insert(pid, env);
            }
            // The new program and the dynamic loader are mapped already: read them now
            // (the reader is woken at once for an exec), then again at the process's
            // first sync event, when its libraries are in.
            self.namer.remember(pid);
            self.stale_maps.insert(pid);
            self.comms.remove(&pid);
        } else if !self.stale_maps.is_empty()
            && matches!(ev, rtm_common::decode::Event::Sync(_))
            && self.stale_maps.remove(&ev.header().pid)
        {
            let pid = ev.header().pid;
            self.namer.remember(pid);
            if let Some(c) = process::comm(pid) {
                self.comms.insert(pid, c);
            }
        }
        if let Some(pid) = a.new_process {
            // Its maps are read at its first sync event, while it is alive, so names
            // resolve after it exits; until then the copy of its parent's that the fork
            // made and the kernel's mapping records stand in. A program that forks
            // thousands of children that never synchronize costs nothing per child.
            if self.eager_maps {
                self.namer.remember(pid);
            } else {
                self.stale_maps.insert(pid);
            }
            if let Some(c) = process::comm(pid) {
                self.comms.insert(pid, c);
            }
        }
        if let Some(t) = a.new_thread {
            self.sampler.add_thread(t.pid, t.tid);
            self.model.set_thread_info(
                t,
                process::thread_name(t.pid, t.tid),
                process::thread_start_ns(t.pid, t.tid),
            );
        }
    }
}

fn io_err(what: &str) -> impl FnOnce(std::io::Error) -> SessionError + '_ {
    move |source| SessionError::Io {
        what: what.to_owned(),
        source,
    }
}

pub(super) async fn trace(
    cli: Cli,
    mut child: Option<GatedChild>,
    mut outputs: super::Outputs,
) -> Result<i32, SessionError> {
    // Handlers first: a Ctrl-C at any moment after this still detaches and writes results.
    let mut sigint = signal(SignalKind::interrupt()).map_err(io_err("SIGINT handler"))?;
    let mut sigterm = signal(SignalKind::terminate()).map_err(io_err("SIGTERM handler"))?;
    // The same signals as a flag for the steps that may wait outside the loop.
    crate::interrupt::install().map_err(io_err("signal handlers"))?;
    // Descriptors: per-thread counters of a process with thousands of threads, and the
    // probes, maps and files the tracer holds. The soft limit goes up to the hard one,
    // here, after a launched command was forked (it keeps the limit it was given).
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit with a valid struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < lim.rlim_max {
            lim.rlim_cur = lim.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
    // A bad config file is refused before anything is loaded or run.
    let thresholds = match sampler::thresholds(cli.config.as_deref()) {
        Ok(t) => t,
        Err(e) => {
            drop(child);
            return Err(e);
        }
    };
    let mut probes = match Probes::load(
        EBPF_OBJECT,
        cli.ring_size,
        cli.follow_forks(),
        cli.mode == Mode::Full,
    ) {
        Ok(p) => p,
        Err(e) => {
            drop(child); // the gated child sees the gate close and exits 127
            return Err(e.into());
        }
    };
    if cli.verbose {
        crate::say!("rtm-trace: futex calls seen at {}", probes.futex_entry());
    }
    let rings = probes
        .take_rings()?
        .into_iter()
        .map(MappedRing::new)
        .collect::<std::io::Result<Vec<_>>>()
        .map_err(io_err("ring buffer"))?;
    let mut reader = EventReader::new(rings).map_err(io_err("ring buffer"))?;
    // Only contention mode leaves waits in the threads' slots.
    let mut left = match cli.mode {
        Mode::Contention => Some(probes.take_left_waits()?),
        Mode::Full => None,
    };
    // The kernel's per-program run-time statistics cost every probe a little: on only
    // when asked for, and only until the tracer exits.
    let _bpf_stats = cli.bpf_stats.then(|| {
        crate::probes::stats::enable()
            .map_err(|e| crate::say!("rtm-trace: warning: --bpf-stats: {e}"))
            .ok()
    });
    // Before anything runs: the records of a launched program's exec must be caught.
    let mut mappings = match MappingReader::open() {
        Ok(m) => Some(m),
        Err(e) => {
            crate::say!(
                "rtm-trace: warning: cannot follow address spaces through perf events ({e}); \
                 objects of processes that exit quickly may be shown by address"
            );
            None
        }
    };

    let mut targets: Vec<TargetInfo> = Vec::new();
    let pids: Vec<u32> = cli
        .pids
        .iter()
        .copied()
        .chain(child.as_ref().map(|c| c.pid))
        .collect();
    for &pid in &pids {
        // Ctrl-C while attaching to many processes: the loop stops at its first turn.
        if crate::interrupt::requested() {
            break;
        }
        probes.set_traced(pid, true)?;
        // A launched child has not exec'd yet: the tracer's own libc is the one its
        // program will load (same mount namespace, same loader).
        let probe_pid = if child.as_ref().is_some_and(|c| c.pid == pid) {
            std::process::id()
        } else {
            pid
        };
        let launched = child.as_ref().is_some_and(|c| c.pid == pid);
        // A statically linked program carries its own pthread code.
        let static_exe = match &child {
            Some(c)
                if launched && ElfSymbols::is_static_executable(&c.program).unwrap_or(false) =>
            {
                Some(c.program.clone())
            }
            _ => None,
        };
        let library = match cli.mode {
            Mode::Full => Some(
                attach_full(
                    &mut probes,
                    &cli,
                    pid,
                    probe_pid,
                    static_exe.as_deref(),
                    child
                        .as_ref()
                        .filter(|_| launched)
                        .map(|c| c.program.as_path()),
                    false,
                )?
                .library
                .display()
                .to_string(),
            ),
            Mode::Contention => None,
        };
        targets.push(TargetInfo {
            pid,
            // A launched child still runs the tracer's image: its name comes after exec.
            comm: if launched { None } else { process::comm(pid) },
            library,
            ended: None,
        });
    }

    // MPI probes go in before a launched command runs: a rank may call MPI_Init within
    // milliseconds of its start.
    let launched = child.as_ref().map(|_| cli.command.as_slice());
    if cli.probe_mpi() {
        mpi_attach::attach(&mut probes, &cli, &pids, launched)?;
    } else if cli.mode == Mode::Contention && !cli.no_mpi {
        mpi_attach::hint(&pids, launched);
    }
    let start_ns = monotonic_ns();
    // The trace lasts --duration from here, however long the setup below takes (per-
    // thread counters for a process with thousands of threads take seconds).
    let started = Instant::now();
    let mut sampler = Sampler::new(&cli, thresholds, start_ns);
    for &pid in &pids {
        sampler.add_process(pid);
    }
    sampler.sample(start_ns, pids.iter().copied());
    let started_unix_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0);
    if let Some(c) = child.as_mut()
        && let Err(e) = c.release()
    {
        let _ = wait_child(c.pid);
        return Err(e.into());
    }
    let mut command_name = None;
    if let Some(c) = &child {
        command_name = c
            .program
            .file_name()
            .map(|n| n.to_string_lossy().into_owned());
        crate::say!(
            "rtm-trace: launched {} as PID {}; tracing until it exits{}",
            c.program.display(),
            c.pid,
            cli.duration
                .map(|d| format!(" or {:?} pass", d))
                .unwrap_or_default()
        );
    } else {
        let list: Vec<String> = targets
            .iter()
            .map(|t| format!("{} ({})", t.pid, t.comm.as_deref().unwrap_or("?")))
            .collect();
        crate::say!(
            "rtm-trace: attached to PID {}; tracing until Ctrl-C{}",
            list.join(", "),
            cli.duration
                .map(|d| format!(", {:?} pass", d))
                .unwrap_or_default()
        );
    }

    // Loading the programs parsed the kernel's BTF and the target's libraries: several
    // MiB freed but still resident in the heap. Hand them back before tracing. From here
    // blocks up to 4 MiB come from the heap, about where glibc's own threshold stood
    // after one BTF parse: the model's many mid-sized blocks each mapped afresh (and
    // faulted in page by page) slowed the reader enough to lose events in a 64-thread
    // burst, while its largest tables, mapped, go back to the system when they grow
    // (with a 32 MiB threshold they stayed in the heap: 67 MiB at the peak, not 59).
    // SAFETY: malloc_trim only releases free memory; mallopt only tunes the allocator.
    unsafe {
        libc::malloc_trim(0);
        libc::mallopt(libc::M_MMAP_THRESHOLD, 4 * 1024 * 1024);
    }
    let (exit_tx, mut exit_rx) = mpsc::unbounded_channel();
    for &pid in &pids {
        exits::watch(pid, exit_tx.clone());
    }
    let deadline = cli.duration.map(|d| started + d);
    // The kernel wakes the reader only when the ring fills up; the rest of the time the
    // reader comes by on this timer, so records wait at most DRAIN_EVERY.
    let mut drain = tokio::time::interval(DRAIN_EVERY);
    drain.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut ticker = cli.interval.map(|i| {
        let mut t = tokio::time::interval_at(Instant::now() + i, i);
        t.set_missed_tick_behavior(MissedTickBehavior::Delay);
        t
    });

    let mut sampling =
        tokio::time::interval_at(Instant::now() + cli.sample_every(), cli.sample_every());
    sampling.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut state = State {
        model: SyncGraph::new(cli.limits(), cli.mode == Mode::Contention),
        tasks: TaskGraph::default(),
        rank_env: Default::default(),
        namer: ObjectNamer::default(),
        code: CodeNamer::default(),
        comms: Default::default(),
        spawned: Vec::new(),
        execd: Vec::new(),
        gone: Vec::new(),
        stale_maps: Default::default(),
        eager_maps: mappings.is_none(),
        follow: Default::default(),
        sampler,
    };
    for &pid in &pids {
        state.model.trace_process(pid);
        if child.as_ref().is_none_or(|c| c.pid != pid) {
            state.add_threads(pid, start_ns);
        }
    }
    state.follow.targets = pids.clone();
    let mut catch_up = super::catch_up::CatchUp::new();
    let mut child_exit: Option<ChildExit> = None;
    let mut live = pids.len();
    let mut report_failed = None;
    let reason = loop {
        let wake = tokio::select! {
            r = reader.ready() => { r.map_err(io_err("reading the ring buffer"))?; Wake::Events { backlog: true } }
            _ = drain.tick() => Wake::Events { backlog: false },
            _ = sampling.tick() => Wake::Sample,
            _ = async { ticker.as_mut().expect("guarded").tick().await }, if ticker.is_some() => Wake::Tick,
            _ = async { tokio::time::sleep_until(deadline.expect("guarded")).await }, if deadline.is_some() => Wake::Stop(EndReason::Duration),
            _ = sigint.recv() => Wake::Stop(EndReason::Signal),
            _ = sigterm.recv() => Wake::Stop(EndReason::Signal),
            Some(pid) = exit_rx.recv() => Wake::Exited(pid),
        };
        match wake {
            Wake::Events { backlog } => {
                // Raised before draining: a reader starved by the target's threads would
                // otherwise take its time over the very drain that must catch up.
                if backlog {
                    catch_up.update(true);
                }
                follow_mappings(&mut mappings, &probes, &mut state.namer);
                reader.drain(BATCH, &mut |ev| state.apply(ev));
                catch_up.update(reader.behind());
                follow(&mut probes, &cli, &mut state);
            }
            Wake::Tick => {
                follow_mappings(&mut mappings, &probes, &mut state.namer);
                reader.drain_now(&mut |ev| state.apply(ev));
                let alive: Vec<u32> = pids.iter().chain(&state.follow.followed).copied().collect();
                take_left(&mut left, alive.into_iter(), false, &mut state);
                let mut run = run_info(
                    &cli,
                    &targets,
                    started_unix_ms,
                    None,
                    probes.losses()?,
                    &reader,
                );
                run.losses.mapping_records = mapping_losses(&mappings, &state.namer);
                run.unprobed = state.follow.unprobed.clone();
                let (snap, missing) = snapshot(&mut state, start_ns, monotonic_ns());
                run.missing_symbols = missing;
                let secs = (monotonic_ns() - start_ns) as f64 / 1e9;
                if report_failed.is_none() {
                    let text = report::render(
                        &format!("summary at +{secs:.1} s (cumulative)"),
                        &run,
                        &snap,
                        cli.top.min(5),
                    );
                    // A summary that cannot be written (stdout closed) stops the
                    // summaries, not the trace: the results still go where they can.
                    if let Err(e) = outputs.report.write(&mut |w| w.write_all(text.as_bytes())) {
                        crate::say!("rtm-trace: error: {e}; no more summaries, tracing goes on");
                        report_failed = Some(e);
                    }
                }
            }
            Wake::Sample => {
                let alive: Vec<u32> = pids.iter().chain(&state.follow.followed).copied().collect();
                state.sampler.sample(monotonic_ns(), alive.iter().copied());
                take_left(&mut left, alive.into_iter(), false, &mut state);
            }
            Wake::Stop(r) => break r,
            Wake::Exited(pid) => {
                // Its last events are already in the ring buffer; its usage is still
                // readable until it is reaped.
                let alive = pids.iter().chain(&state.follow.followed).copied();
                state.sampler.sample(monotonic_ns(), alive);
                follow_mappings(&mut mappings, &probes, &mut state.namer);
                reader.drain_now(&mut |ev| state.apply(ev));
                let ended = if child.as_ref().is_some_and(|c| c.pid == pid) {
                    let e = wait_child(pid)?;
                    child_exit = Some(e);
                    match e {
                        ChildExit::Code(c) => format!("exit {c}"),
                        ChildExit::Signal(s) => format!("signal {s}"),
                    }
                } else {
                    "exited".to_owned()
                };
                if let Some(t) = targets.iter_mut().find(|t| t.pid == pid) {
                    t.ended = Some(ended);
                }
                // Its address space is gone, and its probes with it; the links are
                // released with the others at the end.
                live -= 1;
                if live == 0 {
                    break EndReason::TargetsExited;
                }
            }
        }
    };

    // Stop collecting at once, take what is in flight, and write the results; the
    // breakpoints themselves go afterwards, since unregistering them is slow.
    probes.stop(&pids);
    probes.stop(&state.follow.followed);
    let end_ns = monotonic_ns();
    state
        .sampler
        .sample(end_ns, pids.iter().chain(&state.follow.followed).copied());
    follow_mappings(&mut mappings, &probes, &mut state.namer);
    reader.drain_now(&mut |ev| state.apply(ev));
    // The threads' last waits: exited threads sent theirs; the programs no longer run
    // for the others.
    let all: Vec<u32> = pids.iter().chain(&state.follow.followed).copied().collect();
    take_left(&mut left, all.into_iter(), true, &mut state);
    let losses = probes.losses()?;

    for t in targets.iter_mut() {
        if t.comm.is_none() {
            t.comm = state.comms.get(&t.pid).cloned().or(command_name.clone());
        }
    }
    let mut run = run_info(
        &cli,
        &targets,
        started_unix_ms,
        Some(reason),
        losses,
        &reader,
    );
    run.losses.mapping_records = mapping_losses(&mappings, &state.namer);
    run.unprobed = state.follow.unprobed.clone();
    if cli.bpf_stats {
        run.bpf = Some(probes.bpf_stats());
    }
    state.model.settle_pending();
    let (snap, missing) = snapshot(&mut state, start_ns, end_ns);
    run.missing_symbols = missing;
    // The report, then the JSON whatever became of the report: a failure of one must
    // not cost the other. Either failing makes the run fail.
    let text = report::render("final report", &run, &snap, cli.top);
    let report = outputs.report.write(&mut |w| w.write_all(text.as_bytes()));
    let json = outputs.json.as_mut().map(|dest| {
        run.tracer_max_rss_kib = process::peak_rss_kib();
        json::write(dest, &run, &snap).inspect(|_| {
            crate::say!(
                "rtm-trace: wrote {}",
                Shown(&dest.path().display().to_string())
            );
        })
    });
    let uprobes = probes.uprobe_count();
    if let Some(helper) = probes.release()
        && cli.verbose
    {
        crate::say!(
            "rtm-trace: {uprobes} uprobes are removed in the background by PID {helper} \
             (about 0.1 s each; they no longer trace anything)"
        );
    }
    if let Some(e) = report_failed {
        return Err(e.into());
    }
    report?;
    json.transpose()?;

    match (child, child_exit) {
        (_, Some(e)) => Ok(e.shell_code()),
        (Some(c), None) => {
            crate::say!(
                "rtm-trace: results written; waiting for PID {} to exit (Ctrl-C to stop \
                 waiting; it keeps running)",
                c.pid
            );
            // Its exit comes through the watcher; Ctrl-C or SIGTERM ends the wait.
            loop {
                tokio::select! {
                    Some(pid) = exit_rx.recv() => if pid == c.pid {
                        break Ok(wait_child(c.pid)?.shell_code());
                    },
                    _ = sigint.recv() => break Ok(130),
                    _ = sigterm.recv() => break Ok(143),
                }
            }
        }
        (None, _) => Ok(0),
    }
}

/// Handles processes the targets forked (already in the in-kernel filter, put there by
/// the fork tracepoint): full mode gives them their own uprobes. Followed processes that
/// exited leave the filter.
fn follow(probes: &mut Probes, cli: &Cli, state: &mut State) {
    let spawned = std::mem::take(&mut state.spawned);
    if cli.follow_forks() {
        for &(pid, _) in &spawned {
            state.model.trace_process(pid);
        }
    }
    let namer = &state.namer;
    full_probes::follow(
        probes,
        cli,
        spawned,
        std::mem::take(&mut state.execd),
        std::mem::take(&mut state.gone),
        &mut state.follow,
        &|pid| namer.modules(pid),
    );
}

/// Brings in the address-space records, before the events that may refer to them.
fn follow_mappings(m: &mut Option<MappingReader>, probes: &Probes, namer: &mut ObjectNamer) {
    let Some(m) = m else { return };
    m.drain(&mut |pid| probes.is_traced(pid), &mut |r| match r {
        MappingRecord::Map { pid, mapping } => namer.mapped(pid, mapping),
        MappingRecord::Exec { pid } => namer.exec(pid),
        MappingRecord::Fork { parent, child } => namer.forked(parent, child),
    });
}

/// Mapping records lost by the kernel or not kept by the tracer.
fn mapping_losses(m: &Option<MappingReader>, namer: &ObjectNamer) -> u64 {
    m.as_ref().map_or(0, MappingReader::lost) + namer.dropped_mappings()
}

fn run_info(
    cli: &Cli,
    targets: &[TargetInfo],
    started_unix_ms: u64,
    end_reason: Option<EndReason>,
    losses: [u64; rtm_common::LossCounter::COUNT as usize],
    reader: &EventReader,
) -> RunInfo {
    RunInfo {
        mode: cli.mode,
        command: (!cli.command.is_empty()).then(|| {
            cli.command
                .iter()
                .map(|a| a.to_string_lossy().into_owned())
                .collect()
        }),
        targets: targets.to_vec(),
        host: std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_owned())
            .unwrap_or_default(),
        started_unix_ms,
        end_reason,
        losses: Losses::from_counters(losses),
        unprobed: Vec::new(),
        missing_symbols: Vec::new(),
        reader: reader.stats(),
        tracer_max_rss_kib: None,
        bpf: None,
    }
}

/// Marks gone threads as exited, refreshes names of live ones, and builds the views;
/// also returns what to tell about stripped files met (see [`ObjectNamer`]).
fn snapshot(state: &mut State, start_ns: u64, end_ns: u64) -> (Snapshot<'_>, Vec<String>) {
    let threads: Vec<_> = state
        .model
        .threads()
        .map(|(k, n)| (*k, n.last_event_ns))
        .collect();
    for (k, last) in threads {
        if process::thread_alive(k.pid, k.tid) {
            state
                .model
                .set_thread_info(k, process::thread_name(k.pid, k.tid), None);
        } else {
            state.model.mark_thread_exited(k, last);
        }
    }
    let (ambient, counters) = state.sampler.views();
    let State {
        model,
        namer,
        code,
        tasks,
        rank_env,
        ..
    } = state;
    let objects = std::cell::RefCell::new(namer);
    let mut snap = Snapshot::build(
        model,
        Window { start_ns, end_ns },
        &mut |o| objects.borrow_mut().name(o.pid, o.addr),
        &mut |pid, addr| code.name(&mut objects.borrow_mut(), pid, addr),
    );
    if !tasks.is_empty() {
        snap.tasks = Some(TaskView::build(tasks, rank_env, &process::host_name()));
    }
    snap.ambient = Some(ambient);
    snap.counters = Some(counters);
    let objects = objects.into_inner();
    // Each stripped file is said once on stderr, and every time in the report.
    for hint in objects.take_missing_symbols() {
        crate::say!("rtm-trace: note: {hint}");
    }
    (snap, objects.missing_symbols())
}
