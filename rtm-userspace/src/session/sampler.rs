//! The sampling side of a trace: system statistics and performance counters, read on
//! their own timer beside the event stream, and their thresholds from the config file.

use std::path::Path;

use super::SessionError;
use crate::{
    cli::Cli,
    model::{
        ambient::{Ambient, AmbientView},
        counters::CountersView,
        thresholds::Thresholds,
    },
    readers::{
        ambient::{AmbientReader, ticks_per_second},
        counters::{Counters, Reading, Scope},
    },
};

/// The thresholds a config file's text sets (a TOML `[thresholds]` table), checked.
pub fn parse_config(text: &str) -> Result<Thresholds, String> {
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct ConfigFile {
        #[serde(default)]
        thresholds: Thresholds,
    }
    let t = toml::from_str::<ConfigFile>(text)
        .map(|c| c.thresholds)
        .map_err(|e| e.to_string())?;
    t.validate()?;
    Ok(t)
}

/// Thresholds from `path` (a TOML file with a `[thresholds]` table), or the defaults.
pub fn thresholds(path: Option<&Path>) -> Result<Thresholds, SessionError> {
    let Some(path) = path else {
        return Ok(Thresholds::default());
    };
    let config_err = |message: String| SessionError::Config {
        path: path.display().to_string(),
        message,
    };
    let text = super::input::read_text(path, super::input::MAX_CONFIG_BYTES)
        .map_err(|e| config_err(format!("cannot read it: {e}")))?;
    parse_config(&text).map_err(config_err)
}

/// Reads the system and the counters; keeps the model of them.
pub struct Sampler {
    reader: AmbientReader,
    model: Ambient,
    counters: Counters,
    last: Vec<(Scope, &'static str, Reading)>,
    told_unavailable: bool,
}

impl Sampler {
    /// Opens per-CPU counters and takes the first sample.
    pub fn new(cli: &Cli, thresholds: Thresholds, start_ns: u64) -> Self {
        let cpus: Vec<u32> = crate::readers::mappings::online_cpus()
            .unwrap_or_default()
            .into_iter()
            .map(|c| c as u32)
            .collect();
        let counters = Counters::new(cli.counters.0.clone(), &cpus);
        Self {
            reader: AmbientReader::default(),
            model: Ambient::new(
                start_ns,
                cli.sample_every().as_nanos() as u64,
                ticks_per_second(),
                thresholds,
            ),
            counters,
            last: Vec::new(),
            told_unavailable: false,
        }
    }

    /// Counts a traced process. A launched one has a single thread yet, and the
    /// counters it inherits cover every thread it will create.
    pub fn add_process(&mut self, pid: u32) {
        let tids = crate::target::process::thread_ids(pid);
        self.counters.add_process(pid, &tids);
    }

    /// Gives a new thread counters of its own.
    pub fn add_thread(&mut self, pid: u32, tid: u32) {
        self.counters.add_thread(pid, tid);
    }

    /// Samples everything now (`pids`: the traced processes).
    pub fn sample(&mut self, now_ns: u64, pids: impl Iterator<Item = u32>) {
        let pids: Vec<u32> = pids.collect();
        let s = self.reader.sample(now_ns, &pids);
        for p in self.reader.new_problems.drain(..) {
            crate::say!("rtm-trace: {p}");
        }
        self.model.push(s);
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

    /// What the outputs show.
    pub fn views(&self) -> (AmbientView, CountersView) {
        (
            self.model.view(),
            CountersView::build(
                self.counters.events(),
                self.counters.unavailable(),
                &self.last,
                self.counters.threads_not_counted,
            ),
        )
    }
}

/// Property tests: any config text is accepted or refused with a message, never a panic,
/// and what is accepted holds only valid numbers.
#[cfg(test)]
mod fuzz {
    use proptest::prelude::*;

    use super::*;

    const KEYS: [&str; 8] = [
        "cpu_busy_pct",
        "run_queue_per_cpu",
        "swap_pages_per_s",
        "mem_available_pct",
        "disk_busy_pct",
        "packet_drops",
        "steal_pct",
        "stall_pct",
    ];

    proptest! {
        #[test]
        fn any_text_is_accepted_or_refused(text in "[ -~\\n]{0,200}") {
            let _ = parse_config(&text);
        }

        #[test]
        fn any_values_are_checked(
            values in prop::collection::vec(
                (0..KEYS.len(), prop_oneof![
                    Just("nan".to_owned()), Just("inf".to_owned()), Just("-inf".to_owned()),
                    any::<f64>().prop_map(|v| format!("{v:?}")),
                    any::<i64>().prop_map(|v| v.to_string()),
                    "[a-z\"]{0,5}",
                ]),
                0..8,
            )
        ) {
            let mut text = String::from("[thresholds]\n");
            let mut seen = std::collections::HashSet::new();
            for (k, v) in &values {
                if seen.insert(k) {
                    text.push_str(&format!("{} = {v}\n", KEYS[*k]));
                }
            }
            if let Ok(t) = parse_config(&text) {
                prop_assert!(t.validate().is_ok());
                for v in [t.cpu_busy_pct, t.run_queue_per_cpu, t.stall_pct, t.steal_pct] {
                    prop_assert!(v.is_finite() && v >= 0.0);
                }
            }
        }
    }

    #[test]
    fn bad_values_are_refused_by_name() {
        let e = parse_config("[thresholds]\nsteal_pct = -1\n").unwrap_err();
        assert!(e.contains("thresholds.steal_pct"), "{e}");
        let e = parse_config("[thresholds]\nstall_pct = nan\n").unwrap_err();
        assert!(e.contains("thresholds.stall_pct = NaN"), "{e}");
        let e = parse_config("[thresholds]\ncpu_busy_pct = 250\n").unwrap_err();
        assert!(e.contains("at most 100"), "{e}");
        let e = parse_config("[thresholds]\ncpu_busy = 5\n").unwrap_err();
        assert!(e.contains("cpu_busy"), "{e}");
        assert_eq!(parse_config("").unwrap(), Thresholds::default());
    }
}
