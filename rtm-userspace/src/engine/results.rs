//! What the engine writes: the facts about the run, the window it covers, the snapshot
//! of the model with the sampler's views, and the final results at the end.

use super::{Engine, EngineError, Outcome, deadlocks, state::State};
use crate::{
    model::Window,
    output::{EndReason, RunInfo, sink::Moment},
    proc::process::{self, monotonic_ns},
};

impl Engine {
    /// Facts about the run so far.
    pub(super) fn run_info(&self, end_reason: Option<EndReason>) -> RunInfo {
        let mut losses = self.source.losses();
        losses.mapping_records = self.source.mapping_losses() + self.state.namer.dropped_mappings();
        let command = self
            .targets
            .iter()
            .find_map(|t| t.launched.as_ref())
            .map(|l| {
                l.argv
                    .iter()
                    .map(|a| a.to_string_lossy().into_owned())
                    .collect()
            });
        RunInfo {
            mode: self.config.mode,
            command,
            targets: self.targets.iter().map(|t| t.info.clone()).collect(),
            host: process::host_name(),
            started_unix_ms: self.start.map_or(0, |s| s.unix_ms),
            end_reason,
            losses,
            unprobed: self.source.unprobed(),
            missing_symbols: Vec::new(),
            reader: self.source.reader_stats(),
            tracer_max_rss_kib: None,
            bpf: None,
            collection: (self.config.mode == crate::config::Mode::Contention).then(|| {
                crate::output::Collection {
                    summed: self.config.output.timeline.is_none(),
                    syscall_entry: self.config.unslept || !self.source.sleep_entry(),
                    futex_functions: self.source.futex_functions(),
                    stack_rate: match self.config.stacks.rate {
                        _ if !self.config.stacks.enabled => Some(0),
                        crate::config::StackRate::All => None,
                        crate::config::StackRate::PerSecond(n) => Some(n),
                    },
                }
            }),
        }
    }

    pub(super) fn window(&self, end_ns: u64) -> Window {
        Window {
            start_ns: self.start.map_or(end_ns, |s| s.ns),
            end_ns,
        }
    }

    /// Stops collecting, takes what is in flight, writes every sink's results, and
    /// detaches. The run's error is the first sink failure (an interval's, then a
    /// final one's); every sink is written either way.
    pub fn finish(mut self, reason: EndReason) -> Result<Outcome, EngineError> {
        // Stop collecting at once, take what is in flight, and write the results; the
        // breakpoints themselves go afterwards, since unregistering them is slow.
        let all = self.all_pids();
        self.source.stop(&all);
        let end_ns = monotonic_ns();
        if let Some(s) = &mut self.sampler {
            s.sample(end_ns, all.iter().copied(), &mut self.state.analyses);
        }
        self.drain(usize::MAX);
        // The threads' last waits: exited threads sent theirs; the programs no longer
        // run for the others.
        self.take_left(all, true);
        for t in &mut self.targets {
            if t.info.comm.is_none() {
                t.info.comm = self.state.comms.get(&t.info.pid).cloned().or_else(|| {
                    t.launched.as_ref().and_then(|l| {
                        l.program
                            .file_name()
                            .map(|n| n.to_string_lossy().into_owned())
                    })
                });
            }
        }
        let mut run = self.run_info(Some(reason));
        if self.config.bpf_stats {
            run.bpf = self.source.bpf_stats();
        }
        self.state.model.settle_pending();
        let window = self.window(end_ns);
        let (snap, missing) = snapshot(&mut self.state, window, &*self.source, &self.deadlocks);
        run.missing_symbols = missing;
        let at = Moment {
            elapsed_ns: window.end_ns - window.start_ns,
            run: &run,
            snapshot: &snap,
        };
        // Each sink whatever became of the others: a failure of one must not cost
        // another.
        let mut first_error = None;
        let mut final_error = None;
        for s in self.sinks.iter_mut() {
            if let Err(e) = s.sink.finish(&at) {
                final_error.get_or_insert(e);
            }
            if let Some(e) = s.failed.take() {
                first_error.get_or_insert(e);
            }
        }
        drop(snap);
        self.source.release();
        if let Some(e) = first_error.or(final_error) {
            return Err(e.into());
        }
        Ok(Outcome {
            reason,
            exits: self
                .targets
                .iter()
                .filter_map(|t| t.exit.map(|e| (t.info.pid, e)))
                .collect(),
        })
    }
}

/// A snapshot of `state` with the deadlocks found, and the files whose symbols were
/// missing.
pub(super) fn snapshot<'s>(
    state: &'s mut State,
    window: Window,
    kernel: &dyn crate::analyses::Kernel,
    deadlocks: &deadlocks::Deadlocks,
) -> (crate::model::Snapshot<'s>, Vec<String>) {
    let (mut snap, missing) = state.snapshot(window, kernel);
    snap.deadlocks = deadlocks.found.clone();
    snap.cannot_tell = deadlocks.undecided.clone();
    // A deadlock's words by the names the rest of the snapshot gives them.
    for t in snap.deadlocks.iter_mut().flat_map(|d| d.threads.iter_mut()) {
        use rtm_common::Primitive;
        let named = [Primitive::Futex, Primitive::Mutex]
            .into_iter()
            .find_map(|primitive| {
                snap.objects.name(&crate::model::sync::ObjectKey {
                    pid: t.pid,
                    primitive,
                    addr: t.word,
                })
            });
        if let Some(n) = named {
            t.word_name = Some(n.to_owned());
        }
    }
    (snap, missing)
}
