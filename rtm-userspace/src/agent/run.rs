//! The agent's start and end: the config, the engines (their programs loaded at once
//! with `keep_loaded`), the endpoint's thread, and the targets' loop (`targets.rs`).

use std::{
    sync::{Arc, atomic::AtomicBool},
    time::Duration,
};

use tokio::{
    signal::unix::{SignalKind, signal},
    sync::watch,
};

use super::{
    discovery::Selector,
    http,
    metrics::Texts,
    profiles::Profiles,
    targets::{Defaults, discover},
    web::{self, Web},
};
use crate::{
    cli::AgentCli,
    config::{CounterList, Mode, TraceConfig},
    engine::{Engine, EngineHandle, KernelSource},
    output::EndReason,
    session::{SessionError, preflight, read_config},
};

fn io_err(what: &'static str) -> impl FnOnce(std::io::Error) -> SessionError {
    move |source| SessionError::Io {
        what: what.to_owned(),
        source,
    }
}

/// Runs the agent until SIGINT or SIGTERM; returns the exit code (2 for a bad config).
pub fn run(cli: AgentCli) -> Result<i32, SessionError> {
    let (config, selector, web) = match load(&cli) {
        Ok(c) => c,
        Err(message) => {
            crate::say!(
                "rtm-trace agent: error: config file {}: {message} (what it may set: docs/agent.md and docs/config.md)",
                cli.config.display()
            );
            return Ok(2);
        }
    };
    if cli.check_config {
        let a = &config.agent;
        println!(
            "{}: valid: {} select and {} exclude rules; serving on {}://{} ({}); {} mode",
            cli.config.display(),
            a.select.len(),
            a.exclude.len(),
            Web::scheme(web.as_deref()),
            a.listen,
            Web::describe(web.as_deref()),
            match config.mode {
                crate::config::Mode::Contention => "contention",
                crate::config::Mode::Full => "full",
            }
        );
        if let Some(w) = web::exposure_warning(a.listen, web.as_deref()) {
            crate::say!("{w}");
        }
        return Ok(0);
    }
    preflight::check()?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(io_err("starting the async runtime"))?;
    rt.block_on(agent(config, selector, web))
}

/// The config file with the command line over it, checked, and the web config it names
/// loaded; Err: what is wrong.
fn load(cli: &AgentCli) -> Result<(TraceConfig, Selector, Option<Arc<Web>>), String> {
    let mut config = read_config(&cli.config).map_err(|e| match e {
        SessionError::Config { message, .. } => message,
        e => e.to_string(),
    })?;
    if let Some(l) = cli.listen {
        config.agent.listen = l;
    }
    config.agent.validate().map_err(|e| e.to_string())?;
    // The command line's path is the shell's; the file's is from the file's directory.
    let web_file = match (&cli.web_config_file, &config.agent.web_config_file) {
        (Some(p), _) => Some(("--web-config-file", p.clone())),
        (None, Some(p)) => Some((
            "agent.web_config_file",
            cli.config
                .parent()
                .unwrap_or(std::path::Path::new("."))
                .join(p),
        )),
        (None, None) => None,
    };
    let web = match web_file {
        Some((field, path)) => Some(Arc::new(Web::load(&path).map_err(|e| {
            format!(
                "{field}: {}: {}",
                crate::format::text::path_shown(&path),
                crate::format::text::escape(&e)
            )
        })?)),
        None => None,
    };
    config.agent.web_config_file = web.as_ref().map(|w| w.source.clone());
    let a = &config.agent;
    let selector = Selector::new(&a.select, &a.exclude).map_err(|e| e.to_string())?;
    if config.duration.is_some()
        || !config.targets.command.is_empty()
        || !config.targets.pids.is_empty()
    {
        return Err(
            "duration and targets are for the one-shot command: the agent runs until stopped and takes its targets from [agent] select rules".into(),
        );
    }
    // The agent exports no counters, and samples at its update interval. Call stacks
    // are sampled as the file says (200 a second per CPU by default) for the
    // contention profiles; their files are the one-shot command's.
    config.counters = CounterList(Vec::new());
    if config.stacks.folded.is_some() || config.stacks.pprof.is_some() {
        return Err(
            "stacks.folded and stacks.pprof are files of the one-shot command: the agent serves its profiles at /debug/pprof/contention".into(),
        );
    }
    config.interval = Some(Duration::from_secs_f64(a.update_interval));
    Ok((config, selector, web))
}

async fn agent(
    config: TraceConfig,
    selector: Selector,
    web: Option<Arc<Web>>,
) -> Result<i32, SessionError> {
    let mut sigint = signal(SignalKind::interrupt()).map_err(io_err("SIGINT handler"))?;
    let mut sigterm = signal(SignalKind::terminate()).map_err(io_err("SIGTERM handler"))?;
    crate::interrupt::install().map_err(io_err("signal handlers"))?;
    let a = config.agent.clone();
    let listener = http::bind(a.listen).map_err(io_err("the metrics endpoint"))?;
    crate::say!(
        "rtm-trace agent: serving /metrics, /healthz, /readyz and /debug/pprof/contention on {}://{} ({})",
        Web::scheme(web.as_deref()),
        a.listen,
        Web::describe(web.as_deref())
    );
    if let Some(w) = web::exposure_warning(a.listen, web.as_deref()) {
        crate::say!("{w}");
    }
    // One engine in the file's mode, and one in the other mode when a rule asks for it
    // (each loads its programs only when it has a target).
    let engine_in = |mode: Mode| {
        let mut c = config.clone();
        c.mode = mode;
        let source = Box::new(KernelSource::new(&c));
        let mut e = Engine::new(c, source, Vec::new());
        e.publish_processes(true);
        // It exports no system statistics: none are read or kept (their history, up to
        // 1,024 samples, would grow the agent for its first hour and a half).
        e.sample_system(false);
        // The programs stay loaded for good with `keep_loaded` (loaded below), else as
        // long as an exited target's series (churn does not reload them for every
        // short-lived process).
        e.release_after(if a.keep_loaded {
            Duration::MAX
        } else {
            Duration::from_secs_f64(a.grace)
        });
        e
    };
    let other_mode = match config.mode {
        Mode::Contention => Mode::Full,
        Mode::Full => Mode::Contention,
    };
    let mut main = engine_in(config.mode);
    let mut other = a.selects_mode(other_mode).then(|| engine_in(other_mode));
    // Loaded now, before any target: a process that lives a few milliseconds is traced
    // from its exec, not missed while the first target's load takes its 100-200 ms.
    if a.keep_loaded {
        let wanted = |mode: Mode| {
            a.select
                .iter()
                .any(|r| r.mode.unwrap_or(config.mode) == mode)
        };
        for e in std::iter::once(&mut main).chain(other.as_mut()) {
            if wanted(e.config().mode)
                && let Err(err) = e.add_targets(Vec::new())
            {
                crate::say!("rtm-trace agent: cannot load the eBPF programs: {err}");
            }
        }
    }
    let handles: Vec<(Mode, EngineHandle)> = std::iter::once((config.mode, main.handle()))
        .chain(other.as_ref().map(|e| (other_mode, e.handle())))
        .collect();
    let (texts_tx, texts_rx) = watch::channel(Texts::default());
    let ready = Arc::new(AtomicBool::new(false));
    http::spawn(
        listener,
        http::Shared {
            texts: texts_rx,
            ready: ready.clone(),
            profiles: Arc::new(Profiles::new(
                handles.iter().map(|(_, h)| h.clone()).collect(),
            )),
        },
        a.max_scrapes,
        web,
    )
    .map_err(io_err("the metrics endpoint's thread"))?;
    let defaults = Defaults {
        mode: config.mode,
        mpi: config.probe_mpi(),
    };
    let stops = handles.clone();
    // The filters of the engines whose programs are loaded already (keep_loaded): the
    // exec watcher puts selected processes into them itself.
    let filters: Vec<(Mode, crate::probes::FilterIds)> = std::iter::once(&main)
        .chain(other.as_ref())
        .filter_map(|e| Some((e.config().mode, e.filter_ids()?)))
        .collect();
    let discovery = tokio::spawn(discover(
        handles, filters, selector, a, defaults, texts_tx, ready,
    ));
    let signalled = async {
        tokio::select! {
            _ = sigint.recv() => {}
            _ = sigterm.recv() => {}
        }
        for (_, h) in &stops {
            let _ = h.stop(EndReason::Signal);
        }
    };
    let (main_result, other_result, ()) = tokio::join!(
        main.run(std::future::pending()),
        async {
            match other.as_mut() {
                Some(e) => e.run(std::future::pending()).await.map(Some),
                None => Ok(None),
            }
        },
        signalled
    );
    discovery.abort();
    let reason = main_result?;
    main.finish(reason)?;
    if let (Some(e), Some(reason)) = (other, other_result?) {
        e.finish(reason)?;
    }
    crate::say!("rtm-trace agent: stopped; every probe detached");
    Ok(0)
}
