//! The tracing engine: it owns the event source (the kernel's probes and rings, or a
//! list of records), the model, the sampler of system statistics and counters, and the
//! sinks, and runs the event loop. Front ends drive it: the one-shot command
//! (`session`) adds its targets, runs until the targets exit, the duration passes or a
//! signal comes, and finishes; a daemon adds and removes targets while it runs (through
//! an [`EngineHandle`] from any thread) and reads the [`Summary`] published on every
//! tick.
//!
//! The kernel side is loaded when the first target is added and released when none is
//! left (a daemon between targets holds no probes); the model stays.
//!
//! This file holds the engine's parts and how records reach the model; `targets` adds
//! and removes targets, `run` is the event loop, and `results` builds snapshots and
//! writes the final results.

mod admit;
pub(crate) mod blocked;
mod catch_up;
mod deadlocks;
pub(crate) mod exits;
mod handle;
mod kernel;
mod naming;
pub(crate) mod processes;
mod profiles;
mod results;
mod reuse;
mod run;
mod sampler;
pub(crate) mod source;
mod stacks;
mod state;
pub(crate) mod summary;
mod targets;

use std::{collections::HashSet, ffi::OsString, io, path::PathBuf, sync::Arc};

use handle::Command;
pub use handle::EngineHandle;
pub use kernel::{KernelSource, load_options};
pub use profiles::{ProfileAsk, ProfileData, ProfileRefused};
use rtm_common::decode::Event;
#[cfg(test)]
pub use source::EventList;
pub use source::{ProcessChanges, Source};
pub use summary::Summary;
use tokio::{
    sync::{mpsc, watch},
    time::Instant,
};

use self::{catch_up::CatchUp, sampler::Sampler, state::State};
use crate::{
    config::TraceConfig,
    model::{SyncGraph, sync::ThreadKey},
    output::{EndReason, TargetInfo, dest::DestError, sink::Sink},
    probes::ProbeError,
    proc::{
        launch::{ChildExit, LaunchError},
        process::{self, monotonic_ns},
    },
};

/// A thread's last futex wait is sent when it next waits or exits; one that has not
/// waited again for this long has its last wait taken by the reader (when it samples).
const QUIET_WAIT_NS: u64 = 1_000_000_000;

/// A process to trace.
#[derive(Debug, Clone)]
pub struct Target {
    /// Its id.
    pub pid: u32,
    /// Trace the processes it forks too, from birth (and theirs).
    pub follow_forks: bool,
    /// Set when the front end launched it: it waits at a gate, not yet exec'd, and the
    /// engine reaps it when it exits.
    pub launched: Option<Launched>,
    /// Probe its MPI library: None for the trace's setting (`TraceConfig::mpi`).
    pub mpi: Option<bool>,
}

impl Target {
    /// A running process.
    pub fn running(pid: u32, follow_forks: bool) -> Self {
        Self {
            pid,
            follow_forks,
            launched: None,
            mpi: None,
        }
    }
}

/// What a launched target will run.
#[derive(Debug, Clone)]
pub struct Launched {
    /// The program it will execute.
    pub program: PathBuf,
    /// The command line (the program's name first).
    pub argv: Vec<OsString>,
}

/// Why the engine could not do what it was asked.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// Probes could not be loaded or attached (boxed: it is large).
    #[error(transparent)]
    Probe(Box<ProbeError>),
    /// A result could not be written.
    #[error(transparent)]
    Output(#[from] DestError),
    /// A launched target could not be reaped.
    #[error(transparent)]
    Launch(#[from] LaunchError),
    /// Other I/O (ring buffers, signals).
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// Why it failed.
        #[source]
        source: io::Error,
    },
    /// The engine is gone (a handle's command was not taken).
    #[error("the tracing engine has stopped")]
    Stopped,
    /// A `--func` spec cannot be timed.
    #[error(transparent)]
    Func(#[from] crate::probes::funcs::FuncError),
}

impl From<ProbeError> for EngineError {
    fn from(e: ProbeError) -> Self {
        EngineError::Probe(Box::new(e))
    }
}

/// How a trace ended.
#[derive(Debug)]
pub struct Outcome {
    /// Why tracing stopped.
    pub reason: EndReason,
    /// How the launched targets that exited during the trace ended.
    pub exits: Vec<(u32, ChildExit)>,
}

pub use reuse::ProcKey;

/// A target and what became of it.
struct Traced {
    info: TargetInfo,
    /// When it started (clock ticks since boot): with the pid, which process it is.
    start: u64,
    launched: Option<Launched>,
    live: bool,
    exit: Option<ChildExit>,
}

/// A sink and whether its intervals failed.
struct SinkSlot {
    sink: Box<dyn Sink>,
    failed: Option<DestError>,
}

/// When tracing started.
#[derive(Clone, Copy)]
struct Start {
    ns: u64,
    instant: Instant,
    unix_ms: u64,
}

/// The engine.
pub struct Engine {
    config: TraceConfig,
    source: Box<dyn Source>,
    state: State,
    /// Deadlocks found while tracing.
    deadlocks: deadlocks::Deadlocks,
    sampler: Option<Sampler>,
    sinks: Vec<SinkSlot>,
    /// The functions timed (`--func`) the sinks were told of.
    timed_functions: usize,
    /// Whether some sink wants every event.
    event_sinks: bool,
    targets: Vec<Traced>,
    /// Processes forked by following processes, traced from birth, each with the
    /// target it descends from.
    followed: Vec<(u32, u32)>,
    /// When each followed process started (see [`Traced::start`]).
    followed_starts: std::collections::HashMap<u32, u64>,
    /// Processes whose forks are followed.
    following: HashSet<u32>,
    exits: (
        mpsc::UnboundedSender<ProcKey>,
        mpsc::UnboundedReceiver<ProcKey>,
    ),
    commands: (
        mpsc::UnboundedSender<Command>,
        mpsc::UnboundedReceiver<Command>,
    ),
    summary: watch::Sender<Arc<Summary>>,
    start: Option<Start>,
    catch_up: CatchUp,
    seq: u64,
    stop_when_targets_exit: bool,
    /// Publish per-process summaries (a metrics agent wants them).
    per_process: bool,
    /// Rows per list in the published summary (default: the report's `top`).
    summary_rows: Option<usize>,
    /// How long the kernel side stays loaded with nothing to trace.
    release_after: std::time::Duration,
    /// Since when nothing has been traced, while the kernel side stays loaded.
    idle_since: Option<Instant>,
    /// Sample the system's statistics and the counters.
    sample_system: bool,
}

fn io_err(what: &'static str) -> impl FnOnce(io::Error) -> EngineError {
    move |source| EngineError::Io {
        what: what.to_owned(),
        source,
    }
}

/// The stacks unwound since the last call, to the sinks that want events.
fn give_stacks(state: &mut State, sinks: &mut [SinkSlot]) {
    state.take_unwound(&mut |u, waiter, waker| {
        let seen = crate::output::sink::WaitStacks {
            pid: u.pid,
            tid: u.tid,
            wake_ns: u.at_ns,
            waiter,
            waker,
            waker_thread: (u.waker_pid, u.waker_tid),
        };
        for s in sinks.iter_mut() {
            if s.sink.wants_events() {
                s.sink.stacks(&seen);
            }
        }
    });
}

impl Engine {
    /// An engine for traces like `config`, reading `source` and writing `sinks` (in
    /// this order at the end). Nothing is traced until targets are added.
    pub fn new(config: TraceConfig, source: Box<dyn Source>, sinks: Vec<Box<dyn Sink>>) -> Self {
        let model = SyncGraph::new(
            config.model_limits(),
            config.mode == crate::config::Mode::Contention,
        );
        let event_sinks = sinks.iter().any(|s| s.wants_events());
        let mut state = State::new(model);
        state.analyses = crate::analyses::Analyses::new(&config);
        Self {
            state,
            deadlocks: deadlocks::Deadlocks::default(),
            sampler: None,
            timed_functions: 0,
            event_sinks,
            sinks: sinks
                .into_iter()
                .map(|sink| SinkSlot { sink, failed: None })
                .collect(),
            source,
            targets: Vec::new(),
            followed: Vec::new(),
            followed_starts: std::collections::HashMap::new(),
            following: HashSet::new(),
            exits: mpsc::unbounded_channel(),
            commands: mpsc::unbounded_channel(),
            summary: watch::Sender::new(Arc::new(Summary::default())),
            start: None,
            catch_up: if config.mode == crate::config::Mode::Contention
                && config.output.timeline.is_none()
            {
                CatchUp::never()
            } else {
                CatchUp::default()
            },
            seq: 0,
            stop_when_targets_exit: false,
            summary_rows: None,
            per_process: false,
            release_after: std::time::Duration::ZERO,
            idle_since: None,
            sample_system: true,
            config,
        }
    }

    /// Ends [`Engine::run`] when every target has exited (the one-shot command); by
    /// default the engine keeps running with nothing attached, ready for more.
    pub fn stop_when_targets_exit(&mut self, yes: bool) {
        self.stop_when_targets_exit = yes;
    }

    /// Publishes summaries of `rows` rows per list (a live view sorts and filters more
    /// than the report shows).
    pub fn summary_rows(&mut self, rows: usize) {
        self.summary_rows = Some(rows);
    }

    /// Keeps the kernel side loaded for `linger` after the last target is gone (a daemon
    /// whose targets come and go does not load and release the programs for each); by
    /// default it is released at once.
    pub fn release_after(&mut self, linger: std::time::Duration) {
        self.release_after = linger;
    }

    /// Samples the system's statistics and the counters (the default), or not (a front
    /// end that shows neither: nothing is read for them, nothing kept).
    pub fn sample_system(&mut self, yes: bool) {
        self.sample_system = yes;
    }

    /// Publishes a summary of each traced process with the [`Summary`].
    pub fn publish_processes(&mut self, yes: bool) {
        self.per_process = yes;
    }

    /// A handle to drive the engine while it runs.
    pub fn handle(&self) -> EngineHandle {
        EngineHandle {
            commands: self.commands.0.clone(),
            summary: self.summary.subscribe(),
        }
    }

    /// The trace's description.
    pub fn config(&self) -> &TraceConfig {
        &self.config
    }

    /// Reads up to `max` records into the model (and the sinks that want them).
    fn drain(&mut self, max: usize) -> usize {
        self.source.mappings(&mut self.state.namer);
        let state = &mut self.state;
        let n = if self.event_sinks {
            let sinks = &mut self.sinks;
            state.join.keep_unwound = true;
            self.source.drain(max, &mut |ev| {
                state.apply(ev);
                for s in sinks.iter_mut() {
                    if s.sink.wants_events() {
                        s.sink.event(ev, &mut state.namer);
                    }
                }
                if matches!(ev, Event::Stacks(_)) {
                    give_stacks(state, sinks);
                }
            })
        } else {
            self.source.drain(max, &mut |ev| state.apply(ev))
        };
        self.after_batch();
        n
    }

    /// Between batches: the answers of the naming worker, counters for new threads.
    fn after_batch(&mut self) {
        self.state.take_answers();
        // Stacks that waited for their process's mappings.
        give_stacks(&mut self.state, &mut self.sinks);
        let new = std::mem::take(&mut self.state.changes.new_threads);
        if let Some(s) = &mut self.sampler {
            for ThreadKey { pid, tid } in new {
                s.add_thread(pid, tid);
            }
        }
    }

    /// Takes the ended futex waits the threads of `pids` have not sent: those older
    /// than QUIET_WAIT_NS, or all of them (`all`, once the programs no longer run for
    /// them).
    fn take_left(&mut self, pids: Vec<u32>, all: bool) {
        let before = (!all).then(|| monotonic_ns().saturating_sub(QUIET_WAIT_NS));
        let mut threads = pids
            .into_iter()
            .flat_map(|p| process::thread_ids(p).into_iter().map(move |t| (p, t)));
        let state = &mut self.state;
        // To the sinks that take events too (the timeline draws them).
        let sinks = &mut self.sinks;
        let to_sinks = self.event_sinks;
        self.source
            .take_left(&mut threads, before, &mut |ev: &Event| {
                state.apply(ev);
                if to_sinks {
                    for s in sinks.iter_mut().filter(|s| s.sink.wants_events()) {
                        s.sink.event(ev, &mut state.namer);
                    }
                }
            });
        self.after_batch();
    }

    /// Acts on processes the followed ones forked, exec'd or lost.
    fn follow(&mut self) {
        let c = std::mem::take(&mut self.state.changes);
        self.state.changes.new_threads = c.new_threads;
        for (child, parent, _) in c.spawned {
            if !self.following.contains(&parent) || self.followed.iter().any(|f| f.0 == child) {
                continue;
            }
            let root = self
                .followed
                .iter()
                .find(|f| f.0 == parent)
                .map_or(parent, |f| f.1);
            self.followed.push((child, root));
            self.followed_starts
                .insert(child, process::start_ticks(child, child).unwrap_or(0));
            self.following.insert(child);
            self.state.model.trace_process(child);
            if self.config.verbose {
                crate::say!("rtm-trace: following forked process {child}");
            }
        }
        let ours: HashSet<u32> = self.all_pids().into_iter().collect();
        let execd = c
            .execd
            .into_iter()
            .filter(|(p, _)| ours.contains(p))
            .collect();
        let mut gone_followed = Vec::new();
        for pid in &c.gone {
            if let Some(i) = self.followed.iter().position(|f| f.0 == *pid) {
                self.followed.swap_remove(i);
                self.state.ended.insert(*pid);
                self.following.remove(pid);
                gone_followed.push(*pid);
            }
        }
        // Followed processes that exited leave the filter.
        self.source.stop(&gone_followed);
        let namer = &self.state.namer;
        self.source.changes(
            ProcessChanges {
                execd,
                gone: c.gone,
            },
            &|pid| namer.modules(pid),
        );
        self.release_if_idle();
    }
}

#[cfg(test)]
mod tests;
