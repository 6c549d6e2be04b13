//! What-if estimates: how much faster the threads that use a lock would finish if its
//! critical section were k times shorter. From a full-mode trace: each thread's
//! acquisitions, holds and waits on the lock and its observed time give a closed
//! queueing model ([`super::simulate`]); the two things not measured (how variable the
//! time outside the lock is, how long a release takes to reach the next waiter) are
//! fitted so that the model waits as long as the threads were measured to; every fit
//! that matches gives an estimate, and they make the interval. docs/findings.md says
//! what it assumes.

use serde::{Deserialize, Serialize};

use super::simulate::{self, Params, Worker};

/// Fewer acquisitions than this make no estimate: too few rounds to simulate.
const MIN_ACQUISITIONS: u64 = 20;
/// Rounds simulated at most (the threads' acquisitions scaled down to it).
const MAX_ROUNDS: f64 = 4_000.0;
/// Variabilities of the time outside the lock tried.
const CVS: [f64; 5] = [0.0, 0.25, 0.5, 0.75, 1.0];
/// A fit matches when its mean wait is within this share of the measured one (or
/// within [`WAIT_SLACK_NS`]).
const WAIT_MATCH: f64 = 0.15;
const WAIT_SLACK_NS: f64 = 1_000.0;
const SEED: u64 = 0x5eed_2026;

/// An estimate of what a change would buy.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WhatIf {
    /// The change, as a clause: "the hold of audit_lock were halved".
    pub change: String,
    /// How many times faster the threads that use the lock would finish (their
    /// makespan now over the makespan after the change).
    pub speedup: f64,
    /// The lowest estimate over the fits that match the measured waits.
    pub low: f64,
    /// The highest.
    pub high: f64,
    /// The threads it is about.
    pub threads: usize,
}

impl WhatIf {
    /// "x1.60 [1.40-1.80] for its 4 threads if the hold of audit_lock were halved".
    pub fn sentence(&self) -> String {
        format!(
            "x{:.2} [{:.2}-{:.2}] for its {} threads if {}",
            self.speedup, self.low, self.high, self.threads, self.change
        )
    }
}

/// One thread's use of the lock, as measured.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Use {
    /// Its acquisitions of the lock.
    pub acquisitions: u64,
    /// Its time holding it, ns.
    pub hold_ns: u64,
    /// Its time waiting for it, ns.
    pub wait_ns: u64,
    /// The thread's observed time.
    pub observed_ns: u64,
}

/// The speedup of `uses`' threads if their holds were `1/k` as long, with its interval;
/// `None` when there is nothing to model (no holds measured).
pub fn shorter_holds(uses: &[Use], k: f64, change: String) -> Option<WhatIf> {
    let uses: Vec<&Use> = uses
        .iter()
        .filter(|u| u.acquisitions > 0 && u.observed_ns > 0)
        .collect();
    let acquisitions: u64 = uses.iter().map(|u| u.acquisitions).sum();
    let held: u64 = uses.iter().map(|u| u.hold_ns).sum();
    if acquisitions < MIN_ACQUISITIONS || held == 0 || k <= 0.0 {
        return None;
    }
    let measured_wait = uses.iter().map(|u| u.wait_ns).sum::<u64>() as f64 / acquisitions as f64;
    let scale = (MAX_ROUNDS / acquisitions as f64).min(1.0);
    let workers: Vec<Worker> = uses
        .iter()
        .map(|u| {
            let n = u.acquisitions as f64;
            let outside = u.observed_ns.saturating_sub(u.wait_ns + u.hold_ns) as f64;
            Worker {
                rounds: ((n * scale).round() as u32).max(1),
                outside_ns: outside / n,
                hold_ns: u.hold_ns as f64 / n,
            }
        })
        .collect();
    let mean_hold = held as f64 / acquisitions as f64;
    let matches =
        |wait: f64| (wait - measured_wait).abs() <= (measured_wait * WAIT_MATCH).max(WAIT_SLACK_NS);
    let sim = |cv: f64, handoff: f64, hold_scale: f64| {
        simulate::run(
            &workers,
            Params {
                outside_cv: cv,
                handoff_ns: handoff,
                hold_scale,
                split: 1,
            },
            SEED,
        )
    };
    let mut estimates = Vec::new();
    for cv in CVS {
        let Some(handoff) = fit_handoff(|h| sim(cv, h, 1.0).mean_wait_ns, measured_wait, mean_hold)
        else {
            continue;
        };
        if !matches(sim(cv, handoff, 1.0).mean_wait_ns) {
            continue;
        }
        let now = sim(cv, handoff, 1.0).makespan_ns;
        let after = sim(cv, handoff, 1.0 / k).makespan_ns;
        if after > 0.0 {
            estimates.push(now / after);
        }
    }
    if estimates.is_empty() {
        // Even regular threads with instant hand-offs wait longer in the model than
        // they were measured to: take that, the least queueing the model can give.
        let now = sim(0.0, 0.0, 1.0).makespan_ns;
        let after = sim(0.0, 0.0, 1.0 / k).makespan_ns;
        if after <= 0.0 {
            return None;
        }
        estimates.push(now / after);
    }
    // Shorter holds cannot make the model slower; below 1 is the noise of a short
    // simulation (another interleaving), not a loss.
    if k >= 1.0 {
        estimates.iter_mut().for_each(|e| *e = e.max(1.0));
    }
    estimates.sort_by(f64::total_cmp);
    Some(WhatIf {
        change,
        speedup: estimates[estimates.len() / 2],
        low: estimates[0],
        high: estimates[estimates.len() - 1],
        threads: workers.len(),
    })
}

/// The hand-off time at which `wait(h)` (the model's mean wait) is the measured one:
/// 0 when even that waits long enough, `None` when no hand-off up to a generous bound
/// (ten mean holds or 1 ms) reaches it.
fn fit_handoff(wait: impl Fn(f64) -> f64, measured: f64, mean_hold: f64) -> Option<f64> {
    if wait(0.0) >= measured {
        return Some(0.0);
    }
    let bound = (mean_hold * 10.0).max(1_000_000.0);
    let (mut lo, mut hi) = (0.0, mean_hold.max(1.0).min(bound));
    while wait(hi) < measured {
        if hi >= bound {
            return None;
        }
        lo = hi;
        hi = (hi * 4.0).min(bound);
    }
    for _ in 0..12 {
        let mid = (lo + hi) / 2.0;
        if wait(mid) < measured {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    Some((lo + hi) / 2.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn uses(n: usize, acquisitions: u64, hold: u64, wait: u64, outside: u64) -> Vec<Use> {
        vec![
            Use {
                acquisitions,
                hold_ns: acquisitions * hold,
                wait_ns: acquisitions * wait,
                observed_ns: acquisitions * (hold + wait + outside),
            };
            n
        ]
    }

    #[test]
    fn a_saturated_lock_nearly_doubles() {
        // 4 threads, hold 300 us, outside 300 us: the lock is the bottleneck, a round
        // takes 4 x (hold + hand-off), so a measured wait of 680 us means 20 us
        // hand-offs; halved holds: 320 / 170 = 1.88.
        let w = shorter_holds(&uses(4, 1_000, 300_000, 680_000, 300_000), 2.0, "x".into())
            .expect("modelled");
        assert!(w.speedup > 1.8 && w.speedup < 1.95, "{w:?}");
        assert!(w.low <= w.speedup && w.speedup <= w.high, "{w:?}");
    }

    #[test]
    fn little_waiting_means_little_gain() {
        let w = shorter_holds(&uses(4, 1_000, 10_000, 500, 2_000_000), 2.0, "x".into())
            .expect("modelled");
        assert!((0.99..1.02).contains(&w.speedup), "{w:?}");
    }

    #[test]
    fn no_holds_no_estimate() {
        assert_eq!(
            shorter_holds(&uses(2, 10, 0, 5, 100), 2.0, "x".into()),
            None
        );
        assert_eq!(shorter_holds(&[], 2.0, "x".into()), None);
    }

    #[test]
    fn the_fit_finds_the_handoff() {
        let h = fit_handoff(|h| 100.0 + h, 350.0, 10.0).expect("reachable");
        assert!((h - 250.0).abs() < 1.0, "{h}");
        assert_eq!(fit_handoff(|h| 100.0 + h, 50.0, 10.0), Some(0.0));
        assert_eq!(fit_handoff(|_| 1.0, 50.0, 10.0), None);
    }
}
