//! The kernel as the engine's source: the eBPF programs, loaded when the first target
//! is attached and released when the engine has nothing left to trace; the ring
//! buffers; the address-space records; the waits left in the threads' slots.

mod full;
mod funcs;
mod mpi;

use std::{future::Future, io, os::fd::OwnedFd, pin::Pin};

use rtm_common::{LossCounter, decode::Event, names};

use super::{
    EngineError, Target,
    processes::Asleep,
    source::{KernelState, ProcessChanges, Source},
};
use crate::{
    EBPF_OBJECT,
    analyses::{
        Kernel,
        functions::{RunningCall, TimedFunction},
    },
    config::{Mode, TraceConfig},
    output::{TargetInfo, Unprobed},
    probes::{LoadOptions, Probes, Traced, funcs::FuncSpec},
    proc::{Module, elf::ElfSymbols, process},
    readers::{
        EventReader, FutexSums, LeftWaits, Losses, MmapRecord, MmapRecordReader, ReaderStats,
        bpf_stats::{self, BpfStats},
        ring_buffer::RingBuffer,
    },
    symbolize::ObjectNamer,
};

/// What the kernel source needs of the trace's description.
#[derive(Debug, Clone)]
pub(super) struct Settings {
    pub mode: Mode,
    pub ring_bytes: u32,
    /// Bytes of each stack copied at the wake that ends a sleeping futex wait (0: none).
    pub stack_bytes: u32,
    pub probe_all: bool,
    pub probe_mpi: bool,
    /// MPI neither asked for nor refused: say when the targets use it.
    pub hint_mpi: bool,
    pub verbose: bool,
    pub bpf_stats: bool,
    /// `--func`: the functions to time.
    pub funcs: Vec<FuncSpec>,
    /// Most functions timed.
    pub max_funcs: usize,
    /// Read each futex wait's mutex holder at its start (`[deadlocks] detect`).
    pub read_holders: bool,
    /// `--tid`, `--cpu`.
    pub tids: Vec<u32>,
    pub cpus: Vec<u32>,
    /// Sum ended waits in the kernel (no output needs each one).
    pub aggregate: bool,
    /// `--unslept`: futex waits seen at their system call's entry too.
    pub unslept: bool,
    /// Waiters' stacks per CPU per second (u32::MAX: all).
    pub stack_rate: u32,
    /// Entries of the map of summed waits.
    pub futex_sums: u32,
}

/// How a trace configured by `config` loads the eBPF programs.
pub fn load_options(config: &TraceConfig) -> LoadOptions {
    Settings::new(config).load_options()
}

impl Settings {
    fn load_options(&self) -> LoadOptions {
        LoadOptions {
            ring_bytes: self.ring_bytes,
            count_wakes: self.mode == Mode::Full,
            stack_bytes: self.stack_bytes,
            timed_functions: !self.funcs.is_empty(),
            read_holders: self.read_holders,
            tids: self.tids.clone(),
            cpus: self.cpus.clone(),
            aggregate: self.aggregate,
            syscall_entry: self.unslept,
            stack_rate: self.stack_rate,
            agg_entries: self.futex_sums,
        }
    }

    fn new(c: &TraceConfig) -> Self {
        Self {
            mode: c.mode,
            ring_bytes: c.limits.ring_bytes,
            stack_bytes: if c.stacks.enabled && c.stacks.rate.per_second() != 0 {
                c.stacks.bytes
            } else {
                0
            },
            probe_all: c.probe_all,
            probe_mpi: c.probe_mpi(),
            hint_mpi: c.mode == Mode::Contention && c.mpi.is_none(),
            verbose: c.verbose,
            bpf_stats: c.bpf_stats,
            // Checked by the config's validation.
            funcs: c
                .functions
                .time
                .iter()
                .filter_map(|s| FuncSpec::parse(s).ok())
                .collect(),
            max_funcs: c.functions.max_functions,
            read_holders: c.deadlocks.detect,
            tids: c.targets.tids.clone(),
            cpus: c.targets.cpus.clone(),
            // A timeline draws each wait.
            aggregate: c.output.timeline.is_none(),
            unslept: c.unslept,
            stack_rate: c.stacks.rate.per_second(),
            futex_sums: c.limits.futex_sums,
        }
    }
}

/// The programs while loaded, and what reads from them.
struct Live {
    probes: Probes,
    reader: EventReader,
    /// Contention mode leaves the threads' last waits in their slots.
    left: Option<LeftWaits>,
    /// Contention mode sums ended waits in the kernel.
    sums: Option<FutexSums>,
    mappings: Option<MmapRecordReader>,
    /// The kernel's run-time statistics, on while this is held (`--bpf-stats`).
    _bpf_stats: Option<OwnedFd>,
}

/// The eBPF side, loaded on demand.
pub struct KernelSource {
    settings: Settings,
    live: Option<Live>,
    /// Counts of earlier loads (a daemon's targets came and went).
    carried: Carried,
    follow: full::Follow,
    /// `--func`: the functions timed, by index (the probes' cookie).
    funcs: Vec<TimedFunction>,
}

#[derive(Debug, Default)]
struct Carried {
    losses: [u64; LossCounter::COUNT as usize],
    reader: ReaderStats,
    mapping_lost: u64,
}

fn io_err(what: &'static str) -> impl FnOnce(io::Error) -> EngineError {
    move |source| EngineError::Io {
        what: what.to_owned(),
        source,
    }
}

impl KernelSource {
    /// A source for traces like `config`; nothing is loaded until the first target.
    pub fn new(config: &TraceConfig) -> Self {
        Self {
            settings: Settings::new(config),
            live: None,
            carried: Carried::default(),
            follow: full::Follow::default(),
            funcs: Vec::new(),
        }
    }

    fn load(&self) -> Result<Live, EngineError> {
        let s = &self.settings;
        let mut probes = Probes::load(EBPF_OBJECT, &s.load_options())?;
        if s.verbose {
            crate::say!("rtm-trace: futex calls seen at {}", probes.futex_entry());
        }
        let rings = probes
            .take_rings()?
            .into_iter()
            .map(RingBuffer::new)
            .collect::<io::Result<Vec<_>>>()
            .map_err(io_err("ring buffer"))?;
        let reader = EventReader::new(rings).map_err(io_err("ring buffer"))?;
        let sums = probes
            .take_futex_sums()
            .map(FutexSums::new)
            .transpose()
            .map_err(|e| EngineError::Io {
                what: "futex sums map".into(),
                source: io::Error::other(e),
            })?;
        let left = match s.mode {
            Mode::Contention => Some(
                LeftWaits::new(probes.take_left_wait_maps()?)
                    .map_err(io_err("futex wait slots"))?,
            ),
            Mode::Full => None,
        };
        // The kernel's per-program run-time statistics cost every probe a little: on
        // only when asked for, and only while loaded.
        let bpf_stats = s
            .bpf_stats
            .then(|| {
                bpf_stats::enable()
                    .map_err(|e| crate::say!("rtm-trace: warning: --bpf-stats: {e}"))
                    .ok()
            })
            .flatten();
        // Before anything runs: the records of a launched program's exec must be caught.
        let mappings = match MmapRecordReader::open() {
            Ok(m) => Some(m),
            Err(e) => {
                crate::say!(
                    "rtm-trace: warning: cannot follow address spaces through perf events \
                     ({e}); objects of processes that exit quickly may be shown by address"
                );
                None
            }
        };
        Ok(Live {
            probes,
            reader,
            left,
            sums,
            mappings,
            _bpf_stats: bpf_stats,
        })
    }
}

impl Kernel for KernelSource {
    fn timed_functions(&self) -> Vec<TimedFunction> {
        self.funcs.clone()
    }

    fn running_calls(&self) -> Vec<RunningCall> {
        let Some(live) = &self.live else {
            return Vec::new();
        };
        crate::probes::func_tables::running_calls(live.probes.ebpf())
            .into_iter()
            .map(|(pid, tid, function, start_ns)| RunningCall {
                pid,
                tid,
                function,
                start_ns,
            })
            .collect()
    }
}

impl Source for KernelSource {
    fn attach(&mut self, targets: &[Target]) -> Result<Vec<TargetInfo>, EngineError> {
        if self.live.is_none() {
            self.live = Some(self.load()?);
        }
        let settings = &self.settings;
        let live = self.live.as_mut().expect("loaded above");
        let mut infos = Vec::new();
        for t in targets {
            // Ctrl-C while attaching to many processes: the loop stops at its first turn.
            if crate::interrupt::requested() {
                break;
            }
            let pid = t.pid;
            live.probes.set_traced(pid, Traced::new(t.follow_forks))?;
            let launched = t.launched.as_ref();
            // A launched child has not exec'd yet: the tracer's own libc is the one its
            // program will load (same mount namespace, same loader).
            let probe_pid = if launched.is_some() {
                std::process::id()
            } else {
                pid
            };
            // A statically linked program carries its own pthread code.
            let static_exe = launched
                .filter(|l| ElfSymbols::is_static_executable(&l.program).unwrap_or(false))
                .map(|l| l.program.clone());
            let library = match settings.mode {
                Mode::Full => Some(
                    full::attach(
                        &mut live.probes,
                        settings,
                        &full::Wanted {
                            pid,
                            probe_pid,
                            static_exe: static_exe.as_deref(),
                            launched,
                            follow_forks: t.follow_forks,
                            forked: false,
                        },
                    )?
                    .library
                    .display()
                    .to_string(),
                ),
                Mode::Contention => None,
            };
            funcs::attach(&mut live.probes, settings, &mut self.funcs, t)?;
            self.follow.targets.push((pid, t.follow_forks));
            infos.push(TargetInfo {
                pid,
                // A launched child still runs the tracer's image: its name comes after
                // exec.
                comm: if launched.is_some() {
                    None
                } else {
                    process::comm(pid)
                },
                library,
                ended: None,
            });
        }
        // MPI probes go in before a launched command runs: a rank may call MPI_Init
        // within milliseconds of its start. Each target's own choice, else the trace's.
        let command = targets
            .iter()
            .find_map(|t| t.launched.as_ref().map(|l| l.argv.as_slice()));
        let attached = |probe: bool| -> Vec<u32> {
            targets
                .iter()
                .filter(|t| infos.iter().any(|i| i.pid == t.pid))
                .filter(|t| t.mpi.unwrap_or(settings.probe_mpi) == probe)
                .map(|t| t.pid)
                .collect()
        };
        let (probed, unprobed) = (attached(true), attached(false));
        if !probed.is_empty() {
            mpi::attach(&mut live.probes, settings.verbose, &probed, command)?;
        }
        if settings.hint_mpi && !unprobed.is_empty() {
            mpi::hint(&unprobed, command);
        }
        Ok(infos)
    }

    fn stop(&mut self, pids: &[u32]) {
        if let Some(l) = &mut self.live {
            l.probes.stop(pids);
        }
    }

    fn filter_ids(&self) -> Option<crate::probes::FilterIds> {
        self.live.as_ref()?.probes.filter_ids()
    }

    fn admit(&mut self, pid: u32, admit: bool) {
        if let Some(l) = &mut self.live {
            if admit {
                if let Err(e) = l.probes.set_traced(pid, Traced::new(true)) {
                    log::debug!("admitting {pid}: {e}");
                }
            } else {
                l.probes.stop(&[pid]);
            }
        }
    }

    fn release(&mut self) -> Option<u32> {
        let live = self.live.take()?;
        if let Ok(l) = live.probes.losses() {
            for (c, n) in self.carried.losses.iter_mut().zip(l) {
                *c += n;
            }
        }
        let r = live.reader.stats();
        let c = &mut self.carried.reader;
        c.records += r.records;
        c.bytes += r.bytes;
        c.short_records += r.short_records;
        c.unknown_records += r.unknown_records;
        self.carried.mapping_lost += live.mappings.as_ref().map_or(0, MmapRecordReader::lost);
        self.follow = full::Follow::default();
        let uprobes = live.probes.uprobe_count();
        let helper = live.probes.release();
        if let Some(helper) = helper
            && self.settings.verbose
        {
            crate::say!(
                "rtm-trace: {uprobes} uprobes are removed in the background by PID {helper} \
                 (about 0.1 s each; they no longer trace anything)"
            );
        }
        helper
    }

    fn ready(&mut self) -> Pin<Box<dyn Future<Output = io::Result<()>> + '_>> {
        match &mut self.live {
            Some(l) => Box::pin(l.reader.ready()),
            None => Box::pin(std::future::pending()),
        }
    }

    fn is_live(&self) -> bool {
        self.live.is_some()
    }

    fn records_mappings(&self) -> bool {
        self.live.as_ref().is_none_or(|l| l.mappings.is_some())
    }

    fn mappings(&mut self, namer: &mut ObjectNamer) {
        let Some(live) = &mut self.live else {
            return;
        };
        if let Some(m) = &mut live.mappings {
            let probes = &live.probes;
            m.drain(&mut |pid| probes.is_traced(pid), &mut |t, r| match r {
                MmapRecord::Map { pid, mapping } => namer.mapped(pid, t, mapping),
                MmapRecord::Exec { pid } => namer.exec(pid, t),
                MmapRecord::Fork { parent, child } => namer.forked(parent, child),
            });
        }
    }

    fn drain(&mut self, max: usize, sink: &mut dyn FnMut(&Event)) -> usize {
        self.live.as_mut().map_or(0, |l| l.reader.drain(max, sink))
    }

    fn behind(&self) -> bool {
        self.live.as_ref().is_some_and(|l| l.reader.behind())
    }

    fn take_left(
        &mut self,
        threads: &mut dyn Iterator<Item = (u32, u32)>,
        before: Option<u64>,
        sink: &mut dyn FnMut(&Event),
    ) {
        let Some(live) = self.live.as_mut() else {
            return;
        };
        let threads: Vec<(u32, u32)> = threads.collect();
        if let Some(left) = &live.left {
            left.take(threads.iter().copied(), before, sink);
        }
        // The sums after the slots: a wait the slots still held is in neither twice.
        if let Some(sums) = &mut live.sums {
            let alive: Option<std::collections::HashSet<(u32, u32)>> =
                before.map(|_| threads.iter().copied().collect());
            sums.read(crate::proc::process::monotonic_ns(), alive.as_ref(), sink);
        }
        // The programs no longer run for these threads: the calls they kept are taken.
        if before.is_none() && !self.funcs.is_empty() {
            let pids: std::collections::HashSet<u32> = threads.iter().map(|t| t.0).collect();
            for ev in crate::probes::func_tables::take_kept_calls(live.probes.ebpf_mut(), &pids) {
                sink(&Event::Func(ev));
            }
        }
    }

    fn sleep_entry(&self) -> bool {
        self.live.as_ref().is_some_and(|l| l.probes.sleep_entry())
    }

    fn futex_functions(&self) -> bool {
        self.live.as_ref().is_some_and(|l| l.probes.futex_fn())
    }

    fn knows_asleep(&self) -> bool {
        self.live.as_ref().is_some_and(|l| l.left.is_some())
    }

    fn asleep(
        &self,
        threads: &mut dyn Iterator<Item = (u32, u32)>,
        before_ns: Option<u64>,
    ) -> Vec<Asleep> {
        let Some(left) = self.live.as_ref().and_then(|l| l.left.as_ref()) else {
            return Vec::new();
        };
        left.asleep(threads, before_ns)
            .into_iter()
            .map(|(pid, tid, start_ns, word, val)| Asleep {
                pid,
                tid,
                start_ns,
                word,
                val,
            })
            .collect()
    }

    fn forget(&mut self, pids: &[u32]) {
        self.follow.targets.retain(|(p, _)| !pids.contains(p));
        if let Some(l) = &mut self.live {
            l.probes.forget(pids);
        }
    }

    fn kernel_state(&self) -> KernelState {
        let Some(live) = &self.live else {
            return KernelState::default();
        };
        let mut maps = Vec::new();
        if let Some((n, cap)) = live.probes.filter_fill() {
            maps.push((names::MAP_TRACED_TGIDS, n, cap));
        }
        if let Some((n, cap)) = live.left.as_ref().and_then(|l| l.overflow_fill()) {
            maps.push((names::MAP_PENDING_FUTEX, n, cap));
        }
        KernelState {
            loaded: true,
            uprobes: live.probes.uprobe_count(),
            maps,
        }
    }

    fn changes(&mut self, changes: ProcessChanges, modules: &dyn Fn(u32) -> Vec<Module>) {
        if let Some(live) = &mut self.live {
            full::follow(
                &mut live.probes,
                &self.settings,
                changes,
                &mut self.follow,
                modules,
            );
        }
    }

    fn unprobed(&self) -> Vec<Unprobed> {
        self.follow.unprobed.clone()
    }

    fn losses(&self) -> Losses {
        let mut all = self.carried.losses;
        if let Some(now) = self.live.as_ref().and_then(|l| l.probes.losses().ok()) {
            for (a, n) in all.iter_mut().zip(now) {
                *a += n;
            }
        }
        Losses::from_counters(all)
    }

    fn reader_stats(&self) -> ReaderStats {
        let mut r = self.carried.reader;
        if let Some(l) = &self.live {
            let s = l.reader.stats();
            r.records += s.records;
            r.bytes += s.bytes;
            r.short_records += s.short_records;
            r.unknown_records += s.unknown_records;
        }
        r
    }

    fn mapping_losses(&self) -> u64 {
        self.carried.mapping_lost
            + self
                .live
                .as_ref()
                .and_then(|l| l.mappings.as_ref())
                .map_or(0, MmapRecordReader::lost)
    }

    fn bpf_stats(&self) -> Option<BpfStats> {
        let live = self.live.as_ref()?;
        self.settings
            .bpf_stats
            .then(|| bpf_stats::read(&live.probes))
    }
}
