//! Graphviz DOT: the sync graph (threads -> the objects they waited on -> the threads
//! whose wakes ended the waits, edge width by time waited) and the MPI rank graph
//! (ranks, edges by bytes), for `dot -Tsvg`. Names are quoted and escaped.

use std::fmt::Write as _;

use super::saved::Doc;
use crate::format::{count, dot::quote, ns};

/// Objects drawn: those threads waited on longest, contention first, then a few that
/// threads waited on for work (drawn grey).
const MAX_OBJECTS: usize = 10;
const MAX_IDLE_OBJECTS: usize = 3;
/// Threads drawn on each side of an object (its waiters, the threads whose wakes ended
/// their waits); the others are one node, their times summed.
const THREADS_PER_SIDE: usize = 3;

/// The sync graph, and the analyses' parts (the rank graph when MPI was traced), as one
/// DOT file.
pub fn render(doc: &Doc) -> String {
    let mut out = String::from(
        "digraph rtm_trace {\n  rankdir=LR;\n  node [fontname=\"sans-serif\", fontsize=10];\n  edge [fontname=\"sans-serif\", fontsize=9];\n",
    );
    sync_graph(&mut out, doc);
    crate::analyses::dot(&doc.sections, &mut out);
    out.push_str("}\n");
    out
}

/// `n` `what`s, in words ("1 wait", "118 waits").
fn times(n: u64, what: &str) -> String {
    if n == 1 {
        format!("1 {what}")
    } else {
        format!("{} {what}s", count(n))
    }
}

/// One side of an object: a thread (or a process not traced) and its summed waits.
struct Side {
    node: String,
    label: String,
    pid: Option<u32>,
    waits: u64,
    wait_ns: u64,
}

/// The objects threads waited on longest, each with its top waiters and wakers, in a
/// cluster per process: a graph a person can read at any size (the whole graph is in
/// the JSON).
fn sync_graph(out: &mut String, doc: &Doc) {
    let g = &doc.sync_graph;
    let mut objects: Vec<_> = g.objects.iter().filter(|o| o.wait.total_ns > 0).collect();
    objects.sort_by_key(|o| std::cmp::Reverse((o.counts.contended_wait_ns, o.wait.total_ns)));
    let (idle, busy): (Vec<_>, Vec<_>) = objects.iter().partition(|o| o.is_idle());
    let shown: Vec<&crate::model::ObjectView> = busy
        .iter()
        .take(MAX_OBJECTS)
        .chain(idle.iter().take(MAX_IDLE_OBJECTS))
        .copied()
        .collect();
    let rest_ns: u64 = objects.iter().map(|o| o.wait.total_ns).sum::<u64>()
        - shown.iter().map(|o| o.wait.total_ns).sum::<u64>();
    let _ = writeln!(
        out,
        "  label={};\n  labelloc=t;",
        quote(&format!(
            "Who waited on what, and whose wakes ended the waits: the {} objects waited on \
             longest of {}{} (red: waited on; blue: woke them; grey: waiting for work). \
             Every object and edge is in the JSON.",
            shown.len(),
            objects.len(),
            if objects.len() > shown.len() {
                format!(", the others {} waited in all", ns(rest_ns))
            } else {
                String::new()
            }
        ))
    );
    let max = shown
        .iter()
        .map(|o| o.wait.total_ns)
        .max()
        .unwrap_or(1)
        .max(1) as f64;
    let width = |v: u64| 1.0 + 5.0 * (v as f64 / max).sqrt();
    let thread = |pid: u32, tid: u32| format!("t{pid}_{tid}");
    // Nodes by process (a cluster each), edges after them.
    let mut by_pid: std::collections::BTreeMap<u32, Vec<String>> = Default::default();
    let mut outside: Vec<String> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    let mut edges = String::new();
    for o in &shown {
        let id = format!("o{}_{:x}", o.pid, o.addr);
        let fill = if o.is_idle() { "#dddddd" } else { "#f3d9a4" };
        by_pid.entry(o.pid).or_default().push(format!(
            "{id} [shape=ellipse, style=filled, fillcolor=\"{fill}\", label={}];",
            quote(&o.titled())
        ));
        let mut waiters: Vec<Side> = g
            .edges
            .iter()
            .filter(|e| e.pid == o.pid && e.object == o.addr && e.wait.total_ns > 0)
            .map(|e| Side {
                node: thread(e.pid, e.tid),
                label: doc.thread_label(e.pid, e.tid),
                pid: Some(e.pid),
                waits: e.wait.count,
                wait_ns: e.wait.total_ns,
            })
            .collect();
        let mut wakers: Vec<Side> = Vec::new();
        for w in g
            .waits_for
            .iter()
            .filter(|w| w.pid == o.pid && w.object == o.addr)
        {
            let (node, label, pid) = if w.outside {
                let p = w.waker_pid;
                (format!("p{p}"), format!("process {p} (not traced)"), None)
            } else {
                let l = doc.thread_label(w.waker_pid, w.waker);
                (thread(w.waker_pid, w.waker), l, Some(w.waker_pid))
            };
            match wakers.iter_mut().find(|s| s.node == node) {
                Some(s) => {
                    s.waits += w.count;
                    s.wait_ns += w.wait.total_ns;
                }
                None => wakers.push(Side {
                    node,
                    label,
                    pid,
                    waits: w.count,
                    wait_ns: w.wait.total_ns,
                }),
            }
        }
        for (sides, waker) in [(&mut waiters, false), (&mut wakers, true)] {
            sides.sort_by_key(|s| std::cmp::Reverse(s.wait_ns));
            if sides.len() > THREADS_PER_SIDE {
                let others = sides.split_off(THREADS_PER_SIDE);
                sides.push(Side {
                    node: format!("{id}_{}", if waker { "wakers" } else { "waiters" }),
                    label: match others.len() {
                        1 => "1 other thread".to_owned(),
                        n => format!("{n} other threads"),
                    },
                    pid: Some(o.pid),
                    waits: others.iter().map(|s| s.waits).sum(),
                    wait_ns: others.iter().map(|s| s.wait_ns).sum(),
                });
            }
            for s in sides.iter() {
                if seen.insert(s.node.clone()) {
                    let node = format!("{} [shape=box, label={}];", s.node, quote(&s.label));
                    match s.pid {
                        Some(p) => by_pid.entry(p).or_default().push(node),
                        None => outside.push(node),
                    }
                }
                let (from, to, color, text) = if waker {
                    (
                        &id,
                        &s.node,
                        "#2d6cdf",
                        format!("woke {} ({})", times(s.waits, "wait"), ns(s.wait_ns)),
                    )
                } else {
                    (
                        &s.node,
                        &id,
                        "#c0392b",
                        format!("waited {} ({})", ns(s.wait_ns), times(s.waits, "time")),
                    )
                };
                // Wakes do not rank their threads after the object: threads that wait and
                // wake stay in one column left of the objects (else every thread between
                // two objects chains them into one long row).
                let _ = writeln!(
                    edges,
                    "  {from} -> {to} [color=\"{color}\", penwidth={:.1}, label={}{}];",
                    width(s.wait_ns),
                    quote(&text),
                    if waker { ", constraint=false" } else { "" }
                );
            }
        }
    }
    for (pid, nodes) in &by_pid {
        let comm = doc
            .run
            .targets
            .iter()
            .find(|t| t.pid == *pid)
            .and_then(|t| t.comm.clone());
        let _ = writeln!(
            out,
            "  subgraph cluster_p{pid} {{\n    label={};",
            quote(&match comm {
                Some(c) => format!("process {pid} ({c})"),
                None => format!("process {pid}"),
            })
        );
        for n in nodes {
            let _ = writeln!(out, "    {n}");
        }
        out.push_str("  }\n");
    }
    for n in &outside {
        let _ = writeln!(out, "  {n}");
    }
    out.push_str(&edges);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_quoted_and_escaped() {
        assert_eq!(quote("a\"b\\c\nd"), "\"a\\\"b\\\\c\\nd\"");
        let d = Doc::parse(
            br#"{"format":"rtm-trace","version":1,"sync_graph":{"objects":[{"pid":5,"kind":"mutex","addr":"0x10","name":"m\"]; evil","wait":{"total_ns":9}}],
                "threads":[{"pid":5,"tid":6,"name":"w"}],"edges":[{"pid":5,"tid":6,"kind":"mutex","object":"0x10","wait":{"total_ns":9}}]}}"#,
            "t.json",
        )
        .unwrap();
        let dot = render(&d);
        assert!(dot.contains("t5_6 -> o5_10"), "{dot}");
        assert!(dot.contains("label=\"mutex m\\\"]; evil\""), "{dot}");
    }
}
