//! Lock order (full mode, where every acquisition is seen): for each process, which
//! lock each thread took while holding which, how often, and from where; every pair
//! taken in both orders is an inversion that can deadlock, whether or not it has yet.
//! Bounded: at most [`MAX_PAIRS`] ordered pairs and [`MAX_HELD`] locks held per thread
//! are kept; what is over is counted.

use foldhash::HashMap;
use serde::Serialize;

/// Ordered pairs kept.
pub const MAX_PAIRS: usize = 65_536;
/// Locks remembered as held per thread (deeper nesting is counted, not ordered).
pub const MAX_HELD: usize = 16;

/// One ordering: `then` taken while `first` was held.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Ordering {
    /// How often.
    pub count: u64,
    /// Where `first` was taken (its lock call's return address), the first time.
    pub first_site: u64,
    /// Where `then` was taken, the first time.
    pub then_site: u64,
    /// A thread that did it.
    pub tid: u32,
}

/// The lock order seen so far.
#[derive(Debug, Default)]
pub struct LockOrder {
    /// (pid, first, then) -> how.
    pairs: HashMap<(u32, u64, u64), Ordering>,
    /// (pid, tid) -> the locks it holds now with where each was taken, oldest first.
    held: HashMap<(u32, u32), Vec<(u64, u64)>>,
    /// Orderings not kept: the pair cap, or a thread holding more than [`MAX_HELD`].
    pub over_cap: u64,
}

/// A pair of locks taken in both orders.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Inversion {
    /// Process.
    pub pid: u32,
    /// One lock (the lower address).
    pub a: u64,
    /// The other.
    pub b: u64,
    /// `b` taken while holding `a`.
    pub a_then_b: Ordering,
    /// `a` taken while holding `b`.
    pub b_then_a: Ordering,
}

impl LockOrder {
    /// Thread `tid` of `pid` acquired lock `addr` from `site`.
    pub fn acquired(&mut self, pid: u32, tid: u32, addr: u64, site: u64) {
        let held = self.held.entry((pid, tid)).or_default();
        if held.iter().any(|h| h.0 == addr) {
            // Re-entered (a recursive mutex): no new order.
            held.push((addr, site));
            return;
        }
        for (i, &(first, first_site)) in held.iter().enumerate() {
            // A lock re-entered is held once.
            if held[..i].iter().any(|h| h.0 == first) {
                continue;
            }
            let key = (pid, first, addr);
            let full = self.pairs.len() >= MAX_PAIRS;
            match self.pairs.get_mut(&key) {
                Some(o) => o.count += 1,
                None if full => self.over_cap += 1,
                None => {
                    self.pairs.insert(
                        key,
                        Ordering {
                            count: 1,
                            first_site,
                            then_site: site,
                            tid,
                        },
                    );
                }
            }
        }
        if held.len() < MAX_HELD {
            held.push((addr, site));
        } else {
            self.over_cap += 1;
        }
    }

    /// Thread `tid` of `pid` released lock `addr`.
    pub fn released(&mut self, pid: u32, tid: u32, addr: u64) {
        if let Some(held) = self.held.get_mut(&(pid, tid))
            && let Some(i) = held.iter().rposition(|h| h.0 == addr)
        {
            held.remove(i);
            if held.is_empty() {
                self.held.remove(&(pid, tid));
            }
        }
    }

    /// Forgets an exited thread's holds.
    pub fn thread_exited(&mut self, pid: u32, tid: u32) {
        self.held.remove(&(pid, tid));
    }

    /// Forgets processes `pids`.
    pub fn forget(&mut self, pids: &std::collections::HashSet<u32>) {
        self.pairs.retain(|k, _| !pids.contains(&k.0));
        self.held.retain(|k, _| !pids.contains(&k.0));
    }

    /// Ordered pairs seen.
    pub fn pairs(&self) -> usize {
        self.pairs.len()
    }

    /// Every pair taken in both orders, most taken first.
    pub fn inversions(&self) -> Vec<Inversion> {
        let mut out: Vec<Inversion> = self
            .pairs
            .iter()
            .filter(|((_, first, then), _)| first < then)
            .filter_map(|(&(pid, a, b), &ab)| {
                let ba = *self.pairs.get(&(pid, b, a))?;
                Some(Inversion {
                    pid,
                    a,
                    b,
                    a_then_b: ab,
                    b_then_a: ba,
                })
            })
            .collect();
        out.sort_by(|x, y| {
            (y.a_then_b.count + y.b_then_a.count)
                .cmp(&(x.a_then_b.count + x.b_then_a.count))
                .then((x.pid, x.a, x.b).cmp(&(y.pid, y.a, y.b)))
        });
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_orders_make_an_inversion_one_order_does_not() {
        let mut o = LockOrder::default();
        // Path 1: A then B, twice.
        for _ in 0..2 {
            o.acquired(1, 10, 0xa, 0x100);
            o.acquired(1, 10, 0xb, 0x110);
            o.released(1, 10, 0xb);
            o.released(1, 10, 0xa);
        }
        // A then C, never the other way.
        o.acquired(1, 11, 0xa, 0x200);
        o.acquired(1, 11, 0xc, 0x210);
        o.released(1, 11, 0xc);
        o.released(1, 11, 0xa);
        assert!(o.inversions().is_empty());
        // Path 2: B then A, on another thread; a recursive re-entry adds nothing.
        o.acquired(1, 12, 0xb, 0x300);
        o.acquired(1, 12, 0xb, 0x301);
        o.acquired(1, 12, 0xa, 0x310);
        let inv = o.inversions();
        assert_eq!(inv.len(), 1, "{inv:?}");
        let i = &inv[0];
        assert_eq!((i.a, i.b), (0xa, 0xb));
        assert_eq!(
            (
                i.a_then_b.count,
                i.a_then_b.first_site,
                i.a_then_b.then_site
            ),
            (2, 0x100, 0x110)
        );
        assert_eq!(
            (
                i.b_then_a.count,
                i.b_then_a.first_site,
                i.b_then_a.then_site,
                i.b_then_a.tid
            ),
            (1, 0x300, 0x310, 12)
        );
        // Another process's same addresses are another pair.
        o.acquired(2, 20, 0xb, 1);
        o.acquired(2, 20, 0xa, 2);
        assert_eq!(o.inversions().len(), 1);
    }

    #[test]
    fn deep_nesting_and_many_pairs_are_bounded_and_counted() {
        let mut o = LockOrder::default();
        for l in 0..(MAX_HELD as u64 + 4) {
            o.acquired(1, 1, 0x1000 + l, 0);
        }
        assert_eq!(o.held[&(1, 1)].len(), MAX_HELD);
        assert_eq!(o.over_cap, 4);
        o.thread_exited(1, 1);
        assert!(o.held.is_empty());
    }
}
