//! `--blocked`: the snapshot of blocked threads and their deadlocks, as text and JSON.

use std::fmt::Write as _;

use serde::Serialize;

use super::{
    format::{count, ns},
    json::{FORMAT, VERSION},
    table::table,
    text::Shown,
};
use crate::model::{
    blocked::{BlockedThread, BlockedView, Cycle, DeadlockView, Holder, Undecided},
    views::snapshot::LockOrderView,
};

/// Frames shown of each deadlocked thread's stack.
const FRAMES: usize = 10;

fn thread(t: &BlockedThread) -> String {
    match &t.name {
        Some(n) => format!("{} {n}", t.tid),
        None => t.tid.to_string(),
    }
}

fn word(t: &BlockedThread) -> String {
    t.word_name
        .clone()
        .unwrap_or_else(|| format!("{:#x}", t.word))
}

fn holder(v: &BlockedView, t: &BlockedThread) -> String {
    match &t.holder {
        Holder::Thread { tid, mutex } => {
            let name = v
                .blocked
                .iter()
                .find(|b| b.tid == *tid)
                .and_then(|b| b.name.clone());
            let pid = match t.holder_pid {
                Some(p) if p != t.pid => format!(" of PID {p}"),
                Some(_) => String::new(),
                None => " (no such thread now: it exited holding it?)".into(),
            };
            match name {
                Some(n) => format!("{tid} {n}{pid} ({mutex} mutex)"),
                None => format!("{tid}{pid} ({mutex} mutex)"),
            }
        }
        Holder::Unknown { why } => format!("unknown: {why}"),
    }
}

/// Each of `threads` waiting (and for how long, when known) for its word and holder,
/// `; `-separated.
fn waits<'a>(threads: impl Iterator<Item = &'a BlockedThread>) -> String {
    let parts: Vec<String> = threads
        .map(|t| {
            let held = match t.holder {
                Holder::Thread { tid, .. } => tid.to_string(),
                Holder::Unknown { .. } => "?".into(),
            };
            let waited = t
                .waited_ns
                .map(|w| format!(" for {}", ns(w)))
                .unwrap_or_default();
            format!("{} waits{waited} for {} held by {held}", thread(t), word(t))
        })
        .collect();
    parts.join("; ")
}

/// A deadlocked thread, its word and holder (`held`), and where it waits.
fn thread_with_stack(out: &mut String, t: &BlockedThread, held: &str) {
    let _ = writeln!(
        out,
        "    {} waits for {} (held by {}), where:",
        Shown(&thread(t)),
        Shown(&word(t)),
        Shown(held)
    );
    for f in t.stack.iter().take(FRAMES) {
        let _ = writeln!(out, "      {}", Shown(f));
    }
}

/// One line naming a deadlock's threads and locks.
pub fn cycle_line(v: &BlockedView, c: &Cycle) -> String {
    let of = |tid: u32| v.blocked.iter().find(|b| b.tid == tid);
    let members = c.threads.iter().filter_map(|&(_, tid)| of(tid));
    Shown(&format!("deadlock: {}", waits(members))).to_string()
}

/// The text report.
pub fn render(v: &BlockedView, top: usize) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Blocked now: {} of {} threads in a futex wait (snapshot took {})",
        count(v.blocked.len() as u64),
        count(v.threads_seen as u64),
        ns(v.took_ns)
    );
    let rows: Vec<Vec<String>> = v
        .blocked
        .iter()
        .take(top)
        .map(|t| {
            vec![
                thread(t),
                t.pid.to_string(),
                word(t),
                holder(v, t),
                t.off_cpu_ns.map_or_else(|| "?".into(), ns),
            ]
        })
        .collect();
    if !rows.is_empty() {
        table(
            &mut out,
            &["thread", "pid", "waits on", "held by", "off CPU for"],
            &rows,
        );
    }
    if v.blocked.len() > top {
        let _ = writeln!(out, "  ... {} more (--top)", v.blocked.len() - top);
    }
    if v.cycles.is_empty() && !v.cannot_tell.is_empty() {
        let _ = writeln!(
            out,
            "\nCannot tell whether these threads are deadlocked: {} wait{} to acquire \
             something whose holder cannot be known, so a cycle through them would not \
             be seen (exit code 4):",
            count(v.cannot_tell.len() as u64),
            if v.cannot_tell.len() == 1 { "s" } else { "" }
        );
        for u in v.cannot_tell.iter().take(top) {
            let Some(t) = v.blocked.iter().find(|b| b.tid == u.tid && b.pid == u.pid) else {
                continue;
            };
            let _ = writeln!(
                out,
                "  {} ({}) on {}: {}",
                Shown(&thread(t)),
                u.wait_kind.name(),
                Shown(&word(t)),
                Shown(&u.why)
            );
        }
        if v.cannot_tell.len() > top {
            let _ = writeln!(out, "  ... {} more (--top)", v.cannot_tell.len() - top);
        }
        return out;
    }
    if v.cycles.is_empty() {
        let _ = writeln!(
            out,
            "\nNo deadlock: no cycle of threads waiting on each other's mutexes, and \
             every thread waiting to acquire one has a holder known."
        );
        return out;
    }
    let _ = writeln!(out, "\nDeadlocks ({})", v.cycles.len());
    for c in &v.cycles {
        let _ = writeln!(out, "  {}", cycle_line(v, c));
        for &(_, tid) in &c.threads {
            if let Some(t) = v.blocked.iter().find(|b| b.tid == tid) {
                thread_with_stack(&mut out, t, &holder(v, t));
            }
        }
    }
    out
}

/// The report's section on the deadlocks found while tracing.
pub(super) fn found(out: &mut String, deadlocks: &[DeadlockView]) {
    if deadlocks.is_empty() {
        return;
    }
    let _ = writeln!(out, "\nDeadlocks found while tracing ({})", deadlocks.len());
    for d in deadlocks {
        let _ = writeln!(out, "  {}", Shown(&describe(d)));
        for t in &d.threads {
            let held = match &t.holder {
                Holder::Thread { tid, mutex } if mutex.contains("semaphore") => {
                    format!("{tid} (it took the {mutex} last)")
                }
                Holder::Thread { tid, mutex } => format!("{tid} ({mutex} mutex)"),
                Holder::Unknown { why } => format!("unknown: {why}"),
            };
            thread_with_stack(out, t, &held);
        }
    }
}

/// The report's section on threads found blocked while tracing where a deadlock cannot
/// be ruled out.
pub(super) fn undecided(out: &mut String, threads: &[Undecided]) {
    if threads.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "\nCannot tell whether these threads were deadlocked ({}): each waited to acquire \
         something whose holder cannot be known, so a cycle through them would not be seen",
        threads.len()
    );
    for u in threads {
        let word = u
            .word_name
            .clone()
            .unwrap_or_else(|| format!("{:#x}", u.word));
        let _ = writeln!(
            out,
            "  {} (pid {}) on {} ({}): {}",
            u.tid,
            u.pid,
            Shown(&word),
            u.wait_kind.name(),
            Shown(&u.why)
        );
    }
}

/// One line naming a deadlock's threads, locks, how long each waited, and holders.
pub fn describe(d: &DeadlockView) -> String {
    let pids: std::collections::HashSet<u32> = d.threads.iter().map(|t| t.pid).collect();
    let across = if pids.len() > 1 {
        " (across processes)"
    } else {
        ""
    };
    format!("deadlock{across}: {}", waits(d.threads.iter()))
}

/// The report's section on locks taken in both orders (full mode).
pub(super) fn inversions(out: &mut String, v: Option<&LockOrderView>, top: usize) {
    let Some(v) = v.filter(|v| !v.inversions.is_empty()) else {
        return;
    };
    let _ = writeln!(
        out,
        "\nLock-order inversions: pairs of locks taken in both orders, which can deadlock \
         ({} of {} ordered pairs{})",
        v.inversions.len(),
        count(v.pairs as u64),
        if v.over_cap > 0 {
            format!("; {} orderings over the caps", count(v.over_cap))
        } else {
            String::new()
        }
    );
    let name = |n: &Option<String>, a: u64| n.clone().unwrap_or_else(|| format!("{a:#x}"));
    let site = |s: &Option<String>| s.clone().unwrap_or_else(|| "?".into());
    for i in v.inversions.iter().take(top) {
        let (a, b) = (name(&i.a_name, i.a), name(&i.b_name, i.b));
        let _ = writeln!(out, "  {} and {} (PID {})", Shown(&a), Shown(&b), i.pid);
        for (first, then, o) in [(&a, &b, &i.a_then_b), (&b, &a, &i.b_then_a)] {
            let _ = writeln!(
                out,
                "    {} then {}: {} times (thread {}); {} taken at {}, then {} at {}",
                Shown(first),
                Shown(then),
                count(o.count),
                o.tid,
                Shown(first),
                Shown(&site(&o.first_site)),
                Shown(then),
                Shown(&site(&o.then_site))
            );
        }
    }
}

#[derive(Serialize)]
struct Doc<'a> {
    format: &'static str,
    version: u32,
    tool_version: &'static str,
    blocked: &'a BlockedView,
}

/// The JSON document.
pub fn json(v: &BlockedView) -> String {
    serde_json::to_string_pretty(&Doc {
        format: FORMAT,
        version: VERSION,
        tool_version: env!("CARGO_PKG_VERSION"),
        blocked: v,
    })
    .expect("the document serializes")
}
