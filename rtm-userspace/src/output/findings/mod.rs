//! Findings: what limits the traced work, ranked, each with its evidence, where in the
//! code, how sure it is and what the trace could not see. Made from a snapshot, so
//! every output says the same (the report and `rtm-trace report` open with them, the
//! JSON has them as `findings`, the HTML page shows them first).
//!
//! What they rest on (docs/findings.md): a lock "holds up" its waiters by the share
//! of their observed time they spent waiting on it; a barrier "waits for a laggard"
//! when one thread arrives last in most rounds; the wait-for graph's knot says where
//! waiting ends ([`knots`]); waiting for work (condition variables, joins, ...) is
//! called out as not the problem. In full mode the first lock findings carry a what-if
//! estimate ([`whatif`]): what halving the critical section would buy, unless other
//! processes kept the CPUs busy (then they say why there is none).

pub(crate) mod knots;
mod more;
mod simulate;
pub(crate) mod whatif;

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use super::format::{count, ns};
use crate::model::{Snapshot, wait_kind::WaitKind};
pub use whatif::WhatIf;

/// Findings kept, most important first.
const MAX_FINDINGS: usize = 6;
/// A lock whose waiters spent less of their time waiting on it is not a finding.
const MIN_LOCK_SHARE: f64 = 0.02;
/// A thread arriving last in at least this share of a barrier's rounds is its laggard.
const LAGGARD_SHARE: f64 = 0.5;
/// Below this share of lock waiting in every thread, nothing lock-bound is reported.
const LOCK_BOUND_SHARE: f64 = 0.05;
/// A lock most of whose acquisitions wait is handed from thread to thread: a convoy.
const CONVOY_SHARE: f64 = 0.75;
/// Lock findings given a what-if estimate (the first ones).
const MAX_WHAT_IFS: usize = 2;
/// The what-if asked by default: critical sections this many times shorter.
const HOLD_FACTOR: f64 = 2.0;

/// How sure a finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Confidence {
    /// Measured directly (waits and holds both seen).
    High,
    /// The waits are measured, what causes them is not (contention mode: no holds).
    Medium,
    /// An inference from little data.
    Low,
}

/// One thing the trace says about what limits the program.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Finding {
    /// `lock`, `barrier`, `idle` or `none`.
    pub kind: String,
    /// One sentence.
    pub title: String,
    /// The figures it rests on.
    pub evidence: Vec<String>,
    /// Where in the code, when known.
    pub location: Option<String>,
    /// How sure it is.
    pub confidence: Confidence,
    /// What the trace could not see, and the run that would.
    pub not_seen: Option<String>,
    /// The share of the affected threads' time it accounts for (0 to 1): the rank.
    pub share: f64,
    /// What fixing it would buy, estimated (full mode, locks).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub what_if: Option<WhatIf>,
    /// Why the estimate it would carry was not made (other processes kept the CPUs
    /// busy): then `what_if` is absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub what_if_withheld: Option<String>,
}

fn pct(v: f64) -> String {
    format!("{:.1}%", v * 100.0)
}

/// The findings of `snap`; `full`: full mode (acquisitions and holds seen).
pub fn find(snap: &Snapshot, full: bool) -> Vec<Finding> {
    let observed: HashMap<(u32, u32), u64> = snap
        .threads
        .iter()
        .map(|t| ((t.pid, t.tid), t.observed_ns))
        .collect();
    let mut found = Vec::new();
    // Per lock finding (by index in `found`): what its what-if estimate is made from.
    let mut models: Vec<(usize, Vec<whatif::Use>, String)> = Vec::new();
    let mut lock_bound = false;
    // The lock held longest (full mode): the what-if of a run no lock limits.
    let mut busiest = None;
    for row in snap.objects.rows() {
        if row.wait_kind.is_idle() || !row.active {
            continue;
        }
        let mut waited = 0u64;
        let mut their_time = 0u64;
        let mut waiters = 0usize;
        let uses = uses_of(snap, row, &observed);
        let held: u64 = uses.iter().map(|u| u.hold_ns).sum();
        if full && held > busiest.map_or(0, |(h, _)| h) {
            busiest = Some((held, row));
        }
        for e in snap.objects.edges_of(row) {
            let t = e.key.thread();
            let w = e.stats.counts().contended_wait_ns;
            if w == 0 {
                continue;
            }
            waited += w;
            their_time += observed.get(&(t.pid, t.tid)).copied().unwrap_or(0);
            waiters += 1;
        }
        if waiters == 0 || their_time == 0 {
            continue;
        }
        let share = (waited as f64 / their_time as f64).min(1.0);
        if share < MIN_LOCK_SHARE {
            continue;
        }
        lock_bound |= share >= LOCK_BOUND_SHARE;
        let v = snap.objects.view(row);
        let name = v.name.clone().unwrap_or_else(|| format!("{:#x}", v.addr));
        // Its one display name, as every table shows it.
        let title = v.titled();
        let mut evidence = vec![if full && v.counts.acquisitions > 0 {
            format!(
                "{} of {} acquisitions waited, {} in all",
                count(v.counts.contended),
                count(v.counts.acquisitions),
                ns(v.counts.contended_wait_ns)
            )
        } else {
            format!(
                "{} waits slept, {} in all",
                count(v.counts.contended),
                ns(v.counts.contended_wait_ns)
            )
        }];
        if let (Some(mean), Some(p99)) = (v.wait.mean_ns, v.wait.p99_ns) {
            evidence.push(format!(
                "a wait {} on average, {} at p99",
                ns(mean as u64),
                ns(p99)
            ));
        }
        if full && let Some(h) = v.hold.mean_ns {
            evidence.push(format!(
                "held {} on average, {} at most",
                ns(h as u64),
                ns(v.hold.max_ns.unwrap_or(0))
            ));
        }
        if full
            && waiters > 1
            && v.counts.contended as f64 >= CONVOY_SHARE * v.counts.acquisitions.max(1) as f64
        {
            evidence.push(format!(
                "a convoy: {} of acquisitions found it held, so it passes from thread to \
                 thread and every hand-off waits for a wake-up",
                pct(v.counts.contended as f64 / v.counts.acquisitions as f64)
            ));
        }
        let site = waited_at(snap, v.pid, v.addr);
        let location = site.as_ref().map(|l| format!("most waiting at {l}"));
        if full {
            models.push((found.len(), uses, halved(&name, site.as_deref())));
        }
        found.push(Finding {
            kind: "lock".into(),
            title: if waiters == 1 {
                format!(
                    "{title} holds up 1 thread: it spent {} of its time waiting for it",
                    pct(share)
                )
            } else {
                format!(
                    "{title} holds up {waiters} threads: they spent {} of their time \
                     waiting for it",
                    pct(share)
                )
            },
            evidence,
            location,
            confidence: if full {
                Confidence::High
            } else {
                Confidence::Medium
            },
            not_seen: (!full).then(|| {
                "how long it was held and where: contention mode sees the waits only; \
                 `rtm-trace -m full` (or `--func` on the critical section) shows the holds"
                    .to_owned()
            }),
            share,
            what_if: None,
            what_if_withheld: None,
        });
    }
    let mut estimated = 0;
    models.sort_by(|a, b| found[b.0].share.total_cmp(&found[a.0].share));
    for (i, uses, change) in models {
        if estimated == MAX_WHAT_IFS {
            break;
        }
        found[i].what_if = whatif::shorter_holds(&uses, HOLD_FACTOR, change);
        estimated += usize::from(found[i].what_if.is_some());
    }
    for v in snap.objects.iter().filter(|v| v.barrier.is_some()) {
        let b = v.barrier.as_ref().expect("filtered");
        let Some(&(tid, last)) = b.last_arrivals.first() else {
            continue;
        };
        if b.rounds < 3 || (last as f64) < LAGGARD_SHARE * b.rounds as f64 {
            continue;
        }
        let name = v.name.clone().unwrap_or_else(|| format!("{:#x}", v.addr));
        found.push(Finding {
            kind: "barrier".into(),
            title: format!(
                "barrier {name} waits for thread {tid}: it arrived last in {} of {} rounds",
                last, b.rounds
            ),
            evidence: vec![format!(
                "the first arrival waited {} on average for the last",
                ns(b.spread.mean_ns.unwrap_or(0.0) as u64)
            )],
            location: None,
            confidence: Confidence::High,
            not_seen: None,
            share: last as f64 / b.rounds as f64 * 0.5,
            what_if: None,
            what_if_withheld: None,
        });
    }
    found.extend(more::laggard_ranks(snap));
    found.sort_by(|a, b| b.share.total_cmp(&a.share));
    found.truncate(MAX_FINDINGS - 3);
    found.extend(knot(snap, &observed, full));
    let busy = more::BusyCpus::of(snap);
    // The estimates of a run whose CPUs were busy hold the time queueing for a CPU fixed.
    let withheld = busy.as_ref().and_then(more::BusyCpus::withholds_what_ifs);
    if let Some(why) = &withheld {
        for f in found.iter_mut().filter(|f| f.what_if.is_some()) {
            f.what_if = None;
            f.what_if_withheld = Some(why.clone());
        }
    } else if busy.is_some() {
        for f in found.iter_mut().filter(|f| f.what_if.is_some()) {
            f.not_seen = Some(
                "how much of the time outside the lock was queueing for a busy CPU: the \
                 estimate holds that time fixed, so with the CPUs saturated the real gain \
                 can differ (larger when the CPU time shorter holds free speeds up the other \
                 threads' work)"
                    .into(),
            );
        }
    }
    found.extend(busy.as_ref().map(more::BusyCpus::finding));
    let idle: u64 = snap.threads.iter().map(|t| t.idle_wait_ns).sum();
    if !lock_bound && !found.iter().any(|f| f.kind == "barrier") {
        let most = snap
            .threads
            .iter()
            .map(|t| t.lock_wait_ns() as f64 / t.observed_ns.max(1) as f64)
            .fold(0.0, f64::max);
        found.insert(
            0,
            Finding {
                kind: "none".into(),
                title: format!(
                    "no lock limits the traced work: no thread spent {} or more of its \
                     time waiting for locks (at most {})",
                    pct(LOCK_BOUND_SHARE),
                    pct(most.min(1.0))
                ),
                evidence: Vec::new(),
                location: None,
                confidence: Confidence::Medium,
                not_seen: Some(
                    "what the threads did while running (CPU, I/O): a profiler (perf) says".into(),
                ),
                share: 0.0,
                what_if: None,
                what_if_withheld: None,
            },
        );
        let estimate = busiest.and_then(|(_, row)| {
            let v = snap.objects.view(row);
            let name = v.name.clone().unwrap_or_else(|| format!("{:#x}", v.addr));
            let site = waited_at(snap, v.pid, v.addr);
            whatif::shorter_holds(
                &uses_of(snap, row, &observed),
                HOLD_FACTOR,
                halved(&name, site.as_deref()),
            )
        });
        match (estimate, &withheld) {
            (Some(_), Some(why)) => found[0].what_if_withheld = Some(why.clone()),
            (estimate, _) => found[0].what_if = estimate,
        }
    }
    if idle > 0 {
        found.push(Finding {
            kind: "idle".into(),
            title: format!(
                "{} of waiting was for work or for other threads (condition variables, \
                 joins, ...): not contention, not the problem",
                ns(idle)
            ),
            evidence: Vec::new(),
            location: None,
            confidence: Confidence::High,
            not_seen: None,
            share: 0.0,
            what_if: None,
            what_if_withheld: None,
        });
    }
    found
}

/// The wait-for graph's bottleneck as a finding (after the lock findings: it says where
/// waiting ends, they say on what).
fn knot(snap: &Snapshot, observed: &HashMap<(u32, u32), u64>, full: bool) -> Option<Finding> {
    // Whether a futex word is waiting for work: its object's kind. In full mode a
    // condition variable's word lies inside the pthread_cond_t (48 bytes) the object is
    // keyed by, so the nearest object at or below the word counts.
    let kinds: std::collections::BTreeMap<(u32, u64), WaitKind> = snap
        .objects
        .rows()
        .iter()
        .map(|r| ((r.key.pid, r.key.addr), r.wait_kind))
        .collect();
    let kind_of = |pid: u32, word: u64| {
        kinds
            .range((pid, word.saturating_sub(47))..=(pid, word))
            .next_back()
            .map_or(WaitKind::Unknown, |(_, k)| *k)
    };
    let edges: Vec<knots::WaitEdge> = snap
        .waits_for
        .rows()
        .iter()
        // A join's wait ends at the thread's exit: it says a thread ran to its end, not
        // that it held anyone up (a main thread joining its workers would otherwise make
        // the first worker joined look like everyone's bottleneck).
        .filter(|r| !r.outside && !r.at_exit)
        .map(|r| knots::WaitEdge {
            waiter: (r.pid, r.waiter),
            waker: (r.waker_pid, r.waker),
            wait_ns: r.wait.total(),
            object: match (kind_of(r.pid, r.object), &r.object_name) {
                (WaitKind::Unknown, Some(n)) => format!("futex {n}"),
                (WaitKind::Unknown, None) => format!("futex {:#x}", r.object),
                (k, Some(n)) => format!("{} {n}", k.name()),
                (k, None) => format!("{} {:#x}", k.name(), r.object),
            },
            idle: kind_of(r.pid, r.object).is_idle(),
        })
        .collect();
    let k = knots::bottleneck(&edges, observed)?;
    let names: HashMap<(u32, u32), &str> = snap
        .threads
        .iter()
        .filter_map(|t| Some(((t.pid, t.tid), t.name.as_deref()?)))
        .collect();
    let thread = |n: &(u32, u32)| match names.get(n) {
        Some(name) => format!("{name} ({})", n.1),
        None => format!("thread {}", n.1),
    };
    let mut listed: Vec<String> = k.threads.iter().take(4).map(thread).collect();
    if k.threads.len() > 4 {
        listed.push(format!("{} more", k.threads.len() - 4));
    }
    let listed = listed.join(", ");
    let their_time: u64 = k.threads.iter().filter_map(|n| observed.get(n)).sum();
    let waited = if k.threads.len() == 1 {
        k.into_ns
    } else {
        k.inside_ns
    };
    let on = k
        .objects
        .first()
        .filter(|_| waited > 0)
        .map(|(o, ns)| format!(", {} of it for {o}", pct(*ns as f64 / waited as f64)))
        .unwrap_or_default();
    let others = match k.waiting_threads {
        0 => String::new(),
        1 => format!("; 1 other thread waits for them ({})", ns(k.into_ns)),
        n => format!("; {n} other threads wait for them ({})", ns(k.into_ns)),
    };
    let (title, not_seen) = if k.threads.len() == 1 {
        (
            format!(
                "{listed} is what {} wait{} for: {} of their waiting ended with its \
                 wakes{on}; it waits for no other traced thread",
                if k.waiting_threads == 1 {
                    "1 other thread".to_owned()
                } else {
                    format!("{} other threads", k.waiting_threads)
                },
                if k.waiting_threads == 1 { "s" } else { "" },
                ns(k.into_ns)
            ),
            Some(format!(
                "what {listed} does while they wait (its own CPU work, I/O, sleeps): a CPU \
                 profile of that thread (perf record -t {}) says",
                k.threads[0].1
            )),
        )
    } else if k.idle_ns * 2 > k.inside_ns {
        (
            format!(
                "{} threads hand work to each other and wait on no one else: {listed} spent \
                 {} of their time waiting for each other, mostly for work{on}{others}",
                k.threads.len(),
                pct(k.inside_ns as f64 / their_time.max(1) as f64)
            ),
            Some(
                "which of them is slowest at its part of the work: a CPU profile of these \
                 threads says; their waiting for work is not contention"
                    .into(),
            ),
        )
    } else {
        (
            format!(
                "{} threads wait on each other and on no one else: {listed} spent {} of their \
                 time waiting for each other{on}{others}",
                k.threads.len(),
                pct(k.inside_ns as f64 / their_time.max(1) as f64)
            ),
            None,
        )
    };
    Some(Finding {
        kind: "knot".into(),
        title,
        evidence: vec![
            "from the wait-for graph: who waited until whom woke them, edges of 2% or more \
             of the waiter's time; no such edge leaves these threads"
                .into(),
        ],
        location: None,
        confidence: if full {
            Confidence::High
        } else {
            Confidence::Medium
        },
        not_seen,
        share: k.inside_ns.max(k.into_ns) as f64 / their_time.max(1) as f64,
        what_if: None,
        what_if_withheld: None,
    })
}

/// Each thread's acquisitions, holds and waits on `row`'s object, with its observed time.
fn uses_of(
    snap: &Snapshot,
    row: &crate::model::ObjectRow,
    observed: &HashMap<(u32, u32), u64>,
) -> Vec<whatif::Use> {
    let mut uses: HashMap<(u32, u32), whatif::Use> = HashMap::new();
    for e in snap.objects.edges_of(row) {
        let (c, t) = (e.stats.counts(), e.key.thread());
        let u = uses.entry((t.pid, t.tid)).or_default();
        u.acquisitions += c.acquisitions;
        u.hold_ns += e.stats.hold().total();
        u.wait_ns += c.contended_wait_ns;
        u.observed_ns = observed.get(&(t.pid, t.tid)).copied().unwrap_or(0);
    }
    let mut uses: Vec<whatif::Use> = uses.into_values().collect();
    uses.sort_by_key(|u| (u.acquisitions, u.hold_ns, u.wait_ns, u.observed_ns));
    uses
}

/// Where `addr` was waited for most, when the call site is known.
fn waited_at(snap: &Snapshot, pid: u32, addr: u64) -> Option<String> {
    snap.call_sites
        .iter()
        .filter(|c| c.pid == pid && c.object == addr)
        .max_by_key(|c| c.wait_ns)
        .and_then(|c| c.location.clone())
}

/// "the hold of audit_lock (locked at demo.c:58) were halved".
fn halved(name: &str, site: Option<&str>) -> String {
    match site.and_then(|l| l.rsplit_once(" (")) {
        Some((_, line)) => format!(
            "the hold of {name} (locked at {}) were halved",
            line.trim_end_matches(')')
        ),
        None => format!("the hold of {name} were halved"),
    }
}

/// The findings as the report's first section.
pub fn text(out: &mut String, findings: &[Finding]) {
    use std::fmt::Write as _;
    if findings.is_empty() {
        return;
    }
    let _ = writeln!(out, "\nFindings (what limits the traced work, most first)");
    for (i, f) in findings.iter().enumerate() {
        let _ = writeln!(
            out,
            "  {}. {} [{}]",
            i + 1,
            super::text::Shown(&f.title),
            match f.confidence {
                Confidence::High => "measured",
                Confidence::Medium => "waits measured, their cause inferred",
                Confidence::Low => "inferred",
            }
        );
        for e in &f.evidence {
            let _ = writeln!(out, "     {}", super::text::Shown(e));
        }
        if let Some(l) = &f.location {
            let _ = writeln!(out, "     {}", super::text::Shown(l));
        }
        if let Some(w) = &f.what_if {
            let _ = writeln!(out, "     what if: {}", super::text::Shown(&w.sentence()));
        }
        if let Some(w) = &f.what_if_withheld {
            let _ = writeln!(out, "     what if: {}", super::text::Shown(w));
        }
        if let Some(n) = &f.not_seen {
            let _ = writeln!(out, "     not seen: {}", super::text::Shown(n));
        }
    }
}
