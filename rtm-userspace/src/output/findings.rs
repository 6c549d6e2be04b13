//! Findings: what limits the traced work, ranked, each with its evidence, where in the
//! code, how sure it is and what the trace could not see. Made from a snapshot, so
//! every output says the same (the report and `rtm-trace report` open with them, the
//! JSON has them as `findings`, the HTML page shows them first).
//!
//! What they rest on (docs/findings.md): a lock "holds up" its waiters by the share
//! of their observed time they spent waiting on it; a barrier "waits for a laggard"
//! when one thread arrives last in most rounds; waiting for work (condition variables,
//! joins, ...) is called out as not the problem. No finding claims a speedup: they say
//! where the time went.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use super::format::{count, ns};
use crate::model::{Snapshot, wait_kind::WaitKind};

/// Findings kept, most important first.
const MAX_FINDINGS: usize = 5;
/// A lock whose waiters spent less of their time waiting on it is not a finding.
const MIN_LOCK_SHARE: f64 = 0.02;
/// A thread arriving last in at least this share of a barrier's rounds is its laggard.
const LAGGARD_SHARE: f64 = 0.5;
/// Below this share of lock waiting in every thread, nothing lock-bound is reported.
const LOCK_BOUND_SHARE: f64 = 0.05;

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
    let mut lock_bound = false;
    for row in snap.objects.rows() {
        if row.wait_kind.is_idle() || !row.active {
            continue;
        }
        let mut waited = 0u64;
        let mut their_time = 0u64;
        let mut waiters = 0usize;
        for e in snap.objects.edges_of(row) {
            let w = e.stats.counts().contended_wait_ns;
            if w == 0 {
                continue;
            }
            let t = e.key.thread();
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
        let kind = if row.wait_kind == WaitKind::Unknown {
            "lock word".to_owned()
        } else {
            row.wait_kind.name().to_owned()
        };
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
        let location = snap
            .call_sites
            .iter()
            .filter(|c| c.pid == v.pid && c.object == v.addr)
            .max_by_key(|c| c.wait_ns)
            .and_then(|c| c.location.clone())
            .map(|l| format!("most waiting at {l}"));
        found.push(Finding {
            kind: "lock".into(),
            title: if waiters == 1 {
                format!(
                    "{kind} {name} holds up 1 thread: it spent {} of its time waiting for it",
                    pct(share)
                )
            } else {
                format!(
                    "{kind} {name} holds up {waiters} threads: they spent {} of their time \
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
        });
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
        });
    }
    found.sort_by(|a, b| b.share.total_cmp(&a.share));
    found.truncate(MAX_FINDINGS - 1);
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
            },
        );
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
        });
    }
    found
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
        if let Some(n) = &f.not_seen {
            let _ = writeln!(out, "     not seen: {}", super::text::Shown(n));
        }
    }
}
