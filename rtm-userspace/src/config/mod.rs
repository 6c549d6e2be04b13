//! What a trace is: a plain description of the mode, the targets and how to find them,
//! limits, intervals, thresholds, counters and outputs. The command line (`cli.rs`)
//! builds one, or a TOML file gives one (`--config FILE`, docs/config.md), or a daemon
//! makes one in code; nothing below the front ends sees clap. Checked once, by
//! [`TraceConfig::validate`], with the same rules whichever way it was made.
//!
//! This file holds the config's sections and their defaults; `stacks` holds the call
//! stack settings, `validate` the checks and the TOML reader, `agent` the agent's
//! section.

use std::{ffi::OsString, path::PathBuf, time::Duration};

use serde::{Deserialize, Serialize};

use crate::model::Limits;

pub(crate) mod agent;
mod stacks;
pub(crate) mod thresholds;
mod validate;

use thresholds::Thresholds;

pub use agent::AgentConfig;
pub use stacks::{StackRate, StacksConfig, check_stack_bytes};
pub use validate::{
    ConfigError, INTERVAL_SECS, MAX_DURATION_SECS, MAX_RING_BYTES, MAX_TOP, check_ring_bytes,
    secs_in,
};

/// What the probes watch.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Only contended waits, from the futex system calls: nothing on the fast path,
    /// cheap enough for production. Waits are keyed by the futex word (for a mutex, its
    /// address) and name the thread whose wake ended them. Uncontended acquisitions,
    /// hold times and which pthread call waited are not seen.
    #[default]
    Contention,
    /// Every pthread call, with uprobes: exact counts, hold times, condition variables,
    /// barriers, rwlocks, spinlocks, semaphores, create/join. About a microsecond per call.
    Full,
}

impl Mode {
    /// Its name, as the command line and the JSON write it.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Contention => "contention",
            Mode::Full => "full",
        }
    }
}

/// A whole trace's description. Every field may be left out of a config file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TraceConfig {
    /// Contended waits only, or every pthread call.
    pub mode: Mode,
    /// What to trace.
    pub targets: Targets,
    /// Trace the processes the targets fork. None: yes when launching a command.
    pub follow: Option<bool>,
    /// Probe MPI libraries. None: in full mode yes, in contention mode no.
    pub mpi: Option<bool>,
    /// Full mode: probe every pthread function, not only those the program imports.
    pub probe_all: bool,
    /// Stop after this long (seconds in a file). None: until stopped or the targets exit.
    #[serde(with = "secs")]
    pub duration: Option<Duration>,
    /// Summarize at this interval (seconds in a file); also the sampling interval.
    #[serde(with = "secs")]
    pub interval: Option<Duration>,
    /// Performance counters, by `perf list` name.
    pub counters: CounterList,
    /// Count them for the traced processes too, with per-task perf events (each of
    /// their context switches then pays for switching the perf contexts). Otherwise
    /// per CPU only; the processes' CPU time and context switches come from /proc.
    pub target_counters: bool,
    /// When an interval of the system statistics counts as trouble.
    pub thresholds: Thresholds,
    /// Caps on the tracer's memory.
    pub limits: LimitsConfig,
    /// Where results go.
    pub output: OutputConfig,
    /// Call stacks of contended waits.
    pub stacks: StacksConfig,
    /// Functions of the targets to time (`--func`).
    pub functions: FunctionsConfig,
    /// Live deadlock detection.
    pub deadlocks: DeadlocksConfig,
    /// Contention mode: also see futex waits at their system call's entry, so that those
    /// that return without sleeping (the word had changed) are counted. Every system
    /// call on the machine then runs a program (~50 ns here).
    pub unslept: bool,
    /// Measure the eBPF programs and maps (the kernel's BPF statistics).
    pub bpf_stats: bool,
    /// Say where each probe went and what the tracer is doing.
    pub verbose: bool,
    /// `rtm-trace agent`'s settings (the one-shot command ignores them).
    pub agent: AgentConfig,
}

impl Default for TraceConfig {
    fn default() -> Self {
        Self {
            mode: Mode::Contention,
            targets: Targets::default(),
            follow: None,
            mpi: None,
            probe_all: false,
            duration: None,
            interval: None,
            counters: CounterList::default(),
            thresholds: Thresholds::default(),
            limits: LimitsConfig::default(),
            output: OutputConfig::default(),
            stacks: StacksConfig::default(),
            functions: FunctionsConfig::default(),
            deadlocks: DeadlocksConfig::default(),
            target_counters: false,
            unslept: false,
            bpf_stats: false,
            verbose: false,
            agent: AgentConfig::default(),
        }
    }
}

/// The processes to trace: given, found by name, or launched.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Targets {
    /// Processes by id.
    pub pids: Vec<u32>,
    /// Every process whose command name or program file name is one of these.
    pub comms: Vec<String>,
    /// A command to launch and trace from its first instruction.
    #[serde(with = "args")]
    pub command: Vec<OsString>,
    /// Only these threads of the processes traced (empty: all), in the kernel.
    pub tids: Vec<u32>,
    /// Only what happens on these CPUs (empty: all), in the kernel: a call or wait
    /// counts where it started.
    pub cpus: Vec<u32>,
}

/// Functions of the targets to time: entry and return probes on each.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FunctionsConfig {
    /// `SYMBOL`, `SYMBOL@MODULE`, or globs of them (`cache_*@libfoo`).
    pub time: Vec<String>,
    /// Most functions probed (a glob matching more is refused).
    pub max_functions: usize,
    /// Most (process, thread, function) rows kept; calls past it are counted.
    pub max_rows: usize,
}

/// Most (process, thread, function) rows of timed functions kept by default.
pub const DEFAULT_MAX_FUNC_ROWS: usize = 4096;

impl Default for FunctionsConfig {
    fn default() -> Self {
        Self {
            time: Vec::new(),
            max_functions: crate::probes::funcs::DEFAULT_MAX_FUNCS,
            max_rows: DEFAULT_MAX_FUNC_ROWS,
        }
    }
}

/// Live deadlock detection: every quarter second, the threads asleep in a futex wait
/// for a while, the holders of their mutexes, and the cycles among them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DeadlocksConfig {
    /// Look for them.
    pub detect: bool,
    /// What to do when one is found.
    pub on_deadlock: OnDeadlock,
}

impl Default for DeadlocksConfig {
    fn default() -> Self {
        Self {
            detect: true,
            on_deadlock: OnDeadlock::Report,
        }
    }
}

/// What a one-shot trace does when it finds a deadlock.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnDeadlock {
    /// Say it on stderr at once and keep tracing (it is in the results).
    #[default]
    Report,
    /// Say it, stop tracing and write the results (exit code 3).
    Exit,
}

/// Most functions `--func` may time.
pub const MAX_FUNCTIONS: usize = 1024;

/// Caps on what the tracer keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LimitsConfig {
    /// Ring buffer bytes (a power of two, 4096 to 1 GiB).
    pub ring_bytes: u32,
    /// Most distinct objects tracked.
    pub max_objects: usize,
    /// Most distributions that keep percentiles.
    pub max_histograms: usize,
    /// Entries of the kernel's map of summed futex waits (one per waiter, word, waker
    /// and outcome; ~0.7 KiB each). Waits past it are sent one by one (counted).
    pub futex_sums: u32,
}

impl Default for LimitsConfig {
    fn default() -> Self {
        let l = Limits::default();
        Self {
            ring_bytes: rtm_common::names::DEFAULT_RING_BYTES,
            max_objects: l.max_objects,
            max_histograms: l.max_histograms,
            futex_sums: rtm_common::names::DEFAULT_AGG_ENTRIES,
        }
    }
}

/// Where the results go.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OutputConfig {
    /// The text report's file (None: standard output).
    pub report: Option<PathBuf>,
    /// The JSON document's file (None: not written).
    pub json: Option<PathBuf>,
    /// Rows per table in the report.
    pub top: usize,
    /// The Perfetto timeline's file (None: not written).
    pub timeline: Option<PathBuf>,
    /// Show the live terminal view while tracing (the report is printed when it ends).
    pub live: bool,
    /// The HTML report's file (None: not written).
    pub html: Option<PathBuf>,
    /// The Graphviz DOT file of the sync and rank graphs (None: not written).
    pub dot: Option<PathBuf>,
    /// The timeline's size cap, MiB: events past it are counted, not written.
    pub timeline_max_mb: u64,
}

impl Default for OutputConfig {
    fn default() -> Self {
        Self {
            report: None,
            json: None,
            top: 10,
            timeline: None,
            live: false,
            html: None,
            dot: None,
            timeline_max_mb: DEFAULT_TIMELINE_MB,
        }
    }
}

/// The timeline's default size cap, MiB.
pub const DEFAULT_TIMELINE_MB: u64 = 1024;
/// Its largest cap, MiB (1 TiB).
pub const MAX_TIMELINE_MB: u64 = 1 << 20;

impl TraceConfig {
    /// How often system statistics and counters are sampled (and the engine ticks
    /// without an interval).
    pub fn sample_every(&self) -> Duration {
        self.interval.unwrap_or(Duration::from_secs(1))
    }

    /// Whether MPI libraries are probed: in full mode unless turned off, in contention
    /// mode (which must stay cheap for programs that poll MPI a million times a second)
    /// only when asked for.
    pub fn probe_mpi(&self) -> bool {
        self.mpi.unwrap_or(self.mode == Mode::Full)
    }

    /// Whether the targets' forked processes are traced: by default when launching.
    pub fn follow_forks(&self) -> bool {
        self.follow.unwrap_or(!self.targets.command.is_empty())
    }

    /// The model's caps.
    pub fn model_limits(&self) -> Limits {
        Limits {
            max_objects: self.limits.max_objects,
            max_histograms: self.limits.max_histograms,
            ..Limits::default()
        }
    }
}

/// The counters to read, as `perf list` names ("default" for all known, "none").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CounterList(pub Vec<&'static str>);

impl Default for CounterList {
    fn default() -> Self {
        Self(crate::readers::counters::parse_list("default").unwrap_or_default())
    }
}

impl std::str::FromStr for CounterList {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        crate::readers::counters::parse_list(s)
            .map(CounterList)
            .map_err(|e| e.to_string())
    }
}

impl Serialize for CounterList {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if self.0.is_empty() {
            s.serialize_str("none")
        } else {
            s.serialize_str(&self.0.join(","))
        }
    }
}

impl<'de> Deserialize<'de> for CounterList {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Form {
            One(String),
            Many(Vec<String>),
        }
        let text = match Form::deserialize(d)? {
            Form::One(s) => s,
            Form::Many(v) if v.is_empty() => "none".to_owned(),
            Form::Many(v) => v.join(","),
        };
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// Durations as seconds in a file (`duration = 2.5`).
mod secs {
    use std::time::Duration;

    use serde::{Deserialize as _, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => s.serialize_some(&d.as_secs_f64()),
            None => s.serialize_none(),
        }
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<Duration>, D::Error> {
        let v = f64::deserialize(d)?;
        super::secs_in(v, f64::MIN_POSITIVE, f64::MAX)
            .map(Some)
            .map_err(serde::de::Error::custom)
    }
}

/// A command's arguments as strings in a file (the command line may give any bytes).
mod args {
    use std::ffi::OsString;

    use serde::{Deserialize as _, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(a: &[OsString], s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(a.iter().map(|a| a.to_string_lossy()))
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<OsString>, D::Error> {
        Ok(Vec::<String>::deserialize(d)?
            .into_iter()
            .map(OsString::from)
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_whole_trace_is_described_in_toml() {
        let c = TraceConfig::from_toml(
            r#"
            mode = "full"
            duration = 2.5
            interval = 1
            counters = ["task-clock", "context-switches"]
            follow = false
            [targets]
            comms = ["app"]
            pids = [12, 13]
            [limits]
            ring_bytes = 16777216
            max_objects = 500
            [output]
            json = "out.json"
            top = 5
            [thresholds]
            cpu_busy_pct = 30
            "#,
        )
        .unwrap();
        assert_eq!(c.mode, Mode::Full);
        assert_eq!(c.duration, Some(Duration::from_millis(2500)));
        assert_eq!(c.counters.0, vec!["task-clock", "context-switches"]);
        assert_eq!(c.targets.pids, vec![12, 13]);
        assert_eq!(c.limits.ring_bytes, 1 << 24);
        assert_eq!(c.model_limits().max_objects, 500);
        assert_eq!(
            c.output.json.as_deref(),
            Some(std::path::Path::new("out.json"))
        );
        assert_eq!(c.thresholds.cpu_busy_pct, 30.0);
        assert!(!c.follow_forks());
        assert!(c.probe_mpi(), "full mode probes MPI unless told not to");
        // What it does not say keeps the defaults.
        assert_eq!(c.limits.max_histograms, Limits::default().max_histograms);
        assert_eq!(c.output.report, None);
        // And it comes back the same through serde.
        let again = TraceConfig::from_toml(&toml::to_string(&c).unwrap()).unwrap();
        assert_eq!(again, c);
    }

    #[test]
    fn the_documented_example_is_a_valid_config() {
        let doc = include_str!("../../../docs/config.md");
        let block = doc
            .split("```toml\n")
            .nth(1)
            .and_then(|b| b.split("```").next())
            .expect("docs/config.md has a toml block");
        let c = TraceConfig::from_toml(block).unwrap();
        assert_eq!(c.targets.comms, vec!["solver"]);
        assert_eq!(c.limits, LimitsConfig::default());
        assert_eq!(c.thresholds, Thresholds::default());
        assert_eq!(c.counters, CounterList::default());
        assert_eq!(c.interval, Some(Duration::from_secs(1)));
    }

    #[test]
    fn bad_values_are_refused_by_name() {
        for (text, says) in [
            ("duration = -1", "positive"),
            ("duration = nan", "positive"),
            ("interval = 0.001", "interval"),
            ("[limits]\nring_bytes = 5000", "limits.ring_bytes"),
            ("[output]\ntop = 0", "output.top"),
            ("[targets]\npids = [5, 5]", "targets.pids"),
            ("[thresholds]\nsteal_pct = -1", "thresholds.steal_pct"),
            ("counters = \"cycels\"", "unknown counter"),
            ("mode = \"fast\"", "unknown variant"),
            ("color = true", "unknown field `color`"),
            ("[targets]\nuid = 0", "unknown field `uid`"),
        ] {
            let e = TraceConfig::from_toml(text).unwrap_err();
            assert!(e.contains(says), "{text}: {e}");
        }
        assert_eq!(TraceConfig::from_toml("").unwrap(), TraceConfig::default());
    }

    #[test]
    fn defaults_follow_the_mode_and_the_targets() {
        let mut c = TraceConfig::default();
        assert!(!c.probe_mpi() && !c.follow_forks());
        c.targets.command = vec!["ls".into()];
        assert!(
            c.follow_forks(),
            "a launched command's children are followed"
        );
        c.follow = Some(false);
        assert!(!c.follow_forks());
        c.mode = Mode::Full;
        assert!(c.probe_mpi());
        c.mpi = Some(false);
        assert!(!c.probe_mpi());
        assert_eq!(c.sample_every(), Duration::from_secs(1));
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

    const TOP: [&str; 6] = [
        "duration",
        "interval",
        "mode",
        "counters",
        "follow",
        "probe_all",
    ];

    proptest! {
        #[test]
        fn any_text_is_accepted_or_refused(text in "[ -~\\n]{0,200}") {
            let _ = TraceConfig::from_toml(&text);
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
            ),
            top in prop::collection::vec(
                (0..TOP.len(), prop_oneof![
                    Just("nan".to_owned()), Just("1e300".to_owned()), Just("true".to_owned()),
                    any::<f64>().prop_map(|v| format!("{v:?}")),
                    "\"[a-z,-]{0,12}\"",
                ]),
                0..4,
            ),
        ) {
            let mut text = String::new();
            let mut seen = std::collections::HashSet::new();
            for (k, v) in &top {
                if seen.insert(*k) {
                    text.push_str(&format!("{} = {v}\n", TOP[*k]));
                }
            }
            text.push_str("[thresholds]\n");
            let mut seen = std::collections::HashSet::new();
            for (k, v) in &values {
                if seen.insert(k) {
                    text.push_str(&format!("{} = {v}\n", KEYS[*k]));
                }
            }
            if let Ok(c) = TraceConfig::from_toml(&text) {
                prop_assert!(c.validate().is_ok());
                let t = &c.thresholds;
                for v in [t.cpu_busy_pct, t.run_queue_per_cpu, t.stall_pct, t.steal_pct] {
                    prop_assert!(v.is_finite() && v >= 0.0);
                }
                if let Some(d) = c.duration {
                    prop_assert!(d.as_secs_f64() <= MAX_DURATION_SECS);
                }
            }
        }
    }

    #[test]
    fn bad_thresholds_are_refused_by_name() {
        let e = TraceConfig::from_toml("[thresholds]\nsteal_pct = -1\n").unwrap_err();
        assert!(e.contains("thresholds.steal_pct"), "{e}");
        let e = TraceConfig::from_toml("[thresholds]\nstall_pct = nan\n").unwrap_err();
        assert!(e.contains("thresholds.stall_pct = NaN"), "{e}");
        let e = TraceConfig::from_toml("[thresholds]\ncpu_busy_pct = 250\n").unwrap_err();
        assert!(e.contains("at most 100"), "{e}");
        let e = TraceConfig::from_toml("[thresholds]\ncpu_busy = 5\n").unwrap_err();
        assert!(e.contains("cpu_busy"), "{e}");
        assert_eq!(
            TraceConfig::from_toml("").unwrap().thresholds,
            Thresholds::default()
        );
    }
}
