//! A trace as the JSON document holds it (docs/json-format.md), read back for the
//! outputs that render it: `rtm-trace report FILE.json` (text, HTML, DOT) and the
//! `--html` / `--dot` sinks, which build the same document from the final snapshot. Only
//! what those outputs show is read; unknown fields are ignored, so later additions to
//! the format do not break it, and a different format version is refused by name.
//!
//! The fields are those of docs/json-format.md, documented there once.
#![allow(missing_docs)]

mod read;
pub(crate) mod text;

pub use read::object_start;

use serde::Deserialize;

use super::json;

/// Why a document cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum SavedError {
    /// Not a JSON document rtm-trace wrote.
    #[error("{path} is not a JSON document written by rtm-trace --json: {why}")]
    NotOurs {
        /// The file.
        path: String,
        /// What is wrong.
        why: String,
    },
    /// Written in another version of the format.
    #[error(
        "{path} was written in version {version} of rtm-trace's JSON format (by rtm-trace \
         {tool}); this rtm-trace ({ours}) reads version {reads}: render it with the \
         rtm-trace that wrote it, or trace again"
    )]
    Version {
        /// The file.
        path: String,
        /// Its format version.
        version: u64,
        /// The tool that wrote it.
        tool: String,
        /// This build's version.
        ours: &'static str,
        /// The format version this build reads.
        reads: u32,
    },
}

/// A field that may be `null` in a document (a merged one leaves some empty): its
/// default then.
fn nullable<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

/// A time distribution's summary.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct Dist {
    pub count: u64,
    pub total_ns: u64,
    pub mean_ns: Option<f64>,
    pub p50_ns: Option<u64>,
    pub p99_ns: Option<u64>,
    pub max_ns: Option<u64>,
}

/// A thread.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct Thread {
    pub pid: u32,
    pub tid: u32,
    pub name: Option<String>,
    pub parent: Option<ThreadKey>,
    pub exited: bool,
    pub acquisitions: u64,
    pub contended: u64,
    #[serde(deserialize_with = "nullable")]
    pub wait: Dist,
    #[serde(deserialize_with = "nullable")]
    pub hold: Dist,
    pub observed_ns: u64,
    pub wait_share: f64,
    pub idle_wait_ns: u64,
}

impl Thread {
    /// Its wait for locks (contention or waits of unknown kind): the rest of its wait
    /// after waiting for work.
    pub fn lock_wait_ns(&self) -> u64 {
        self.wait.total_ns.saturating_sub(self.idle_wait_ns)
    }
}

/// A thread's key.
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq, Hash)]
#[serde(default)]
pub struct ThreadKey {
    pub pid: u32,
    pub tid: u32,
}

/// A barrier round.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct Round {
    pub first_arrival_ns: u64,
    pub spread_ns: u64,
    pub last_tid: u32,
    pub threads: u32,
}

/// A barrier's rounds.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct Barrier {
    pub rounds: u64,
    #[serde(deserialize_with = "nullable")]
    pub spread: Dist,
    #[serde(deserialize_with = "nullable")]
    pub last_arrivals: Vec<(u32, u64)>,
    #[serde(deserialize_with = "nullable")]
    pub round_list: Vec<Round>,
}

/// A synchronization object.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct Object {
    pub pid: u32,
    pub kind: String,
    pub wait_kind: String,
    pub addr: String,
    pub name: Option<String>,
    pub threads: u64,
    pub acquisitions: u64,
    pub contended: u64,
    pub contended_wait_ns: u64,
    pub waits: u64,
    pub failed_trylocks: u64,
    pub timeouts: u64,
    #[serde(deserialize_with = "nullable")]
    pub wait: Dist,
    #[serde(deserialize_with = "nullable")]
    pub hold: Dist,
    pub barrier: Option<Barrier>,
}

impl Object {
    /// How it is shown: its symbol, else its kind and address.
    pub fn label(&self) -> String {
        match &self.name {
            Some(n) => n.clone(),
            None => format!("{} {}", self.kind, self.addr),
        }
    }

    /// Its row's name in the tables: its kind (a futex word's by what its waits are
    /// for, when known), then its symbol or address.
    pub fn titled(&self) -> String {
        let kind = match self.wait_kind.as_str() {
            "" | "unknown" => &self.kind,
            k if self.kind == "futex" => k,
            _ => &self.kind,
        };
        match &self.name {
            Some(n) => format!("{kind} {n}"),
            None => format!("{kind} {}", self.addr),
        }
    }

    /// Waiting for work or for another thread (a condition variable, semaphore,
    /// barrier, join or parked thread), not contention.
    pub fn is_idle(&self) -> bool {
        matches!(
            self.wait_kind.as_str(),
            "condvar" | "semaphore" | "barrier" | "join" | "park"
        )
    }

    /// Whether its acquisitions and holds were seen: not for a futex word, whose waits
    /// are seen but not who took it or for how long (contention mode, or a word no
    /// probed call used). The tables then say "-", not 0.
    pub fn sees_acquisitions(&self) -> bool {
        self.kind != "futex"
    }
}

/// A thread's use of an object.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct Edge {
    pub pid: u32,
    pub tid: u32,
    pub kind: String,
    pub object: String,
    pub role: String,
    pub acquisitions: u64,
    pub contended: u64,
    pub waits: u64,
    #[serde(deserialize_with = "nullable")]
    pub wait: Dist,
    #[serde(deserialize_with = "nullable")]
    pub hold: Dist,
}

/// Waits of one thread ended by another.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct WaitsFor {
    pub pid: u32,
    pub waiter: u32,
    pub waker_pid: u32,
    pub waker: u32,
    pub outside: bool,
    pub object: String,
    pub object_name: Option<String>,
    pub count: u64,
    #[serde(deserialize_with = "nullable")]
    pub wait: Dist,
    pub at_exit: bool,
}

/// The trace window.
#[derive(Debug, Clone, Copy, Default, Deserialize)]
#[serde(default)]
pub struct Window {
    pub start_ns: u64,
    pub end_ns: u64,
}

/// The sync graph.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct SyncGraph {
    #[serde(deserialize_with = "nullable")]
    pub window: Window,
    #[serde(deserialize_with = "nullable")]
    pub threads: Vec<Thread>,
    #[serde(deserialize_with = "nullable")]
    pub objects: Vec<Object>,
    #[serde(deserialize_with = "nullable")]
    pub edges: Vec<Edge>,
    #[serde(deserialize_with = "nullable")]
    pub waits_for: Vec<WaitsFor>,
    /// Contended waits by call stack, when any were captured.
    pub stacks: Option<Stacks>,
}

/// Contended waits by call stack (`sync_graph.stacks`).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct Stacks {
    #[serde(deserialize_with = "nullable")]
    pub rows: Vec<StackRow>,
    pub rows_total: u64,
    pub other_waits: u64,
    pub other_wait_ns: u64,
}

/// One (word, waiter stack, waker stack) row.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct StackRow {
    pub pid: u32,
    #[serde(deserialize_with = "nullable")]
    pub object: String,
    pub object_name: Option<String>,
    pub waker_pid: u32,
    pub waits: u64,
    pub wait_ns: u64,
    pub max_ns: u64,
    #[serde(deserialize_with = "nullable")]
    pub waiter: Vec<String>,
    #[serde(deserialize_with = "nullable")]
    pub waker: Vec<String>,
}

/// A traced process.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct Target {
    pub pid: u32,
    pub comm: Option<String>,
    pub ended: Option<String>,
}

/// The run's facts.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct Run {
    pub mode: String,
    pub command: Option<Vec<String>>,
    #[serde(deserialize_with = "nullable")]
    pub targets: Vec<Target>,
    pub host: String,
    pub started_unix_ms: u64,
    pub end_reason: Option<String>,
    #[serde(deserialize_with = "nullable")]
    pub losses: std::collections::BTreeMap<String, u64>,
}

/// One side of an MPI edge.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct Traffic {
    pub messages: u64,
    pub bytes: u64,
    pub time_ns: u64,
}

/// MPI traffic between two ranks.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct RankEdge {
    pub src: Option<i64>,
    pub dst: Option<i64>,
    pub sent: Option<Traffic>,
    pub received: Option<Traffic>,
}

/// An MPI rank.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct Rank {
    pub rank: Option<i64>,
    pub pid: u32,
    pub host: String,
    pub calls: u64,
    pub time_in_mpi_ns: u64,
    pub span_ns: u64,
}

/// A collective operation.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct Collective {
    pub comm_id: Option<u64>,
    pub function: String,
    pub ranks: u64,
    pub calls: u64,
    pub time_ns: u64,
    pub instances: u64,
    pub mean_spread_ns: Option<u64>,
    pub max_spread_ns: Option<u64>,
    #[serde(deserialize_with = "nullable")]
    pub most_often_last: Vec<i64>,
}

/// The MPI rank graph.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct RankGraph {
    #[serde(deserialize_with = "nullable")]
    pub ranks: Vec<Rank>,
    #[serde(deserialize_with = "nullable")]
    pub edges: Vec<RankEdge>,
    #[serde(deserialize_with = "nullable")]
    pub collectives: Vec<Collective>,
}

/// CPU shares.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct Cpu {
    pub busy: f64,
    pub iowait: f64,
    pub steal: f64,
}

/// A process's usage over an interval.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct ProcUsage {
    pub pid: u32,
    pub user_pct: f64,
    pub system_pct: f64,
    pub rss_bytes: u64,
}

/// PSI shares.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct Psi {
    pub cpu_some: f64,
    pub memory_some: f64,
    pub io_some: f64,
}

/// A system interval.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct Interval {
    pub t_s: f64,
    pub dur_s: f64,
    #[serde(deserialize_with = "nullable")]
    pub cpu: Cpu,
    pub load1: f64,
    pub procs_running: u64,
    pub procs_blocked: u64,
    pub context_switches_per_s: f64,
    pub mem_available_pct: f64,
    pub psi: Option<Psi>,
    #[serde(deserialize_with = "nullable")]
    pub procs: Vec<ProcUsage>,
}

/// The system over the run.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct Ambient {
    pub period_s: f64,
    #[serde(deserialize_with = "nullable")]
    pub intervals: Vec<Interval>,
}

/// The document.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct Doc {
    pub format: String,
    pub version: u64,
    pub tool_version: String,
    #[serde(deserialize_with = "nullable")]
    pub run: Run,
    #[serde(deserialize_with = "nullable")]
    pub sync_graph: SyncGraph,
    pub task_graph: Option<RankGraph>,
    pub ambient: Option<Ambient>,
    /// Timed functions (`--func`).
    pub functions: Option<crate::model::funcs::FunctionsView>,
    /// A merged job's parts (`rtm-trace merge --json`): it has no sync graph.
    #[serde(deserialize_with = "nullable")]
    pub merged_from: Vec<serde_json::Value>,
    /// What limits the traced work (none in documents written before findings were).
    #[serde(deserialize_with = "nullable")]
    pub findings: Vec<crate::output::findings::Finding>,
}

impl Doc {
    /// The name a thread is shown by: "tid name".
    pub fn thread_label(&self, pid: u32, tid: u32) -> String {
        match self
            .sync_graph
            .threads
            .iter()
            .find(|t| t.pid == pid && t.tid == tid)
            .and_then(|t| t.name.as_deref())
        {
            Some(n) => format!("{tid} {n}"),
            None => tid.to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn another_format_or_version_is_refused_by_name() {
        let e = Doc::parse(
            br#"{"format":"rtm-trace","version":0,"tool_version":"0.0.1"}"#,
            "old.json",
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("version 0") && e.contains("0.0.1") && e.contains("reads version 1"),
            "{e}"
        );
        let e = Doc::parse(br#"{"format":"other"}"#, "x.json")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("not a JSON document written by rtm-trace"),
            "{e}"
        );
        let e = Doc::parse(b"{", "x.json").unwrap_err().to_string();
        assert!(e.contains("x.json"), "{e}");
    }

    #[test]
    fn a_document_reads_back() {
        let d = Doc::parse(
            br#"{"format":"rtm-trace","version":1,"tool_version":"x","run":{"mode":"full","host":"h","targets":[{"pid":5,"comm":"app"}]},
                "sync_graph":{"objects":[{"pid":5,"kind":"mutex","addr":"0x10","name":"m","acquisitions":3,"wait":{"count":1,"total_ns":7}}],
                "threads":[{"pid":5,"tid":6,"name":"w"}],"future_field":1}}"#,
            "t.json",
        )
        .unwrap();
        assert_eq!(d.sync_graph.objects[0].label(), "m");
        assert_eq!(d.sync_graph.objects[0].wait.total_ns, 7);
        assert_eq!(d.thread_label(5, 6), "6 w");
        assert_eq!(d.run.targets[0].comm.as_deref(), Some("app"));
    }
}
