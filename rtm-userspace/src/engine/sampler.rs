//! The sampling side of a trace: system statistics and performance counters, read on
//! their own timer beside the event stream.

use crate::{
    analyses::{
        Analyses,
        system::{CounterReadings, Sample},
    },
    config::TraceConfig,
    readers::{ambient::AmbientReader, counters::Counters},
};

/// Reads the system and the counters, and hands each sample to the analyses
/// (`analyses/system/` keeps the model of them).
pub struct Sampler {
    reader: AmbientReader,
    counters: Counters,
    /// Counters this machine cannot count are said on stderr too (`-v`); the report
    /// says them once either way. Set once said, or from the start without `-v`.
    told_unavailable: bool,
    /// The traced processes get counters of their own (`--target-counters`).
    per_target: bool,
}

impl Sampler {
    /// Opens per-CPU counters and takes the first sample.
    pub fn new(config: &TraceConfig) -> Self {
        let cpus: Vec<u32> = crate::proc::host::online_cpus()
            .unwrap_or_default()
            .into_iter()
            .map(|c| c as u32)
            .collect();
        let counters = Counters::new(config.counters.0.clone(), &cpus);
        Self {
            reader: AmbientReader::default(),
            counters,
            // A VM has no hardware counters: a warning on every run there said nothing
            // the report does not.
            told_unavailable: !config.verbose,
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

    /// Samples everything now (`pids`: the traced processes), for `analyses`.
    pub fn sample(
        &mut self,
        now_ns: u64,
        pids: impl Iterator<Item = u32>,
        analyses: &mut Analyses,
    ) {
        let pids: Vec<u32> = pids.collect();
        let system = self.reader.sample(now_ns, &pids);
        for p in self.reader.new_problems.drain(..) {
            crate::say!("rtm-trace: {p}");
        }
        let readings = self.counters.read();
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
        analyses.sampled(&Sample {
            system,
            counters: CounterReadings {
                events: self.counters.events().to_vec(),
                unavailable: self.counters.unavailable(),
                readings,
                threads_not_counted: self.counters.threads_not_counted,
                per_target: self.per_target,
            },
        });
    }
}
