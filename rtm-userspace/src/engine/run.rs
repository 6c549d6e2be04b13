//! The engine's loop: what wakes it (the source's backlog, the drain timer, the sampling
//! and interval ticks, a stop, a target's exit, a handle's command) and what it does
//! then, including the snapshots it builds for interval sinks and the summary.

use std::{future::Future, sync::Arc, time::Duration};

use tokio::time::{Instant, MissedTickBehavior};

use super::{Command, Engine, EngineError, Summary, io_err};
use crate::{
    output::{EndReason, sink::Moment},
    proc::{
        launch::{ChildExit, wait_child},
        process::monotonic_ns,
    },
};

/// How often the reader drains the ring buffer without being woken.
const DRAIN_EVERY: Duration = Duration::from_millis(20);

/// Records decoded per wake-up before the loop looks at its other sources again.
const BATCH: usize = 16_384;

enum Wake {
    /// The source has records: `backlog` when it said so, not the drain timer.
    Events {
        backlog: bool,
    },
    Tick,
    Sample,
    Stop(EndReason),
    Exited(super::ProcKey),
    DeadlockCheck,
    Command(Command),
}

impl Engine {
    /// Builds a snapshot for the interval sinks (`interval`) and the summary's
    /// watchers, when any wants one.
    fn publish(&mut self, interval: bool) {
        let to_sinks = interval
            && self
                .sinks
                .iter()
                .any(|s| s.failed.is_none() && s.sink.wants_intervals());
        let watched = self.summary.receiver_count() > 0;
        if !to_sinks && !watched {
            return;
        }
        let mut run = self.run_info(None);
        let now = monotonic_ns();
        let window = self.window(now);
        let followed = self.followed.len();
        // Read before the snapshot, which holds the model.
        let per_process = (watched && self.per_process).then(|| self.process_inputs());
        let (snap, missing) =
            super::results::snapshot(&mut self.state, window, &*self.source, &self.deadlocks);
        run.missing_symbols = missing;
        let at = Moment {
            elapsed_ns: window.end_ns - window.start_ns,
            run: &run,
            snapshot: &snap,
        };
        if to_sinks {
            for s in self.sinks.iter_mut() {
                if s.failed.is_some() || !s.sink.wants_intervals() {
                    continue;
                }
                // An output that cannot be written (stdout closed) stops its intervals,
                // not the trace: the results still go where they can.
                if let Err(e) = s.sink.interval(&at) {
                    crate::say!(
                        "rtm-trace: error: {e}; no more intervals to {}, tracing goes on",
                        s.sink.name()
                    );
                    s.failed = Some(e);
                }
            }
        }
        if watched {
            self.seq += 1;
            let top = self.summary_rows.unwrap_or(self.config.output.top);
            // The rank graph read back from its section once, for both summaries.
            let mpi = crate::analyses::mpi::of(&snap.sections);
            let system = crate::analyses::system::latest(&snap.sections);
            let mut summary =
                Summary::build(self.seq, &run, &snap, mpi.as_ref(), followed, system, top);
            if per_process.is_none() {
                summary.finding =
                    crate::output::findings::find(&snap, run.mode == crate::config::Mode::Full)
                        .into_iter()
                        .next()
                        .map(|f| f.title);
            }
            if let Some(p) = per_process {
                summary.processes = p.build(&snap, mpi.as_ref(), now);
                summary.kernel = self.source.kernel_state();
                if self.config.bpf_stats {
                    summary.bpf = self.source.bpf_stats();
                }
            }
            self.summary.send_replace(Arc::new(summary));
        }
    }

    /// What the per-process summaries need from outside the snapshot.
    pub(super) fn process_inputs(&self) -> super::processes::Inputs {
        let pids: Vec<(u32, u64, bool)> = self
            .targets
            .iter()
            .map(|t| (t.info.pid, t.start, t.live))
            .chain(self.followed.iter().map(|f| {
                let start = self.followed_starts.get(&f.0).copied().unwrap_or(0);
                (f.0, start, true)
            }))
            .collect();
        let running: std::collections::HashSet<u32> =
            pids.iter().filter(|p| p.2).map(|p| p.0).collect();
        let mut threads = self
            .state
            .model
            .threads()
            .filter(|(k, n)| running.contains(&k.pid) && n.exited_ns.is_none())
            .map(|(k, _)| (k.pid, k.tid));
        let asleep = self.source.asleep(&mut threads, None);
        let totals = pids
            .iter()
            .filter_map(|(p, _, _)| Some((*p, *self.state.model.process_totals(*p)?)))
            .collect();
        let deadlocked = self
            .deadlocks
            .found
            .iter()
            .flat_map(|d| d.threads.iter().map(|t| (t.pid, t.tid)))
            .collect();
        super::processes::Inputs {
            mode: self.config.mode,
            pids,
            totals,
            asleep,
            deadlocked,
        }
    }

    /// Runs the loop until `stop` resolves, a handle says stop, the duration passes,
    /// or (with [`Engine::stop_when_targets_exit`]) every target has exited. Events
    /// still in flight are read by [`Engine::finish`].
    pub async fn run(
        &mut self,
        stop: impl Future<Output = EndReason>,
    ) -> Result<EndReason, EngineError> {
        let mut stop = std::pin::pin!(stop);
        let started = self.start.map_or_else(Instant::now, |s| s.instant);
        let deadline = self.config.duration.map(|d| started + d);
        // The kernel wakes the reader only when the ring fills up; the rest of the time
        // the reader comes by on this timer, so records wait at most DRAIN_EVERY.
        let mut drain = tokio::time::interval(DRAIN_EVERY);
        drain.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let mut ticker = self.config.interval.map(|i| {
            let mut t = tokio::time::interval_at(Instant::now() + i, i);
            t.set_missed_tick_behavior(MissedTickBehavior::Delay);
            t
        });
        let mut deadlock_check = self.config.deadlocks.detect.then(|| {
            let mut t = tokio::time::interval(super::deadlocks::CHECK_EVERY);
            t.set_missed_tick_behavior(MissedTickBehavior::Delay);
            t
        });
        let every = self.config.sample_every();
        let mut sampling = tokio::time::interval_at(Instant::now() + every, every);
        sampling.set_missed_tick_behavior(MissedTickBehavior::Delay);
        if self.stop_when_targets_exit && !self.targets.is_empty() && self.idle() {
            return Ok(EndReason::TargetsExited);
        }
        loop {
            let wake = tokio::select! {
                r = self.source.ready() => {
                    r.map_err(io_err("reading the ring buffer"))?;
                    Wake::Events { backlog: true }
                }
                _ = drain.tick() => Wake::Events { backlog: false },
                _ = sampling.tick() => Wake::Sample,
                _ = async { deadlock_check.as_mut().expect("guarded").tick().await }, if deadlock_check.is_some() => Wake::DeadlockCheck,
                _ = async { ticker.as_mut().expect("guarded").tick().await }, if ticker.is_some() => Wake::Tick,
                _ = async { tokio::time::sleep_until(deadline.expect("guarded")).await }, if deadline.is_some() => Wake::Stop(EndReason::Duration),
                r = &mut stop => Wake::Stop(r),
                Some(key) = self.exits.1.recv() => Wake::Exited(key),
                Some(c) = self.commands.1.recv() => Wake::Command(c),
            };
            match wake {
                Wake::Events { backlog } => {
                    // Raised before draining: a reader starved by the target's threads
                    // would otherwise take its time over the very drain that must
                    // catch up.
                    if backlog {
                        self.catch_up.update(true);
                    }
                    self.drain(BATCH);
                    self.catch_up.update(self.source.behind());
                    self.follow();
                }
                Wake::Tick => {
                    self.drain(usize::MAX);
                    self.take_left(self.all_pids(), false);
                    self.publish(true);
                }
                Wake::DeadlockCheck => {
                    if self.check_deadlocks()
                        && self.config.deadlocks.on_deadlock == crate::config::OnDeadlock::Exit
                    {
                        return Ok(EndReason::Deadlock);
                    }
                }
                Wake::Sample => {
                    let alive = self.all_pids();
                    if let Some(s) = &mut self.sampler {
                        s.sample(
                            monotonic_ns(),
                            alive.iter().copied(),
                            &mut self.state.analyses,
                        );
                    }
                    self.take_left(alive, false);
                    // A release put off by `release_after` comes due here.
                    if self.idle_since.is_some() {
                        self.release_if_idle();
                    }
                    if ticker.is_none() {
                        self.publish(false);
                    }
                }
                Wake::Stop(r) => return Ok(r),
                Wake::Exited(key) => {
                    if self.exited(key)? {
                        return Ok(EndReason::TargetsExited);
                    }
                }
                Wake::Command(Command::Add(targets, reply)) => {
                    let _ = reply.send(self.add_targets(targets));
                }
                Wake::Command(Command::Remove(pid)) => self.remove_target(pid),
                Wake::Command(Command::Forget(pids)) => self.forget(&pids),
                Wake::Command(Command::Stop(r)) => return Ok(r),
                Wake::Command(Command::Admit(pid, admit, start)) => self.admit(pid, admit, start),
                Wake::Command(Command::Profile(ask, reply)) => {
                    let _ = reply.send(self.profile(ask));
                }
            }
        }
    }

    /// A target exited; returns whether the run is over.
    fn exited(&mut self, (pid, start): super::ProcKey) -> Result<bool, EngineError> {
        // Its last events are already in the ring buffer; its usage is still readable
        // until it is reaped.
        let alive = self.all_pids();
        if let Some(s) = &mut self.sampler {
            s.sample(monotonic_ns(), alive.into_iter(), &mut self.state.analyses);
        }
        self.drain(usize::MAX);
        let Some(t) = self
            .targets
            .iter_mut()
            .find(|t| t.info.pid == pid && t.start == start && t.live)
        else {
            // Already retired (its pid traced again).
            return Ok(false);
        };
        let ended = if t.launched.is_some() {
            let e = wait_child(pid)?;
            t.exit = Some(e);
            match e {
                ChildExit::Code(c) => format!("exit {c}"),
                ChildExit::Signal(s) => format!("signal {s}"),
            }
        } else {
            "exited".to_owned()
        };
        t.info.ended = Some(ended);
        // Its address space is gone, and its probes with it; the links are released
        // with the others at the end, or when a daemon forgets it. It leaves the
        // in-kernel filter now (its pid may be used again).
        t.live = false;
        self.state.ended.insert(pid);
        self.source.stop(&[pid]);
        if self.stop_when_targets_exit {
            return Ok(self.targets.iter().all(|t| !t.live));
        }
        self.release_if_idle();
        Ok(false)
    }
}
