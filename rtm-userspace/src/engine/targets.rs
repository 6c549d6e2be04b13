//! Adding and removing targets while the engine runs: the kernel side is loaded with
//! the first target and released, after `release_after`, when none is left.

use std::time::{SystemTime, UNIX_EPOCH};

use tokio::time::Instant;

use super::{Engine, EngineError, Start, Target, Traced, exits, sampler::Sampler};
use crate::{output::TargetInfo, proc::process::monotonic_ns};

impl Engine {
    /// Starts tracing `targets`: loads the kernel side if nothing was traced, attaches,
    /// and counts their threads from now. Must run inside the tokio runtime (exits are
    /// watched there).
    pub fn add_targets(&mut self, targets: Vec<Target>) -> Result<Vec<TargetInfo>, EngineError> {
        let first_load = self.targets.iter().all(|t| !t.live) && self.followed.is_empty();
        // Not idle any more: a later idle spell lingers its whole time again.
        self.idle_since = None;
        let starts = self.retire_reused(&targets);
        let infos = self.source.attach(&targets)?;
        self.state.analyses.attached(&*self.source);
        let timed = self.source.timed_functions();
        if timed.len() != self.timed_functions {
            self.timed_functions = timed.len();
            for s in self.sinks.iter_mut() {
                s.sink.functions(&timed);
            }
        }
        let now = monotonic_ns();
        self.start.get_or_insert_with(|| Start {
            ns: now,
            // The trace lasts the duration from here, however long the setup below
            // takes (per-thread counters of thousands of threads take seconds).
            instant: Instant::now(),
            unix_ms: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_millis() as u64)
                .unwrap_or(0),
        });
        if self.sample_system {
            let config = &self.config;
            let sampler = self.sampler.get_or_insert_with(|| Sampler::new(config));
            for info in &infos {
                sampler.add_process(info.pid);
            }
            sampler.sample(now, infos.iter().map(|i| i.pid), &mut self.state.analyses);
        }
        if first_load {
            // Loading the programs parsed the kernel's BTF and the target's libraries:
            // several MiB freed but still resident in the heap. Hand them back before
            // tracing. From here blocks up to 4 MiB come from the heap, about where
            // glibc's own threshold stood after one BTF parse: the model's many
            // mid-sized blocks each mapped afresh (and faulted in page by page) slowed
            // the reader enough to lose events in a 64-thread burst, while its largest
            // tables, mapped, go back to the system when they grow.
            // SAFETY: malloc_trim only releases free memory; mallopt only tunes the
            // allocator.
            unsafe {
                libc::malloc_trim(0);
                libc::mallopt(libc::M_MMAP_THRESHOLD, 4 * 1024 * 1024);
            }
        }
        self.state.eager_maps = !self.source.records_mappings();
        for info in &infos {
            let Some(t) = targets.iter().find(|t| t.pid == info.pid) else {
                continue;
            };
            self.state.model.trace_process(t.pid);
            if t.launched.is_none() {
                self.state.add_threads(t.pid, now);
            }
            if t.follow_forks {
                self.following.insert(t.pid);
            }
            let start = starts.get(&t.pid).copied().unwrap_or(0);
            exits::watch(t.pid, (t.pid, start), self.exits.0.clone());
            self.targets.retain(|old| old.info.pid != t.pid);
            self.targets.push(Traced {
                start,
                info: info.clone(),
                launched: t.launched.clone(),
                live: true,
                exit: None,
            });
        }
        Ok(infos)
    }

    /// Stops tracing `pid` and the processes followed from it; with nothing left, the
    /// kernel side is released.
    pub fn remove_target(&mut self, pid: u32) {
        let mut pids = vec![pid];
        pids.extend(
            self.followed
                .iter()
                .filter(|(_, root)| *root == pid)
                .map(|(p, _)| *p),
        );
        self.source.stop(&pids);
        self.drain(usize::MAX);
        self.take_left(pids.clone(), true);
        self.followed.retain(|(p, _)| !pids.contains(p));
        for p in &pids {
            self.following.remove(p);
        }
        for t in self.targets.iter_mut().filter(|t| t.info.pid == pid) {
            if t.live {
                t.live = false;
                t.info.ended.get_or_insert_with(|| "removed".into());
            }
        }
        self.release_if_idle();
    }

    pub(super) fn idle(&self) -> bool {
        self.targets.iter().all(|t| !t.live) && self.followed.is_empty()
    }

    /// With nothing left to trace (and more to come), the kernel side goes, once it has
    /// been idle for `release_after`: what is in flight is read first.
    pub(super) fn release_if_idle(&mut self) {
        if !self.idle() || self.stop_when_targets_exit || !self.source.is_live() {
            self.idle_since = None;
            return;
        }
        let since = *self.idle_since.get_or_insert_with(Instant::now);
        if since.elapsed() < self.release_after {
            return;
        }
        self.idle_since = None;
        let all = self.all_pids();
        self.source.stop(&all);
        self.drain(usize::MAX);
        self.take_left(all, true);
        self.source.release();
    }

    /// Every process traced: the targets (live or not) and the followed processes.
    pub(super) fn all_pids(&self) -> Vec<u32> {
        self.targets
            .iter()
            .map(|t| t.info.pid)
            .chain(self.followed.iter().map(|(p, _)| *p))
            .collect()
    }
}
