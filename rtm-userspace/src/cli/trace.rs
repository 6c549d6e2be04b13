//! The trace's options, turned into a [`TraceConfig`] (over the one `--config` gives, if
//! any).

use std::{ffi::OsString, path::PathBuf, time::Duration};

use clap::Args;

use crate::config::{self, CounterList, Mode, TraceConfig};

impl clap::ValueEnum for Mode {
    fn value_variants<'a>() -> &'a [Self] {
        &[Mode::Contention, Mode::Full]
    }

    fn to_possible_value(&self) -> Option<clap::builder::PossibleValue> {
        use clap::builder::PossibleValue;
        Some(match self {
            Mode::Contention => PossibleValue::new("contention").help(
                "Only contended waits, from the futex system calls: nothing on the fast \
                 path, cheap enough for production",
            ),
            Mode::Full => PossibleValue::new("full").help(
                "Every pthread call, with uprobes: exact counts, hold times, condition \
                 variables, barriers, rwlocks, create/join. About a microsecond per call",
            ),
        })
    }
}

/// What to trace and how: the options of `rtm-trace [trace]`, `top` and `--blocked`.
#[derive(Debug, Default, Args)]
pub struct TraceCli {
    /// Process to trace (all its threads, including ones created later). Repeatable.
    #[arg(help_heading = "Targets", short, long = "pid", value_name = "PID")]
    pub pids: Vec<u32>,

    /// Trace every process whose command name (as ps shows it) or program file name is
    /// NAME, e.g. all ranks of an MPI job on this node. Repeatable; combines with --pid.
    #[arg(help_heading = "Targets", long = "comm", value_name = "NAME")]
    pub comms: Vec<String>,

    /// Only these threads of the traced processes (comma-separated or repeated), in the
    /// kernel; alone, it traces their processes.
    #[arg(
        help_heading = "Targets",
        long = "tid",
        value_name = "TID",
        value_delimiter = ','
    )]
    pub tids: Vec<u32>,

    /// Only what starts on these CPUs (e.g. 0,2-3), in the kernel: a call or wait
    /// counts where it started.
    #[arg(help_heading = "Targets", long = "cpu", value_name = "LIST", value_parser = parse_cpus)]
    pub cpus: Option<CpuList>,

    /// Also trace processes the targets fork (default in launch mode).
    #[arg(help_heading = "Targets", long)]
    pub follow: bool,

    /// Do not trace processes the targets fork.
    #[arg(help_heading = "Targets", long, conflicts_with = "follow")]
    pub no_follow: bool,

    /// Command to launch and trace from its first instruction (after `--`). rtm-trace exits
    /// with its exit code.
    #[arg(help_heading = "Targets", last = true, value_name = "COMMAND")]
    pub command: Vec<OsString>,

    /// What to trace (default: contention): contended waits only (near-zero overhead),
    /// or every pthread call.
    #[arg(help_heading = "Mode", short, long, value_enum)]
    pub mode: Option<Mode>,

    /// Probe the MPI library each traced process maps (or a launched command's ranks
    /// will load) in contention mode too: the task graph, at about 2 us per MPI call
    /// (full mode probes MPI unless --no-mpi).
    #[arg(help_heading = "Mode", long, conflicts_with = "no_mpi")]
    pub mpi: bool,

    /// Do not probe MPI libraries in full mode.
    #[arg(help_heading = "Mode", long)]
    pub no_mpi: bool,

    /// Time FUNCTION of the targets: calls, and the distribution of their inclusive
    /// time, per thread. SYMBOL, SYMBOL@MODULE (a file name or its start: libfoo), or a
    /// glob (cache_*@libfoo). Repeatable. About 1 us per call.
    #[arg(help_heading = "Mode", long = "func", value_name = "SPEC", value_parser = parse_func)]
    pub funcs: Vec<String>,

    /// Show a live view in the terminal while tracing (also `rtm-trace top ...`): the
    /// top locks, threads and who waited for whom, refreshed each interval; sort,
    /// filter, pause, drill into a lock. q stops tracing and prints the report.
    #[arg(help_heading = "Mode", long)]
    pub live: bool,

    /// Do not trace: show which threads of the targets are blocked now, on what, held by
    /// whom, for how long, and any deadlock among them (a snapshot from /proc and their
    /// memory, for a hung process). Exits 3 when there is a deadlock, 4 when one cannot
    /// be ruled out (threads wait on semaphores or locks whose holder cannot be read).
    #[arg(help_heading = "Mode", long)]
    pub blocked: bool,

    /// When a deadlock is found while tracing (threads waiting on each other's mutexes):
    /// `report` (the default) says it on stderr at once and keeps tracing; `exit` says
    /// it, stops and writes the results (exit code 3).
    #[arg(help_heading = "Mode", long, value_name = "WHAT", value_parser = ["report", "exit"])]
    pub on_deadlock: Option<String>,

    /// Stop after this many seconds (default: until Ctrl-C or the targets exit; at most
    /// a year).
    #[arg(help_heading = "Mode", short, long, value_name = "SECS", value_parser = parse_duration)]
    pub duration: Option<Duration>,

    /// Print a summary every SECS seconds while tracing (0.01 to 86400). System
    /// statistics and counters are sampled at this interval too (every second when it
    /// is not given).
    #[arg(help_heading = "Mode", short, long, value_name = "SECS", value_parser = parse_interval)]
    pub interval: Option<Duration>,

    /// A TOML file describing the trace (docs/config.md): thresholds that flag trouble
    /// in the system, and any option below; the command line overrides it.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,

    /// Write the report to FILE instead of stdout.
    #[arg(help_heading = "Outputs", short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,

    /// Write the whole sync graph as JSON (format: docs/json-format.md).
    #[arg(help_heading = "Outputs", long, value_name = "FILE")]
    pub json: Option<PathBuf>,

    /// Write the report as one self-contained HTML file (tables, sync graph, MPI matrix,
    /// time series; opens offline).
    #[arg(help_heading = "Outputs", long, value_name = "FILE.html")]
    pub html: Option<PathBuf>,

    /// Write the sync graph and the MPI task graph as Graphviz DOT (`dot -Tsvg`).
    #[arg(help_heading = "Outputs", long, value_name = "FILE.dot")]
    pub dot: Option<PathBuf>,

    /// Write a timeline while tracing: a Perfetto trace (open it at ui.perfetto.dev) with
    /// a track per thread, waits, wakes as arrows, holds, MPI calls and the system's
    /// counters.
    #[arg(help_heading = "Outputs", long, value_name = "FILE.pftrace")]
    pub timeline: Option<PathBuf>,

    /// Rows per table in the report (default 10).
    #[arg(help_heading = "Outputs", long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=config::MAX_TOP as u64))]
    pub top: Option<u64>,

    /// No call stacks of the waiters and wakers of contended waits (each wake that ends
    /// a sleeping futex wait copies both threads' stacks).
    #[arg(help_heading = "Stacks", long)]
    pub no_stacks: bool,

    /// Waits whose call stacks are taken, per CPU per second at most (default 200;
    /// `all`: every wait; 0: none). Each sample stands for the waits it was chosen
    /// among; per-lock counts and times stay exact whatever the rate.
    #[arg(help_heading = "Stacks", long, value_name = "N|all", value_parser = config::StackRate::parse)]
    pub stack_rate: Option<config::StackRate>,

    /// Bytes of each user stack copied at a contended wake (1024, 2048, 4096, 8192 or
    /// 16384; default 4096): deeper stacks are cut there.
    #[arg(help_heading = "Stacks", long, value_name = "BYTES", value_parser = parse_stack_bytes)]
    pub stack_bytes: Option<u32>,

    /// Write the contended waits' call stacks as folded stacks (waiter frames from the
    /// root, `--`, waker frames, wait ns), for flamegraph.pl or speedscope.
    #[arg(help_heading = "Stacks", long, value_name = "FILE")]
    pub folded: Option<PathBuf>,

    /// Write the contended waits' call stacks as a gzip-compressed pprof profile
    /// (contentions and delay per waiter stack, like Go's mutex profile), for
    /// `go tool pprof`, Parca or Pyroscope.
    #[arg(help_heading = "Outputs", long, value_name = "FILE")]
    pub pprof: Option<PathBuf>,

    /// Ring buffer size in bytes (a power of two, at least 4096; default 8 MiB; in
    /// contention mode shared by a ring per CPU, up to 4); raise it if events are lost.
    #[arg(help_heading = "Limits", long, value_name = "BYTES", value_parser = parse_ring_size)]
    pub ring_size: Option<u32>,

    /// Most distinct objects tracked (default 200000); events beyond are counted, not
    /// recorded.
    #[arg(help_heading = "Limits", long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub max_objects: Option<u64>,

    /// Most distributions that keep percentiles (1-16 KiB each; default 2048); beyond,
    /// exact counts, totals, min and max only.
    #[arg(help_heading = "Limits", long, value_name = "N")]
    pub max_histograms: Option<usize>,

    /// Entries of the kernel's map of summed futex waits (one per waiter, word, waker and
    /// outcome; ~0.7 KiB each; default 8192). Waits past it are sent one by one, and
    /// counted in the report.
    #[arg(help_heading = "Limits", long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=1 << 20))]
    pub futex_sums: Option<u32>,

    /// Most functions --func may time (default 64; a glob matching more is refused).
    #[arg(help_heading = "Limits", long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=config::MAX_FUNCTIONS as u64))]
    pub max_funcs: Option<u64>,

    /// The timeline's size cap in MiB (default 1024); events past it are counted and
    /// reported, not written.
    #[arg(help_heading = "Limits", long, value_name = "MIB", value_parser = clap::value_parser!(u64).range(1..=config::MAX_TIMELINE_MB))]
    pub timeline_max_mb: Option<u64>,

    /// Performance counters to read, by `perf list` name, comma-separated ("default",
    /// the default, for all known; "none" for none). Ones this machine cannot count are
    /// reported.
    #[arg(help_heading = "Advanced", long, value_name = "LIST", value_parser = parse_counters)]
    pub counters: Option<CounterList>,

    /// Also count the performance counters for the traced processes (their threads,
    /// per-task perf events), not only per CPU. Every context switch of theirs then
    /// pays for switching the perf contexts (~1 us here: a program whose critical
    /// sections yield ran at 0.36x); their CPU time and switches are in the report
    /// anyway, from /proc.
    #[arg(help_heading = "Advanced", long)]
    pub target_counters: bool,

    /// Contention mode: also count futex waits that returned without sleeping (the word
    /// had changed), seen at their system call's entry. Every system call on the
    /// machine then pays for a program (~50 ns here); by default none does.
    #[arg(help_heading = "Advanced", long)]
    pub unslept: bool,

    /// Full mode: probe every pthread function, not only those the program and its
    /// libraries import (each probe costs ~0.1 s to remove at exit). Use it when the
    /// program loads libraries with dlopen after the trace starts.
    #[arg(help_heading = "Advanced", long)]
    pub probe_all: bool,

    /// Measure the eBPF side: each program's runs and time per run (the kernel's BPF
    /// statistics, on for this run only) and each map's memory, in the report and JSON.
    #[arg(help_heading = "Advanced", long)]
    pub bpf_stats: bool,

    /// Say where each probe went and what the tracer is doing.
    #[arg(short, long)]
    pub verbose: bool,
}

/// Seconds in `[min, max]`, refused otherwise (never a panic on 1e30, NaN or -0).
fn parse_secs_in(s: &str, min: f64, max: f64) -> Result<Duration, String> {
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("`{s}` is not a number of seconds"))?;
    config::secs_in(v, min, max)
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    parse_secs_in(s, 0.000_001, config::MAX_DURATION_SECS)
}

fn parse_interval(s: &str) -> Result<Duration, String> {
    parse_secs_in(s, config::INTERVAL_SECS.0, config::INTERVAL_SECS.1)
}

fn parse_stack_bytes(s: &str) -> Result<u32, String> {
    let v: u32 = s
        .parse()
        .map_err(|_| format!("{s:?} is not a number of bytes"))?;
    config::check_stack_bytes(v)
}

fn parse_ring_size(s: &str) -> Result<u32, String> {
    let v: u32 = s.parse().map_err(|_| {
        format!(
            "`{s}` is not a byte count (at most {})",
            config::MAX_RING_BYTES
        )
    })?;
    config::check_ring_bytes(v)
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
    /// --blocked with a command.
    #[error("--blocked looks at running processes: give --pid or --comm, not a command")]
    BlockedCommand,
    /// --tid names no running thread.
    #[error(
        "--tid {0}: no running thread has that id (list a process's threads with `ps -T -p PID`)"
    )]
    NoSuchThread(u32),
}

fn parse_counters(s: &str) -> Result<CounterList, String> {
    s.parse()
}

fn parse_func(s: &str) -> Result<String, String> {
    crate::probes::funcs::FuncSpec::parse(s).map(|_| s.to_owned())
}

/// CPUs, from a list as the kernel writes them (`0,2-3`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CpuList(pub Vec<u32>);

/// A CPU list as the kernel writes them: `0,2-3`.
pub fn parse_cpus(s: &str) -> Result<CpuList, String> {
    let bad = || format!("`{s}` is not a CPU list (e.g. 0,2-3)");
    let mut out = Vec::new();
    for part in s.split(',') {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        let (a, b): (u32, u32) = (
            a.trim().parse().map_err(|_| bad())?,
            b.trim().parse().map_err(|_| bad())?,
        );
        if a > b || b >= rtm_common::names::MAX_FILTER_CPUS {
            return Err(bad());
        }
        out.extend(a..=b);
    }
    out.sort_unstable();
    out.dedup();
    Ok(CpuList(out))
}

impl TraceCli {
    /// The trace this command line describes, over `base` (what `--config` gave, or
    /// the defaults): what the command line says wins.
    pub fn into_config(self, base: TraceConfig) -> TraceConfig {
        let mut c = base;
        c.targets.pids.extend(self.pids);
        c.targets.comms.extend(self.comms);
        c.targets.tids.extend(self.tids);
        if let Some(cpus) = self.cpus {
            c.targets.cpus = cpus.0;
        }
        c.functions.time.extend(self.funcs);
        if let Some(w) = self.on_deadlock.as_deref() {
            c.deadlocks.on_deadlock = if w == "exit" {
                config::OnDeadlock::Exit
            } else {
                config::OnDeadlock::Report
            };
        }
        if let Some(n) = self.max_funcs {
            c.functions.max_functions = n as usize;
        }
        if !self.command.is_empty() {
            c.targets.command = self.command;
        }
        c.mode = self.mode.unwrap_or(c.mode);
        c.duration = self.duration.or(c.duration);
        c.interval = self.interval.or(c.interval);
        c.counters = self.counters.unwrap_or(c.counters);
        if self.follow {
            c.follow = Some(true);
        } else if self.no_follow {
            c.follow = Some(false);
        }
        if self.mpi {
            c.mpi = Some(true);
        } else if self.no_mpi {
            c.mpi = Some(false);
        }
        c.probe_all |= self.probe_all;
        c.bpf_stats |= self.bpf_stats;
        c.verbose |= self.verbose;
        if let Some(r) = self.ring_size {
            c.limits.ring_bytes = r;
        }
        if self.no_stacks {
            c.stacks.enabled = false;
        }
        if let Some(b) = self.stack_bytes {
            c.stacks.bytes = b;
        }
        if let Some(r) = self.stack_rate {
            c.stacks.rate = r;
        }
        c.unslept |= self.unslept;
        c.target_counters |= self.target_counters;
        c.stacks.folded = self.folded.or(c.stacks.folded);
        c.stacks.pprof = self.pprof.or(c.stacks.pprof);
        if let Some(n) = self.max_objects {
            c.limits.max_objects = n as usize;
        }
        if let Some(n) = self.max_histograms {
            c.limits.max_histograms = n;
        }
        if let Some(n) = self.futex_sums {
            c.limits.futex_sums = n;
        }
        if let Some(t) = self.top {
            c.output.top = t as usize;
        }
        c.output.report = self.output.or(c.output.report);
        c.output.json = self.json.or(c.output.json);
        c.output.timeline = self.timeline.or(c.output.timeline);
        c.output.html = self.html.or(c.output.html);
        c.output.live |= self.live;
        c.output.dot = self.dot.or(c.output.dot);
        c.output.timeline_max_mb = self.timeline_max_mb.unwrap_or(c.output.timeline_max_mb);
        c
    }
}

/// Checks what a one-shot trace needs: something to trace, given one way.
pub fn check_targets(c: &TraceConfig) -> Result<(), UsageError> {
    let t = &c.targets;
    match (
        t.pids.is_empty() && t.comms.is_empty() && t.tids.is_empty(),
        t.command.is_empty(),
    ) {
        (true, true) => return Err(UsageError::NoTarget),
        (false, false) => return Err(UsageError::BothTargets),
        _ => {}
    }
    for (i, &p) in t.pids.iter().enumerate() {
        if p == 0 || t.pids[..i].contains(&p) {
            return Err(UsageError::BadPid(p));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<TraceCli, clap::Error> {
        use clap::Parser;
        let cli = crate::cli::Cli::try_parse_from(
            std::iter::once("rtm-trace").chain(args.iter().copied()),
        )?;
        Ok(cli.trace)
    }

    fn config(args: &[&str]) -> TraceConfig {
        parse(args).unwrap().into_config(TraceConfig::default())
    }

    #[test]
    fn functions_and_context_filters() {
        let c = config(&[
            "--func",
            "work_*",
            "--func",
            "lib_step@libfuncs",
            "--tid",
            "5,6",
            "--tid",
            "7",
            "--cpu",
            "0,2-3",
            "--max-funcs",
            "9",
            "-p",
            "4",
        ]);
        assert_eq!(c.functions.time, vec!["work_*", "lib_step@libfuncs"]);
        assert_eq!(c.functions.max_functions, 9);
        assert_eq!(c.targets.tids, vec![5, 6, 7]);
        assert_eq!(c.targets.cpus, vec![0, 2, 3]);
        // --tid alone is a target (its process).
        check_targets(&config(&["--tid", "9"])).unwrap();
        for bad in [
            &["--func", "a/b", "-p", "1"][..],
            &["--cpu", "3-1", "-p", "1"],
            &["--cpu", "x", "-p", "1"],
            &["--max-funcs", "0", "-p", "1"],
        ] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn pid_and_command_forms() {
        let c = config(&["-p", "12", "--pid", "13", "-d", "1.5"]);
        assert_eq!(c.targets.pids, vec![12, 13]);
        assert_eq!(c.duration, Some(Duration::from_millis(1500)));
        check_targets(&c).unwrap();
        c.validate().unwrap();
        let c = config(&["-i", "2", "--", "./app", "--flag", "-x"]);
        assert_eq!(c.targets.command, vec!["./app", "--flag", "-x"]);
        check_targets(&c).unwrap();
    }

    #[test]
    fn bad_combinations_and_values_are_refused() {
        assert!(matches!(
            check_targets(&config(&[])),
            Err(UsageError::NoTarget)
        ));
        assert!(matches!(
            check_targets(&config(&["-p", "1", "--", "ls"])),
            Err(UsageError::BothTargets)
        ));
        assert!(matches!(
            check_targets(&config(&["-p", "5", "-p", "5"])),
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
        assert!(parse(&["-p", "1", "--top", "0"]).is_err());
        assert!(parse(&["-p", "1", "--follow", "--no-follow"]).is_err());
        // Whatever clap lets through, the config takes.
        config(&[
            "-p",
            "1",
            "-d",
            "31622400",
            "-i",
            "86400",
            "--ring-size",
            "4096",
        ])
        .validate()
        .unwrap();
    }

    #[test]
    fn mode_and_follow_defaults() {
        let c = config(&["-p", "1"]);
        assert_eq!(c.mode, Mode::Contention);
        assert!(!c.follow_forks());
        assert!(config(&["-p", "1", "--follow"]).follow_forks());
        assert!(!c.probe_mpi(), "contention mode probes MPI only with --mpi");
        assert!(config(&["-p", "1", "--mpi"]).probe_mpi());
        assert!(parse(&["-p", "1", "--mpi", "--no-mpi"]).is_err());
        let c = config(&["--mode", "full", "--", "ls"]);
        assert_eq!(c.mode, Mode::Full);
        assert!(c.probe_mpi());
        assert!(!config(&["-m", "full", "--no-mpi", "-p", "1"]).probe_mpi());
        assert!(c.follow_forks());
        assert!(!config(&["--no-follow", "--", "ls"]).follow_forks());
    }

    #[test]
    fn the_command_line_wins_over_the_config_file() {
        let file = TraceConfig::from_toml(
            "mode = \"full\"\ninterval = 5\n[output]\ntop = 3\n[targets]\ncomms = [\"app\"]\n",
        )
        .unwrap();
        let c = parse(&["-i", "2", "-p", "7"])
            .unwrap()
            .into_config(file.clone());
        assert_eq!(c.mode, Mode::Full, "kept from the file");
        assert_eq!(c.output.top, 3, "kept from the file");
        assert_eq!(
            c.interval,
            Some(Duration::from_secs(2)),
            "the command line's"
        );
        assert_eq!(c.targets.comms, vec!["app"]);
        assert_eq!(c.targets.pids, vec![7]);
        let c = parse(&["-m", "contention", "--top", "7"])
            .unwrap()
            .into_config(file);
        assert_eq!((c.mode, c.output.top), (Mode::Contention, 7));
    }
}
