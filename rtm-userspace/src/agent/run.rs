//! The agent's tasks: the engine's loop, the endpoint, and the loop that discovers
//! targets, retires exited ones after the grace period and turns each summary into the
//! scrape's text.

use std::{
    collections::{HashMap, HashSet},
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use tokio::{
    signal::unix::{SignalKind, signal},
    sync::watch,
    time::{Instant, MissedTickBehavior},
};

use super::{
    discovery::{self, ProcInfo, Selector},
    http,
    metrics::{Bounds, Metrics, SelfCounts, Texts},
    proc_events::{ProcEvent, ProcEvents},
    profiles::Profiles,
    web::{self, Web},
};
use crate::{
    cli::AgentCli,
    config::{AgentConfig, CounterList, Mode, TraceConfig},
    engine::{Engine, EngineError, EngineHandle, KernelSource, ProcKey, Summary, Target},
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
                crate::output::text::path_shown(&path),
                crate::output::text::escape(&e)
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
        // The programs stay loaded as long as an exited target's series (churn does
        // not reload them for every short-lived process).
        e.release_after(Duration::from_secs_f64(a.grace));
        e
    };
    let other_mode = match config.mode {
        Mode::Contention => Mode::Full,
        Mode::Full => Mode::Contention,
    };
    let mut main = engine_in(config.mode);
    let mut other = a.selects_mode(other_mode).then(|| engine_in(other_mode));
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
    let discovery = tokio::spawn(discover(handles, selector, a, defaults, texts_tx, ready));
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

/// What a rule that says nothing gets.
#[derive(Debug, Clone, Copy)]
struct Defaults {
    mode: Mode,
    mpi: bool,
}

/// A short name for why an attach failed (a label value).
fn reason(e: &EngineError) -> &'static str {
    match e {
        EngineError::Probe(_) => "probe",
        EngineError::Io { .. } => "io",
        EngineError::Launch(_) => "launch",
        EngineError::Output(_) => "output",
        EngineError::Stopped => "stopped",
        EngineError::Func(_) => "func",
    }
}

struct Discovery {
    /// The engines, by mode: the file's first.
    handles: Vec<(Mode, EngineHandle)>,
    /// The engine (index in `handles`) tracing each process. Processes are keyed by
    /// (pid, start) here, as in the engines and the metrics: a pid the kernel gives
    /// again is another process, never merged into the series of the one that had it.
    owner: HashMap<ProcKey, usize>,
    selector: Selector,
    config: AgentConfig,
    metrics: Metrics,
    own: SelfCounts,
    /// Processes traced (added by the agent, or followed by the engine).
    traced: HashSet<ProcKey>,
    /// Processes added that no summary has listed yet, with when.
    added: HashMap<ProcKey, Instant>,
    /// Processes looked at that did not match (their start time: a pid used again is
    /// looked at again).
    passed: HashMap<u32, u64>,
    /// When each exited target was first seen exited (its grace period runs from then).
    exited: HashMap<ProcKey, Instant>,
    told: HashSet<&'static str>,
    /// Per select rule turning targets away: when it was last said, and how many
    /// since.
    turned_away_told: HashMap<usize, (Option<Instant>, u64)>,
    /// The file's mode and MPI choice.
    defaults: Defaults,
    /// Processes caught at their exec that need their libraries probed: looked at again
    /// once the loader has mapped them (when, pid).
    deferred: Vec<(Instant, u32)>,
}

/// How long a process added is taken as traced before a summary lists it.
const RECENT: Duration = Duration::from_secs(30);

/// How often a rule turning targets away is said at most.
const TOLD_EVERY: Duration = Duration::from_secs(60);

/// How long after its exec a process's libraries are surely mapped.
const LOADER_TIME: Duration = Duration::from_millis(300);

/// The process's start (clock ticks since boot): with the pid, its identity.
fn start_time(pid: u32) -> u64 {
    crate::target::process::start_ticks(pid, pid).unwrap_or(0)
}

impl Discovery {
    /// Looks at process `pid`, traces it if it is wanted; `execd`: it has just exec'd
    /// (its libraries may not be mapped yet).
    async fn consider(&mut self, pid: u32, execd: bool) {
        let Some(info) = ProcInfo::read(pid) else {
            return;
        };
        let key = info.key();
        if self.traced.contains(&key) || self.metrics.knows(key) {
            return;
        }
        let Some((rule, mpi, mode)) = self
            .selector
            .rule_for(&info)
            .map(|(i, r)| (i, r.mpi, r.mode))
        else {
            self.passed.insert(pid, info.start);
            return;
        };
        let mode = mode.unwrap_or(self.defaults.mode);
        // Library probes (MPI, full mode) need the libraries the loader maps after the
        // exec: such a process is looked at again a moment later. Contention mode needs
        // none, and starts at once.
        if execd && (mode == Mode::Full || mpi.unwrap_or(self.defaults.mpi)) {
            self.deferred.push((Instant::now() + LOADER_TIME, pid));
            return;
        }
        if self.traced.len() >= self.config.max_targets {
            self.turn_away(rule, &info);
            self.passed.insert(pid, info.start);
            return;
        }
        let target = Target {
            mpi,
            ..Target::running(pid, true)
        };
        let engine = self
            .handles
            .iter()
            .position(|(m, _)| *m == mode)
            .expect("an engine for every mode a rule names");
        match self.handles[engine].1.add(vec![target]).await {
            Ok(_) => {
                self.traced.insert(key);
                self.added.insert(key, Instant::now());
                self.owner.insert(key, engine);
                self.own.attached += 1;
                self.metrics.know(Arc::new(info));
            }
            Err(e) => {
                let r = reason(&e);
                *self.own.attach_errors.entry(r.into()).or_default() += 1;
                self.passed.insert(pid, info.start);
                if self.told.insert(r) {
                    crate::say!(
                        "rtm-trace agent: cannot trace PID {pid} ({}): {e}",
                        info.comm
                    );
                }
            }
        }
    }

    /// The target slots are full: `p`, selected by rule `rule`, is not traced. Counted
    /// by rule, and said at most once a minute per rule (with how many since), so
    /// processes planted to fill the slots show which rule let them in.
    fn turn_away(&mut self, rule: usize, p: &ProcInfo) {
        *self
            .own
            .attach_errors
            .entry("max_targets".into())
            .or_default() += 1;
        let name = format!("select[{rule}]");
        *self.own.turned_away.entry(name.clone()).or_default() += 1;
        let now = Instant::now();
        let (last, since) = self.turned_away_told.entry(rule).or_insert((None, 0));
        *since += 1;
        if last.is_none_or(|l| now.duration_since(l) >= TOLD_EVERY) {
            crate::say!(
                "rtm-trace agent: all {} target slots taken (agent.max_targets): PID {} ({}) \
                 matched by agent.{name} ({}) is not traced ({} turned away by that rule \
                 since the last message; restrict the rule, e.g. with uid or user)",
                self.config.max_targets,
                p.pid,
                crate::output::text::Shown(&p.comm),
                self.selector.describe(rule),
                since
            );
            *last = Some(now);
            *since = 0;
        }
    }

    async fn scan(&mut self) {
        let pids = discovery::all_pids();
        let now: HashSet<u32> = pids.iter().copied().collect();
        self.passed.retain(|p, _| now.contains(p));
        for pid in pids {
            if let Some(start) = self.passed.get(&pid) {
                if *start == start_time(pid) {
                    continue;
                }
                self.passed.remove(&pid);
            }
            self.consider(pid, false).await;
        }
        self.own.scans += 1;
        self.own.discovered = true;
    }

    /// New summaries (one per engine): retire exited targets past their grace, and
    /// publish the text.
    fn update(&mut self, summaries: &[Arc<Summary>], texts: &watch::Sender<Texts>) {
        for (i, s) in summaries.iter().enumerate() {
            for p in &s.processes {
                self.owner.insert((p.pid, p.start), i);
            }
        }
        let summary = &combine(summaries);
        let now = Instant::now();
        let listed: HashSet<ProcKey> = summary.processes.iter().map(|p| (p.pid, p.start)).collect();
        // Traced: what the engines list, and what was added too recently to be listed
        // (a summary may predate the add).
        self.added
            .retain(|p, at| !listed.contains(p) && now.duration_since(*at) < RECENT);
        self.traced = listed.iter().chain(self.added.keys()).copied().collect();
        self.metrics.update(summary);
        // The grace of each exited process the metrics hold (an engine drops one early
        // when its pid is traced again; its series stay their time all the same).
        let grace = Duration::from_secs_f64(self.config.grace);
        let exited: HashSet<ProcKey> = self.metrics.exited().collect();
        self.exited.retain(|k, _| exited.contains(k));
        let mut forget = Vec::new();
        for key in exited {
            let since = *self.exited.entry(key).or_insert(now);
            if now.duration_since(since) >= grace {
                forget.push(key);
            }
        }
        self.metrics.retire(&forget);
        let families = self.metrics.families(summary, &self.own);
        texts.send_replace(Texts::encode(families));
        for (i, (_, handle)) in self.handles.iter().enumerate() {
            let mine: Vec<ProcKey> = forget
                .iter()
                .copied()
                .filter(|p| self.owner.get(p) == Some(&i))
                .collect();
            if !mine.is_empty() {
                let _ = handle.forget(mine);
            }
        }
        self.owner.retain(|p, _| listed.contains(p));
    }
}

/// Resolves when any engine publishes a summary (Err: an engine is gone).
async fn changed(
    watches: &mut [watch::Receiver<Arc<Summary>>],
) -> Result<(), watch::error::RecvError> {
    let (first, rest) = watches.split_first_mut().expect("at least one engine");
    match rest.first_mut() {
        Some(second) => tokio::select! {
            r = first.changed() => r,
            r = second.changed() => r,
        },
        None => first.changed().await,
    }
}

/// The engines' summaries as one: their processes side by side, their counts summed.
fn combine(summaries: &[Arc<Summary>]) -> Summary {
    let mut out = Summary::default();
    for s in summaries {
        out.processes.extend(s.processes.iter().cloned());
        let (l, o) = (&mut out.losses, &s.losses);
        l.ring_full += o.ring_full;
        l.pending_full += o.pending_full;
        l.missed_entry += o.missed_entry;
        l.mapping_records += o.mapping_records;
        out.model.events += s.model.events;
        out.model.dropped_over_limits += s.model.dropped_over_limits;
        let k = &mut out.kernel;
        k.loaded |= s.kernel.loaded;
        k.uprobes += s.kernel.uprobes;
        for &(name, n, cap) in &s.kernel.maps {
            match k.maps.iter_mut().find(|m| m.0 == name) {
                Some(m) => {
                    m.1 += n;
                    m.2 += cap;
                }
                None => k.maps.push((name, n, cap)),
            }
        }
        if let Some(b) = &s.bpf {
            let into = out.bpf.get_or_insert_with(Default::default);
            for p in &b.programs {
                match into.programs.iter_mut().find(|q| q.name == p.name) {
                    Some(q) => {
                        q.runs += p.runs;
                        q.run_ns += p.run_ns;
                    }
                    None => into.programs.push(p.clone()),
                }
            }
            for m in &b.maps {
                match into.maps.iter_mut().find(|q| q.name == m.name) {
                    Some(q) => q.memlock_bytes += m.memlock_bytes,
                    None => into.maps.push(m.clone()),
                }
            }
        }
    }
    out
}

async fn discover(
    handles: Vec<(Mode, EngineHandle)>,
    selector: Selector,
    config: AgentConfig,
    defaults: Defaults,
    texts: watch::Sender<Texts>,
    ready: Arc<AtomicBool>,
) {
    let mut watches: Vec<_> = handles.iter().map(|(_, h)| h.summary()).collect();
    let bounds = Bounds {
        top_locks: config.top_locks,
        top_edges: config.top_edges,
        top_mpi_peers: config.top_mpi_peers,
        sticky_updates: (config.sticky / config.update_interval).ceil().max(1.0) as u64,
        max_series: config.max_series,
    };
    let mut events = match ProcEvents::open() {
        Ok(e) => Some(e),
        Err(e) => {
            crate::say!(
                "rtm-trace agent: no exec events from the kernel's process connector ({e}): new processes are found by the /proc rescan every {} s",
                config.discovery_interval
            );
            None
        }
    };
    let mut rescan = tokio::time::interval(Duration::from_secs_f64(config.discovery_interval));
    rescan.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut d = Discovery {
        handles,
        owner: HashMap::new(),
        selector,
        config,
        metrics: Metrics::new(bounds),
        own: SelfCounts::default(),
        traced: HashSet::new(),
        added: HashMap::new(),
        passed: HashMap::new(),
        exited: HashMap::new(),
        told: HashSet::new(),
        turned_away_told: HashMap::new(),
        defaults,
        deferred: Vec::new(),
    };
    // The text before the first update: the agent's own figures.
    d.update(&[Arc::new(Summary::default())], &texts);
    loop {
        tokio::select! {
            _ = rescan.tick() => {
                d.scan().await;
                ready.store(true, Ordering::Release);
            }
            r = async { events.as_mut().expect("guarded").next().await }, if events.is_some() => {
                match r {
                    Ok(evs) => {
                        d.own.proc_events += evs.len() as u64;
                        for ev in evs {
                            if let ProcEvent::Exec { pid } = ev {
                                d.passed.remove(&pid);
                                d.consider(pid, true).await;
                            }
                        }
                    }
                    Err(_) => {
                        // Events were lost (a full socket buffer): look at everything.
                        d.own.proc_event_errors += 1;
                        d.scan().await;
                    }
                }
            }
            _ = async {
                let due = d.deferred.iter().map(|(t, _)| *t).min().expect("guarded");
                tokio::time::sleep_until(due).await
            }, if !d.deferred.is_empty() => {
                let now = Instant::now();
                let (due, later): (Vec<_>, Vec<_>) =
                    d.deferred.drain(..).partition(|(t, _)| *t <= now);
                d.deferred = later;
                for (_, pid) in due {
                    d.consider(pid, false).await;
                }
            }
            r = changed(&mut watches) => {
                if r.is_err() {
                    return;
                }
                let latest: Vec<Arc<Summary>> =
                    watches.iter_mut().map(|w| w.borrow_and_update().clone()).collect();
                d.update(&latest, &texts);
            }
        }
    }
}
