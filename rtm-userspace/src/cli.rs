//! Command line. Validated up front so mistakes are reported before anything attaches.

use std::{ffi::OsString, path::PathBuf, time::Duration};

use clap::Parser;

use crate::model::Limits;

/// What the probes watch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Only contended waits, from the futex system calls: nothing on the fast path,
    /// cheap enough for production. Waits are keyed by the futex word (for a mutex, its
    /// address) and name the thread whose wake ended them. Uncontended acquisitions,
    /// hold times and which pthread call waited are not seen.
    Contention,
    /// Every pthread call, with uprobes: exact counts, hold times, condition variables,
    /// barriers, rwlocks, spinlocks, semaphores, create/join. About a microsecond per call.
    Full,
}

/// Attach to running processes (or launch one) and show where their threads wait on each
/// other: which locks are contended, for how long, by whom, and who they waited for.
#[derive(Debug, Parser)]
#[command(
    name = "rtm-trace",
    version,
    after_help = "EXAMPLES:\n  \
        sudo rtm-trace --pid 1234                 trace PID 1234 until Ctrl-C\n  \
        sudo rtm-trace -p 1234 -d 10 --json out.json   10 seconds, graph to out.json\n  \
        sudo rtm-trace -i 1 -- ./app --threads 8    launch ./app, summary every second\n  \
        rtm-trace merge a.json b.json             join MPI parts written on several nodes\n\n\
        Needs root (or CAP_BPF and CAP_PERFMON) and a kernel with BPF and uprobes.\n\
        The report goes to stdout (or --output); messages go to stderr."
)]
pub struct Cli {
    /// Process to trace (all its threads, including ones created later). Repeatable.
    #[arg(short, long = "pid", value_name = "PID")]
    pub pids: Vec<u32>,

    /// Trace every process whose command name (as ps shows it) or program file name is
    /// NAME, e.g. all ranks of an MPI job on this node. Repeatable; combines with --pid.
    #[arg(long = "comm", value_name = "NAME")]
    pub comms: Vec<String>,

    /// Stop after this many seconds (default: until Ctrl-C or the targets exit; at most
    /// a year).
    #[arg(short, long, value_name = "SECS", value_parser = parse_duration)]
    pub duration: Option<Duration>,

    /// Print a summary every SECS seconds while tracing (0.01 to 86400). System
    /// statistics and counters are sampled at this interval too (every second when it
    /// is not given).
    #[arg(short, long, value_name = "SECS", value_parser = parse_interval)]
    pub interval: Option<Duration>,

    /// Performance counters to read, by `perf list` name, comma-separated ("default"
    /// for all known, "none" for none). Ones this machine cannot count are reported.
    #[arg(long, value_name = "LIST", default_value = "default",
          value_parser = parse_counters)]
    pub counters: CounterList,

    /// A TOML file overriding the thresholds that flag trouble in the system
    /// (docs/config.md).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,

    /// Write the whole sync graph as JSON (format: docs/json-format.md).
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,

    /// Write the report to FILE instead of stdout.
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,

    /// Rows per table in the report.
    #[arg(long, value_name = "N", default_value_t = 10)]
    pub top: usize,

    /// Ring buffer size in bytes (a power of two, at least 4096; in contention mode shared by
    /// a ring per CPU, up to 4); raise it if events are lost.
    #[arg(long, value_name = "BYTES", default_value_t = rtm_common::names::DEFAULT_RING_BYTES,
          value_parser = parse_ring_size)]
    pub ring_size: u32,

    /// Most distinct mutexes tracked; events beyond are counted, not recorded.
    #[arg(long, value_name = "N", default_value_t = Limits::default().max_objects)]
    pub max_objects: usize,

    /// Most distributions that keep percentiles (1-16 KiB each); beyond, exact counts,
    /// totals, min and max only.
    #[arg(long, value_name = "N", default_value_t = Limits::default().max_histograms)]
    pub max_histograms: usize,

    /// What to trace: contended waits only (near-zero overhead), or every pthread call.
    #[arg(short, long, value_enum, default_value_t = Mode::Contention)]
    pub mode: Mode,

    /// Full mode: probe every pthread function, not only those the program and its
    /// libraries import (each probe costs ~0.1 s to remove at exit). Use it when the
    /// program loads libraries with dlopen after the trace starts.
    #[arg(long)]
    pub probe_all: bool,

    /// Also trace processes the targets fork (default in launch mode).
    #[arg(long)]
    pub follow: bool,

    /// Do not trace processes the targets fork.
    #[arg(long)]
    pub no_follow: bool,

    /// Probe the MPI library each traced process maps (or a launched command's ranks
    /// will load) in contention mode too: the task graph, at about 2 us per MPI call
    /// (full mode probes MPI unless --no-mpi).
    #[arg(long, conflicts_with = "no_mpi")]
    pub mpi: bool,

    /// Do not probe MPI libraries in full mode.
    #[arg(long)]
    pub no_mpi: bool,

    /// Measure the eBPF side: each program's runs and time per run (the kernel's BPF
    /// statistics, on for this run only) and each map's memory, in the report and JSON.
    #[arg(long)]
    pub bpf_stats: bool,

    /// Say where each probe went and what the tracer is doing.
    #[arg(short, long)]
    pub verbose: bool,

    /// Command to launch and trace from its first instruction (after `--`). rtm-trace exits
    /// with its exit code.
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<OsString>,
}

/// `rtm-trace merge`: join the parts several nodes wrote (--json) for one MPI job.
#[derive(Debug, Parser)]
#[command(
    name = "rtm-trace merge",
    version,
    about = "Join the task graphs several nodes wrote (rtm-trace --json) for one MPI job \
             into one cluster-wide task graph and report",
    after_help = "EXAMPLE:\n  \
        rtm-trace merge node1.json node2.json --json job.json\n\n\
        Parts of different jobs or format versions, or that trace one rank twice, are \
        refused."
)]
pub struct MergeCli {
    /// The parts: JSON files written by `rtm-trace --json` on each node.
    #[arg(required = true, value_name = "PART.json")]
    pub parts: Vec<PathBuf>,

    /// Write the merged task graph as JSON (format: docs/json-format.md).
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,

    /// Write the report to FILE instead of stdout.
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,

    /// Rows per table in the report.
    #[arg(long, value_name = "N", default_value_t = 10)]
    pub top: usize,
}

/// Longest --duration: a year (a tracer meant to run longer is the agent's job).
pub const MAX_DURATION_SECS: f64 = 366.0 * 86_400.0;

/// Seconds in `[min, max]`, refused otherwise (never a panic on 1e30, NaN or -0).
fn parse_secs_in(s: &str, min: f64, max: f64) -> Result<Duration, String> {
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("`{s}` is not a number of seconds"))?;
    if !v.is_finite() || v <= 0.0 {
        return Err("must be a positive number of seconds".into());
    }
    if v < min || v > max {
        return Err(format!("must be between {min} and {max} seconds"));
    }
    Duration::try_from_secs_f64(v).map_err(|e| e.to_string())
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    parse_secs_in(s, 0.000_001, MAX_DURATION_SECS)
}

fn parse_interval(s: &str) -> Result<Duration, String> {
    parse_secs_in(s, 0.01, 86_400.0)
}

/// Largest --ring-size: 1 GiB.
const MAX_RING_BYTES: u32 = 1 << 30;

fn parse_ring_size(s: &str) -> Result<u32, String> {
    let v: u32 = s
        .parse()
        .map_err(|_| format!("`{s}` is not a byte count (at most {MAX_RING_BYTES})"))?;
    if !(4096..=MAX_RING_BYTES).contains(&v) || !v.is_power_of_two() {
        return Err(format!(
            "must be a power of two from 4096 to {MAX_RING_BYTES} (e.g. 16777216)"
        ));
    }
    Ok(v)
}

/// Usage errors found after parsing.
#[derive(Debug, thiserror::Error)]
pub enum UsageError {
    /// Neither a PID nor a command.
    #[error("nothing to trace: give --pid PID, --comm NAME, or a command after `--` (see --help)")]
    NoTarget,
    /// Both a PID and a command.
    #[error("give either --pid/--comm or a command after `--`, not both")]
    BothTargets,
    /// --comm matched nothing.
    #[error("--comm {0}: no running process has that name (check with `pgrep -l {0}`)")]
    NoSuchComm(String),
    /// PID 0 or a repeated PID.
    #[error("invalid --pid {0}")]
    BadPid(u32),
}

/// The counters `--counters` named.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CounterList(pub Vec<&'static str>);

fn parse_counters(s: &str) -> Result<CounterList, String> {
    crate::readers::counters::parse_list(s)
        .map(CounterList)
        .map_err(|e| e.to_string())
}

impl Cli {
    /// How often system statistics and counters are sampled.
    pub fn sample_every(&self) -> Duration {
        self.interval.unwrap_or(Duration::from_secs(1))
    }

    /// Checks combinations clap cannot express.
    pub fn validate(&self) -> Result<(), UsageError> {
        match (
            self.pids.is_empty() && self.comms.is_empty(),
            self.command.is_empty(),
        ) {
            (true, true) => return Err(UsageError::NoTarget),
            (false, false) => return Err(UsageError::BothTargets),
            _ => {}
        }
        for (i, &p) in self.pids.iter().enumerate() {
            if p == 0 || self.pids[..i].contains(&p) {
                return Err(UsageError::BadPid(p));
            }
        }
        Ok(())
    }

    /// Whether MPI libraries are probed: in full mode unless --no-mpi, in contention mode
    /// (which must stay cheap for programs that poll MPI a million times a second) only
    /// with --mpi.
    pub fn probe_mpi(&self) -> bool {
        match self.mode {
            Mode::Full => !self.no_mpi,
            Mode::Contention => self.mpi,
        }
    }

    /// Whether forked processes are traced: on by default when launching.
    pub fn follow_forks(&self) -> bool {
        !self.no_follow && (self.follow || !self.command.is_empty())
    }

    /// The model's caps.
    pub fn limits(&self) -> Limits {
        Limits {
            max_objects: self.max_objects,
            max_histograms: self.max_histograms,
            ..Limits::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("rtm-trace").chain(args.iter().copied()))
    }

    #[test]
    fn pid_and_command_forms() {
        let c = parse(&["-p", "12", "--pid", "13", "-d", "1.5"]).unwrap();
        assert_eq!(c.pids, vec![12, 13]);
        assert_eq!(c.duration, Some(Duration::from_millis(1500)));
        c.validate().unwrap();
        let c = parse(&["-i", "2", "--", "./app", "--flag", "-x"]).unwrap();
        assert_eq!(c.command, vec!["./app", "--flag", "-x"]);
        c.validate().unwrap();
    }

    #[test]
    fn bad_combinations_and_values_are_refused() {
        assert!(matches!(
            parse(&[]).unwrap().validate(),
            Err(UsageError::NoTarget)
        ));
        assert!(matches!(
            parse(&["-p", "1", "--", "ls"]).unwrap().validate(),
            Err(UsageError::BothTargets)
        ));
        assert!(matches!(
            parse(&["-p", "5", "-p", "5"]).unwrap().validate(),
            Err(UsageError::BadPid(5))
        ));
        assert!(parse(&["-p", "abc"]).is_err());
        assert!(parse(&["-p", "1", "-d", "-3"]).is_err());
        assert!(parse(&["-p", "1", "--ring-size", "5000"]).is_err());
        assert!(parse(&["--no-such-option"]).is_err());
        // Values that once panicked (Duration overflow) are refused.
        for d in ["1e30", "1.8e19", "NaN", "inf", "-0", "0", "1e-30"] {
            assert!(parse(&["-p", "1", "-d", d]).is_err(), "-d {d}");
            assert!(parse(&["-p", "1", "-i", d]).is_err(), "-i {d}");
        }
        assert!(parse(&["-p", "1", "-i", "0.001"]).is_err());
        assert!(parse(&["-p", "1", "-d", "31622401"]).is_err());
        assert!(parse(&["-p", "1", "-d", "31622400", "-i", "86400"]).is_ok());
        assert!(parse(&["-p", "1", "--ring-size", "2147483648"]).is_err());
        assert!(parse(&["-p", "1", "--ring-size", "99999999999"]).is_err());
        assert!(parse(&["-p", "1", "--mode", "fast"]).is_err());
    }

    #[test]
    fn mode_and_follow_defaults() {
        let c = parse(&["-p", "1"]).unwrap();
        assert_eq!(c.mode, Mode::Contention);
        assert!(!c.follow_forks());
        assert!(parse(&["-p", "1", "--follow"]).unwrap().follow_forks());
        assert!(!c.probe_mpi(), "contention mode probes MPI only with --mpi");
        assert!(parse(&["-p", "1", "--mpi"]).unwrap().probe_mpi());
        assert!(parse(&["-p", "1", "--mpi", "--no-mpi"]).is_err());
        let c = parse(&["--mode", "full", "--", "ls"]).unwrap();
        assert_eq!(c.mode, Mode::Full);
        assert!(c.probe_mpi());
        assert!(
            !parse(&["-m", "full", "--no-mpi", "-p", "1"])
                .unwrap()
                .probe_mpi()
        );
        assert!(c.follow_forks());
        assert!(!parse(&["--no-follow", "--", "ls"]).unwrap().follow_forks());
    }
}
