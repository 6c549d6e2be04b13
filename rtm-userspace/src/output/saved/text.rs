//! The text report of a saved document (`rtm-trace report FILE.json`): what was traced,
//! the most contended objects, the threads that waited most, who waited for whom, and
//! the MPI traffic; `top` rows each.

use super::Doc;
use crate::output::{
    format::{count, mean_ns, ns, opt_ns, pct},
    table::table,
    text::escape,
};

/// Renders the report.
pub fn render(doc: &Doc, top: usize) -> String {
    let mut out = String::new();
    let g = &doc.sync_graph;
    let r = &doc.run;
    let targets: Vec<String> = r
        .targets
        .iter()
        .map(|t| {
            let comm = t.comm.as_deref().unwrap_or("?");
            match &t.ended {
                Some(e) => format!("{} ({comm}) [{e}]", t.pid),
                None => format!("{} ({comm})", t.pid),
            }
        })
        .collect();
    if !doc.merged_from.is_empty() {
        out.push_str(&format!(
            "== rtm-trace report of a merged MPI job ({} parts, merged by rtm-trace {}) ==\n",
            doc.merged_from.len(),
            escape(&doc.tool_version)
        ));
    } else {
        out.push_str(&format!(
            "== rtm-trace report of a saved trace (written by rtm-trace {}) ==\n",
            escape(&doc.tool_version)
        ));
    }
    if doc.merged_from.is_empty() {
        out.push_str(&escape(&format!(
            "host {}; traced {} for {} in {} mode; {} threads, {} objects",
            r.host,
            targets.join(", "),
            ns(g.window.end_ns.saturating_sub(g.window.start_ns)),
            r.mode,
            count(g.threads.len() as u64),
            count(g.objects.len() as u64),
        )));
        out.push('\n');
        let lost: u64 = ["ring_full", "pending_full"]
            .iter()
            .filter_map(|k| r.losses.get(*k))
            .sum();
        out.push_str(&if lost == 0 {
            "lost events: none\n".to_owned()
        } else {
            format!(
                "lost events: {} (the counts below miss them)\n",
                count(lost)
            )
        });
        crate::output::findings::text(&mut out, &doc.findings);
        sync_sections(&mut out, doc, top);
    }
    crate::output::funcs_report::render(&mut out, doc.functions.as_ref(), top);
    if let Some(tg) = &doc.task_graph {
        let mut edges: Vec<_> = tg.edges.iter().collect();
        edges.sort_by_key(|e| std::cmp::Reverse(e.sent.as_ref().map_or(0, |s| s.bytes)));
        out.push_str(&format!(
            "\nMPI: {} ranks; traffic (top {} of {} rank pairs)\n",
            tg.ranks.len(),
            top.min(edges.len()),
            edges.len()
        ));
        let rank = |r: Option<i64>| r.map_or("?".to_owned(), |r| r.to_string());
        let rows: Vec<Vec<String>> = edges
            .iter()
            .take(top)
            .map(|e| {
                let s = e
                    .sent
                    .clone()
                    .or_else(|| e.received.clone())
                    .unwrap_or_default();
                vec![
                    format!("{} -> {}", rank(e.src), rank(e.dst)),
                    count(s.messages),
                    count(s.bytes),
                    ns(s.time_ns),
                ]
            })
            .collect();
        table(&mut out, &["ranks", "messages", "bytes", "time"], &rows);
        if !tg.collectives.is_empty() {
            out.push('\n');
            let rows: Vec<Vec<String>> = tg
                .collectives
                .iter()
                .take(top)
                .map(|c| {
                    vec![
                        c.function.clone(),
                        c.ranks.to_string(),
                        count(c.instances),
                        ns(c.time_ns),
                        opt_ns(c.mean_spread_ns),
                        opt_ns(c.max_spread_ns),
                    ]
                })
                .collect();
            table(
                &mut out,
                &[
                    "collective",
                    "ranks",
                    "instances",
                    "time",
                    "arrival spread avg",
                    "max",
                ],
                &rows,
            );
        }
    }
    out
}

/// The object rows of `objects`, first `top`.
fn objects_table(out: &mut String, objects: &[&super::Object], top: usize) {
    let rows: Vec<Vec<String>> = objects
        .iter()
        .take(top)
        .map(|o| {
            let seen = o.sees_acquisitions();
            let unseen = || "-".to_owned();
            vec![
                o.titled(),
                o.pid.to_string(),
                if seen {
                    count(o.acquisitions)
                } else {
                    unseen()
                },
                count(o.contended),
                ns(o.wait.total_ns),
                mean_ns(o.wait.mean_ns),
                opt_ns(o.wait.p99_ns),
                opt_ns(o.wait.max_ns),
                if seen {
                    mean_ns(o.hold.mean_ns)
                } else {
                    unseen()
                },
                if seen {
                    opt_ns(o.hold.max_ns)
                } else {
                    unseen()
                },
                o.threads.to_string(),
            ]
        })
        .collect();
    table(
        out,
        &[
            "object",
            "pid",
            "acquired",
            "contended",
            "waited",
            "wait avg",
            "wait p99",
            "wait max",
            "hold avg",
            "hold max",
            "threads",
        ],
        &rows,
    );
}

/// The sync graph's tables.
fn sync_sections(out: &mut String, doc: &Doc, top: usize) {
    let g = &doc.sync_graph;
    let mut objects: Vec<_> = g.objects.iter().collect();
    objects.sort_by_key(|o| std::cmp::Reverse((o.contended_wait_ns, o.wait.total_ns)));
    let (idle, objects): (Vec<_>, Vec<_>) = objects.into_iter().partition(|o| o.is_idle());
    out.push_str(&format!(
        "\nMost contended objects by time waiting (top {} of {})\n",
        top.min(objects.len()),
        objects.len()
    ));
    objects_table(out, &objects, top);
    if !idle.is_empty() {
        out.push_str(&format!(
            "\nWaiting for work or for other threads, not contention (condition variables, \
             semaphores, barriers, joins, parked runtime threads; top {} of {})\n",
            top.min(idle.len()),
            idle.len()
        ));
        objects_table(out, &idle, top);
    }

    let mut threads: Vec<_> = g.threads.iter().collect();
    threads.sort_by_key(|t| std::cmp::Reverse((t.lock_wait_ns(), t.wait.total_ns)));
    out.push_str(&format!(
        "\nThreads by time spent waiting for locks (contention, or waits of unknown kind; \
         \"for work\": waiting for work or for other threads; top {} of {})\n",
        top.min(threads.len()),
        threads.len()
    ));
    let rows: Vec<Vec<String>> = threads
        .iter()
        .take(top)
        .map(|t| {
            vec![
                doc.thread_label(t.pid, t.tid),
                t.pid.to_string(),
                count(t.acquisitions),
                count(t.contended),
                ns(t.lock_wait_ns()),
                pct(if t.observed_ns > 0 {
                    (t.lock_wait_ns() as f64 / t.observed_ns as f64).min(1.0)
                } else {
                    t.wait_share
                }),
                ns(t.idle_wait_ns),
                ns(t.hold.total_ns),
            ]
        })
        .collect();
    table(
        out,
        &[
            "thread",
            "pid",
            "acquired",
            "contended",
            "waited",
            "of its time",
            "for work",
            "held",
        ],
        &rows,
    );

    let mut wf: Vec<_> = g.waits_for.iter().collect();
    wf.sort_by_key(|w| std::cmp::Reverse(w.wait.total_ns));
    if !wf.is_empty() {
        out.push_str(&format!(
            "\nWho waited for whom (top {} of {})\n",
            top.min(wf.len()),
            wf.len()
        ));
        let rows: Vec<Vec<String>> = wf
            .iter()
            .take(top)
            .map(|w| {
                vec![
                    doc.thread_label(w.pid, w.waiter),
                    doc.thread_label(w.waker_pid, w.waker),
                    w.object_name.clone().unwrap_or_else(|| w.object.clone()),
                    count(w.count),
                    ns(w.wait.total_ns),
                    opt_ns(w.wait.max_ns),
                ]
            })
            .collect();
        table(
            out,
            &["waiter", "woken by", "on", "waits", "waited", "max"],
            &rows,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_merged_job_reads_with_its_empty_fields_and_shows_its_traffic() {
        let d = Doc::parse(
            br#"{"format":"rtm-trace","version":1,"tool_version":"t","merged_from":[{"path":"a.json"},{"path":"b.json"}],
                "task_graph":{"ranks":[{"rank":0,"pid":1,"host":"n1"},{"rank":1,"pid":2,"host":"n2"}],
                "edges":[{"src":0,"dst":1,"sent":{"messages":3,"bytes":24,"time_ns":5},"received":null}],
                "collectives":[{"function":"barrier","ranks":2,"most_often_last":null}]}}"#,
            "merged.json",
        )
        .unwrap();
        let text = render(&d, 10);
        assert!(text.contains("merged MPI job (2 parts"), "{text}");
        assert!(
            text.contains("0 -> 1") && text.contains("barrier"),
            "{text}"
        );
        assert!(
            !text.contains("Most contended"),
            "no empty sync graph tables: {text}"
        );
        let page = crate::output::html::render(&d);
        assert!(page.contains("a merged MPI job (2 parts)"));
    }

    #[test]
    fn the_report_lists_objects_threads_and_edges_escaped() {
        let d = Doc::parse(
            br#"{"format":"rtm-trace","version":1,"tool_version":"t","run":{"mode":"full","host":"h","targets":[{"pid":5,"comm":"app"}]},
                "sync_graph":{"window":{"start_ns":0,"end_ns":2000000000},
                "objects":[{"pid":5,"kind":"mutex","addr":"0x10","name":"big_lock","acquisitions":30,"contended":4,"contended_wait_ns":900,"wait":{"count":4,"total_ns":900}}],
                "threads":[{"pid":5,"tid":6,"name":"evil\u001b[2J","wait":{"total_ns":900}},{"pid":5,"tid":7,"name":"w2"}],
                "waits_for":[{"pid":5,"waiter":6,"waker_pid":5,"waker":7,"object":"0x10","object_name":"big_lock","count":4,"wait":{"total_ns":900}}]}}"#,
            "t.json",
        )
        .unwrap();
        let text = render(&d, 10);
        assert!(text.contains("big_lock"), "{text}");
        assert!(text.contains("6 evil\\x1b[2J"), "escaped: {text}");
        assert!(!text.contains('\x1b'));
        assert!(text.contains("7 w2"), "{text}");
        assert!(text.contains("2.000 s in full mode"), "{text}");
    }
}
