//! Call stacks of contended waits (contention mode): each wait that slept and was woken
//! is counted per (futex word, the waiter's stack, the waker's stack), with its wait.
//! Stacks are interned (each distinct stack once) and both tables are capped; what is
//! over a cap is counted, never silently dropped. Pure: frames arrive unwound.

use std::collections::HashMap;

use indexmap::IndexSet;
use serde::Serialize;

/// A stack: code addresses, innermost first (the first is where the thread was, the
/// others are return addresses).
pub type Frames = Box<[u64]>;

/// Which interned stack; [`StackId::NONE`] when it is not known.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StackId(u32);

impl StackId {
    /// No stack: not captured, not readable, or over the cap.
    pub const NONE: StackId = StackId(u32::MAX);

    /// Whether this is a known stack.
    pub fn is_known(self) -> bool {
        self != Self::NONE
    }
}

/// One (word, waiter stack, waker stack) of a process.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StackEdgeKey {
    /// The waiting process.
    pub pid: u32,
    /// The futex word.
    pub addr: u64,
    /// Where the waiter waited.
    pub waiter: StackId,
    /// Where the waker woke it (for a mutex: its unlock, the end of its hold).
    pub waker: StackId,
    /// The waker's process (another one for a process-shared word).
    pub waker_pid: u32,
}

/// Waits counted on a [`StackEdgeKey`]. Stacks are sampled: each sample stands for the
/// waits it was chosen among, so `waits` and `wait_ns` are estimates (exact when every
/// wait's stacks were taken, `samples == waits`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(default)]
pub struct StackEdge {
    /// Waits (the samples' weights summed).
    pub waits: u64,
    /// Their time asleep until the wake, ns (each sample's weighted).
    pub wait_ns: u64,
    /// The longest sampled, ns.
    pub max_ns: u64,
    /// Waits whose stacks were taken.
    pub samples: u64,
    /// The weights summed, in thousandths of a wait.
    #[serde(skip)]
    pub weight_milli: u64,
}

/// Why stacks are missing or were not kept.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(default)]
pub struct StackCounters {
    /// Waits counted with their stacks (one per wait that slept: woken by a thread or
    /// not).
    pub records: u64,
    /// Waiter stacks not copied: the waker was in another process (a process-shared
    /// word), whose context cannot read the waiter's memory.
    pub waiter_other_process: u64,
    /// Stacks whose memory could not be read at the wake (pages not resident).
    pub unreadable: u64,
    /// Stacks not unwound: the process's mappings were not known yet, or no frame
    /// could be recovered.
    pub not_unwound: u64,
    /// Distinct stacks not kept: the cap on stacks was reached (`max_stacks`).
    pub stacks_over_cap: u64,
    /// Waits not counted per stack: the cap on (word, stack, stack) rows was reached.
    pub edges_over_cap: u64,
    /// Waker stacks never seen for a sampled waiter's stack: its wake came just before
    /// its sleep (counted as woken before it slept), or the wake's record was lost.
    pub wake_unseen: u64,
}

/// Caps of the stack tables.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StackLimits {
    /// Distinct stacks kept (about 8 bytes per frame each).
    pub max_stacks: usize,
    /// Distinct (word, waiter stack, waker stack) rows.
    pub max_edges: usize,
}

impl Default for StackLimits {
    fn default() -> Self {
        Self {
            max_stacks: 16_384,
            max_edges: 65_536,
        }
    }
}

/// The stacks seen and the waits counted on them.
#[derive(Debug, Default)]
pub struct StackTable {
    limits: StackLimits,
    /// (pid, frames): addresses are the process's own.
    stacks: IndexSet<(u32, Frames)>,
    edges: HashMap<StackEdgeKey, StackEdge>,
    counters: StackCounters,
    /// Tables that count only the waits since each was opened (a profile over a
    /// window of time), by id: at most [`MAX_WINDOWS`].
    windows: Vec<(u64, StackTable)>,
}

/// Most windows open at once (each is a table of its own, capped like this one).
pub const MAX_WINDOWS: usize = 4;

/// One side of a wait's stacks as it arrived.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Side {
    /// Unwound frames, innermost first.
    Frames(Frames),
    /// Not copied: the waker was in another process.
    OtherProcess,
    /// The copy could not be read.
    Unreadable,
    /// Copied but not unwound, or its record was not seen.
    NotUnwound,
    /// No thread woke the wait (timed out, interrupted, ended by a thread's exit, or
    /// still asleep when the trace ended): the waker's side of such a wait.
    NoWaker,
    /// The waker's side never came: the wait's wake was seen before its sleep (it was
    /// counted as woken before it slept), or its record was lost.
    WakeUnseen,
}

impl StackTable {
    /// An empty table with these caps.
    pub fn new(limits: StackLimits) -> Self {
        Self {
            limits,
            ..Self::default()
        }
    }

    fn intern(&mut self, pid: u32, side: Side) -> StackId {
        let frames = match side {
            Side::Frames(f) => f,
            Side::OtherProcess => {
                self.counters.waiter_other_process += 1;
                return StackId::NONE;
            }
            Side::Unreadable => {
                self.counters.unreadable += 1;
                return StackId::NONE;
            }
            Side::NotUnwound => {
                self.counters.not_unwound += 1;
                return StackId::NONE;
            }
            Side::NoWaker => return StackId::NONE,
            Side::WakeUnseen => {
                self.counters.wake_unseen += 1;
                return StackId::NONE;
            }
        };
        let key = (pid, frames);
        if let Some(i) = self.stacks.get_index_of(&key) {
            return StackId(i as u32);
        }
        if self.stacks.len() >= self.limits.max_stacks {
            self.counters.stacks_over_cap += 1;
            return StackId::NONE;
        }
        StackId(self.stacks.insert_full(key).0 as u32)
    }

    /// A woken wait of `pid` on `addr` for `wait_ns`, with the waiter's and the
    /// waker's (of `waker_pid`) stacks.
    #[allow(clippy::too_many_arguments)]
    pub fn add(
        &mut self,
        pid: u32,
        addr: u64,
        wait_ns: u64,
        waiter: Side,
        waker_pid: u32,
        waker: Side,
        weight_milli: u32,
    ) {
        for (_, w) in &mut self.windows {
            w.add(
                pid,
                addr,
                wait_ns,
                waiter.clone(),
                waker_pid,
                waker.clone(),
                weight_milli,
            );
        }
        self.counters.records += 1;
        let key = StackEdgeKey {
            pid,
            addr,
            waiter: self.intern(pid, waiter),
            waker: self.intern(waker_pid, waker),
            waker_pid,
        };
        if !self.edges.contains_key(&key) && self.edges.len() >= self.limits.max_edges {
            self.counters.edges_over_cap += 1;
            return;
        }
        let e = self.edges.entry(key).or_default();
        let w = u64::from(if weight_milli == 0 {
            1000
        } else {
            weight_milli
        });
        e.samples += 1;
        e.weight_milli = e.weight_milli.saturating_add(w);
        e.waits = (e.weight_milli + 500) / 1000;
        e.wait_ns = e
            .wait_ns
            .saturating_add((u128::from(wait_ns) * u128::from(w) / 1000) as u64);
        e.max_ns = e.max_ns.max(wait_ns);
    }

    /// The frames of a known stack.
    pub fn frames(&self, id: StackId) -> Option<&[u64]> {
        self.stacks.get_index(id.0 as usize).map(|(_, f)| &f[..])
    }

    /// Every row, in no order.
    pub fn edges(&self) -> impl Iterator<Item = (&StackEdgeKey, &StackEdge)> {
        self.edges.iter()
    }

    /// The `n` rows with the most wait, most first (ties by key).
    pub fn top(&self, n: usize) -> Vec<(StackEdgeKey, StackEdge)> {
        let mut rows: Vec<_> = self.edges.iter().map(|(k, e)| (*k, *e)).collect();
        rows.sort_unstable_by(|a, b| b.1.wait_ns.cmp(&a.1.wait_ns).then(a.0.cmp(&b.0)));
        rows.truncate(n);
        rows
    }

    /// Why stacks are missing.
    pub fn counters(&self) -> StackCounters {
        self.counters
    }

    /// Whether any stack record arrived.
    pub fn is_empty(&self) -> bool {
        self.counters.records == 0
    }

    /// Forgets the processes `pids` (their stacks stay interned until the table is
    /// rebuilt: ids must stay valid; their rows go).
    /// The windows keep theirs: a window counts every wait of its time.
    pub fn forget(&mut self, pids: &std::collections::HashSet<u32>) {
        self.edges.retain(|k, _| !pids.contains(&k.pid));
        if self.edges.is_empty() {
            self.stacks.clear();
        } else {
            self.compact();
        }
    }

    /// Drops the stacks no row names any more when they are most of the interned ones
    /// (a long-running agent's processes come and go: their stacks must not fill the
    /// cap for good). Ids change; the rows are renumbered with them.
    fn compact(&mut self) {
        let used: std::collections::HashSet<StackId> = self
            .edges
            .keys()
            .flat_map(|k| [k.waiter, k.waker])
            .filter(|id| id.is_known())
            .collect();
        if used.len() * 2 > self.stacks.len() {
            return;
        }
        let old = std::mem::take(&mut self.stacks);
        let mut renumber = |id: StackId| -> StackId {
            match old.get_index(id.0 as usize) {
                Some(key) if id.is_known() => {
                    StackId(self.stacks.insert_full(key.clone()).0 as u32)
                }
                _ => StackId::NONE,
            }
        };
        self.edges = std::mem::take(&mut self.edges)
            .into_iter()
            .map(|(k, e)| {
                let k = StackEdgeKey {
                    waiter: renumber(k.waiter),
                    waker: renumber(k.waker),
                    ..k
                };
                (k, e)
            })
            .collect();
    }

    /// Starts counting the waits from now in a window of its own, `id`; false when
    /// [`MAX_WINDOWS`] are open already.
    pub fn open_window(&mut self, id: u64) -> bool {
        if self.windows.len() >= MAX_WINDOWS {
            return false;
        }
        self.windows.push((id, StackTable::new(self.limits)));
        true
    }

    /// Ends window `id`: the waits counted since it was opened.
    pub fn close_window(&mut self, id: u64) -> Option<StackTable> {
        let i = self.windows.iter().position(|(w, _)| *w == id)?;
        Some(self.windows.swap_remove(i).1)
    }

    /// Rows counted.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.edges.len()
    }

    /// Stacks interned.
    #[cfg(test)]
    pub fn stacks_interned(&self) -> usize {
        self.stacks.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frames(v: &[u64]) -> Side {
        Side::Frames(v.into())
    }

    #[test]
    fn waits_are_counted_per_word_and_stack_pair_with_stacks_interned_once() {
        let mut t = StackTable::default();
        t.add(1, 0x10, 100, frames(&[1, 2, 3]), 1, frames(&[7, 8]), 0);
        t.add(1, 0x10, 300, frames(&[1, 2, 3]), 1, frames(&[7, 8]), 0);
        t.add(1, 0x10, 50, frames(&[1, 2, 4]), 1, frames(&[7, 8]), 0);
        t.add(1, 0x20, 10, Side::OtherProcess, 2, frames(&[7, 8]), 0);
        let top = t.top(10);
        assert_eq!(top.len(), 3);
        assert_eq!(
            (top[0].1.waits, top[0].1.wait_ns, top[0].1.max_ns),
            (2, 400, 300)
        );
        assert_eq!(t.frames(top[0].0.waiter), Some(&[1, 2, 3][..]));
        assert_eq!(t.frames(top[0].0.waker), Some(&[7, 8][..]));
        // The same frames in another process are another stack (addresses are its own).
        assert_ne!(top[2].0.waker, top[0].0.waker);
        assert_eq!(top[2].0.waiter, StackId::NONE);
        assert_eq!(t.stacks.len(), 4);
        assert_eq!(t.counters().waiter_other_process, 1);
        assert_eq!(t.counters().records, 4);
    }

    #[test]
    fn caps_are_counted() {
        let mut t = StackTable::new(StackLimits {
            max_stacks: 2,
            max_edges: 2,
        });
        t.add(1, 0x10, 1, frames(&[1]), 1, frames(&[2]), 0);
        // A third distinct stack: over the cap, counted, its wait kept with no stack.
        t.add(1, 0x10, 1, frames(&[3]), 1, frames(&[2]), 0);
        assert_eq!(t.counters().stacks_over_cap, 1);
        // A third row: over the cap.
        t.add(1, 0x30, 1, frames(&[1]), 1, frames(&[2]), 0);
        assert_eq!(t.counters().edges_over_cap, 1);
        assert_eq!(t.edges().count(), 2);
        assert_eq!(t.edges().map(|(_, e)| e.waits).sum::<u64>(), 2);
    }

    #[test]
    fn a_window_counts_only_the_waits_since_it_opened() {
        let mut t = StackTable::default();
        t.add(1, 0x10, 5, frames(&[1, 2]), 1, frames(&[3]), 0);
        assert!(t.open_window(7));
        t.add(1, 0x10, 7, frames(&[1, 2]), 1, frames(&[3]), 0);
        t.add(2, 0x20, 9, frames(&[4]), 2, Side::NoWaker, 0);
        let w = t.close_window(7).expect("open");
        assert_eq!(t.edges().map(|(_, e)| e.waits).sum::<u64>(), 3);
        assert_eq!(w.edges().map(|(_, e)| e.waits).sum::<u64>(), 2);
        assert_eq!(w.edges().map(|(_, e)| e.wait_ns).sum::<u64>(), 16);
        assert!(t.close_window(7).is_none());
        for i in 0..MAX_WINDOWS as u64 {
            assert!(t.open_window(i));
        }
        assert!(!t.open_window(99));
    }

    #[test]
    fn forgotten_processes_stacks_are_dropped_and_the_rest_renumbered() {
        let mut t = StackTable::default();
        for pid in 1..=4u32 {
            let base = u64::from(pid) * 100;
            t.add(
                pid,
                0x10,
                5,
                frames(&[base, base + 1]),
                pid,
                frames(&[base + 2]),
                0,
            );
        }
        assert_eq!(t.stacks_interned(), 8);
        t.forget(&[1, 2, 3].into_iter().collect());
        assert_eq!(t.stacks_interned(), 2);
        let (k, e) = t.edges().next().map(|(k, e)| (*k, *e)).expect("a row");
        assert_eq!(k.pid, 4);
        assert_eq!(t.frames(k.waiter), Some(&[400, 401][..]));
        assert_eq!(t.frames(k.waker), Some(&[402][..]));
        assert_eq!(e.waits, 1);
    }
}
