//! `--folded FILE`: the contended waits' call stacks as folded stacks, in the off-wake
//! layout flame-graph tools read (flamegraph.pl, inferno, speedscope): one line per
//! (word, waiter stack, waker stack), `WORD;waiter frames from the root;--;waker frames
//! from the innermost WAIT_NS`. The waker's frames sit above the `--`, so a flame graph
//! shows where each wait was and, above it, the code that ended it.
//!
//! Each line's root says what the wait was for, so that waits that are no contention
//! (threads idle waiting for work, a main thread in pthread_join) stand apart from the
//! locks that cost something and can be filtered out (`grep -v '^idle:'`):
//! `contention:mutex`, `contention:rwlock`, `idle:condvar`, `idle:join`, ... or
//! `not_known` (see the report's "wait kinds").

use super::{
    dest::{Dest, DestError},
    sink::{Moment, Sink},
    text::{Shown, escape},
};
use crate::{
    config::TraceConfig,
    model::{stacks::StacksView, wait_kind::WaitKind},
};

/// The root node that says what a wait was for.
fn kind_node(kind: WaitKind) -> String {
    if kind.is_contention() {
        format!("contention:{}", kind.name())
    } else if kind.is_idle() {
        format!("idle:{}", kind.name())
    } else {
        "not_known".into()
    }
}

/// A frame as a flame graph node: the function (no offset, no line: calls from one
/// function merge), with the separators the format uses replaced.
fn node(frame: &str) -> String {
    let func = frame.split_once('+').map_or(frame, |(f, _)| f);
    escape(func).replace([';', ' '], "_")
}

/// A word as the flame graph's root: its whole name (`slots+0x10`, `in f (a.c:3) #2`:
/// what tells it from the others), with the separators the format uses replaced.
fn word_node(name: &str) -> String {
    escape(name).replace([';', ' '], "_")
}

/// `frames` (innermost first) without the unnamed addresses at their outer end: what
/// the unwinder read past a stack's last real frame (or a return probe's trampoline),
/// not code, which would make each its own root in a flame graph.
pub(crate) fn to_last_named(frames: &[String]) -> &[String] {
    let raw = |f: &String| {
        f.strip_prefix("0x")
            .is_some_and(|h| !h.is_empty() && h.bytes().all(|b| b.is_ascii_hexdigit()))
    };
    let mut end = frames.len();
    while end > 1 && raw(&frames[end - 1]) {
        end -= 1;
    }
    &frames[..end]
}

/// The folded lines of `view`; `kind_of(pid, word)`: what the snapshot says a word's
/// waits are for, where the waiter's own frames do not tell.
pub fn render(view: &StacksView, kind_of: &dyn Fn(u32, u64) -> WaitKind) -> String {
    let mut out = String::new();
    for r in &view.rows {
        let word = r
            .object_name
            .clone()
            .unwrap_or_else(|| format!("{:#x}", r.object));
        let kind = WaitKind::of_frames(r.waiter.iter().map(String::as_str))
            .unwrap_or_else(|| kind_of(r.pid, r.object));
        let mut line = vec![kind_node(kind), word_node(&word)];
        if r.waiter.is_empty() {
            line.push("[waiter_stack_not_known]".into());
        }
        line.extend(to_last_named(&r.waiter).iter().rev().map(|f| node(f)));
        line.push("--".into());
        line.extend(to_last_named(&r.waker).iter().map(|f| node(f)));
        if r.waker_pid == 0 {
            line.push("[no_waker]".into());
        } else if r.waker.is_empty() {
            line.push("[waker_stack_not_known]".into());
        }
        out.push_str(&format!("{} {}\n", line.join(";"), r.edge.wait_ns));
    }
    if view.other_wait_ns > 0 {
        out.push_str(&format!("[other_stacks] {}\n", view.other_wait_ns));
    }
    out
}

/// The folded-stack file as a sink, written at the end.
pub struct FoldedSink {
    dest: Dest,
}

/// The folded-stack file, when the config names one (checked now).
pub fn sink(c: &TraceConfig) -> Result<Option<Box<dyn Sink>>, DestError> {
    c.stacks
        .folded
        .as_deref()
        .map(|path| {
            Ok(Box::new(FoldedSink {
                dest: Dest::check(path)?,
            }) as Box<dyn Sink>)
        })
        .transpose()
}

impl Sink for FoldedSink {
    fn name(&self) -> String {
        "the folded stacks".into()
    }

    fn finish(&mut self, at: &Moment) -> Result<(), DestError> {
        // Each word's kind as the snapshot classified it (by its holders, its name).
        let kinds: std::collections::HashMap<(u32, u64), WaitKind> = at
            .snapshot
            .objects
            .rows()
            .iter()
            .map(|r| ((r.key.pid, r.key.addr), r.wait_kind))
            .collect();
        let kind_of = |pid, addr| kinds.get(&(pid, addr)).copied().unwrap_or_default();
        let text = at
            .snapshot
            .stacks
            .as_ref()
            .map(|v| render(v, &kind_of))
            .unwrap_or_default();
        self.dest.write(&mut |w| w.write_all(text.as_bytes()))?;
        crate::say!(
            "rtm-trace: wrote {} ({} stack rows)",
            Shown(&self.dest.path().display().to_string()),
            text.lines().count()
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::stacks::{StackEdge, StackRowView};

    #[test]
    fn a_row_folds_waiter_root_first_then_the_waker_innermost_first() {
        let view = StacksView {
            rows: vec![StackRowView {
                pid: 1,
                object: 0x10,
                object_name: Some("chain;lock".into()),
                waker_pid: 1,
                edge: StackEdge {
                    waits: 2,
                    wait_ns: 500,
                    max_ns: 300,
                    samples: 2,
                    weight_milli: 2000,
                },
                waiter: vec![
                    "__lll_lock_wait+0x2b (x.c:1)".into(),
                    "lock_c+0x8".into(),
                    "main+0x1".into(),
                ],
                waker: vec!["__lll_lock_wake+0x13".into(), "unlock_c+0x8 (y.c:2)".into()],
            }],
            rows_total: 3,
            other_wait_ns: 70,
            ..StacksView::default()
        };
        assert_eq!(
            render(&view, &|_, _| WaitKind::Unknown),
            "contention:mutex;chain_lock;main;lock_c;__lll_lock_wait;--;__lll_lock_wake;unlock_c 500\n[other_stacks] 70\n"
        );
    }

    /// A word's root node is its whole name: the elements of an array, and words
    /// numbered apart, stay apart.
    #[test]
    fn words_keep_the_names_that_tell_them_apart() {
        let row = |name: &str| StackRowView {
            pid: 1,
            object: 0x10,
            object_name: Some(name.into()),
            waker_pid: 1,
            edge: StackEdge {
                waits: 1,
                wait_ns: 5,
                max_ns: 5,
                samples: 1,
                weight_milli: 1000,
            },
            waiter: vec!["main+0x1".into()],
            waker: vec!["main+0x2".into()],
        };
        let view = StacksView {
            rows: vec![
                row("slots+0x0"),
                row("slots+0x10"),
                row("in worker (a.c:3) #1"),
                row("in worker (a.c:3) #2"),
            ],
            ..StacksView::default()
        };
        let roots: Vec<String> = render(&view, &|_, _| WaitKind::Unknown)
            .lines()
            .map(|l| l.split(';').nth(1).unwrap().to_owned())
            .collect();
        assert_eq!(
            roots,
            [
                "slots+0x0",
                "slots+0x10",
                "in_worker_(a.c:3)_#1",
                "in_worker_(a.c:3)_#2"
            ]
        );
    }

    #[test]
    fn unnamed_addresses_past_the_outermost_named_frame_are_left_out() {
        let v = |s: &[&str]| s.iter().map(|f| (*f).to_owned()).collect::<Vec<_>>();
        assert_eq!(
            to_last_named(&v(&["lock+0x1", "main+0x2", "0x7fffffffe000", "0x10"])),
            v(&["lock+0x1", "main+0x2"])
        );
        // An address inside the stack stays: it is where a frame was.
        assert_eq!(
            to_last_named(&v(&["lock+0x1", "0x55aa", "main+0x2"])).len(),
            3
        );
        // A stack of addresses only keeps its innermost.
        assert_eq!(to_last_named(&v(&["0x1", "0x2"])), v(&["0x1"]));
    }

    /// Idle waits stand apart from contention at the root: by the waiter's frames, or
    /// else by what the snapshot says of the word.
    #[test]
    fn each_line_starts_with_what_the_wait_was_for() {
        let row = |waiter: &str, object: u64| StackRowView {
            pid: 1,
            object,
            object_name: None,
            waker_pid: 1,
            edge: StackEdge {
                waits: 1,
                wait_ns: 5,
                max_ns: 5,
                samples: 1,
                weight_milli: 1000,
            },
            waiter: vec![waiter.into(), "main+0x1".into()],
            waker: vec!["main+0x2".into()],
        };
        let view = StacksView {
            rows: vec![
                row("___pthread_cond_wait+0x5 (c.c:1)", 1),
                row("__pthread_clockjoin_ex+0x9", 2),
                row("futex_wait+0x3", 3),
                row("futex_wait+0x3", 4),
            ],
            ..StacksView::default()
        };
        let kind_of = |_, addr| {
            if addr == 3 {
                WaitKind::Mutex
            } else {
                WaitKind::Unknown
            }
        };
        let roots: Vec<String> = render(&view, &kind_of)
            .lines()
            .map(|l| l.split(';').next().unwrap().to_owned())
            .collect();
        assert_eq!(
            roots,
            ["idle:condvar", "idle:join", "contention:mutex", "not_known"]
        );
    }
}
