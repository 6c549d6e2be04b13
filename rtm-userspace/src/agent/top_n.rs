//! Sticky top-N counters with an `other` series that never goes down.
//!
//! Each update brings every group's cumulative values (a lock's acquisitions, contended
//! acquisitions, sleeps and wait time) and the total over all groups. At most N groups are exported as
//! series of their own; the rest are summed into `other`. A member stays while it grows,
//! and gives its place to a busier group only after `sticky` updates without growth, so
//! series do not flap. Every exported value only grows: a group that joins starts from
//! what `other` has not exported yet (all of it on the first update), a group that
//! leaves hands its value back to `other`, and `other` is the total less the members.
//! So the series always sum to the total, and no counter resets unless its series goes.

use std::{collections::HashMap, hash::Hash};

/// Four counters: acquisitions, contended acquisitions, sleeps, time waited in ns.
pub type Values = [u64; 4];

fn zip(a: Values, b: Values, f: impl Fn(u64, u64) -> u64) -> Values {
    std::array::from_fn(|i| f(a[i], b[i]))
}

fn sub(a: Values, b: Values) -> Values {
    zip(a, b, u64::saturating_sub)
}

fn add(a: Values, b: Values) -> Values {
    zip(a, b, u64::saturating_add)
}

fn max(a: Values, b: Values) -> Values {
    zip(a, b, u64::max)
}

fn min(a: Values, b: Values) -> Values {
    zip(a, b, u64::min)
}

#[derive(Debug, Clone)]
struct Member {
    offset: Values,
    /// The value exported last.
    shown: Values,
    /// The update at which it last grew.
    grew_at: u64,
}

/// The sticky top-N of one list.
#[derive(Debug, Clone)]
pub struct TopN<K> {
    members: HashMap<K, Member>,
    other: Values,
    seq: u64,
}

impl<K> Default for TopN<K> {
    fn default() -> Self {
        Self {
            members: HashMap::new(),
            other: [0; 4],
            seq: 0,
        }
    }
}

impl<K: Hash + Eq + Clone + Ord> TopN<K> {
    /// Takes the groups' values now and their total; returns the members' series and
    /// `other`'s. `n`: most members; `sticky`: updates a member keeps its place without
    /// growing.
    pub fn update(
        &mut self,
        groups: &HashMap<K, Values>,
        total: Values,
        n: usize,
        sticky: u64,
    ) -> (Vec<(K, Values)>, Values) {
        self.seq += 1;
        let seq = self.seq;
        for (k, m) in self.members.iter_mut() {
            if let Some(v) = groups.get(k) {
                let now = max(m.shown, sub(*v, m.offset));
                if now != m.shown {
                    m.grew_at = seq;
                }
                m.shown = now;
            }
        }
        // Candidates, busiest first.
        let mut candidates: Vec<(&K, &Values)> = groups
            .iter()
            .filter(|(k, v)| !self.members.contains_key(*k) && v.iter().any(|x| *x > 0))
            .collect();
        candidates
            .sort_by(|a, b| (b.1[3], b.1[2], b.1[0], a.0).cmp(&(a.1[3], a.1[2], a.1[0], b.0)));
        for (k, v) in candidates {
            if self.members.len() >= n {
                // The member idle longest, if it has been idle long enough.
                let Some(idle) = self
                    .members
                    .iter()
                    .filter(|(_, m)| seq.saturating_sub(m.grew_at) >= sticky)
                    .min_by_key(|(key, m)| (m.grew_at, (*key).clone()))
                    .map(|(key, _)| key.clone())
                else {
                    break;
                };
                self.members.remove(&idle);
            }
            let shown_sum = self.members.values().fold([0; 4], |s, m| add(s, m.shown));
            // What `other` holds but has not exported: a joiner may take that much.
            let headroom = sub(sub(total, shown_sum), self.other);
            let start = min(*v, headroom);
            self.members.insert(
                k.clone(),
                Member {
                    offset: sub(*v, start),
                    shown: start,
                    grew_at: seq,
                },
            );
        }
        let shown_sum = self.members.values().fold([0; 4], |s, m| add(s, m.shown));
        self.other = max(self.other, sub(total, shown_sum));
        let mut out: Vec<(K, Values)> = self
            .members
            .iter()
            .map(|(k, m)| (k.clone(), m.shown))
            .collect();
        out.sort();
        (out, self.other)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn groups(v: &[(&'static str, u64)]) -> HashMap<&'static str, Values> {
        v.iter().map(|(k, x)| (*k, [*x; 4])).collect()
    }

    fn total(g: &HashMap<&'static str, Values>) -> Values {
        g.values().fold([0; 4], |s, v| add(s, *v))
    }

    /// Checks the invariants over a random-ish walk: values only grow, series sum to
    /// the total.
    #[test]
    fn series_only_grow_and_sum_to_the_total() {
        let mut top = TopN::default();
        let mut seen: HashMap<&str, u64> = HashMap::new();
        let mut last_other = 0;
        let names = ["a", "b", "c", "d", "e", "f"];
        let mut vals: HashMap<&'static str, u64> = HashMap::new();
        for step in 0..200u64 {
            // Each step, a different pair of groups grows.
            let i = (step * 7 % 6) as usize;
            let j = (step * 3 % 6) as usize;
            *vals.entry(names[i]).or_default() += step % 5 + 1;
            *vals.entry(names[j]).or_default() += 1;
            let g: HashMap<&str, Values> = vals.iter().map(|(k, v)| (*k, [*v; 4])).collect();
            let t = total(&g);
            let (members, other) = top.update(&g, t, 2, 3);
            assert!(members.len() <= 2);
            let sum = members.iter().fold(other, |s, (_, v)| add(s, *v));
            assert_eq!(sum, t, "step {step}");
            assert!(other[0] >= last_other, "other went down at {step}");
            last_other = other[0];
            for (k, v) in members {
                if let Some(prev) = seen.get(k) {
                    assert!(v[0] >= *prev, "{k} went down at {step}");
                }
                seen.insert(k, v[0]);
            }
            seen.retain(|k, _| top.members.contains_key(k));
        }
    }

    #[test]
    fn first_update_shows_everything_and_members_stick() {
        let mut top = TopN::default();
        let g = groups(&[("a", 100), ("b", 50), ("c", 10)]);
        let (m, other) = top.update(&g, total(&g), 2, 5);
        assert_eq!(m, vec![("a", [100; 4]), ("b", [50; 4])]);
        assert_eq!(other, [10; 4]);
        // c becomes the busiest; a and b keep their places while they grow.
        let g = groups(&[("a", 101), ("b", 51), ("c", 1000)]);
        let (m, other) = top.update(&g, total(&g), 2, 5);
        assert_eq!(m, vec![("a", [101; 4]), ("b", [51; 4])]);
        assert_eq!(other, [1000; 4]);
        // b stops growing; after 5 updates c takes its place. It starts from what other
        // has not exported (b's 51 handed back, and this update's growth): other stays.
        for _ in 0..5 {
            let g = groups(&[("a", 102), ("b", 51), ("c", 1000)]);
            top.update(&g, total(&g), 2, 5);
        }
        let g = groups(&[("a", 103), ("b", 51), ("c", 1100)]);
        let (m, other) = top.update(&g, total(&g), 2, 5);
        assert_eq!(m, vec![("a", [103; 4]), ("c", [151; 4])]);
        assert_eq!(other, [1000; 4]);
        let g = groups(&[("a", 103), ("b", 51), ("c", 1200)]);
        let (m, other) = top.update(&g, total(&g), 2, 5);
        assert_eq!(m[1], ("c", [251; 4]));
        assert_eq!(other, [1000; 4]);
    }
}
