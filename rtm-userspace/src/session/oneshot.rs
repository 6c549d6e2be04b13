//! The one-shot trace over the engine: attach the given processes (or the launched
//! command, then let it run), trace until the targets exit, the duration passes or
//! SIGINT/SIGTERM come, write the results, and exit with the command's code.

use tokio::{
    signal::unix::{SignalKind, signal},
    sync::mpsc,
};

use super::SessionError;
use crate::{
    config::TraceConfig,
    engine::{Engine, KernelSource, Launched, Target, exits},
    output::{EndReason, sink::Sink},
    proc::launch::{ChildExit, GatedChild, wait_child},
};

fn io_err(what: &str) -> impl FnOnce(std::io::Error) -> SessionError + '_ {
    move |source| SessionError::Io {
        what: what.to_owned(),
        source,
    }
}

/// Raises the soft descriptor limit to the hard one: per-thread counters of a process
/// with thousands of threads, and the probes, maps and files the tracer holds. Done
/// here, after a launched command was forked (it keeps the limit it was given).
fn raise_fd_limit() {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit with a valid struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < lim.rlim_max {
            lim.rlim_cur = lim.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
}

pub(super) async fn trace(
    config: TraceConfig,
    mut child: Option<GatedChild>,
    sinks: Vec<Box<dyn Sink>>,
) -> Result<i32, SessionError> {
    // Handlers first: a Ctrl-C at any moment after this still detaches and writes results.
    let mut sigint = signal(SignalKind::interrupt()).map_err(io_err("SIGINT handler"))?;
    let mut sigterm = signal(SignalKind::terminate()).map_err(io_err("SIGTERM handler"))?;
    // The same signals as a flag for the steps that may wait outside the loop.
    crate::interrupt::install().map_err(io_err("signal handlers"))?;
    raise_fd_limit();

    let follow = config.follow_forks();
    let mut targets: Vec<Target> = config
        .targets
        .pids
        .iter()
        .map(|&pid| Target::running(pid, follow))
        .collect();
    if let Some(c) = &child {
        targets.push(Target {
            pid: c.pid,
            follow_forks: follow,
            launched: Some(Launched {
                program: c.program.clone(),
                argv: config.targets.command.clone(),
            }),
            mpi: None,
        });
    }
    let duration = config.duration;
    let config_live = config.output.live;
    let source = Box::new(KernelSource::new(&config));
    let mut engine = Engine::new(config, source, sinks);
    engine.stop_when_targets_exit(true);
    // A failure here drops the gated child, which sees the gate close and exits 127.
    let attached = engine.add_targets(targets)?;
    if let Some(c) = child.as_mut()
        && let Err(e) = c.release()
    {
        let _ = wait_child(c.pid);
        return Err(e.into());
    }
    if let Some(c) = &child {
        crate::say!(
            "rtm-trace: launched {} as PID {}; tracing until it exits{}",
            c.program.display(),
            c.pid,
            duration
                .map(|d| format!(" or {:?} pass", d))
                .unwrap_or_default()
        );
    } else {
        let list: Vec<String> = attached
            .iter()
            .map(|t| format!("{} ({})", t.pid, t.comm.as_deref().unwrap_or("?")))
            .collect();
        crate::say!(
            "rtm-trace: attached to PID {}; tracing until Ctrl-C{}",
            list.join(", "),
            duration
                .map(|d| format!(", {:?} pass", d))
                .unwrap_or_default()
        );
    }

    let live = if config_live {
        engine.summary_rows(crate::live::ROWS);
        Some(crate::live::start(engine.handle())?)
    } else {
        None
    };
    let signalled = async {
        // A signal that came before the streams above existed (while the outputs were
        // opened, or attaching) is only in the flag.
        if crate::interrupt::requested() {
            return EndReason::Signal;
        }
        tokio::select! {
            _ = sigint.recv() => EndReason::Signal,
            _ = sigterm.recv() => EndReason::Signal,
        }
    };
    let reason = engine.run(signalled).await;
    // The terminal is the report's again.
    if let Some(l) = live {
        l.finish();
    }
    let reason = reason?;
    let outcome = engine.finish(reason)?;
    if reason == EndReason::Deadlock {
        if let Some(c) = &child {
            crate::say!(
                "rtm-trace: results written; PID {} is deadlocked and keeps running",
                c.pid
            );
        }
        return Ok(3);
    }

    let exit = child
        .as_ref()
        .and_then(|c| outcome.exits.iter().find(|(pid, _)| *pid == c.pid))
        .map(|(_, e)| *e);
    match (child, exit) {
        (_, Some(e)) => Ok(e.shell_code()),
        (Some(c), None) => {
            crate::say!(
                "rtm-trace: results written; waiting for PID {} to exit (Ctrl-C to stop \
                 waiting; it keeps running)",
                c.pid
            );
            // Its exit comes through a watcher; Ctrl-C or SIGTERM ends the wait.
            let (tx, mut rx) = mpsc::unbounded_channel();
            exits::watch(c.pid, (), tx);
            tokio::select! {
                Some(_) = rx.recv() => Ok(wait_child(c.pid).map(ChildExit::shell_code)?),
                _ = sigint.recv() => Ok(130),
                _ = sigterm.recv() => Ok(143),
            }
        }
        (None, _) => Ok(0),
    }
}
