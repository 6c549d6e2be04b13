//! A closed queueing model of threads sharing one lock, solved by simulation: each
//! thread repeats "work outside the lock, take the lock (first come, first served),
//! hold it", for as many rounds as it was seen to, with the measured mean times. Pure
//! and deterministic (a fixed seed), so a saved trace gives the same estimate again.
//!
//! Two things the trace does not measure are parameters: how variable the time outside
//! the lock is (`outside_cv`, 0 = always the mean, 1 = exponential) and how long a
//! release takes to reach the next waiter (`handoff_ns`: the wake-up, during which the
//! lock is free but nobody runs in it). `whatif` fits them to the measured waiting.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

/// One thread of the model.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Worker {
    /// Rounds it runs.
    pub rounds: u32,
    /// Mean time outside the lock before each acquisition, ns.
    pub outside_ns: f64,
    /// Mean time holding the lock, ns.
    pub hold_ns: f64,
}

/// The unmeasured parameters and the change asked about.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Params {
    /// Coefficient of variation of the time outside the lock, 0 to 1.
    pub outside_cv: f64,
    /// From a release to the next waiter running in the lock, ns.
    pub handoff_ns: f64,
    /// Holds are multiplied by this (0.5: halved).
    pub hold_scale: f64,
    /// The lock split into this many, each acquisition taking one at random (1: as is).
    pub split: u32,
}

/// What one simulation gave.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Outcome {
    /// When the last thread ended its last round, ns.
    pub makespan_ns: f64,
    /// Mean wait per acquisition (0 for those that found the lock free), ns.
    pub mean_wait_ns: f64,
}

/// xorshift64*: small, fast, and the same on every machine.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform in (0, 1].
    fn unit(&mut self) -> f64 {
        ((self.next() >> 11) as f64 + 1.0) / (1u64 << 53) as f64
    }

    /// Mean 1, coefficient of variation `cv` (a shifted exponential).
    fn around_one(&mut self, cv: f64) -> f64 {
        if cv <= 0.0 {
            1.0
        } else {
            (1.0 - cv) + cv * -self.unit().ln()
        }
    }
}

/// Time in the event queue: integer picoseconds, so events order exactly.
fn tick(ns: f64) -> u64 {
    (ns.max(0.0) * 1000.0) as u64
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    /// The lock `.1` was released by thread `.0`.
    Release(usize, usize),
    /// Thread `.0` asks for the lock.
    Request(usize),
}

#[derive(Default)]
struct Lock {
    held: bool,
    queue: VecDeque<(usize, u64)>,
}

/// Runs the model. `workers` start together at time 0. Each thread draws its times
/// from its own stream, so two runs that differ only in `p` see the same draws (common
/// random numbers: their ratio is not noise).
pub fn run(workers: &[Worker], p: Params, seed: u64) -> Outcome {
    let mut rng = Rng(seed | 1);
    let mut streams: Vec<Rng> = (0..workers.len() as u64)
        .map(|i| Rng((seed ^ (i + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15)) | 1))
        .collect();
    let split = p.split.max(1) as usize;
    let mut locks: Vec<Lock> = (0..split).map(|_| Lock::default()).collect();
    let mut left: Vec<u32> = workers.iter().map(|w| w.rounds).collect();
    let mut heap = BinaryHeap::new();
    let (mut waited, mut acquisitions, mut end) = (0u128, 0u64, 0u64);
    for (i, w) in workers.iter().enumerate() {
        if w.rounds > 0 {
            let first = w.outside_ns * streams[i].around_one(p.outside_cv);
            heap.push(Reverse((tick(first), Event::Request(i))));
        }
    }
    let hold = |i: usize| tick(workers[i].hold_ns * p.hold_scale);
    while let Some(Reverse((now, event))) = heap.pop() {
        match event {
            Event::Request(i) => {
                let l = if split > 1 {
                    (rng.next() % split as u64) as usize
                } else {
                    0
                };
                if locks[l].held {
                    locks[l].queue.push_back((i, now));
                } else {
                    locks[l].held = true;
                    acquisitions += 1;
                    heap.push(Reverse((now + hold(i), Event::Release(i, l))));
                }
            }
            Event::Release(i, l) => {
                left[i] -= 1;
                if left[i] == 0 {
                    end = end.max(now);
                } else {
                    let outside = workers[i].outside_ns * streams[i].around_one(p.outside_cv);
                    heap.push(Reverse((now + tick(outside), Event::Request(i))));
                }
                match locks[l].queue.pop_front() {
                    Some((next, since)) => {
                        let start = now + tick(p.handoff_ns);
                        waited += u128::from(start - since);
                        acquisitions += 1;
                        heap.push(Reverse((start + hold(next), Event::Release(next, l))));
                    }
                    None => locks[l].held = false,
                }
            }
        }
    }
    Outcome {
        makespan_ns: end as f64 / 1000.0,
        mean_wait_ns: if acquisitions == 0 {
            0.0
        } else {
            waited as f64 / 1000.0 / acquisitions as f64
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn same(rounds: u32, n: usize, outside: f64, hold: f64) -> Vec<Worker> {
        vec![
            Worker {
                rounds,
                outside_ns: outside,
                hold_ns: hold
            };
            n
        ]
    }

    const AS_IS: Params = Params {
        outside_cv: 0.0,
        handoff_ns: 0.0,
        hold_scale: 1.0,
        split: 1,
    };

    #[test]
    fn one_thread_never_waits() {
        let o = run(&same(100, 1, 300.0, 100.0), AS_IS, 1);
        assert_eq!(o.mean_wait_ns, 0.0);
        assert!((o.makespan_ns - 40_000.0).abs() < 1.0, "{o:?}");
    }

    #[test]
    fn a_saturated_lock_sets_the_pace() {
        // 4 threads wanting the lock 100 of every 150 ns: it is busy all the time, so
        // 4000 holds take 400 us; halving them halves that (still saturated: 4 x 50 of
        // every 100 ns).
        let w = same(1000, 4, 50.0, 100.0);
        let full = run(&w, AS_IS, 1);
        assert!(
            (full.makespan_ns / 400_000.0 - 1.0).abs() < 0.01,
            "{full:?}"
        );
        let half = run(
            &w,
            Params {
                hold_scale: 0.5,
                ..AS_IS
            },
            1,
        );
        assert!(
            (full.makespan_ns / half.makespan_ns - 2.0).abs() < 0.02,
            "{half:?}"
        );
    }

    #[test]
    fn handoff_adds_to_every_contended_acquisition() {
        let w = same(1000, 4, 50.0, 100.0);
        let o = run(
            &w,
            Params {
                handoff_ns: 10.0,
                ..AS_IS
            },
            1,
        );
        assert!((o.makespan_ns / 440_000.0 - 1.0).abs() < 0.01, "{o:?}");
    }

    #[test]
    fn work_outside_the_lock_bounds_the_gain() {
        // Holds of 1% of a round: halving them buys about 0.5%.
        let w = same(1000, 4, 9_900.0, 100.0);
        let a = run(
            &w,
            Params {
                outside_cv: 0.5,
                ..AS_IS
            },
            7,
        );
        let b = run(
            &w,
            Params {
                outside_cv: 0.5,
                hold_scale: 0.5,
                ..AS_IS
            },
            7,
        );
        let speedup = a.makespan_ns / b.makespan_ns;
        assert!((1.0..1.02).contains(&speedup), "{speedup}");
    }

    #[test]
    fn variability_makes_queues() {
        // Lock busy 4 x 100 of 500 ns on average: no waits when regular, some when not.
        let w = same(2000, 4, 400.0, 100.0);
        let regular = run(&w, AS_IS, 3);
        let random = run(
            &w,
            Params {
                outside_cv: 1.0,
                ..AS_IS
            },
            3,
        );
        assert!(
            random.mean_wait_ns > regular.mean_wait_ns + 10.0,
            "{regular:?} {random:?}"
        );
    }

    #[test]
    fn splitting_a_saturated_lock_helps() {
        let w = same(1000, 4, 50.0, 100.0);
        let one = run(&w, AS_IS, 5);
        let four = run(
            &w,
            Params {
                split: 4,
                outside_cv: 0.5,
                ..AS_IS
            },
            5,
        );
        assert!(one.makespan_ns / four.makespan_ns > 1.5, "{one:?} {four:?}");
    }

    #[test]
    fn the_same_seed_gives_the_same_answer() {
        let w = same(500, 3, 200.0, 100.0);
        let p = Params {
            outside_cv: 1.0,
            ..AS_IS
        };
        assert_eq!(run(&w, p, 9), run(&w, p, 9));
    }
}
