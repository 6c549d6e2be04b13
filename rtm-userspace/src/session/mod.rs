//! A tracing session: checks, launch, attach, the event loop, and the final outputs.

mod catch_up;
mod exits;
mod full_probes;
mod input;
mod merge;
mod mpi_attach;
mod preflight;
mod sampler;
mod trace;

use crate::{
    cli::{Cli, UsageError},
    output::dest::{Dest, DestError},
    probes::ProbeError,
    target::{
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
    /// Probes could not be loaded or attached (boxed: it is large).
    #[error(transparent)]
    Probe(Box<ProbeError>),
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
    #[error(
        "config file {path}: {message}\n(the thresholds it may set are listed in docs/config.md)"
    )]
    Config {
        /// The file.
        path: String,
        /// What is wrong.
        message: String,
    },
    /// The parts given to `merge` do not belong together.
    #[error(transparent)]
    Merge(#[from] crate::model::task_merge::MergeError),
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

impl From<ProbeError> for SessionError {
    fn from(e: ProbeError) -> Self {
        SessionError::Probe(Box::new(e))
    }
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

pub use merge::merge;

/// Where a session's results go, checked before anything is traced.
pub(crate) struct Outputs {
    /// The report: standard output or --output.
    pub report: Dest,
    /// --json.
    pub json: Option<Dest>,
}

impl Outputs {
    /// Checks every destination the command line names.
    pub fn check(
        report: Option<&std::path::Path>,
        json: Option<&std::path::Path>,
    ) -> Result<Self, DestError> {
        Ok(Self {
            report: report
                .map(Dest::check)
                .transpose()?
                .unwrap_or_else(Dest::stdout),
            json: json.map(Dest::check).transpose()?,
        })
    }
}

/// Runs a session; returns the exit code (the launched command's, or 0).
pub fn run(mut cli: Cli) -> Result<i32, SessionError> {
    cli.validate()?;
    // A destination that cannot be written is said before the trace, not after it.
    let outputs = Outputs::check(cli.output.as_deref(), cli.json.as_deref())?;
    for name in &cli.comms {
        let found = process::named(name);
        if found.is_empty() {
            return Err(UsageError::NoSuchComm(name.clone()).into());
        }
        for pid in found {
            if !cli.pids.contains(&pid) {
                cli.pids.push(pid);
            }
        }
    }
    preflight::check()?;
    for &pid in &cli.pids {
        process::check(pid)?;
    }
    // Fork before the runtime starts any thread.
    let child = if cli.command.is_empty() {
        None
    } else {
        Some(launch::spawn_gated(&cli.command)?)
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|source| SessionError::Io {
            what: "starting the async runtime".into(),
            source,
        })?;
    rt.block_on(trace::trace(cli, child, outputs))
}
