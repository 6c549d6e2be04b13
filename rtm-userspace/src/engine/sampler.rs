//! The sampling side of a trace: system statistics and performance counters, read on
//! their own timer beside the event stream.

use crate::{
    config::TraceConfig,
    model::system::{
        ambient::{Ambient, AmbientView},
        counters::CountersView,
        interval::Interval,
    },
    readers::{
        ambient::{AmbientReader, ticks_per_second},
        counters::{Counters, Reading, Scope},
    },
};

/// Reads the system and the counters; keeps the model of them.
pub struct Sampler {
    reader: AmbientReader,
    model: Ambient,
    counters: Counters,
    last: Vec<(Scope, &'static str, Reading)>,
    /// Counters this machine cannot count are said on stderr too (`-v`); the report
    /// says them once either way. Set once said, or from the start without `-v`.
    told_unavailable: bool,
    /// The last interval closed.
    latest: Option<Interval>,
    /// The traced processes get counters of their own (`--target-counters`).
    per_target: bool,
}

impl Sampler {
    /// Opens per-CPU counters and takes the first sample.
    pub fn new(config: &TraceConfig, start_ns: u64) -> Self {
        let cpus: Vec<u32> = crate::proc::host::online_cpus()
            .unwrap_or_default()
            .into_iter()
            .map(|c| c as u32)
            .collect();
        let counters = Counters::new(config.counters.0.clone(), &cpus);
        Self {
            reader: AmbientReader::default(),
            model: Ambient::new(
                start_ns,
                config.sample_every().as_nanos() as u64,
                ticks_per_second(),
                config.thresholds.clone(),
            ),
            counters,
            last: Vec::new(),
            // A VM has no hardware counters: a warning on every run there said nothing
            // the report does not.
            told_unavailable: !config.verbose,
            latest: None,
            per_target: config.target_counters,
        }
    }

    /// Counts a traced process. A launched one has a single thread yet, and the
    /// counters it inherits cover every thread it will create.
    pub fn add_process(&mut self, pid: u32) {
        // Per-task perf events put the perf contexts' switch on every context switch of
        // the target: 0.36x the throughput of a program whose critical sections yield
        // (0.84x without them; BENCHMARKS.md). Only when asked.
        if !self.per_target {
            return;
        }
        let tids = crate::proc::process::thread_ids(pid);
        self.counters.add_process(pid, &tids);
    }

    /// Gives a new thread counters of its own.
    pub fn add_thread(&mut self, pid: u32, tid: u32) {
        if !self.per_target {
            return;
        }
        self.counters.add_thread(pid, tid);
    }

    /// Forgets the processes `pids` (their counters, when they had any, were closed
    /// with them).
    pub fn forget(&mut self, pids: &std::collections::HashSet<u32>) {
        self.model.forget(pids);
    }

    /// Samples everything now (`pids`: the traced processes).
    pub fn sample(&mut self, now_ns: u64, pids: impl Iterator<Item = u32>) {
        let pids: Vec<u32> = pids.collect();
        let s = self.reader.sample(now_ns, &pids);
        for p in self.reader.new_problems.drain(..) {
            crate::say!("rtm-trace: {p}");
        }
        if let Some(closed) = self.model.push(s) {
            self.latest = Some(closed);
        }
        self.last = self.counters.read();
        if !self.told_unavailable {
            self.told_unavailable = true;
            let u = self.counters.unavailable();
            if !u.is_empty() {
                let names: Vec<&str> = u.iter().map(|u| u.event.as_str()).collect();
                crate::say!(
                    "rtm-trace: counters not available here: {} ({}); carrying on with the rest",
                    names.join(", "),
                    u[0].reason
                );
            }
        }
    }

    /// The last interval closed (for the published summary).
    pub fn latest(&self) -> Option<Interval> {
        self.latest.clone()
    }

    /// What the outputs show.
    pub fn views(&self) -> (AmbientView, CountersView) {
        (
            self.model.view(),
            CountersView::build(
                self.counters.events(),
                self.counters.unavailable(),
                &self.last,
                self.counters.threads_not_counted,
                self.per_target,
            ),
        )
    }
}
