//! A run's document for its own text report, without the rows the report neither shows
//! nor names. The whole document of a graph of 100,000 mutexes is ~130 MiB of JSON and
//! more again as views; the report shows a few dozen of its objects. Every part is the
//! document's own (each value written and read back as the JSON would carry it), the
//! object and edge lists are cut to what any section shows or looks up, and the counts
//! the report gives over every object come along ([`ObjectTotals`]): the report of this
//! document is the report of the whole one, byte for byte (the unit test below, and
//! `one_document_e2e` against `rtm-trace report` of the run's JSON).

use std::collections::{BTreeSet, HashSet};

use rtm_common::Primitive;
use serde::{Serialize, de::DeserializeOwned};

use super::{Doc, ObjectTotals, SyncGraph, is_active, is_lock, json};
use crate::{
    config::Mode,
    model::{ObjectView, Row, Snapshot},
    output::{RunInfo, dest::DestError},
};

/// A value as the document carries it: written and read back.
fn carried<T: Serialize + DeserializeOwned>(v: &T) -> Result<T, DestError> {
    serde_json::to_value(v)
        .and_then(serde_json::from_value)
        .map_err(|e| DestError::Io {
            path: "the trace's document".into(),
            source: std::io::Error::other(e.to_string()),
        })
}

impl Doc {
    /// The document of a run as its text report reads it, `top` rows a table.
    pub fn for_report(run: &RunInfo, s: &Snapshot, top: usize) -> Result<Doc, DestError> {
        // The waits-for rows (the report shows and names the first `top`).
        let waits_for: Vec<_> = s
            .waits_for
            .iter()
            .map(|w| carried(&w))
            .collect::<Result<_, _>>()?;
        // The threads it shows: the first `top`, and the `top` created during the trace
        // that lived longest (the thread tree's order).
        let mut children: Vec<_> = s.threads.iter().filter(|t| t.parent.is_some()).collect();
        children.sort_by(|a, b| b.observed_ns.cmp(&a.observed_ns).then(a.tid.cmp(&b.tid)));
        children.truncate(top);
        let mut people: HashSet<(u32, u32)> =
            s.threads.iter().take(top).map(|t| (t.pid, t.tid)).collect();
        for t in &children {
            people.insert((t.pid, t.tid));
            if let Some(p) = t.parent {
                people.insert((p.pid, p.tid));
            }
        }
        let shown_children: HashSet<(u32, u32)> = children.iter().map(|t| (t.pid, t.tid)).collect();
        // And those its rows name.
        for w in waits_for.iter().take(top) {
            people.insert((w.pid, w.waiter));
            people.insert((w.waker_pid, w.waker));
        }
        people.extend(
            s.held_by
                .iter()
                .flat_map(|h| [(h.pid, h.waiter), (h.pid, h.holder)]),
        );
        // What the report names: the words and objects of every row it may show.
        let mut named: BTreeSet<(u32, u64)> = BTreeSet::new();
        for w in waits_for.iter().take(top) {
            named.insert((w.pid, w.object));
        }
        named.extend(s.held_by.iter().map(|h| (h.pid, h.object)));
        named.extend(s.call_sites.iter().map(|c| (c.pid, c.object)));
        if let Some(st) = &s.stacks {
            named.extend(st.rows.iter().map(|r| (r.pid, r.object)));
        }
        let mut totals = ObjectTotals {
            threads: s.threads.len(),
            children: s.threads.iter().filter(|t| t.parent.is_some()).count(),
            waits_for: s.waits_for.len(),
            ..ObjectTotals::default()
        };
        let (mut locks, mut idle) = (0usize, 0usize);
        let mut of_kind = [0usize; 4];
        let mut joins = 0usize;
        // Kept objects by their place in the snapshot's order, which the whole
        // document lists them in.
        let mut objects: Vec<(usize, ObjectView)> = Vec::new();
        let mut mutexes: HashSet<(u32, u64)> = HashSet::new();
        for (at, row) in s.objects.rows().iter().enumerate() {
            let v = s.objects.view(row);
            totals.add(&v);
            // Named itself, or a pthread object a named word lies inside.
            let end = crate::model::wait_kind::pthread_extent(v.kind)
                .map_or(v.addr, |size| v.addr.saturating_add(size - 1));
            let mut keep = named.range((v.pid, v.addr)..=(v.pid, end)).next().is_some();
            if is_lock(&v) {
                keep |= locks < top;
                locks += 1;
            }
            if is_active(&v) && v.kind == Primitive::Futex && v.is_idle() {
                keep |= idle < top;
                idle += 1;
            }
            let kinds = [
                Primitive::RwLock,
                Primitive::Cond,
                Primitive::Barrier,
                Primitive::Sem,
            ];
            if let Some(k) = kinds.iter().position(|k| *k == v.kind) {
                keep |= of_kind[k] < top;
                of_kind[k] += 1;
            }
            // Joins: the thread tree looks them up by the threads it shows, and is
            // shown at all when there is any (one stands for the rest).
            if v.kind == Primitive::Thread && v.counts.waits > 0 {
                keep |= joins == 0
                    || v.thread_tid
                        .is_some_and(|tid| shown_children.contains(&(v.pid, tid)));
                joins += 1;
            }
            // Barriers: their rows name the thread most often last.
            if keep
                && let Some(b) = &v.barrier
                && let Some((tid, _)) = b.last_arrivals.first()
            {
                people.insert((v.pid, *tid));
            }
            if keep {
                if v.kind == Primitive::Cond
                    && let Some(m) = v.mutex
                {
                    mutexes.insert((v.pid, m));
                }
                objects.push((at, carried(&v)?));
            }
        }
        // The mutexes of the condition variables kept, which their rows name.
        if !mutexes.is_empty() {
            let kept: HashSet<usize> = objects.iter().map(|(at, _)| *at).collect();
            for (at, row) in s.objects.rows().iter().enumerate() {
                if row.key.primitive == Primitive::Mutex
                    && mutexes.contains(&(row.key.pid, row.key.addr))
                    && !kept.contains(&at)
                {
                    objects.push((at, carried(&s.objects.view(row))?));
                }
            }
            objects.sort_by_key(|(at, _)| *at);
        }
        let objects: Vec<ObjectView> = objects.into_iter().map(|(_, o)| o).collect();
        // Edges: the report reads only the rwlocks'.
        let mut edges = Vec::new();
        for e in s.edges.rows() {
            if e.key.object().primitive == Primitive::RwLock {
                edges.push(carried(&e.view())?);
            }
        }
        let sync_graph = SyncGraph {
            window: s.window,
            // One at a time: a value of a whole list of 20,000 threads is tens of MiB.
            threads: s
                .threads
                .iter()
                .filter(|t| people.contains(&(t.pid, t.tid)))
                .map(carried)
                .collect::<Result<_, _>>()?,
            objects,
            edges,
            waits_for,
            call_sites: s.call_sites.iter().map(carried).collect::<Result<_, _>>()?,
            model: s.model,
            stacks: s.stacks.as_ref().map(carried).transpose()?,
            held_by: s.held_by.iter().map(carried).collect::<Result<_, _>>()?,
            lock_order: s.lock_order.as_ref().map(carried).transpose()?,
            deadlocks: carried(&s.deadlocks)?,
            cannot_tell: carried(&s.cannot_tell)?,
            go_processes: s.go_processes.clone(),
            totals: Some(totals),
        };
        Ok(Doc {
            format: json::FORMAT.into(),
            version: u64::from(json::VERSION),
            tool_version: env!("CARGO_PKG_VERSION").into(),
            run: carried(run)?,
            sync_graph,
            sections: s.sections.clone(),
            merged_from: Vec::new(),
            findings: carried(&crate::output::findings::find(s, run.mode == Mode::Full))?,
        })
    }
}
