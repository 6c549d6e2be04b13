//! The report's MPI sections: ranks, who sent what to whom, collectives.

use std::fmt::Write as _;

use serde::Deserialize as _;

use super::view::{RankGraphView, TrafficView};
use crate::format::{count, ns, pct, table::table, text::Shown};

fn rank(r: Option<i32>) -> String {
    r.map_or_else(|| "?".into(), |r| r.to_string())
}

fn bytes(b: u64) -> String {
    match b {
        b if b >= 1 << 30 => format!("{:.2} GiB", b as f64 / (1u64 << 30) as f64),
        b if b >= 1 << 20 => format!("{:.2} MiB", b as f64 / (1u64 << 20) as f64),
        b if b >= 1 << 10 => format!("{:.2} KiB", b as f64 / 1024.0),
        b => format!("{b} B"),
    }
}

fn side(t: Option<&TrafficView>) -> [String; 3] {
    match t {
        Some(t) => [
            count(t.messages),
            bytes(t.bytes),
            t.bandwidth_mb_s
                .map_or_else(|| "-".into(), |b| format!("{b:.1} MB/s")),
        ],
        None => ["-".into(), "-".into(), "-".into()],
    }
}

/// The report's MPI sections, from the document's `task_graph`.
pub(super) fn section(
    v: &serde_json::Value,
    out: &mut String,
    top: usize,
) -> Result<(), serde_json::Error> {
    render(out, &RankGraphView::deserialize(v)?, top);
    Ok(())
}

/// Renders the MPI sections.
pub(super) fn render(out: &mut String, t: &RankGraphView, top: usize) {
    let _ = writeln!(out, "\nMPI ranks ({})", t.ranks.len());
    let rows: Vec<Vec<String>> = t
        .ranks
        .iter()
        .map(|r| {
            let busiest = r
                .functions
                .iter()
                .find(|f| {
                    !matches!(
                        f.function,
                        rtm_common::MpiOp::Init
                            | rtm_common::MpiOp::InitThread
                            | rtm_common::MpiOp::Finalize
                    )
                })
                .map_or_else(
                    || "-".into(),
                    |f| format!("{:?} {}", f.function, ns(f.time_ns)),
                );
            vec![
                rank(r.rank),
                r.pid.to_string(),
                count(r.calls),
                ns(r.time_in_mpi_ns),
                pct(r.mpi_share),
                format!("{:.0}", r.calls_per_sec),
                busiest,
            ]
        })
        .collect();
    table(
        out,
        &[
            "rank",
            "pid",
            "calls",
            "in MPI",
            "of run",
            "calls/s",
            "most time in",
        ],
        &rows,
    );

    let shown: Vec<_> = t.edges.iter().take(top).collect();
    let _ = writeln!(
        out,
        "\nWho sent to whom (point to point, most bytes first; top {} of {})",
        shown.len(),
        t.edges.len()
    );
    let rows: Vec<Vec<String>> = shown
        .iter()
        .map(|e| {
            let [sm, sb, sbw] = side(e.sent.as_ref());
            let [rm, rb, _] = side(e.received.as_ref());
            vec![
                format!("{} -> {}", rank(e.src), rank(e.dst)),
                sm,
                sb,
                sbw,
                rm,
                rb,
            ]
        })
        .collect();
    table(
        out,
        &["ranks", "sent", "bytes", "send rate", "received", "bytes"],
        &rows,
    );

    if !t.collectives.is_empty() {
        let _ = writeln!(out, "\nCollectives (most time first)");
        let rows: Vec<Vec<String>> = t
            .collectives
            .iter()
            .take(top)
            .map(|c| {
                vec![
                    format!("{:?}", c.function),
                    c.comm_id.to_string(),
                    c.ranks.to_string(),
                    count(c.calls),
                    bytes(c.bytes),
                    ns(c.time_ns),
                    rank(c.root),
                    ns(c.mean_spread_ns),
                    ns(c.max_spread_ns),
                    c.most_often_last
                        .map_or_else(|| "-".into(), |(r, n)| format!("{} ({n}x)", rank(r))),
                ]
            })
            .collect();
        table(
            out,
            &[
                "collective",
                "comm",
                "ranks",
                "calls",
                "bytes",
                "time",
                "root",
                "spread avg",
                "max",
                "last in",
            ],
            &rows,
        );
    }
    let c = &t.counters;
    let mut notes = Vec::new();
    if c.unknown_source > 0 {
        notes.push(format!(
            "{} wildcard receives with MPI_STATUS_IGNORE: source unknown",
            c.unknown_source
        ));
    }
    if c.untranslated_peer > 0 {
        notes.push(format!(
            "{} peers could not be translated to world ranks",
            c.untranslated_peer
        ));
    }
    if c.unmatched_completions > 0 {
        notes.push(format!(
            "{} completed requests were posted before the trace (or are persistent)",
            c.unmatched_completions
        ));
    }
    if c.truncated_requests > 0 {
        notes.push(format!(
            "{} wait/test calls completed more than 16 requests; the rest are not followed",
            c.truncated_requests
        ));
    }
    if t.open_requests > 0 {
        notes.push(format!(
            "{} requests were still open at the end",
            t.open_requests
        ));
    }
    for n in notes {
        let _ = writeln!(out, "  - {}", Shown(&n));
    }
}
