//! The long lists of a snapshot (objects, edges, waiter -> waker edges) as sorted rows
//! that refer to the model, turned into views one at a time when an output reads them.
//! A graph of 100,000 objects would otherwise be copied whole into views (a few hundred
//! bytes each, plus merged histograms) just to be written out once.

use std::borrow::Cow;

use rtm_common::Primitive;
use serde::{Serialize, Serializer};

use super::{BarrierView, EdgeView, ObjectView, WaitsForView};
use crate::model::{
    dist::Dist,
    sync::{Counts, EdgeKey, EdgeStats, ObjectKey, ObjectMeta, SyncGraph, barrier},
    wait_kind::WaitKind,
};

/// A row of a list that becomes a view when read.
pub trait Row {
    /// What the outputs read.
    type View: Serialize;
    /// The view of this row.
    fn view(&self) -> Self::View;
}

/// A sorted list of rows, read as views made one at a time.
#[derive(Debug)]
pub struct Rows<R> {
    rows: Vec<R>,
}

impl<R> Default for Rows<R> {
    fn default() -> Self {
        Self { rows: Vec::new() }
    }
}

impl<R: Row> Rows<R> {
    /// Number of rows.
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// Whether there are none.
    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The rows, in order.
    pub fn rows(&self) -> &[R] {
        &self.rows
    }

    /// The views, in order, made as they are read.
    pub fn iter(&self) -> impl Iterator<Item = R::View> + '_ {
        self.rows.iter().map(R::view)
    }
}

impl<R: Row> Serialize for Rows<R> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.iter())
    }
}

/// One thread -> object edge of the model.
#[derive(Clone, Copy, Debug)]
pub struct EdgeRow<'g> {
    /// Which thread, object and role.
    pub key: EdgeKey,
    /// Its statistics.
    pub stats: &'g EdgeStats,
}

/// Counts and distributions summed over `edges` (the distributions merged for the
/// caller's view only).
pub(super) fn totals<'g>(edges: impl IntoIterator<Item = EdgeRow<'g>>) -> (Counts, Dist, Dist) {
    let mut counts = Counts::default();
    let (mut wait, mut hold) = (Dist::default(), Dist::default());
    for e in edges {
        counts.add(&e.stats.counts());
        wait.merge(&e.stats.wait());
        hold.merge(&e.stats.hold());
    }
    (counts, wait, hold)
}

impl Row for EdgeRow<'_> {
    type View = EdgeView;

    fn view(&self) -> EdgeView {
        let (k, e) = (self.key, self.stats);
        EdgeView {
            pid: k.thread().pid,
            tid: k.thread().tid,
            kind: k.object().primitive,
            object: k.object().addr,
            role: k.role(),
            counts: e.counts(),
            wait: e.wait().summary(),
            hold: e.hold().summary(),
        }
    }
}

/// The edges, most wait first: 4-byte indices into the model, each made into a row
/// and a view only when read.
#[derive(Debug, Default)]
pub struct Edges<'g> {
    order: Vec<u32>,
    graph: Option<&'g SyncGraph>,
}

impl<'g> Edges<'g> {
    /// Every edge of `graph`, most wait first, then by key.
    pub(super) fn new(graph: &'g SyncGraph) -> Self {
        let mut order: Vec<u32> = (0..graph.edge_count() as u32).collect();
        let row = |i: &u32| {
            let (k, stats) = graph.edge_at(*i);
            let t = k.thread();
            (
                std::cmp::Reverse(stats.wait_total()),
                (t.pid, t.tid, k.object().addr, k.role()),
            )
        };
        // Keys are unique, so the order is total; computed at each comparison rather than
        // cached (a cache would take 40 bytes per edge at the peak).
        order.sort_unstable_by_key(row);
        Self {
            order,
            graph: Some(graph),
        }
    }

    /// Number of edges.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.order.len()
    }

    /// Whether there are none.
    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }

    /// The rows, in order.
    pub fn rows(&self) -> impl Iterator<Item = EdgeRow<'g>> + '_ {
        let graph = self.graph;
        self.order.iter().map(move |i| {
            let (key, stats) = graph.expect("rows come from a graph").edge_at(*i);
            EdgeRow { key, stats }
        })
    }

    /// The views, in order, made as they are read.
    pub fn iter(&self) -> impl Iterator<Item = EdgeView> + '_ {
        self.rows().map(|r| r.view())
    }
}

impl Serialize for Edges<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.iter())
    }
}

/// One object: its key, what the model knows of it, its name and where its edges are.
#[derive(Debug)]
pub struct ObjectRow<'g> {
    /// Which object.
    pub key: &'g ObjectKey,
    meta: &'g ObjectMeta,
    /// Its edges: `Objects::grouped[first..first + len]`.
    first: u32,
    len: u32,
    /// Whether it was acquired, waited on, or failed a trylock or a timed call (a futex
    /// word: whether a wait on it slept or timed out).
    pub active: bool,
    /// What its waits are for (a futex word's from `Objects::classify`).
    pub wait_kind: WaitKind,
}

/// The objects, most contended wait first.
#[derive(Debug, Default)]
pub struct Objects<'g> {
    rows: Vec<ObjectRow<'g>>,
    /// Every edge of the model (by its index there), grouped by object.
    grouped: Vec<u32>,
    /// The names of the objects that have one (few do: globals and statics).
    names: foldhash::HashMap<ObjectKey, Box<str>>,
    graph: Option<&'g SyncGraph>,
}

impl<'g> Objects<'g> {
    /// Groups the graph's edges by object and sorts the objects. `name_of` names an
    /// object.
    pub(super) fn new(
        graph: &'g SyncGraph,
        name_of: &mut dyn FnMut(&ObjectKey, &ObjectMeta) -> Option<String>,
    ) -> Self {
        let object_of = |i: &u32| graph.edge_at(*i).0.object();
        let mut grouped: Vec<u32> = (0..graph.edge_count() as u32).collect();
        grouped.sort_unstable_by_key(object_of);
        // Totals over an object's edges: counts for `active`, and the sort key.
        let sum = |first: usize, len: usize| {
            let mut counts = Counts::default();
            let mut wait_ns = 0u64;
            for i in &grouped[first..first + len] {
                let stats = graph.edge_at(*i).1;
                counts.add(&stats.counts());
                wait_ns = wait_ns.saturating_add(stats.wait_total());
            }
            (counts, wait_ns)
        };
        let mut names = foldhash::HashMap::default();
        let mut rows: Vec<ObjectRow> = graph
            .objects()
            .map(|(key, meta)| {
                if let Some(name) = name_of(key, meta) {
                    names.insert(*key, name.into_boxed_str());
                }
                let first = grouped.partition_point(|i| object_of(i) < *key);
                let len = grouped[first..].partition_point(|i| object_of(i) == *key);
                let (counts, _) = sum(first, len);
                ObjectRow {
                    key,
                    meta,
                    wait_kind: WaitKind::of_primitive(key.primitive).unwrap_or_else(|| {
                        names
                            .get(key)
                            .and_then(|n| WaitKind::of_name(n))
                            .unwrap_or_default()
                    }),
                    first: first as u32,
                    len: len as u32,
                    // A futex word whose waits all returned without sleeping kept
                    // nobody waiting: it is not in the tables of contention.
                    active: if key.primitive == Primitive::Futex {
                        counts.contended.saturating_add(counts.timeouts) > 0
                    } else {
                        counts
                            .acquisitions
                            .saturating_add(counts.waits)
                            .saturating_add(counts.failed_trylocks)
                            .saturating_add(counts.timeouts)
                            > 0
                    },
                }
            })
            .collect();
        // Most contended wait, then wait, then acquisitions first. The key is summed
        // again at each comparison rather than kept in every row (objects have few
        // edges; a large graph has many objects).
        let sort_key = |r: &ObjectRow| {
            let (c, wait_ns) = sum(r.first as usize, r.len as usize);
            (c.contended_wait_ns, wait_ns, c.acquisitions)
        };
        rows.sort_by(|a, b| {
            sort_key(b)
                .cmp(&sort_key(a))
                .then((a.key.pid, a.key.addr).cmp(&(b.key.pid, b.key.addr)))
        });
        Self {
            rows,
            grouped,
            names,
            graph: Some(graph),
        }
    }

    /// Number of objects.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// Whether there are none.
    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The rows, in order.
    pub fn rows(&self) -> &[ObjectRow<'g>] {
        &self.rows
    }

    /// Sets each futex word's kind that `kind_of` tells (from what the snapshot knows
    /// beyond the model: holders, stacks); words it says nothing of keep theirs.
    pub fn classify(&mut self, kind_of: &mut dyn FnMut(&ObjectKey) -> Option<WaitKind>) {
        for r in &mut self.rows {
            if r.key.primitive == Primitive::Futex
                && r.wait_kind == WaitKind::Unknown
                && let Some(k) = kind_of(r.key)
            {
                r.wait_kind = k;
            }
        }
    }

    /// The views, in order, made as they are read.
    pub fn iter(&self) -> impl Iterator<Item = ObjectView> + '_ {
        self.rows.iter().map(|r| self.view(r))
    }

    /// The views of objects of one kind, in order.
    #[cfg(test)]
    pub fn of_kind(&self, kind: Primitive) -> impl Iterator<Item = ObjectView> + '_ {
        self.rows
            .iter()
            .filter(move |r| r.key.primitive == kind)
            .map(|r| self.view(r))
    }

    /// The row of an object.
    #[cfg(test)]
    pub fn find(&self, pid: u32, addr: u64, kind: Primitive) -> Option<&ObjectRow<'g>> {
        self.rows
            .iter()
            .find(|r| r.key.pid == pid && r.key.addr == addr && r.key.primitive == kind)
    }

    /// An object's name, when it has one.
    pub fn name(&self, key: &ObjectKey) -> Option<&str> {
        self.names.get(key).map(|n| &**n)
    }

    /// An object's name if known, else its address.
    #[cfg(test)]
    pub fn label(&self, row: &ObjectRow) -> String {
        self.names
            .get(row.key)
            .map_or_else(|| format!("{:#x}", row.key.addr), |n| n.to_string())
    }

    /// The edges of an object's row.
    pub fn edges_of(&self, row: &ObjectRow<'g>) -> impl ExactSizeIterator<Item = EdgeRow<'g>> {
        let graph = self.graph;
        self.grouped[row.first as usize..(row.first + row.len) as usize]
            .iter()
            .map(move |i| {
                let (key, stats) = graph.expect("rows come from a graph").edge_at(*i);
                EdgeRow { key, stats }
            })
    }

    /// The view of a row: totals over its edges (distributions merged for this view
    /// only).
    pub fn view(&self, row: &ObjectRow) -> ObjectView {
        let threads = row.len as usize;
        let (counts, wait, hold) = totals(self.edges_of(row));
        let (key, meta) = (row.key, row.meta);
        ObjectView {
            pid: key.pid,
            kind: key.primitive,
            wait_kind: row.wait_kind,
            addr: key.addr,
            name: self.names.get(key).map(|n| n.to_string()),
            threads,
            counts,
            wait: wait.summary(),
            hold: hold.summary(),
            mutex: meta.mutex(),
            thread_tid: meta.tid(),
            barrier: (key.primitive == Primitive::Barrier).then(|| match meta.barrier() {
                Some(b) => barrier_view(&b.calls, b.serial),
                None => barrier_view(&[], 0),
            }),
        }
    }
}

impl Serialize for Objects<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.iter())
    }
}

/// One waiter -> waker edge.
#[derive(Debug)]
pub struct WaitsForRow<'g> {
    /// Process id.
    pub pid: u32,
    /// The waiting thread.
    pub waiter: u32,
    /// The waker's process (`pid`, or another for a process-shared word).
    pub waker_pid: u32,
    /// The waker's process was not traced.
    pub outside: bool,
    /// The thread whose wake ended the waits.
    pub waker: u32,
    /// The futex word.
    pub object: u64,
    /// Its name, when it has one.
    pub object_name: Option<String>,
    /// The waits' lengths (from the model, or matched with thread exits).
    pub wait: Cow<'g, Dist>,
    /// Waits ended by this waker.
    pub count: u64,
    /// Ended by the waker's exit.
    pub at_exit: bool,
}

impl Row for WaitsForRow<'_> {
    type View = WaitsForView;

    fn view(&self) -> WaitsForView {
        WaitsForView {
            pid: self.pid,
            waiter: self.waiter,
            waker_pid: self.waker_pid,
            outside: self.outside,
            waker: self.waker,
            object: self.object,
            object_name: self.object_name.clone(),
            count: self.count,
            wait: self.wait.summary(),
            at_exit: self.at_exit,
        }
    }
}

/// The waiter -> waker edges, most wait first.
pub type WaitsFors<'g> = Rows<WaitsForRow<'g>>;

impl<'g> WaitsFors<'g> {
    /// Sorts the rows: most wait first, then by key.
    pub(super) fn new(mut rows: Vec<WaitsForRow<'g>>) -> Self {
        rows.sort_by(|a, b| {
            b.wait.total().cmp(&a.wait.total()).then(
                (a.pid, a.waiter, a.waker_pid, a.waker, a.object).cmp(&(
                    b.pid,
                    b.waiter,
                    b.waker_pid,
                    b.waker,
                    b.object,
                )),
            )
        });
        Self { rows }
    }
}

/// Most barrier rounds listed per barrier (the summary covers all of them).
const MAX_ROUNDS_LISTED: usize = 1_000;

/// A barrier's rounds, summarized.
fn barrier_view(calls: &[barrier::Arrival], serial: u64) -> BarrierView {
    let rounds = barrier::rounds(calls);
    let mut spread = Dist::default();
    let mut budget = crate::model::HistogramBudget::new(1);
    let mut last: std::collections::HashMap<u32, u64> = std::collections::HashMap::new();
    for r in &rounds {
        spread.record(r.spread_ns, &mut budget);
        *last.entry(r.last_tid).or_default() += 1;
    }
    let mut last_arrivals: Vec<(u32, u64)> = last.into_iter().collect();
    last_arrivals.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let skip = rounds.len().saturating_sub(MAX_ROUNDS_LISTED);
    BarrierView {
        rounds: rounds.len() as u64,
        spread: spread.summary(),
        last_arrivals,
        serial_returns: serial,
        round_list: rounds.into_iter().skip(skip).collect(),
    }
}
