//! Report sections beyond locks and threads: who waited for whom, rwlocks, condition
//! variables, barriers, semaphores and the thread tree. Each prints nothing when its
//! primitive was not seen.

use std::fmt::Write as _;

use rtm_common::Primitive;

use super::{
    format::{count, mean_ns, ns, opt_ns, pct},
    saved::{Doc, is_active},
    table::table,
};
use crate::model::{ObjectView, sync::Role};

/// Futex words whose waits are for work or for another thread (condition variables,
/// semaphores, barriers, joins, parked runtime threads), apart from the contention:
/// their long sleeps are no lock's cost. (Full mode lists its pthread objects of those
/// kinds in their own sections.)
pub(super) fn waiting_for_work(out: &mut String, doc: &Doc, top: usize) {
    let idle = doc
        .sync_graph
        .objects
        .iter()
        .filter(|o| is_active(o) && o.kind == Primitive::Futex && o.is_idle());
    let total = doc.sync_graph.totals().idle_words;
    if total == 0 {
        return;
    }
    let _ = writeln!(
        out,
        "\nWaiting for work or for other threads, not contention (condition variables, \
         semaphores, barriers, joins, parked runtime threads; top {} of {total})",
        top.min(total)
    );
    let rows: Vec<Vec<String>> = idle
        .take(top)
        .map(|v| {
            vec![
                v.titled(),
                v.pid.to_string(),
                count(v.counts.contended),
                ns(v.counts.contended_wait_ns),
                mean_ns(v.wait.mean_ns),
                opt_ns(v.wait.max_ns),
                v.threads.to_string(),
                count(v.counts.timeouts),
            ]
        })
        .collect();
    table(
        out,
        &[
            "object", "pid", "sleeps", "waited", "wait avg", "wait max", "threads", "timeouts",
        ],
        &rows,
    );
}

fn thread_label(doc: &Doc, pid: u32, tid: u32) -> String {
    doc.thread_label(pid, tid)
}

/// The one name of the futex word (or object) at `addr`: the object's own title when
/// it is listed, else the pthread object it lies inside (a condition variable's
/// sequence word), else its symbol, else its address.
pub(super) fn word_label(doc: &Doc, pid: u32, addr: u64, name: Option<&str>) -> String {
    let objects = &doc.sync_graph.objects;
    objects
        .iter()
        .find(|o| o.pid == pid && o.addr == addr && o.kind != Primitive::Futex)
        .or_else(|| objects.iter().find(|o| o.pid == pid && o.addr == addr))
        .or_else(|| objects.iter().find(|o| o.pid == pid && contains(o, addr)))
        .map(ObjectView::titled)
        .unwrap_or_else(|| match name {
            Some(n) => format!("futex {n}"),
            None => format!("futex {addr:#x}"),
        })
}

/// Whether pthread object `o` spans the word at `addr`.
pub(crate) fn contains(o: &ObjectView, addr: u64) -> bool {
    crate::model::wait_kind::pthread_extent(o.kind)
        .is_some_and(|size| o.addr <= addr && addr < o.addr.saturating_add(size))
}

/// Waiter -> waker edges: the answer to "who was I waiting for".
pub(super) fn waits_for(out: &mut String, doc: &Doc, top: usize) {
    let s = &doc.sync_graph;
    if s.waits_for.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "\nWho waited for whom (the thread whose wake ended the wait; top {} of {})",
        top.min(s.totals().waits_for),
        s.totals().waits_for
    );
    let rows: Vec<Vec<String>> = s
        .waits_for
        .iter()
        .take(top)
        .map(|w| {
            let waker = if w.outside {
                format!("{} (PID {}, not traced)", w.waker, w.waker_pid)
            } else if w.waker_pid != w.pid {
                format!(
                    "{} (PID {})",
                    thread_label(doc, w.waker_pid, w.waker),
                    w.waker_pid
                )
            } else {
                thread_label(doc, w.pid, w.waker)
            };
            vec![
                thread_label(doc, w.pid, w.waiter),
                waker,
                if w.at_exit {
                    w.object_name
                        .clone()
                        .unwrap_or_else(|| format!("exit of thread {}", w.waker))
                } else {
                    word_label(doc, w.pid, w.object, w.object_name.as_deref())
                },
                count(w.count),
                ns(w.wait.total_ns),
                mean_ns(w.wait.mean_ns),
                opt_ns(w.wait.max_ns),
            ]
        })
        .collect();
    table(
        out,
        &["waiter", "woken by", "on", "waits", "waited", "avg", "max"],
        &rows,
    );
}

/// Who held the mutex each thread waited on, when its wait began (contention mode).
pub(super) fn held_by(out: &mut String, doc: &Doc, top: usize) {
    let s = &doc.sync_graph;
    if s.held_by.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "\nWho held what they waited for (the mutex's owner when each wait began; top {} of {}; \
         waits on condition variables, barriers and other words have none: {})",
        top.min(s.held_by.len()),
        s.held_by.len(),
        count(s.model.waits_holder_unknown)
    );
    let rows: Vec<Vec<String>> = s
        .held_by
        .iter()
        .take(top)
        .map(|h| {
            vec![
                thread_label(doc, h.pid, h.waiter),
                thread_label(doc, h.pid, h.holder),
                word_label(doc, h.pid, h.object, h.object_name.as_deref()),
                count(h.count),
                ns(h.wait_ns),
                if h.in_progress > 0 {
                    count(h.in_progress)
                } else {
                    "-".into()
                },
            ]
        })
        .collect();
    table(
        out,
        &[
            "waiter",
            "held by",
            "on",
            "waits",
            "waited",
            "still waiting",
        ],
        &rows,
    );
}

/// Call sites: where in the program the waiting happens.
pub(super) fn call_sites(out: &mut String, doc: &Doc, top: usize) {
    let s = &doc.sync_graph;
    let sites: Vec<_> = s
        .call_sites
        .iter()
        .filter(|c| c.wait_ns > 0)
        .take(top)
        .collect();
    if sites.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "\nWhere the waiting happens (call sites, by time waited)"
    );
    let rows: Vec<Vec<String>> = sites
        .iter()
        .map(|c| {
            let object = s
                .find(c.pid, c.object, c.kind)
                .map(ObjectView::titled)
                .unwrap_or_else(|| format!("{} {:#x}", c.kind, c.object));
            vec![
                c.location
                    .clone()
                    .unwrap_or_else(|| format!("{:#x}", c.site)),
                object,
                count(c.calls),
                count(c.contended),
                ns(c.wait_ns),
            ]
        })
        .collect();
    table(
        out,
        &["call site", "object", "calls", "contended", "waited"],
        &rows,
    );
}

/// Readers and writers of each rwlock, side by side.
fn of_kind(doc: &Doc, kind: Primitive) -> impl Iterator<Item = &ObjectView> {
    doc.sync_graph
        .objects
        .iter()
        .filter(move |o| o.kind == kind)
}

pub(super) fn rwlocks(out: &mut String, doc: &Doc, top: usize) {
    let locks: Vec<&ObjectView> = of_kind(doc, Primitive::RwLock).take(top).collect();
    if locks.is_empty() {
        return;
    }
    let _ = writeln!(out, "\nRead-write locks: readers and writers");
    let mut rows = Vec::new();
    for o in locks {
        for role in [Role::Read, Role::Write] {
            let edges: Vec<_> = doc
                .sync_graph
                .edges
                .iter()
                .filter(|e| {
                    e.pid == o.pid
                        && e.object == o.addr
                        && e.kind == Primitive::RwLock
                        && e.role == role
                })
                .collect();
            if edges.is_empty() {
                continue;
            }
            let acquired: u64 = edges.iter().map(|e| e.counts.acquisitions).sum();
            let contended: u64 = edges.iter().map(|e| e.counts.contended).sum();
            let waited: u64 = edges.iter().map(|e| e.wait.total_ns).sum();
            let max_wait = edges.iter().filter_map(|e| e.wait.max_ns).max();
            let held: u64 = edges.iter().map(|e| e.hold.total_ns).sum();
            let holds: u64 = edges.iter().map(|e| e.hold.count).sum();
            rows.push(vec![
                o.label(),
                format!("{role:?}").to_lowercase(),
                edges.len().to_string(),
                count(acquired),
                count(contended),
                ns(waited),
                opt_ns(max_wait),
                held.checked_div(holds)
                    .map(ns)
                    .unwrap_or_else(|| "-".into()),
            ]);
        }
    }
    table(
        out,
        &[
            "rwlock",
            "as",
            "threads",
            "acquired",
            "contended",
            "waited",
            "wait max",
            "hold avg",
        ],
        &rows,
    );
    let _ = writeln!(
        out,
        "  (writer starvation shows as writers' wait max far above the readers' hold avg)"
    );
}

/// Condition variables: waits, timeouts, signals and wakeups.
pub(super) fn condvars(out: &mut String, doc: &Doc, top: usize) {
    let cvs: Vec<&ObjectView> = of_kind(doc, Primitive::Cond).take(top).collect();
    if cvs.is_empty() {
        return;
    }
    let _ = writeln!(out, "\nCondition variables");
    let rows: Vec<Vec<String>> = cvs
        .iter()
        .map(|o| {
            let c = &o.counts;
            let mutex = o
                .mutex
                .map(|m| {
                    doc.sync_graph
                        .find(o.pid, m, Primitive::Mutex)
                        .map(ObjectView::label)
                        .unwrap_or_else(|| format!("{m:#x}"))
                })
                .unwrap_or_else(|| "-".into());
            vec![
                o.label(),
                mutex,
                count(c.waits),
                ns(o.wait.total_ns),
                mean_ns(o.wait.mean_ns),
                opt_ns(o.wait.max_ns),
                count(c.timeouts),
                count(c.signals),
                count(c.broadcasts),
                count(c.woken),
            ]
        })
        .collect();
    table(
        out,
        &[
            "condvar",
            "mutex",
            "waits",
            "waited",
            "avg",
            "max",
            "timeouts",
            "signals",
            "broadcasts",
            "woken",
        ],
        &rows,
    );
}

/// Barriers: rounds, imbalance and who arrived last.
pub(super) fn barriers(out: &mut String, doc: &Doc, top: usize) {
    let bs: Vec<&ObjectView> = of_kind(doc, Primitive::Barrier).take(top).collect();
    if bs.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "\nBarriers (spread = last arrival - first arrival per round: the load imbalance)"
    );
    let rows: Vec<Vec<String>> = bs
        .iter()
        .filter_map(|o| {
            let b = o.barrier.as_ref()?;
            let last = b
                .last_arrivals
                .first()
                .map(|(tid, n)| {
                    format!(
                        "{} ({}/{} rounds)",
                        thread_label(doc, o.pid, *tid),
                        n,
                        b.rounds
                    )
                })
                .unwrap_or_else(|| "-".into());
            Some(vec![
                o.label(),
                count(b.rounds),
                o.threads.to_string(),
                mean_ns(b.spread.mean_ns),
                opt_ns(b.spread.p99_ns),
                opt_ns(b.spread.max_ns),
                ns(o.wait.total_ns),
                last,
            ])
        })
        .collect();
    table(
        out,
        &[
            "barrier",
            "rounds",
            "threads",
            "spread avg",
            "spread p99",
            "spread max",
            "waited",
            "most often last",
        ],
        &rows,
    );
}

/// Semaphores: acquisitions, waits and posts.
pub(super) fn semaphores(out: &mut String, doc: &Doc, top: usize) {
    let sems: Vec<&ObjectView> = of_kind(doc, Primitive::Sem).take(top).collect();
    if sems.is_empty() {
        return;
    }
    let _ = writeln!(out, "\nSemaphores");
    let rows: Vec<Vec<String>> = sems
        .iter()
        .map(|o| {
            let c = &o.counts;
            let share = if c.acquisitions > 0 {
                c.contended as f64 / c.acquisitions as f64
            } else {
                0.0
            };
            vec![
                o.label(),
                count(c.acquisitions),
                format!("{} ({})", count(c.contended), pct(share)),
                ns(o.wait.total_ns),
                opt_ns(o.wait.max_ns),
                count(c.failed_trylocks),
                count(c.timeouts),
                count(c.posts),
            ]
        })
        .collect();
    table(
        out,
        &[
            "semaphore",
            "acquired",
            "had to wait",
            "waited",
            "wait max",
            "trywait fails",
            "timeouts",
            "posts",
        ],
        &rows,
    );
}

/// The thread tree (threads whose creation was seen) and joins.
pub(super) fn thread_tree(out: &mut String, doc: &Doc, top: usize) {
    let s = &doc.sync_graph;
    let children: Vec<_> = s.threads.iter().filter(|t| t.parent.is_some()).collect();
    let joins: Vec<&ObjectView> = of_kind(doc, Primitive::Thread)
        .filter(|o| o.counts.waits > 0)
        .collect();
    let created = s.totals().children;
    if created == 0 && joins.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "\nThread tree ({} threads created during the trace; top {} by lifetime)",
        created,
        top.min(created)
    );
    let mut by_life = children.clone();
    by_life.sort_by(|a, b| b.observed_ns.cmp(&a.observed_ns).then(a.tid.cmp(&b.tid)));
    let rows: Vec<Vec<String>> = by_life
        .iter()
        .take(top)
        .map(|t| {
            let p = t.parent.expect("filtered");
            let joined = joins
                .iter()
                .find(|o| o.pid == t.pid && o.thread_tid == Some(t.tid))
                .map(|o| format!("{} (waited {})", count(o.counts.waits), ns(o.wait.total_ns)))
                .unwrap_or_else(|| "-".into());
            vec![
                thread_label(doc, t.pid, t.tid),
                if p.pid == t.pid {
                    thread_label(doc, p.pid, p.tid)
                } else {
                    format!("{} (process {})", thread_label(doc, p.pid, p.tid), t.pid)
                },
                ns(t.observed_ns),
                if t.exited { "yes" } else { "no" }.into(),
                joined,
            ]
        })
        .collect();
    table(
        out,
        &["thread", "created by", "lifetime", "exited", "joined"],
        &rows,
    );
}
