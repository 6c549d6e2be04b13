//! The report's call-stack section: for the words with the most wait
//! by stack, where their waiters waited and where the wakes that ended the waits came
//! from (for a mutex: the unlock, the end of the holder's critical section).

use std::fmt::Write as _;

use super::{
    format::{count, mean_ns, ns},
    saved::Doc,
    sections::word_label,
    text::Shown,
};
use crate::model::stacks::{StackCounters, StackRowView, StacksView};

/// Words shown, and stack pairs under each.
const WORDS: usize = 5;
const PAIRS: usize = 3;
/// Frames shown of each stack (the JSON and the folded file have them all).
const FRAMES: usize = 8;

fn frames(out: &mut String, label: &str, f: &[String]) {
    if f.is_empty() {
        let _ = writeln!(out, "      {label} (stack not known)");
        return;
    }
    for (i, name) in f.iter().take(FRAMES).enumerate() {
        let head = if i == 0 { label } else { "" };
        let _ = writeln!(out, "      {head:<10} {}", Shown(name));
    }
    if f.len() > FRAMES {
        let _ = writeln!(out, "      {:<10} ... {} more", "", f.len() - FRAMES);
    }
}

fn missing(out: &mut String, c: &StackCounters) {
    let mut said = Vec::new();
    if c.waiter_other_process > 0 {
        said.push(format!(
            "{} waiter stacks of waits woken from another process before they slept (its context cannot read the waiter's memory)",
            count(c.waiter_other_process)
        ));
    }
    if c.unreadable > 0 {
        said.push(format!(
            "{} stacks unreadable (their pages not in memory)",
            count(c.unreadable)
        ));
    }
    if c.not_unwound > 0 {
        said.push(format!(
            "{} stacks not unwound (mappings not known, no unwind information, or the record of that half not seen)",
            count(c.not_unwound)
        ));
    }
    if c.stacks_over_cap + c.edges_over_cap > 0 {
        said.push(format!(
            "{} stacks and {} rows over the caps",
            count(c.stacks_over_cap),
            count(c.edges_over_cap)
        ));
    }
    if !said.is_empty() {
        let _ = writeln!(out, "  missing: {}", said.join("; "));
    }
}

/// The section; nothing when no stacks were captured.
pub(super) fn render(out: &mut String, doc: &Doc) {
    let Some(v) = &doc.sync_graph.stacks else {
        return;
    };
    let _ = writeln!(
        out,
        "\nWhere they waited and who let them go (call stacks of {} waits that slept; top {WORDS} \
         words; time asleep until the wake: the tables above add the time runnable after it)",
        count(v.counters.records)
    );
    missing(out, &v.counters);
    for (word, rows) in by_word(v).into_iter().take(WORDS) {
        let total: u64 = rows.iter().map(|r| r.edge.wait_ns).sum();
        let waits: u64 = rows.iter().map(|r| r.edge.waits).sum();
        let name = word_label(doc, word.0, word.1, rows[0].object_name.as_deref());
        let _ = writeln!(
            out,
            "  {} (PID {}): {} waits, {} asleep",
            Shown(&name),
            word.0,
            count(waits),
            ns(total)
        );
        for r in rows.iter().take(PAIRS) {
            let _ = writeln!(
                out,
                "    {} waits, {} asleep, avg {}:",
                count(r.edge.waits),
                ns(r.edge.wait_ns),
                mean_ns(Some(r.edge.wait_ns as f64 / r.edge.waits.max(1) as f64))
            );
            frames(out, "waited in", &r.waiter);
            if r.waker_pid == 0 {
                let _ = writeln!(
                    out,
                    "      woken from (no thread: timed out, interrupted, ended by a thread's exit, or still asleep)"
                );
            } else {
                frames(out, "woken from", &r.waker);
            }
        }
    }
}

/// The rows grouped by word, the words by their total wait (most first).
fn by_word(v: &StacksView) -> Vec<((u32, u64), Vec<&StackRowView>)> {
    let mut words: Vec<((u32, u64), Vec<&StackRowView>)> = Vec::new();
    for r in &v.rows {
        match words.iter_mut().find(|(k, _)| *k == (r.pid, r.object)) {
            Some((_, rows)) => rows.push(r),
            None => words.push(((r.pid, r.object), vec![r])),
        }
    }
    words.sort_by_key(|(_, rows)| {
        std::cmp::Reverse(rows.iter().map(|r| r.edge.wait_ns).sum::<u64>())
    });
    words
}
