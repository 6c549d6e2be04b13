//! The HTML report: one self-contained file (no network, opens from disk) made from a
//! trace's JSON document: a summary, the locks table (sortable, drill-down lock ->
//! threads -> wakers), the threads, the sync graph as SVG, the thread tree, barrier
//! rounds, the MPI communication matrix and collectives, and the system's and the
//! traced processes' time series on one time axis. Tables carry the top rows; the rest
//! is summarized. Every string the target controls is escaped (markup here, `<` in the
//! embedded data).

mod stacks;

use std::{collections::BTreeMap, fmt::Write as _};

use serde_json::json;

use super::saved::Doc;
use crate::config::Mode;
use crate::format::{count, ns, svg};

/// Rows carried in each table; the rest is summarized.
pub const MAX_ROWS: usize = 500;
/// Nodes of the sync graph picture (by time waited).
const GRAPH_EDGES: usize = 40;

pub(crate) use crate::format::text::markup as esc;

/// JSON for a `<script type="application/json">` block: nothing in it can close the
/// block or start markup.
fn embed(v: &serde_json::Value) -> String {
    serde_json::to_string(v)
        .expect("JSON values serialize")
        .replace('<', "\\u003c")
        .replace('>', "\\u003e")
        .replace('&', "\\u0026")
        .replace('\u{2028}', "\\u2028")
        .replace('\u{2029}', "\\u2029")
}

/// Renders the page.
pub fn render(doc: &Doc) -> String {
    let g = &doc.sync_graph;
    let mut objects: Vec<_> = g.objects.iter().collect();
    // Contention first; waiting for work (condition variables, joins ...) after it.
    objects.sort_by_key(|o| {
        std::cmp::Reverse((
            !o.is_idle(),
            o.counts.contended_wait_ns,
            o.wait.total_ns,
            o.counts.acquisitions,
        ))
    });
    let shown: Vec<_> = objects.iter().take(MAX_ROWS).collect();
    let rest = &objects[shown.len()..];
    let keys: std::collections::HashSet<(u32, u64)> =
        shown.iter().map(|o| (o.pid, o.addr)).collect();
    let mut threads: Vec<_> = g.threads.iter().collect();
    threads.sort_by_key(|t| std::cmp::Reverse(t.wait.total_ns));
    let mut waits_for: Vec<_> = g.waits_for.iter().collect();
    waits_for.sort_by_key(|w| std::cmp::Reverse(w.wait.total_ns));
    // Contention mode sees waits, not acquisitions or holds.
    let full = doc.run.mode != Mode::Contention;
    let data = json!({
        // Acquisitions and holds a mode does not see are null ("-"), not 0.
        "objects": shown.iter().map(|o| {
            let seen = o.sees_acquisitions();
            json!({
                "label": o.titled(), "pid": o.pid, "addr": format!("{:#x}", o.addr),
                "acquisitions": seen.then_some(o.counts.acquisitions),
                "contended": o.counts.contended, "wait_total": o.wait.total_ns, "wait_avg": o.wait.mean_ns,
                "wait_p99": o.wait.p99_ns, "wait_max": o.wait.max_ns,
                "hold_avg": if seen { o.hold.mean_ns } else { None },
                "hold_max": if seen { o.hold.max_ns } else { None },
                "threads": o.threads, "wait_kind": o.wait_kind, "idle": o.is_idle(),
            })
        }).collect::<Vec<_>>(),
        "edges": g.edges.iter().filter(|e| keys.contains(&(e.pid, e.object))).take(MAX_ROWS * 8).map(|e| json!({
            "pid": e.pid, "tid": e.tid, "object": format!("{:#x}", e.object), "role": e.role,
            "acquisitions": full.then_some(e.counts.acquisitions), "contended": e.counts.contended,
            "wait_total": e.wait.total_ns, "wait_max": e.wait.max_ns,
            "hold_avg": if full { e.hold.mean_ns } else { None },
        })).collect::<Vec<_>>(),
        "waits_for": waits_for.iter().take(MAX_ROWS * 4).map(|w| json!({
            "pid": w.pid, "waiter": w.waiter, "waker_pid": w.waker_pid, "waker": w.waker,
            "outside": w.outside, "object": format!("{:#x}", w.object), "count": w.count,
            "wait_total": w.wait.total_ns, "wait_max": w.wait.max_ns,
        })).collect::<Vec<_>>(),
        "threads": threads.iter().take(MAX_ROWS * 4).map(|t| json!({
            "pid": t.pid, "tid": t.tid, "name": t.name, "acquisitions": full.then_some(t.acquisitions),
            "contended": t.contended, "wait_total": t.wait.total_ns, "wait_share": t.wait_share,
            "hold_total": full.then_some(t.hold.total_ns),
        })).collect::<Vec<_>>(),
    });

    let mut tabs = vec![
        ("summary", "Summary"),
        ("locks", "Locks"),
        ("threads", "Threads"),
        ("graph", "Sync graph"),
    ];
    if g.stacks.as_ref().is_some_and(|s| !s.rows.is_empty()) {
        tabs.push(("stacks", "Call stacks"));
    }
    tabs.extend(crate::analyses::html_tabs(&doc.sections));
    let mut p = String::new();
    let title = if doc.merged_from.is_empty() {
        format!(
            "rtm-trace: {} on {}",
            doc.run
                .targets
                .iter()
                .map(|t| t.comm.clone().unwrap_or_else(|| t.pid.to_string()))
                .collect::<Vec<_>>()
                .join(", "),
            doc.run.host
        )
    } else {
        format!(
            "rtm-trace: a merged MPI job ({} parts)",
            doc.merged_from.len()
        )
    };
    let _ = write!(
        p,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:\"><title>{}</title><style>{}</style></head><body>",
        esc(&title),
        include_str!("page.css")
    );
    let span = g.window.end_ns.saturating_sub(g.window.start_ns);
    let _ = write!(
        p,
        "<header><h1>{}</h1><p>{} mode, {} traced, written by rtm-trace {}</p></header><nav>",
        esc(&title),
        esc(doc.run.mode.name()),
        ns(span),
        esc(&doc.tool_version)
    );
    for (i, (id, label)) in tabs.iter().enumerate() {
        let _ = write!(
            p,
            "<button data-tab=\"{id}\"{}>{label}</button>",
            if i == 0 { " class=\"on\"" } else { "" }
        );
    }
    p.push_str("</nav>");
    summary(
        &mut p,
        doc,
        rest.len(),
        rest.iter().map(|o| o.wait.total_ns).sum(),
    );
    let _ = write!(
        p,
        "<section id=\"locks\"><h2>Locks and other objects, most contended first (top {} of {})</h2><p class=\"note\">Click a column to sort, a row for the threads that used it and who woke them.</p><div id=\"locks-table\"></div></section>",
        shown.len(),
        objects.len()
    );
    let _ = write!(
        p,
        "<section id=\"threads\"><h2>Threads (top {} of {})</h2><div id=\"threads-table\"></div></section>",
        threads.len().min(MAX_ROWS * 4),
        threads.len()
    );
    graph(&mut p, doc);
    if let Some(st) = g.stacks.as_ref().filter(|s| !s.rows.is_empty()) {
        stacks::section(&mut p, st);
    }
    crate::analyses::html(&doc.sections, doc, &mut p);
    let _ = writeln!(
        p,
        "<script type=\"application/json\" id=\"rtm-data\">{}</script><script>{}</script></body></html>",
        embed(&data),
        include_str!("page.js")
    );
    p
}

fn summary(p: &mut String, doc: &Doc, rest: usize, rest_wait: u64) {
    let g = &doc.sync_graph;
    let total_wait: u64 = g.threads.iter().map(|t| t.wait.total_ns).sum();
    let lost = doc.run.losses.lost();
    p.push_str("<section id=\"summary\" class=\"on\">");
    if !doc.findings.is_empty() {
        p.push_str("<h2>Findings</h2><ol id=\"findings\">");
        for f in &doc.findings {
            let _ = write!(p, "<li><b>{}</b>", esc(&f.title));
            for line in f.evidence.iter().chain(&f.location) {
                let _ = write!(p, "<br>{}", esc(line));
            }
            if let Some(w) = &f.what_if {
                let _ = write!(p, "<br><b>what if</b>: {}", esc(&w.sentence()));
            }
            if let Some(w) = &f.what_if_withheld {
                let _ = write!(p, "<br><b>what if</b>: {}", esc(w));
            }
            if let Some(n) = &f.not_seen {
                let _ = write!(p, "<br><i>not seen: {}</i>", esc(n));
            }
            p.push_str("</li>");
        }
        p.push_str("</ol>");
    }
    p.push_str("<div class=\"cards\">");
    for (v, label) in [
        (
            ns(g.window.end_ns.saturating_sub(g.window.start_ns)),
            "traced",
        ),
        (count(g.threads.len() as u64), "threads"),
        (count(g.objects.len() as u64), "objects"),
        (ns(total_wait), "time waiting, all threads"),
        (count(lost), "events lost"),
    ] {
        let _ = write!(
            p,
            "<div class=\"card\"><b>{}</b><span>{label}</span></div>",
            esc(&v)
        );
    }
    p.push_str("</div>");
    if lost > 0 {
        let _ = write!(
            p,
            "<p class=\"warn\">{} events were lost: the counts miss them.</p>",
            count(lost)
        );
    }
    if rest > 0 {
        let _ = write!(
            p,
            "<p class=\"note\">The tables carry the top {MAX_ROWS} objects; {} more waited {} in all (in the JSON).</p>",
            count(rest as u64),
            ns(rest_wait)
        );
    }
    p.push_str("<h2>Targets</h2><ul>");
    for t in &doc.run.targets {
        let _ = write!(
            p,
            "<li>{} {}{}</li>",
            t.pid,
            esc(t.comm.as_deref().unwrap_or("")),
            t.ended
                .as_deref()
                .map_or(String::new(), |e| format!(" [{}]", esc(e)))
        );
    }
    p.push_str("</ul><h2>Thread tree</h2>");
    tree(p, doc);
    let barriers: Vec<_> = g
        .objects
        .iter()
        .filter_map(|o| Some((o, o.barrier.as_ref()?)))
        .collect();
    if !barriers.is_empty() {
        p.push_str("<h2>Barrier rounds: the imbalance (first to last arrival) per round</h2>");
        for (o, b) in barriers.iter().take(10) {
            let spreads: Vec<u64> = b
                .round_list
                .iter()
                .rev()
                .take(200)
                .rev()
                .map(|r| r.spread_ns)
                .collect();
            p.push_str(&svg::rounds(
                &format!("{} ({} rounds)", o.label(), b.rounds),
                &spreads,
            ));
            if let Some((tid, n)) = b.last_arrivals.first() {
                let _ = write!(
                    p,
                    "<p class=\"note\">Most often last: thread {} ({n} rounds); everyone else waited for it.</p>",
                    esc(&doc.thread_label(o.pid, *tid))
                );
            }
        }
    }
    p.push_str("</section>");
}

/// The threads as a tree by who created whom.
fn tree(p: &mut String, doc: &Doc) {
    let g = &doc.sync_graph;
    let mut children: BTreeMap<(u32, u32), Vec<(u32, u32)>> = BTreeMap::new();
    let known: std::collections::HashSet<(u32, u32)> =
        g.threads.iter().map(|t| (t.pid, t.tid)).collect();
    let mut roots = Vec::new();
    for t in &g.threads {
        match t.parent {
            Some(par) if known.contains(&(par.pid, par.tid)) => children
                .entry((par.pid, par.tid))
                .or_default()
                .push((t.pid, t.tid)),
            _ => roots.push((t.pid, t.tid)),
        }
    }
    fn node(
        p: &mut String,
        doc: &Doc,
        children: &BTreeMap<(u32, u32), Vec<(u32, u32)>>,
        k: (u32, u32),
        depth: usize,
        budget: &mut usize,
    ) {
        if *budget == 0 || depth > 64 {
            return;
        }
        *budget -= 1;
        let _ = write!(
            p,
            "<li>{} <span class=\"note\">pid {}</span>",
            esc(&doc.thread_label(k.0, k.1)),
            k.0
        );
        if let Some(c) = children.get(&k) {
            p.push_str("<ul>");
            for k in c {
                node(p, doc, children, *k, depth + 1, budget);
            }
            p.push_str("</ul>");
        }
        p.push_str("</li>");
    }
    let mut budget = 2_000;
    p.push_str("<ul>");
    for r in roots {
        node(p, doc, &children, r, 0, &mut budget);
    }
    p.push_str("</ul>");
    if budget == 0 {
        p.push_str("<p class=\"note\">(more threads than shown)</p>");
    }
}

fn graph(p: &mut String, doc: &Doc) {
    use svg::Node;
    let g = &doc.sync_graph;
    let label_of = |pid: u32, addr: u64| {
        g.objects
            .iter()
            .find(|o| o.pid == pid && o.addr == addr)
            .map_or_else(|| format!("{addr:#x}"), |o| o.titled())
    };
    // Nodes by identity: objects by process and address, threads by process and TID.
    let object = |pid: u32, addr: u64, label: String| Node {
        id: format!("o{pid}_{addr:#x}"),
        label,
    };
    let thread = |pid: u32, tid: u32| Node {
        id: format!("t{pid}_{tid}"),
        label: doc.thread_label(pid, tid),
    };
    let mut edges: Vec<_> = g.edges.iter().filter(|e| e.wait.total_ns > 0).collect();
    edges.sort_by_key(|e| std::cmp::Reverse(e.wait.total_ns));
    let waits: Vec<(Node, Node, u64)> = edges
        .iter()
        .take(GRAPH_EDGES)
        .map(|e| {
            (
                thread(e.pid, e.tid),
                object(e.pid, e.object, label_of(e.pid, e.object)),
                e.wait.total_ns,
            )
        })
        .collect();
    let mut wf: Vec<_> = g.waits_for.iter().collect();
    wf.sort_by_key(|w| std::cmp::Reverse(w.wait.total_ns));
    let wakes: Vec<(Node, Node, u64)> = wf
        .iter()
        .take(GRAPH_EDGES)
        .map(|w| {
            let waker = if w.outside {
                Node {
                    id: format!("p{}", w.waker_pid),
                    label: format!("process {} (not traced)", w.waker_pid),
                }
            } else {
                thread(w.waker_pid, w.waker)
            };
            let name = label_of(w.pid, w.object);
            (object(w.pid, w.object, name), waker, w.wait.total_ns)
        })
        .collect();
    let _ = write!(
        p,
        "<section id=\"graph\"><h2>The sync graph: who waited on what, and whose wakes ended the waits</h2><p class=\"note\">Edge width: time waited (the {GRAPH_EDGES} largest each side). Hover for figures.</p>{}</section>",
        svg::sync_graph(&waits, &wakes)
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn target_text_comes_out_inert() {
        let d = Doc::parse(
            br#"{"format":"rtm-trace","version":1,"tool_version":"t","run":{"mode":"full","host":"h<b>","targets":[{"pid":5,"comm":"</script><script>alert(1)</script>"}]},
                "sync_graph":{"objects":[{"pid":5,"kind":"mutex","addr":"0x10","name":"<img src=x onerror=alert(2)>","acquisitions":3,"wait":{"count":1,"total_ns":7}}],
                "threads":[{"pid":5,"tid":6,"name":"\u001b[31m<i>"}],
                "edges":[{"pid":5,"tid":6,"kind":"mutex","object":"0x10","wait":{"total_ns":7}}],
                "stacks":{"rows":[{"pid":5,"object":"0x10","object_name":"<svg onload=x>","waker_pid":5,"waits":2,"wait_ns":9,"max_ns":5,"waiter":["<b>f</b>+0x1 (a.c:1)"],"waker":["\u001b[2Jg+0x2"]}],"rows_total":3,"other_waits":4,"other_wait_ns":8}}}"#,
            "t.json",
        )
        .unwrap();
        let page = render(&d);
        assert!(!page.contains("<img"), "markup from the target");
        assert!(!page.contains("<script>alert"), "a script from the target");
        assert!(!page.contains("<i>"));
        assert!(!page.contains("<svg onload") && !page.contains("<b>f"));
        assert!(page.contains("data-tab=\"stacks\""), "the call stacks tab");
        assert!(
            page.contains("<li>&lt;b&gt;f&lt;/b&gt;+0x1 (a.c:1)</li>"),
            "a frame as text"
        );
        assert!(
            page.contains("4 more waits"),
            "the rows not listed are said"
        );
        assert!(!page.contains('\x1b'));
        assert_eq!(
            page.matches("<script").count(),
            2,
            "the data block and the page's script"
        );
        assert!(
            page.contains("&lt;img src=x onerror=alert(2)&gt;"),
            "shown as text in the graph"
        );
    }

    /// Objects are the graph's nodes by process and address: two processes' objects
    /// of one name are two nodes, and objects numbered apart keep their numbers even
    /// where a label is shortened.
    #[test]
    fn the_graph_draws_one_node_per_object() {
        let long = "in a_function_with_a_long_name (a_long_file_name.c:123)";
        let text = format!(
            r#"{{"format":"rtm-trace","version":1,"tool_version":"t","run":{{"mode":"contention"}},
                "sync_graph":{{"objects":[
                  {{"pid":5,"kind":"futex","addr":"0x10","name":"queue_lock"}},
                  {{"pid":6,"kind":"futex","addr":"0x10","name":"queue_lock"}},
                  {{"pid":5,"kind":"futex","addr":"0x20","name":"{long} #1"}},
                  {{"pid":5,"kind":"futex","addr":"0x30","name":"{long} #2"}}],
                "threads":[{{"pid":5,"tid":7}},{{"pid":6,"tid":8}}],
                "edges":[{{"pid":5,"tid":7,"kind":"futex","object":"0x10","wait":{{"total_ns":7}}}},
                  {{"pid":6,"tid":8,"kind":"futex","object":"0x10","wait":{{"total_ns":7}}}},
                  {{"pid":5,"tid":7,"kind":"futex","object":"0x20","wait":{{"total_ns":7}}}},
                  {{"pid":5,"tid":7,"kind":"futex","object":"0x30","wait":{{"total_ns":7}}}}]}}}}"#
        );
        let d = Doc::parse(text.as_bytes(), "t.json").unwrap();
        let page = render(&d);
        let graph = &page[page.find("id=\"sync-graph\"").expect("the graph")..];
        let graph = &graph[..graph.find("</svg>").unwrap()];
        assert_eq!(
            graph.matches("<title>futex queue_lock</title>").count(),
            2,
            "{graph}"
        );
        assert!(graph.contains("\u{2026} #1<title>"), "{graph}");
        assert!(graph.contains("\u{2026} #2<title>"), "{graph}");
    }
}
