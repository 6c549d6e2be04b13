//! The options of the subcommands that do not trace: `check`, `merge`, `report`, `agent`
//! (and `blocked`'s, a snapshot that takes the trace's targets).

use std::path::PathBuf;

use clap::Args;

/// `rtm-trace check`: what this kernel lets rtm-trace do.
#[derive(Debug, Args)]
#[command(after_help = "Exit status: 0 when every feature loads, 1 when one does not.")]
pub struct CheckCli {
    /// Also say how each feature attaches (tracepoint kinds, uprobe links).
    #[arg(short, long)]
    pub verbose: bool,
}

/// `rtm-trace merge`: join the parts several nodes wrote (--json) for one MPI job.
#[derive(Debug, Args)]
#[command(after_help = "EXAMPLE:\n  \
        rtm-trace merge node1.json node2.json --json job.json\n\n\
        Parts of different jobs or format versions, or that trace one rank twice, are \
        refused.")]
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

/// `rtm-trace report`: render a saved trace (no root needed).
#[derive(Debug, Args)]
#[command(after_help = "EXAMPLES:\n  \
        rtm-trace report trace.json                       the text report\n  \
        rtm-trace report trace.json --html report.html    the HTML report too\n  \
        rtm-trace report trace.json --dot graphs.dot && dot -Tsvg graphs.dot > graphs.svg")]
pub struct ReportCli {
    /// A JSON document written by `rtm-trace --json`.
    #[arg(value_name = "FILE.json")]
    pub file: PathBuf,

    /// Write the HTML report to FILE.
    #[arg(long, value_name = "FILE.html")]
    pub html: Option<PathBuf>,

    /// Write the sync and task graphs as Graphviz DOT to FILE.
    #[arg(long, value_name = "FILE.dot")]
    pub dot: Option<PathBuf>,

    /// Write the text report to FILE instead of stdout.
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,

    /// Rows per table in the text report.
    #[arg(long, value_name = "N", default_value_t = 10)]
    pub top: usize,
}

/// `rtm-trace agent`: a daemon that traces the processes its config selects and serves
/// their metrics to Prometheus.
#[derive(Debug, Args)]
#[command(after_help = "EXAMPLE:\n  \
        rtm-trace agent --config /etc/rtm-trace/agent.toml\n\n\
        The config's [agent] section selects the processes (by comm, exe glob, \
        cmdline regex, cgroup glob, container id, pod UID or namespace) and bounds the \
        series: see docs/agent.md.")]
pub struct AgentCli {
    /// The config file (TOML; its [agent] section, and the trace settings above it).
    #[arg(long, value_name = "FILE")]
    pub config: PathBuf,

    /// Serve on this address instead of the config's (default 127.0.0.1:7470).
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<std::net::SocketAddr>,

    /// TLS and basic auth from this web config file (the Prometheus exporters' format:
    /// tls_server_config, basic_auth_users) instead of the config's web_config_file.
    #[arg(long, value_name = "FILE", alias = "web.config.file")]
    pub web_config_file: Option<PathBuf>,

    /// Check the config and exit: 0 when it is valid, 2 with the reason when not.
    #[arg(long)]
    pub check_config: bool,
}

/// `rtm-trace blocked`: `--blocked` as a subcommand, with only the options it takes.
#[derive(Debug, Args)]
#[command(after_help = "EXAMPLE:\n  \
        sudo rtm-trace blocked -p 1234      (the same as rtm-trace --blocked -p 1234)\n\n\
        Exit status: 3 when there is a deadlock, 4 when one cannot be ruled out (threads \
        wait on semaphores or locks whose holder cannot be read).")]
pub struct BlockedCli {
    /// Process to look at. Repeatable.
    #[arg(short, long = "pid", value_name = "PID")]
    pub pids: Vec<u32>,

    /// Every process whose command name or program file name is NAME. Repeatable.
    #[arg(long = "comm", value_name = "NAME")]
    pub comms: Vec<String>,

    /// The processes of these threads (comma-separated or repeated).
    #[arg(long = "tid", value_name = "TID", value_delimiter = ',')]
    pub tids: Vec<u32>,

    /// Write the snapshot as JSON (format: docs/json-format.md).
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,

    /// Write the report to FILE instead of stdout.
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,

    /// Rows per table in the report (default 10).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=crate::config::MAX_TOP as u64))]
    pub top: Option<u64>,

    /// A TOML file describing the trace (docs/config.md): its targets and outputs.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,

    /// Say what the tracer is doing.
    #[arg(short, long)]
    pub verbose: bool,
}

impl From<BlockedCli> for super::TraceCli {
    fn from(b: BlockedCli) -> Self {
        Self {
            pids: b.pids,
            comms: b.comms,
            tids: b.tids,
            json: b.json,
            output: b.output,
            top: b.top,
            config: b.config,
            verbose: b.verbose,
            blocked: true,
            ..Self::default()
        }
    }
}
