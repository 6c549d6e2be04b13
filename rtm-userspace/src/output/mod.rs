//! Outputs: render a snapshot plus the run's facts. Outputs read, never change, the model.

pub(crate) mod blocked_report;
pub mod dest;
pub(crate) mod dot;
pub(crate) mod findings;
pub(crate) mod folded;
pub mod html;
pub mod json;
pub(crate) mod pprof;
pub(crate) mod proto;
pub(crate) mod rendered;
pub(crate) mod report;
pub mod saved;
mod sections;
pub mod sink;
mod stacks_report;
pub mod timeline;

pub(crate) use crate::format::{self, table, text};

use serde::Serialize;

use crate::{
    config::TraceConfig,
    readers::{Losses, ReaderStats},
};

/// Builds an output from the config, when the config asks for it; checks its
/// destination before anything is traced.
pub type MakeSink = fn(&TraceConfig) -> Result<Option<Box<dyn sink::Sink>>, dest::DestError>;

/// Every output a trace writes, one line each, in the order they are written at the
/// end (the report first, then the JSON whatever became of the report, then the
/// timeline, the HTML report and the DOT graphs).
pub const SINKS: &[MakeSink] = &[
    report::sink,
    json::sink,
    timeline::sink,
    rendered::sink,
    folded::sink,
    pprof::sink,
];

/// The outputs `config` asks for, their destinations checked.
pub fn sinks(config: &TraceConfig) -> Result<Vec<Box<dyn sink::Sink>>, dest::DestError> {
    let mut out = Vec::new();
    for make in SINKS {
        out.extend(make(config)?);
    }
    Ok(out)
}

/// One traced process.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct TargetInfo {
    /// Process id.
    pub pid: u32,
    /// Command name.
    pub comm: Option<String>,
    /// Library the pthread probes went to.
    pub library: Option<String>,
    /// How it ended, if it ended during the trace: "exit 0", "signal 9", "exited".
    pub ended: Option<String>,
}

/// A followed process whose pthread calls went unprobed for a while (full mode): it ran
/// a library no probe covered yet (an exec of a statically linked program, or of a
/// program in another mount namespace), from `since_ns` until its probes were attached.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct Unprobed {
    /// The process.
    pub pid: u32,
    /// From when (its fork or exec), CLOCK_MONOTONIC ns.
    pub since_ns: u64,
    /// Until its probes were attached, or it exited (None: to the end of the trace).
    pub until_ns: Option<u64>,
    /// Why.
    pub why: String,
}

/// Why tracing stopped.
#[derive(Debug, Clone, Copy, Serialize, serde::Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum EndReason {
    /// Every traced process exited.
    TargetsExited,
    /// --duration elapsed.
    Duration,
    /// SIGINT (Ctrl-C) or SIGTERM.
    Signal,
    /// A deadlock was found (`--on-deadlock exit`).
    Deadlock,
}

/// Facts about the run that are not in the model.
#[derive(Debug, Clone, Default, Serialize, serde::Deserialize)]
#[serde(default)]
pub struct RunInfo {
    /// What was traced: `contention` (futex waits only) or `full` (every pthread call).
    pub mode: crate::config::Mode,
    /// The launched command, in launch mode.
    pub command: Option<Vec<String>>,
    /// The traced processes.
    pub targets: Vec<TargetInfo>,
    /// Host name.
    pub host: String,
    /// Wall-clock start, Unix milliseconds.
    pub started_unix_ms: u64,
    /// Why tracing stopped (None for interval summaries).
    pub end_reason: Option<EndReason>,
    /// Kernel-side losses.
    pub losses: Losses,
    /// Followed processes whose pthread calls went unprobed for a while (full mode).
    pub unprobed: Vec<Unprobed>,
    /// Stripped files met without debug symbols, each with what to install.
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub missing_symbols: Vec<String>,
    /// Reader statistics.
    pub reader: ReaderStats,
    /// The tracer's own peak resident memory (VmHWM) when the results were written, KiB.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub tracer_max_rss_kib: Option<u64>,
    /// The eBPF programs' run counts and times and the maps' memory (`--bpf-stats`).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub bpf: Option<crate::readers::bpf_stats::BpfStats>,
    /// How contention mode's waits were collected (None in full mode).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub collection: Option<Collection>,
}

/// How contention mode collected futex waits, for what the outputs say of it.
#[derive(Debug, Clone, Copy, Serialize, serde::Deserialize, PartialEq, Eq)]
pub struct Collection {
    /// Ended waits were summed in the kernel (no timeline wanted each one).
    pub summed: bool,
    /// Waits were seen at their system call's entry (`--unslept`, or no BTF), so those
    /// that returned without sleeping were counted; otherwise from their sleep.
    pub syscall_entry: bool,
    /// Waits were seen on the kernel's futex functions (fentry/fexit on futex_wait and
    /// futex_lock_pi, the waker at wake_q_add_safe), with no program on context switches;
    /// otherwise on the scheduler's tracepoints.
    pub futex_functions: bool,
    /// Waits whose stacks were taken, per CPU per second at most (None: every one; 0:
    /// none).
    pub stack_rate: Option<u32>,
}
