//! The agent's metrics: the engine's per-process summaries gathered into targets (the
//! processes of one program in one container), with their counters kept monotonic as
//! processes come and go, their top locks and waiter -> waker edges (sticky, with the
//! rest in `other`), and the agent's own figures. Built once per update into the text
//! served to every scrape, under a cap on series.

use std::{
    collections::{BTreeMap, HashMap},
    sync::Arc,
};

use super::{
    discovery::ProcInfo,
    exposition::{self, Family, Kind, Labels, Value},
    top_n::{TopN, Values},
};
use crate::{
    config::Mode,
    engine::{
        ProcKey, Summary,
        processes::{GroupValues, ProcessSummary},
    },
    model::{
        sync::{ProcessTotals, WAIT_BUCKETS_NS},
        views::fold::OTHER,
    },
};

mod families;
mod mpi;

use families::{count, own_families, single, target_families};

/// A target: one program (command name) in one container, traced in one mode (what
/// a series means may depend on the mode: its `mode` label says which).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TargetKey {
    /// Command name.
    pub target: String,
    /// Container id ("" outside containers).
    pub container_id: String,
    /// "contention" or "full".
    pub mode: &'static str,
}

/// A mode's name in the `mode` label.
pub fn mode_name(mode: Mode) -> &'static str {
    match mode {
        Mode::Contention => "contention",
        Mode::Full => "full",
    }
}

impl TargetKey {
    fn of(info: &ProcInfo, mode: Mode) -> Self {
        Self {
            target: info.comm.clone(),
            container_id: info.identity.container_id.clone().unwrap_or_default(),
            mode: mode_name(mode),
        }
    }

    fn labels(&self) -> Labels {
        vec![
            ("target", self.target.clone()),
            ("container_id", self.container_id.clone()),
            ("mode", self.mode.to_owned()),
        ]
    }
}

type LockKey = (String, &'static str);
type EdgeKey = (String, String);

fn values(v: &GroupValues) -> Values {
    [v.acquisitions, v.contended, v.sleeps, v.wait_ns]
}

fn plus(a: &mut Values, b: Values) {
    for (x, y) in a.iter_mut().zip(b) {
        *x = x.saturating_add(y);
    }
}

/// One target's state across updates.
#[derive(Debug, Default)]
struct Target {
    /// The last summary of each of its processes the engine still has, by (pid,
    /// start): a later process given the same pid is another entry.
    procs: HashMap<ProcKey, ProcessSummary>,
    /// What its forgotten processes had counted.
    retired: ProcessTotals,
    retired_locks: (HashMap<LockKey, Values>, Values),
    retired_edges: (HashMap<EdgeKey, Values>, Values),
    locks: TopN<LockKey>,
    edges: TopN<EdgeKey>,
    shown_locks: (Vec<(LockKey, Values)>, Values),
    shown_edges: (Vec<(EdgeKey, Values)>, Values),
    /// Its MPI ranks' top destinations.
    pairs: mpi::Pairs,
}

/// How many series and members the metrics may have.
#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    /// Locks per target.
    pub top_locks: usize,
    /// Edges per target.
    pub top_edges: usize,
    /// Destinations per MPI rank.
    pub top_mpi_peers: usize,
    /// Updates a member keeps its place without growing.
    pub sticky_updates: u64,
    /// Series per scrape.
    pub max_series: usize,
}

/// The agent's own counts, kept by the agent's tasks.
#[derive(Debug, Default, Clone)]
pub struct SelfCounts {
    /// Attach failures by reason.
    pub attach_errors: BTreeMap<String, u64>,
    /// Processes not traced because the target slots were full, by the select rule
    /// that matched them (`select[N]`).
    pub turned_away: BTreeMap<String, u64>,
    /// Full /proc scans.
    pub scans: u64,
    /// Exec and fork events read from the kernel.
    pub proc_events: u64,
    /// Process connector errors (each answered by a rescan).
    pub proc_event_errors: u64,
    /// Targets added.
    pub attached: u64,
    /// Processes a select rule matched that ended before they could be traced, by
    /// reason.
    pub missed: BTreeMap<String, u64>,
    /// Whether the first discovery pass is done.
    pub discovered: bool,
}

/// Everything the metrics are made of.
#[derive(Debug)]
pub struct Metrics {
    bounds: Bounds,
    targets: BTreeMap<TargetKey, Target>,
    /// What discovery read of each process traced.
    infos: HashMap<ProcKey, Arc<ProcInfo>>,
    series_dropped: u64,
}

/// Seconds in `ns`.
fn secs(ns: u64) -> f64 {
    ns as f64 / 1e9
}

impl Metrics {
    /// No targets yet.
    pub fn new(bounds: Bounds) -> Self {
        Self {
            bounds,
            targets: BTreeMap::new(),
            infos: HashMap::new(),
            series_dropped: 0,
        }
    }

    /// Records what discovery knows of a traced process.
    pub fn know(&mut self, info: Arc<ProcInfo>) {
        self.infos.insert(info.key(), info);
    }

    /// Whether a process is known (traced, or followed and seen).
    pub fn knows(&self, key: ProcKey) -> bool {
        self.infos.contains_key(&key)
    }

    /// Takes a new summary: processes it no longer has are retired into their target.
    pub fn update(&mut self, summary: &Summary) {
        let mut seen: HashMap<TargetKey, Vec<&ProcessSummary>> = HashMap::new();
        for p in &summary.processes {
            let key = (p.pid, p.start);
            let info = match self.infos.get(&key) {
                Some(i) => i.clone(),
                None => {
                    // A followed child: read it once (or name it by its absence: a
                    // process that has its pid now is another one).
                    let i = Arc::new(
                        ProcInfo::read(p.pid)
                            .filter(|i| i.start == p.start)
                            .unwrap_or_else(|| ProcInfo {
                                pid: p.pid,
                                start: p.start,
                                comm: "unknown".into(),
                                ..ProcInfo::default()
                            }),
                    );
                    self.infos.insert(key, i.clone());
                    i
                }
            };
            seen.entry(TargetKey::of(&info, p.mode))
                .or_default()
                .push(p);
        }
        // Retire what the engine forgot while it ran (a followed process gone), and
        // only that: a process discovery has just added may not be in this summary
        // yet, and an exited one stays for its grace (see `retire`) even when an
        // engine dropped it early, its pid traced again.
        let present: std::collections::HashSet<ProcKey> =
            summary.processes.iter().map(|p| (p.pid, p.start)).collect();
        let gone: Vec<ProcKey> = self
            .targets
            .values()
            .flat_map(|t| t.procs.iter())
            .filter(|(k, p)| p.live && !present.contains(k))
            .map(|(k, _)| *k)
            .collect();
        self.retire(&gone);
        for (key, procs) in seen {
            let t = self.targets.entry(key).or_default();
            for p in procs {
                t.procs.insert((p.pid, p.start), p.clone());
            }
        }
        self.drop_empty();
        let b = self.bounds;
        for t in self.targets.values_mut() {
            let mut locks = t.retired_locks.0.clone();
            let mut total = t.retired_locks.1;
            for p in t.procs.values() {
                for g in &p.locks {
                    plus(
                        locks.entry((g.name.clone(), g.kind)).or_default(),
                        values(&g.values),
                    );
                }
                plus(&mut total, values(&p.locks_total));
            }
            t.shown_locks = t.locks.update(&locks, total, b.top_locks, b.sticky_updates);
            let mut edges = t.retired_edges.0.clone();
            let mut total = t.retired_edges.1;
            for p in t.procs.values() {
                for g in &p.edges {
                    plus(
                        edges
                            .entry((g.waiter.clone(), g.waker.clone()))
                            .or_default(),
                        values(&g.values),
                    );
                }
                plus(&mut total, values(&p.edges_total));
            }
            t.shown_edges = t.edges.update(&edges, total, b.top_edges, b.sticky_updates);
            t.pairs.update(&t.procs, b.top_mpi_peers, b.sticky_updates);
            // Retired values of groups no longer shown are in the totals only.
            let shown: std::collections::HashSet<&LockKey> =
                t.shown_locks.0.iter().map(|(k, _)| k).collect();
            t.retired_locks.0.retain(|k, _| shown.contains(k));
            let shown: std::collections::HashSet<&EdgeKey> =
                t.shown_edges.0.iter().map(|(k, _)| k).collect();
            t.retired_edges.0.retain(|k, _| shown.contains(k));
        }
    }

    /// The processes whose last summary says they exited: their grace runs.
    pub fn exited(&self) -> impl Iterator<Item = ProcKey> + '_ {
        self.targets
            .values()
            .flat_map(|t| t.procs.iter())
            .filter(|(_, p)| !p.live)
            .map(|(k, _)| *k)
    }

    /// Retires processes (exited past their grace, or gone): what they counted stays
    /// in their target's totals; a target left with no process goes.
    pub fn retire(&mut self, keys: &[ProcKey]) {
        for t in self.targets.values_mut() {
            for key in keys {
                let Some(p) = t.procs.remove(key) else {
                    continue;
                };
                t.retired.add(&p.totals);
                for g in &p.locks {
                    let k = (g.name.clone(), g.kind);
                    if t.shown_locks.0.iter().any(|(m, _)| *m == k) {
                        plus(t.retired_locks.0.entry(k).or_default(), values(&g.values));
                    }
                }
                plus(&mut t.retired_locks.1, values(&p.locks_total));
                for g in &p.edges {
                    let k = (g.waiter.clone(), g.waker.clone());
                    if t.shown_edges.0.iter().any(|(m, _)| *m == k) {
                        plus(t.retired_edges.0.entry(k).or_default(), values(&g.values));
                    }
                }
                plus(&mut t.retired_edges.1, values(&p.edges_total));
            }
        }
        for key in keys {
            self.infos.remove(key);
        }
        self.drop_empty();
    }

    fn drop_empty(&mut self) {
        self.targets.retain(|_, t| !t.procs.is_empty());
    }

    /// The families of this update, under the series cap (the agent's own first, then
    /// the targets' totals, the time waited per lock and per edge, the info, the
    /// histograms and the other per-lock and per-edge counts); also counts what the cap
    /// dropped.
    pub fn families(&mut self, summary: &Summary, own: &SelfCounts) -> Vec<Family> {
        let mut fams = own_families(summary, own, self.targets.len());
        let mut per_target = target_families(self);
        let mut room = self.bounds.max_series.saturating_sub(count(&fams) + 2);
        let mut dropped = 0u64;
        for f in &mut per_target {
            let mut kept = Vec::with_capacity(f.samples.len());
            for (l, v) in f.samples.drain(..) {
                if v.series() <= room {
                    room -= v.series();
                    kept.push((l, v));
                } else {
                    dropped += v.series() as u64;
                }
            }
            f.samples = kept;
        }
        self.series_dropped += dropped;
        fams.push(single(
            Kind::Counter,
            "rtm_series_dropped",
            "Series left out of scrapes by the max_series cap (summed over updates).",
            Value::Int(self.series_dropped),
        ));
        fams.extend(per_target);
        let n = count(&fams) as u64 + 1;
        fams.push(single(
            Kind::Gauge,
            "rtm_series",
            "Series in this scrape.",
            Value::Int(n),
        ));
        fams
    }
}

/// The two texts of one update.
#[derive(Debug, Clone, Default)]
pub struct Texts {
    /// OpenMetrics.
    pub openmetrics: hyper::body::Bytes,
    /// Classic text format.
    pub classic: hyper::body::Bytes,
}

impl Texts {
    /// Encodes `families` both ways.
    pub fn encode(families: Vec<Family>) -> Self {
        let om = exposition::openmetrics(families);
        let classic = exposition::classic(&om);
        Self {
            openmetrics: om.into(),
            classic: classic.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::processes::LockGroup;

    fn bounds() -> Bounds {
        Bounds {
            top_locks: 5,
            top_edges: 5,
            top_mpi_peers: 2,
            sticky_updates: 10,
            max_series: 10_000,
        }
    }

    /// A target exits; within its grace an unrelated process gets its pid and is
    /// traced (another rule took it): each keeps its own series, the old target's
    /// never gain the new one's waiter names.
    #[test]
    fn a_reused_pid_never_relabels_the_old_targets_series() {
        let mut m = Metrics::new(bounds());
        let info = |start, comm: &str| {
            Arc::new(ProcInfo {
                pid: 10,
                start,
                comm: comm.into(),
                ..ProcInfo::default()
            })
        };
        let edge = |waiter: &str| crate::engine::processes::EdgeGroup {
            waiter: waiter.into(),
            waker: "main".into(),
            values: GroupValues {
                sleeps: 3,
                wait_ns: 30,
                ..GroupValues::default()
            },
        };
        m.know(info(500, "svc"));
        let mut old = proc(10, 100, 1_000);
        old.start = 500;
        old.edges = vec![edge("svc-worker")];
        let own = SelfCounts::default();
        let s = Summary {
            processes: vec![old.clone()],
            ..Summary::default()
        };
        m.update(&s);
        old.live = false;
        m.know(info(900, "unrel"));
        assert!(m.knows((10, 500)) && m.knows((10, 900)) && !m.knows((10, 901)));
        let mut new = proc(10, 7, 70);
        new.start = 900;
        new.edges = vec![edge("unrelB")];
        let s = Summary {
            processes: vec![old, new],
            ..Summary::default()
        };
        m.update(&s);
        let fams = m.families(&s, &own);
        let edges = fams.iter().find(|f| f.name == "rtm_waits_for").unwrap();
        for (labels, _) in &edges.samples {
            let get = |k: &str| labels.iter().find(|l| l.0 == k).unwrap().1.as_str();
            if get("waiter") == "unrelB" {
                assert_eq!(get("target"), "unrel", "{labels:?}");
            }
            if get("target") == "svc" {
                assert_ne!(get("waiter"), "unrelB", "{labels:?}");
            }
        }
        assert_eq!(
            value(&fams, "rtm_futex_waits", Some(("target", "svc"))),
            Some(100.0)
        );
        assert_eq!(
            value(&fams, "rtm_futex_waits", Some(("target", "unrel"))),
            Some(7.0)
        );
        // The engine dropped the old one early (its pid traced again): it stays, in
        // its grace, until the agent retires it; then its target's series go with it,
        // the new one's go on.
        let mut new = proc(10, 9, 90);
        new.start = 900;
        let s = Summary {
            processes: vec![new],
            ..Summary::default()
        };
        m.update(&s);
        assert_eq!(m.exited().collect::<Vec<_>>(), [(10, 500)]);
        let fams = m.families(&s, &own);
        assert_eq!(
            value(&fams, "rtm_futex_waits", Some(("target", "svc"))),
            Some(100.0)
        );
        m.retire(&[(10, 500)]);
        assert!(!m.knows((10, 500)));
        let fams = m.families(&s, &own);
        assert_eq!(
            value(&fams, "rtm_futex_waits", Some(("target", "svc"))),
            None
        );
        assert_eq!(
            value(&fams, "rtm_futex_waits", Some(("target", "unrel"))),
            Some(9.0)
        );
    }

    fn proc(pid: u32, waits: u64, lock_ns: u64) -> ProcessSummary {
        let mut totals = ProcessTotals {
            waits,
            ..ProcessTotals::default()
        };
        totals.sleep(lock_ns, false);
        let v = GroupValues {
            sleeps: waits,
            wait_ns: lock_ns,
            ..GroupValues::default()
        };
        ProcessSummary {
            pid,
            live: true,
            totals,
            locks: vec![LockGroup {
                name: "queue_lock".into(),
                kind: "mutex",
                values: v,
            }],
            locks_total: v,
            ..ProcessSummary::default()
        }
    }

    fn value(fams: &[Family], name: &str, label: Option<(&str, &str)>) -> Option<f64> {
        let f = fams.iter().find(|f| f.name == name)?;
        f.samples.iter().find_map(|(l, v)| {
            let ok = label.is_none_or(|(k, want)| l.iter().any(|(lk, lv)| *lk == k && lv == want));
            match (ok, v) {
                (true, Value::Int(n)) => Some(*n as f64),
                (true, Value::Float(x)) => Some(*x),
                _ => None,
            }
        })
    }

    /// Two processes of one program: the first is forgotten while the second goes on;
    /// the target's counters and its lock's series never go down.
    #[test]
    fn counters_of_a_target_survive_its_processes_coming_and_going() {
        let mut m = Metrics::new(Bounds {
            top_locks: 5,
            top_edges: 5,
            top_mpi_peers: 2,
            sticky_updates: 10,
            max_series: 10_000,
        });
        for pid in [10, 11] {
            m.know(Arc::new(ProcInfo {
                pid,
                comm: "svc".into(),
                ..ProcInfo::default()
            }));
        }
        let own = SelfCounts::default();
        let mut last = (0.0, 0.0);
        let steps = [
            vec![proc(10, 100, 1_000)],
            vec![proc(10, 150, 2_000), proc(11, 10, 500)],
            // 10 exited and was forgotten: 11 goes on.
            vec![proc(11, 40, 900)],
            vec![proc(11, 70, 1_500), proc(12, 5, 100)],
        ];
        m.know(Arc::new(ProcInfo {
            pid: 12,
            comm: "svc".into(),
            ..ProcInfo::default()
        }));
        for (i, processes) in steps.into_iter().enumerate() {
            let s = Summary {
                processes,
                ..Summary::default()
            };
            m.update(&s);
            let fams = m.families(&s, &own);
            let waits = value(&fams, "rtm_futex_waits", None).unwrap();
            let lock = value(&fams, "rtm_lock_sleeps", Some(("lock", "queue_lock"))).unwrap();
            assert!(
                waits >= last.0 && lock >= last.1,
                "step {i}: {waits} {lock} after {last:?}"
            );
            last = (waits, lock);
        }
        // Everything counted: 150 by the forgotten process, 70 and 5 by the others.
        assert_eq!(last, (225.0, 225.0));
    }

    /// One program traced in both modes (two processes, one per engine): each target
    /// carries its mode; the lock has one kind in both; sleeps and wait time are there
    /// in both, acquisitions in full mode only.
    #[test]
    fn series_say_their_mode_and_acquisitions_are_full_mode_only() {
        let mut m = Metrics::new(bounds());
        for pid in [10, 11] {
            m.know(Arc::new(ProcInfo {
                pid,
                comm: "svc".into(),
                ..ProcInfo::default()
            }));
        }
        let mut full = proc(10, 40, 4_000);
        full.mode = Mode::Full;
        full.locks[0].values.acquisitions = 1_000;
        full.locks[0].values.contended = 300;
        full.locks_total = full.locks[0].values;
        let contention = proc(11, 40, 4_000);
        let s = Summary {
            processes: vec![full, contention],
            ..Summary::default()
        };
        m.update(&s);
        let fams = m.families(&s, &SelfCounts::default());
        let series = |name: &str| -> Vec<(String, String, f64)> {
            let f = fams.iter().find(|f| f.name == name).unwrap();
            f.samples
                .iter()
                .filter_map(|(l, v)| {
                    let get = |k: &str| l.iter().find(|x| x.0 == k).map(|x| x.1.clone());
                    let v = match v {
                        Value::Int(n) => *n as f64,
                        Value::Float(x) => *x,
                        _ => return None,
                    };
                    (get("lock").as_deref() != Some(OTHER))
                        .then(|| (get("mode").unwrap(), get("kind").unwrap_or_default(), v))
                })
                .collect()
        };
        let sleeps = series("rtm_lock_sleeps");
        assert_eq!(
            sleeps,
            [
                ("contention".into(), "mutex".into(), 40.0),
                ("full".into(), "mutex".into(), 40.0)
            ]
        );
        assert_eq!(
            series("rtm_lock_acquisitions"),
            [("full".into(), "mutex".into(), 1_000.0)]
        );
        assert_eq!(
            series("rtm_lock_contended_acquisitions"),
            [("full".into(), "mutex".into(), 300.0)]
        );
        let waits = series("rtm_futex_waits");
        assert_eq!(waits.len(), 2, "{waits:?}");
        assert!(waits.iter().all(|w| w.2 == 40.0), "{waits:?}");
        let info = fams.iter().find(|f| f.name == "rtm_target").unwrap();
        assert!(
            info.samples
                .iter()
                .all(|(l, _)| l.iter().any(|x| x.0 == "mode")),
            "{:?}",
            info.samples
        );
    }
}
