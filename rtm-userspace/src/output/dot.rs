//! Graphviz DOT: the sync graph (threads -> the objects they waited on -> the threads
//! whose wakes ended the waits, edge width by time waited) and the MPI task graph
//! (ranks, edges by bytes), for `dot -Tsvg`. Names are quoted and escaped.

use std::fmt::Write as _;

use super::{
    format::{count, ns},
    saved::Doc,
};

/// Edges drawn per graph (by time waited, by bytes).
const MAX_EDGES: usize = 200;

/// A DOT string literal.
fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c if c.is_control() => {
                let _ = write!(out, "\\\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The sync graph, and the task graph when MPI was traced, as one DOT file.
pub fn render(doc: &Doc) -> String {
    let g = &doc.sync_graph;
    let mut out = String::from(
        "digraph rtm_trace {\n  rankdir=LR;\n  node [fontname=\"sans-serif\", fontsize=10];\n",
    );
    out.push_str("  subgraph cluster_sync {\n    label=\"sync graph: waits (red) and wakes (blue), width by time\";\n");
    let mut edges: Vec<_> = g.edges.iter().filter(|e| e.wait.total_ns > 0).collect();
    edges.sort_by_key(|e| std::cmp::Reverse(e.wait.total_ns));
    let mut wf: Vec<_> = g.waits_for.iter().collect();
    wf.sort_by_key(|w| std::cmp::Reverse(w.wait.total_ns));
    let edges = &edges[..edges.len().min(MAX_EDGES)];
    let wf = &wf[..wf.len().min(MAX_EDGES)];
    let max = edges
        .iter()
        .map(|e| e.wait.total_ns)
        .chain(wf.iter().map(|w| w.wait.total_ns))
        .max()
        .unwrap_or(1)
        .max(1) as f64;
    let width = |v: u64| 1.0 + 7.0 * (v as f64 / max).sqrt();
    let label_of = |pid: u32, addr: &str| {
        g.objects
            .iter()
            .find(|o| o.pid == pid && o.addr == addr)
            .map_or_else(|| addr.to_owned(), |o| o.label())
    };
    let mut nodes = std::collections::BTreeSet::new();
    let thread = |pid: u32, tid: u32| format!("t{pid}_{tid}");
    let object = |pid: u32, addr: &str| format!("o{pid}_{}", addr.trim_start_matches("0x"));
    for e in edges {
        let (t, o) = (thread(e.pid, e.tid), object(e.pid, &e.object));
        if nodes.insert(t.clone()) {
            let _ = writeln!(
                out,
                "    {t} [shape=box, label={}];",
                quote(&doc.thread_label(e.pid, e.tid))
            );
        }
        if nodes.insert(o.clone()) {
            let _ = writeln!(
                out,
                "    {o} [shape=ellipse, style=filled, fillcolor=\"#f3d9a4\", label={}];",
                quote(&label_of(e.pid, &e.object))
            );
        }
        let _ = writeln!(
            out,
            "    {t} -> {o} [color=\"#c0392b\", penwidth={:.1}, label={}];",
            width(e.wait.total_ns),
            quote(&ns(e.wait.total_ns))
        );
    }
    for w in wf {
        let o = object(w.pid, &w.object);
        let k = if w.outside {
            format!("p{}", w.waker_pid)
        } else {
            thread(w.waker_pid, w.waker)
        };
        if nodes.insert(o.clone()) {
            let name = w
                .object_name
                .clone()
                .unwrap_or_else(|| label_of(w.pid, &w.object));
            let _ = writeln!(
                out,
                "    {o} [shape=ellipse, style=filled, fillcolor=\"#f3d9a4\", label={}];",
                quote(&name)
            );
        }
        if nodes.insert(k.clone()) {
            let label = if w.outside {
                format!("process {} (not traced)", w.waker_pid)
            } else {
                doc.thread_label(w.waker_pid, w.waker)
            };
            let _ = writeln!(out, "    {k} [shape=box, label={}];", quote(&label));
        }
        let _ = writeln!(
            out,
            "    {o} -> {k} [color=\"#2d6cdf\", penwidth={:.1}, label={}];",
            width(w.wait.total_ns),
            quote(&format!("woke {} waits", count(w.count)))
        );
    }
    out.push_str("  }\n");
    if let Some(tg) = &doc.task_graph {
        out.push_str("  subgraph cluster_tasks {\n    label=\"MPI task graph: bytes sent\";\n");
        for r in &tg.ranks {
            if let Some(rank) = r.rank {
                let _ = writeln!(
                    out,
                    "    r{rank} [shape=circle, label={}];",
                    quote(&format!("rank {rank}\n{}", r.host))
                );
            }
        }
        let mut te: Vec<_> = tg.edges.iter().collect();
        te.sort_by_key(|e| std::cmp::Reverse(e.sent.as_ref().map_or(0, |s| s.bytes)));
        for e in te.iter().take(MAX_EDGES) {
            let (Some(s), Some(d)) = (e.src, e.dst) else {
                continue;
            };
            let t = e
                .sent
                .clone()
                .or_else(|| e.received.clone())
                .unwrap_or_default();
            let _ = writeln!(
                out,
                "    r{s} -> r{d} [label={}];",
                quote(&format!("{} msgs, {} B", count(t.messages), count(t.bytes)))
            );
        }
        out.push_str("  }\n");
    }
    out.push_str("}\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_quoted_and_escaped() {
        assert_eq!(quote("a\"b\\c\nd"), "\"a\\\"b\\\\c\\nd\"");
        let d = Doc::parse(
            br#"{"format":"rtm-trace","version":1,"sync_graph":{"objects":[{"pid":5,"kind":"mutex","addr":"0x10","name":"m\"]; evil"}],
                "threads":[{"pid":5,"tid":6,"name":"w"}],"edges":[{"pid":5,"tid":6,"object":"0x10","wait":{"total_ns":9}}]}}"#,
            "t.json",
        )
        .unwrap();
        let dot = render(&d);
        assert!(dot.contains("t5_6 -> o5_10"), "{dot}");
        assert!(dot.contains("label=\"m\\\"]; evil\""), "{dot}");
    }
}
