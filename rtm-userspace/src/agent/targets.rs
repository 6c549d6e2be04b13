//! The targets' loop: finds the processes the rules select (exec events from the
//! watcher, /proc rescans), attaches them (a full-mode or MPI one once its loader has
//! mapped its libraries), counts those that ended first, retires exited ones after the
//! grace period and turns each summary into the scrape's text.

use std::{
    collections::{HashMap, HashSet},
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use tokio::{
    sync::watch,
    time::{Instant, MissedTickBehavior},
};

use super::{
    discovery::{self, ProcInfo, Selector},
    exec_watch::{self, Admit, Seen},
    metrics::{Bounds, Metrics, SelfCounts, Texts},
};
use crate::{
    config::{AgentConfig, Mode},
    engine::{EngineError, EngineHandle, ProcKey, Summary, Target},
};

/// What a rule that says nothing gets.
#[derive(Debug, Clone, Copy)]
pub(super) struct Defaults {
    /// The file's mode.
    pub mode: Mode,
    /// The file's MPI choice.
    pub mpi: bool,
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
    /// once the loader has mapped them.
    deferred: Vec<Deferred>,
    /// What the exec of each process that ended before its attach showed, until a
    /// summary lists it (at most [`MAX_MISSED_INFOS`]).
    missed_infos: HashMap<ProcKey, Arc<ProcInfo>>,
    /// The processes discovery attached, while the engines list them (an admitted
    /// process the engine lists already is attached once, not again).
    attached: HashSet<ProcKey>,
}

/// Most missed processes' infos kept for their first summary.
const MAX_MISSED_INFOS: usize = 1024;

/// A process matched at its exec, waiting for the loader to map its libraries.
#[derive(Debug, Clone)]
struct Deferred {
    /// When to look next.
    due: Instant,
    /// Its exec.
    exec: Instant,
    pid: u32,
    /// Its start (clock ticks): another process with its pid is not it.
    start: u64,
    /// Looks so far.
    looks: usize,
    /// Its MPI library is to be probed: wait for that too.
    mpi: bool,
    /// The engine it is for (it is in that engine's filter already).
    engine: usize,
    /// What /proc said of it at its exec.
    info: Arc<ProcInfo>,
}

/// When a process caught at its exec is looked at, after it: the loader maps the
/// libraries in a millisecond or two; the last look attaches whatever is mapped.
const LOOKS_AFTER_EXEC: [Duration; 8] = [
    Duration::from_millis(1),
    Duration::from_millis(2),
    Duration::from_millis(4),
    Duration::from_millis(8),
    Duration::from_millis(16),
    Duration::from_millis(40),
    Duration::from_millis(100),
    Duration::from_millis(300),
];

/// Whether the loader has mapped what `pid`'s probes need: the C library (and with
/// `mpi`, an MPI library), or no loader at all (a static program).
fn loader_done(pid: u32, mpi: bool) -> bool {
    let Ok(modules) = crate::proc::process::modules(pid) else {
        return false;
    };
    let has = |prefix: &str| {
        modules.iter().any(|m| {
            m.path
                .file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(prefix))
        })
    };
    let loader = has("ld-linux") || has("ld-musl") || has("ld64.so");
    !loader || (has("libc.so") || has("libc-")) && (!mpi || has("libmpi"))
}

/// How long a process added is taken as traced before a summary lists it.
const RECENT: Duration = Duration::from_secs(30);

/// How often a rule turning targets away is said at most.
const TOLD_EVERY: Duration = Duration::from_secs(60);

/// The process's start (clock ticks since boot): with the pid, its identity.
fn start_time(pid: u32) -> u64 {
    crate::proc::process::start_ticks(pid, pid).unwrap_or(0)
}

/// Whether the process that started at `start` has ended: gone, its pid another
/// process's, or a zombie not reaped yet.
fn ended(pid: u32, start: u64) -> bool {
    // One read of /proc/PID/stat: after the comm's ')', the state (0), the flags (6)
    // and the start time (19). A process whose exit has begun (PF_EXITING) has ended
    // for an attach: its address space goes before it is a zombie.
    const PF_EXITING: u64 = 0x4;
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().take(20).collect())
        .unwrap_or_default();
    let alive = matches!(fields.first(), Some(&s) if s != "Z" && s != "X");
    let exiting = fields
        .get(6)
        .and_then(|v| v.parse::<u64>().ok())
        .is_some_and(|f| f & PF_EXITING != 0);
    !alive || exiting || fields.get(19).and_then(|v| v.parse::<u64>().ok()) != Some(start)
}

/// Whether a process whose attach failed had ended by then: now, or within a moment
/// (on a loaded machine the exit that broke the attach may not show in /proc yet).
async fn ended_by_now(pid: u32, start: u64) -> bool {
    for _ in 0..4 {
        if ended(pid, start) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    ended(pid, start)
}

impl Discovery {
    /// Looks at process `pid`, traces it if it is wanted; `execd`: it has just exec'd
    /// (its libraries may not be mapped yet). False: it could not be read (it ended).
    async fn consider(&mut self, pid: u32, execd: bool) -> bool {
        let Some(info) = ProcInfo::read(pid) else {
            return false;
        };
        self.consider_info(info, execd, false).await;
        true
    }

    /// Looks at a process read from /proc (at its exec, by the watcher, or now); traces
    /// it if it is wanted. One that ended since is counted as missed when it was.
    /// `admitted`: it was admitted at its exec (the engine may list it already; its
    /// attach is still due).
    async fn consider_info(&mut self, info: ProcInfo, execd: bool, admitted: bool) {
        let pid = info.pid;
        let key = info.key();
        if self.attached.contains(&key)
            || !admitted && (self.traced.contains(&key) || self.metrics.knows(key))
        {
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
        let want_mpi = mpi.unwrap_or(self.defaults.mpi);
        let engine = self
            .handles
            .iter()
            .position(|(m, _)| *m == mode)
            .expect("an engine for every mode a rule names");
        if execd && (mode == Mode::Full || want_mpi) {
            // In the filter already (the exec watcher put it there): the probes placed
            // for every process that maps its C library count its calls from the first,
            // while its own attach waits for the loader.
            let now = Instant::now();
            self.deferred.push(Deferred {
                due: now + LOOKS_AFTER_EXEC[0],
                exec: now,
                pid,
                start: info.start,
                looks: 0,
                mpi: want_mpi,
                engine,
                info: Arc::new(info.clone()),
            });
            return;
        }
        if self.traced.len() >= self.config.max_targets {
            self.handles[engine].1.unadmit(pid);
            self.turn_away(rule, &info);
            self.passed.insert(pid, info.start);
            return;
        }
        let target = Target {
            mpi,
            ..Target::running(pid, true)
        };
        match self.handles[engine].1.add(vec![target]).await {
            Ok(_) => {
                self.traced.insert(key);
                self.attached.insert(key);
                self.added.insert(key, Instant::now());
                self.owner.insert(key, engine);
                self.own.attached += 1;
                self.metrics.know(Arc::new(info));
            }
            Err(_) if ended_by_now(pid, info.start).await => {
                self.handles[engine].1.unadmit(pid);
                self.missed("exited_during_attach", Arc::new(info));
            }
            Err(e) => {
                self.handles[engine].1.unadmit(pid);
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
                crate::format::text::Shown(&p.comm),
                self.selector.describe(rule),
                since
            );
            *last = Some(now);
            *since = 0;
        }
    }

    /// A selected process ended before its attach: counted, and what its exec showed
    /// kept a while, so that the series of what the engine counted of it from its exec
    /// carry its labels.
    fn missed(&mut self, reason: &str, info: Arc<ProcInfo>) {
        *self.own.missed.entry(reason.into()).or_default() += 1;
        if self.missed_infos.len() >= MAX_MISSED_INFOS {
            self.missed_infos.clear();
        }
        self.missed_infos.insert(info.key(), info);
    }

    /// Looks again at the processes caught at their exec whose time has come: traced
    /// once their libraries are mapped (or at the last look), counted as missed when
    /// they ended first.
    async fn look_again(&mut self) {
        let now = Instant::now();
        let (due, later): (Vec<_>, Vec<_>) = self.deferred.drain(..).partition(|d| d.due <= now);
        self.deferred = later;
        for mut d in due {
            if ended(d.pid, d.start) {
                self.handles[d.engine].1.unadmit(d.pid);
                self.missed("exited_before_probes", d.info);
                continue;
            }
            d.looks += 1;
            if loader_done(d.pid, d.mpi) || d.looks >= LOOKS_AFTER_EXEC.len() {
                match ProcInfo::read(d.pid).filter(|i| i.start == d.start) {
                    Some(info) => self.consider_info(info, false, true).await,
                    None => {
                        self.handles[d.engine].1.unadmit(d.pid);
                        self.missed("exited_before_probes", d.info);
                    }
                }
            } else {
                d.due = d.exec + LOOKS_AFTER_EXEC[d.looks];
                self.deferred.push(d);
            }
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
        for key in &listed {
            if let Some(info) = self.missed_infos.remove(key) {
                self.metrics.know(info);
            }
        }
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
        let added = &self.added;
        self.attached
            .retain(|p| listed.contains(p) || added.contains_key(p));
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

/// Runs the targets' loop until an engine is gone; `filters`: the engines' in-kernel
/// filters (their programs loaded at start), which the exec watcher writes itself.
pub(super) async fn discover(
    handles: Vec<(Mode, EngineHandle)>,
    filters: Vec<(Mode, crate::probes::FilterIds)>,
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
    let watcher = Selector::new(&config.select, &config.exclude)
        .map_err(|e| std::io::Error::other(e.to_string()))
        .and_then(|selector| {
            exec_watch::spawn(
                selector,
                Admit {
                    handles: handles.clone(),
                    default_mode: defaults.mode,
                    filters,
                },
            )
        });
    let mut events = match watcher {
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
        missed_infos: HashMap::new(),
        attached: HashSet::new(),
    };
    // The text before the first update: the agent's own figures.
    d.update(&[Arc::new(Summary::default())], &texts);
    loop {
        tokio::select! {
            _ = rescan.tick() => {
                d.scan().await;
                ready.store(true, Ordering::Release);
            }
            r = async { events.as_mut().expect("guarded").recv().await }, if events.is_some() => {
                match r {
                    Some(Seen::Exec { pid, info, admitted, .. }) => {
                        d.own.proc_events += 1;
                        d.passed.remove(&pid);
                        if let Some(info) = info {
                            // The engine lists it from now (admitted): its series carry
                            // what its exec showed, even if it ends before its attach.
                            if admitted {
                                d.metrics.know(Arc::new((*info).clone()));
                            }
                            d.consider_info(*info, true, admitted).await;
                        }
                    }
                    Some(Seen::Lost) => {
                        // Events were lost (a full socket buffer): look at everything.
                        d.own.proc_event_errors += 1;
                        d.scan().await;
                    }
                    None => events = None,
                }
            }
            _ = async {
                let due = d.deferred.iter().map(|w| w.due).min().expect("guarded");
                tokio::time::sleep_until(due).await
            }, if !d.deferred.is_empty() => d.look_again().await,
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
