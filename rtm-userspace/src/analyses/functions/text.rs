//! The report's timed-functions section (`--func`): each function over all threads,
//! then the busiest (thread, function) rows.

use std::fmt::Write as _;

use serde::Deserialize;

use super::view::FunctionsView;
use crate::format::{count, mean_ns, ns, opt_ns, table::table};

fn running(n: u64, longest: u64) -> String {
    if n == 0 {
        "-".into()
    } else {
        format!("{} (longest {})", count(n), ns(longest))
    }
}

/// The section, from the document's `functions`.
pub(super) fn render(
    section: &serde_json::Value,
    out: &mut String,
    top: usize,
) -> Result<(), serde_json::Error> {
    let v = FunctionsView::deserialize(section)?;
    let _ = writeln!(
        out,
        "\nTimed functions (--func; inclusive time of each call: a call's own and its callees'; \
         \"total\" counts recursion once)"
    );
    let rows: Vec<Vec<String>> = v
        .functions
        .iter()
        .map(|f| {
            vec![
                f.name.clone(),
                count(f.time.count),
                f.threads.to_string(),
                ns(f.outer_ns),
                mean_ns(f.time.mean_ns),
                opt_ns(f.time.p50_ns),
                opt_ns(f.time.p90_ns),
                opt_ns(f.time.p99_ns),
                opt_ns(f.time.max_ns),
                count(f.recursive_calls),
                running(f.running, f.running_longest_ns),
                module_name(&f.module),
            ]
        })
        .collect();
    table(
        out,
        &[
            "function",
            "calls",
            "threads",
            "total",
            "avg",
            "p50",
            "p90",
            "p99",
            "max",
            "recursive",
            "running at end",
            "in",
        ],
        &rows,
    );
    threads(out, &v, top);
    let c = &v.counters;
    if c.rows_over_cap > 0 || c.unknown_function > 0 {
        let _ = writeln!(
            out,
            "  not counted: {} calls past the cap on (thread, function) rows; {} records of \
             unknown functions",
            count(c.rows_over_cap),
            count(c.unknown_function)
        );
    }
    Ok(())
}

fn threads(out: &mut String, v: &FunctionsView, top: usize) {
    if v.threads.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "\n  By thread (top {} of {}, most time first)",
        top.min(v.threads.len()),
        v.threads.len()
    );
    let rows: Vec<Vec<String>> = v
        .threads
        .iter()
        .take(top)
        .map(|t| {
            vec![
                t.name.clone(),
                match &t.thread {
                    Some(n) => format!("{} {n}", t.tid),
                    None => t.tid.to_string(),
                },
                t.pid.to_string(),
                count(t.time.count),
                ns(t.outer_ns),
                mean_ns(t.time.mean_ns),
                opt_ns(t.time.p99_ns),
                opt_ns(t.time.max_ns),
                count(t.recursive_calls),
                running(t.running, t.running_longest_ns),
            ]
        })
        .collect();
    table(
        out,
        &[
            "function",
            "thread",
            "pid",
            "calls",
            "total",
            "avg",
            "p99",
            "max",
            "recursive",
            "running at end",
        ],
        &rows,
    );
}

fn module_name(m: &str) -> String {
    m.rsplit('/').next().unwrap_or(m).to_owned()
}
