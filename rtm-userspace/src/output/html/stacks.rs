//! The page's call-stack tab: for the words with the most wait by stack, the waiter and
//! waker stack pairs, frames innermost first. Every frame and name is the target's text,
//! escaped.

use std::fmt::Write as _;

use super::esc;
use crate::format::{count, ns};
use crate::model::stacks::{StackRowView as StackRow, StacksView as Stacks};

/// Words shown, and stack pairs under each.
const WORDS: usize = 20;
const PAIRS: usize = 5;

fn frames(p: &mut String, f: &[String]) {
    if f.is_empty() {
        p.push_str("<td class=\"stack\"><i>not known</i></td>");
        return;
    }
    p.push_str("<td class=\"stack\"><ol>");
    for name in f {
        let _ = write!(p, "<li>{}</li>", esc(name));
    }
    p.push_str("</ol></td>");
}

/// The section.
pub fn section(p: &mut String, st: &Stacks) {
    let mut words: Vec<((u32, u64), Vec<&StackRow>)> = Vec::new();
    for r in &st.rows {
        let key = (r.pid, r.object);
        match words.iter_mut().find(|(k, _)| *k == key) {
            Some((_, rows)) => rows.push(r),
            None => words.push((key, vec![r])),
        }
    }
    let total = |rows: &[&StackRow]| rows.iter().map(|r| r.edge.wait_ns).sum::<u64>();
    words.sort_by_key(|(_, rows)| std::cmp::Reverse(total(rows)));
    let _ = write!(
        p,
        "<section id=\"stacks\"><h2>Where they waited and who let them go (top {} of {} words)</h2>\
         <p class=\"note\">Each wait a thread woke, by the waiter's call stack and the waker's \
         (for a mutex, its unlock: the end of the holder's critical section); frames innermost \
         first; time asleep until the wake.</p>",
        words.len().min(WORDS),
        words.len()
    );
    for ((pid, object), rows) in words.iter().take(WORDS) {
        let name = rows[0]
            .object_name
            .clone()
            .unwrap_or_else(|| format!("{object:#x}"));
        let _ = write!(
            p,
            "<h3>{} (PID {pid}): {} waits, {} asleep</h3><table class=\"stacks\"><tr><th>waits</th>\
             <th>asleep</th><th>max</th><th>waited in</th><th>woken from</th></tr>",
            esc(&name),
            count(rows.iter().map(|r| r.edge.waits).sum()),
            ns(total(rows))
        );
        for r in rows.iter().take(PAIRS) {
            let _ = write!(
                p,
                "<tr><td>{}</td><td>{}</td><td>{}</td>",
                count(r.edge.waits),
                ns(r.edge.wait_ns),
                ns(r.edge.max_ns)
            );
            frames(p, &r.waiter);
            if r.waker_pid == 0 {
                p.push_str("<td class=\"stack\"><i>no thread: timed out, interrupted, ended by a thread's exit, or still asleep</i></td>");
            } else {
                frames(p, &r.waker);
            }
            p.push_str("</tr>");
        }
        p.push_str("</table>");
    }
    if st.other_waits > 0 {
        let _ = write!(
            p,
            "<p class=\"note\">{} more waits in {} rows not listed ({} asleep; in the JSON up to its \
             500 rows).</p>",
            count(st.other_waits),
            count(st.rows_total.saturating_sub(st.rows.len()) as u64),
            ns(st.other_wait_ns)
        );
    }
    p.push_str("</section>");
}
