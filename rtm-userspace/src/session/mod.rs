//! The one-shot command, a front end over the engine: checks, launch, attach, the
//! trace until the targets exit, the duration passes or a signal comes, and the final
//! outputs; also `rtm-trace merge`.

mod blocked;
mod check;
pub(crate) mod input;
mod merge;
mod oneshot;
pub(crate) mod preflight;
mod report;

use crate::{
    cli::{self, TraceCli, UsageError},
    config::TraceConfig,
    engine::EngineError,
    output::dest::DestError,
    proc::{
        launch::{self, LaunchError},
        process::{self, ProcessError},
    },
};

/// Why a session could not run.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// The command line is inconsistent.
    #[error(transparent)]
    Usage(#[from] UsageError),
    /// The machine or user cannot trace.
    #[error(transparent)]
    Preflight(#[from] preflight::PreflightError),
    /// A target process is missing or unreadable.
    #[error(transparent)]
    Process(#[from] ProcessError),
    /// The command could not be launched.
    #[error(transparent)]
    Launch(#[from] LaunchError),
    /// The engine could not trace (probes, ring buffers, reaping the command).
    #[error(transparent)]
    Engine(#[from] EngineError),
    /// A result could not be written (the report or the JSON).
    #[error(transparent)]
    Output(#[from] DestError),
    /// A part given to `merge` cannot be read as one.
    #[error("{path}: {problem}")]
    Part {
        /// The file.
        path: String,
        /// What is wrong with it.
        problem: String,
    },
    /// The config file is not valid.
    #[error("config file {path}: {message} (what it may set is listed in docs/config.md)")]
    Config {
        /// The file.
        path: String,
        /// What is wrong.
        message: String,
    },
    /// The live view cannot run.
    #[error(transparent)]
    Live(#[from] crate::live::LiveError),
    /// The document given to `report` cannot be rendered.
    #[error(transparent)]
    Saved(#[from] crate::output::saved::SavedError),
    /// The parts given to `merge` do not belong together.
    #[error(transparent)]
    Merge(#[from] crate::analyses::mpi::merge::MergeError),
    /// Other I/O (runtime, signals, report file).
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// Why it failed.
        #[source]
        source: std::io::Error,
    },
}

impl SessionError {
    /// The exit code for this error: 127 when a command could not be run (as a shell
    /// does), 2 for usage errors, 1 otherwise.
    pub fn exit_code(&self) -> i32 {
        match self {
            SessionError::Launch(LaunchError::NotFound(_) | LaunchError::Exec { .. }) => 127,
            SessionError::Usage(_) => 2,
            _ => 1,
        }
    }
}

pub use check::check;
pub use merge::merge;
pub use report::report;

/// The config file `path` (TOML), read with a bound and checked.
pub fn read_config(path: &std::path::Path) -> Result<TraceConfig, SessionError> {
    let config_err = |message: String| SessionError::Config {
        path: path.display().to_string(),
        message,
    };
    let text = input::read_text(path, input::MAX_CONFIG_BYTES)
        .map_err(|e| config_err(format!("cannot read it: {e}")))?;
    TraceConfig::from_toml(&text).map_err(config_err)
}

/// Runs a session; returns the exit code (the launched command's, or 0).
pub fn run(cli: TraceCli) -> Result<i32, SessionError> {
    // The config file first: the command line goes over it. A bad one is refused
    // before anything is loaded or run.
    let file = cli.config.clone();
    let blocked = cli.blocked;
    let base = match &file {
        Some(path) => read_config(path)?,
        None => TraceConfig::default(),
    };
    let mut config = cli.into_config(base);
    config.validate().map_err(|e| SessionError::Config {
        path: file
            .as_ref()
            .map_or_else(|| "(none)".into(), |p| p.display().to_string()),
        message: e.to_string(),
    })?;
    cli::check_targets(&config)?;
    // Ctrl-C and SIGTERM as a flag from here on: waiting for a FIFO's reader below gives
    // up at the first one (the tracing loop listens to them its own way too).
    crate::interrupt::install().map_err(|source| SessionError::Io {
        what: "signal handlers".into(),
        source,
    })?;
    // A destination that cannot be written is said before the trace, not after it.
    let sinks = if blocked {
        Vec::new()
    } else {
        crate::output::sinks(&config)?
    };
    if config.output.live {
        crate::live::check()?;
    }
    for name in config.targets.comms.clone() {
        let found = process::named(&name);
        if found.is_empty() {
            return Err(UsageError::NoSuchComm(name).into());
        }
        for pid in found {
            if !config.targets.pids.contains(&pid) {
                config.targets.pids.push(pid);
            }
        }
    }
    // --tid: its thread's process is traced (when no other target is given, the only
    // ones).
    for tid in config.targets.tids.clone() {
        let Some(pid) = process::tgid_of(tid) else {
            return Err(UsageError::NoSuchThread(tid).into());
        };
        if config.targets.command.is_empty() && !config.targets.pids.contains(&pid) {
            config.targets.pids.push(pid);
        }
    }
    preflight::check()?;
    for &pid in &config.targets.pids {
        process::check(pid)?;
    }
    if blocked {
        if !config.targets.command.is_empty() {
            return Err(UsageError::BlockedCommand.into());
        }
        return blocked::run(&config);
    }
    // Fork before the runtime starts any thread.
    let child = if config.targets.command.is_empty() {
        None
    } else {
        Some(launch::spawn_gated(&config.targets.command)?)
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|source| SessionError::Io {
            what: "starting the async runtime".into(),
            source,
        })?;
    rt.block_on(oneshot::trace(config, child, sinks))
}
