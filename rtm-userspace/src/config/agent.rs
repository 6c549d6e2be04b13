//! The `[agent]` section: how `rtm-trace agent` finds its targets, serves its metrics and
//! bounds them. Every key may be left out; unknown keys are refused by name.

use std::{net::SocketAddr, path::PathBuf};

use serde::{Deserialize, Serialize};

use super::{ConfigError, secs_in};

/// The agent's default address: loopback only, on a port outside the 9100-9999 range
/// that known exporters claim.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:7470";

/// Most targets traced at once.
pub const MAX_TARGETS: usize = 4096;

/// The agent's settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AgentConfig {
    /// Where `/metrics`, `/healthz` and `/readyz` are served.
    pub listen: SocketAddr,
    /// TLS and basic auth for the endpoint: a web config file in the Prometheus
    /// exporters' format (`--web.config.file`; docs/agent.md). A relative path is taken
    /// from the config file's directory. None: plain HTTP, no auth.
    pub web_config_file: Option<PathBuf>,
    /// How often /proc is rescanned for targets (seconds; exec events find most at once).
    pub discovery_interval: f64,
    /// How often the metrics are brought up to date (seconds).
    pub update_interval: f64,
    /// How long an exited target's series stay (seconds).
    pub grace: f64,
    /// Locks exported per target (the rest are summed into `other`).
    pub top_locks: usize,
    /// Waiter -> waker edges exported per target (the rest are summed into `other`).
    pub top_edges: usize,
    /// Destinations exported per MPI rank in the per-pair series (the rest are summed
    /// into `dst="(other)"`): at most ranks x (N + 1) series per family.
    pub top_mpi_peers: usize,
    /// How long a lock or edge stays among the exported ones without growing before a
    /// busier one may take its place (seconds).
    pub sticky: f64,
    /// Most series in one scrape: the rest are dropped and counted.
    pub max_series: usize,
    /// Most processes traced at once.
    pub max_targets: usize,
    /// Most `/metrics` answers made at once (more are refused with 503); connections
    /// are capped apart (`http::MAX_CONNECTIONS`, the one idle longest dropped).
    pub max_scrapes: usize,
    /// Keep the eBPF programs loaded from the start while any select rule exists, so a
    /// process that lives a few milliseconds is traced from its exec (false: loaded
    /// with the first target, released `grace` after the last; processes that end
    /// before the programs are loaded are missed, and counted).
    pub keep_loaded: bool,
    /// Processes to trace: one that matches any rule (and no exclude rule).
    pub select: Vec<Rule>,
    /// Processes never traced (checked first).
    pub exclude: Vec<Rule>,
}

impl AgentConfig {
    /// Whether a select rule asks for `mode` (the agent then runs an engine in it).
    pub fn selects_mode(&self, mode: super::Mode) -> bool {
        self.select.iter().any(|r| r.mode == Some(mode))
    }
}

impl Default for AgentConfig {
    fn default() -> Self {
        Self {
            listen: DEFAULT_LISTEN.parse().expect("valid constant address"),
            web_config_file: None,
            discovery_interval: 5.0,
            update_interval: 5.0,
            grace: 60.0,
            top_locks: 10,
            top_edges: 10,
            top_mpi_peers: 8,
            sticky: 300.0,
            max_series: 20_000,
            max_targets: 256,
            max_scrapes: 4,
            keep_loaded: true,
            select: Vec::new(),
            exclude: Vec::new(),
        }
    }
}

/// A selection rule: a process matches when every field given matches.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Rule {
    /// The command name (/proc/PID/comm), exactly.
    pub comm: Option<String>,
    /// The executable's path, a glob (`/usr/bin/*`, `**/java`).
    pub exe: Option<String>,
    /// The command line (arguments joined by spaces), a regular expression.
    pub cmdline: Option<String>,
    /// The process's cgroup path (v2, or v1's first hierarchy), a glob.
    pub cgroup: Option<String>,
    /// The container id (64 hex digits), or a prefix of it.
    pub container_id: Option<String>,
    /// The Kubernetes pod UID.
    pub pod_uid: Option<String>,
    /// The Kubernetes namespace (read from the pod's service account mount).
    pub namespace: Option<String>,
    /// The process's real user id (/proc/PID/status): another user's processes named
    /// like the target cannot take its place.
    pub uid: Option<u32>,
    /// The same by user name, resolved to a uid once when the config is loaded.
    pub user: Option<String>,
    /// Select rules only: probe the MPI library of the processes this rule selects
    /// (per-rank calls, time, messages and bytes); None for the file's top-level `mpi`.
    pub mpi: Option<bool>,
    /// Select rules only: trace the processes this rule selects in this mode; None for
    /// the file's top-level `mode`.
    pub mode: Option<super::Mode>,
}

impl Rule {
    /// Whether it names nothing to match (`mpi` is what to do, not what to match).
    fn is_empty(&self) -> bool {
        Rule {
            mpi: None,
            mode: None,
            ..self.clone()
        } == Rule::default()
    }
}

impl AgentConfig {
    /// Checks every value but the patterns, which discovery compiles (and reports by
    /// field, `agent.select[1].cmdline: ...`, the same way).
    pub fn validate(&self) -> Result<(), ConfigError> {
        let err = |field: &str, problem: String| ConfigError(format!("agent.{field}: {problem}"));
        for (name, v, min, max) in [
            ("discovery_interval", self.discovery_interval, 0.1, 3600.0),
            ("update_interval", self.update_interval, 0.1, 3600.0),
            ("grace", self.grace, 0.1, 86_400.0),
            ("sticky", self.sticky, 0.1, 86_400.0),
        ] {
            secs_in(v, min, max).map_err(|p| err(name, p))?;
        }
        for (name, v, max) in [
            ("top_locks", self.top_locks, 1000),
            ("top_edges", self.top_edges, 1000),
            ("top_mpi_peers", self.top_mpi_peers, 1000),
            ("max_series", self.max_series, 10_000_000),
            ("max_targets", self.max_targets, MAX_TARGETS),
            ("max_scrapes", self.max_scrapes, 1024),
        ] {
            if !(1..=max).contains(&v) {
                return Err(err(name, format!("must be between 1 and {max}")));
            }
        }
        for (list, rules) in [("select", &self.select), ("exclude", &self.exclude)] {
            for (i, r) in rules.iter().enumerate() {
                if r.is_empty() {
                    return Err(err(
                        &format!("{list}[{i}]"),
                        "a rule needs at least one of comm, exe, cmdline, cgroup, container_id, pod_uid, namespace, uid, user".into(),
                    ));
                }
            }
        }
        if self.select.is_empty() {
            return Err(err(
                "select",
                "no rule: say which processes to trace (e.g. [[agent.select]] comm = \"myservice\")".into(),
            ));
        }
        Ok(())
    }
}
