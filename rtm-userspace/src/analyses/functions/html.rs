//! The HTML page's timed-functions tab: each function over all threads, then the
//! busiest (thread, function) rows. Names and modules are the target's text, escaped.

use std::fmt::Write as _;

use serde::Deserialize;

use super::view::FunctionsView;
use crate::format::{count, mean_ns, ns, opt_ns, text::markup};

/// Rows of the per-thread table.
const THREAD_ROWS: usize = 50;

/// The tab, from the document's `functions`.
pub(super) fn render(
    section: &serde_json::Value,
    _: &dyn crate::analyses::Names,
    p: &mut String,
) -> Result<(), serde_json::Error> {
    let v = FunctionsView::deserialize(section)?;
    p.push_str(
        "<section id=\"functions\"><h2>Timed functions (--func)</h2><p class=\"note\">Inclusive \
         time of each call: its own and its callees'; \"total\" counts recursion once.</p>\
         <table><tr><th>function</th><th>calls</th><th>threads</th><th>total</th><th>avg</th>\
         <th>p50</th><th>p99</th><th>max</th><th>running at end</th><th>in</th></tr>",
    );
    for f in &v.functions {
        let _ = write!(
            p,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>\
             <td>{}</td><td>{}</td><td>{}</td></tr>",
            markup(&f.name),
            count(f.time.count),
            f.threads,
            ns(f.outer_ns),
            mean_ns(f.time.mean_ns),
            opt_ns(f.time.p50_ns),
            opt_ns(f.time.p99_ns),
            opt_ns(f.time.max_ns),
            count(f.running),
            markup(&f.module)
        );
    }
    p.push_str("</table>");
    if !v.threads.is_empty() {
        let _ = write!(
            p,
            "<h3>By thread (top {} of {})</h3><table><tr><th>thread</th><th>function</th>\
             <th>calls</th><th>total</th><th>max</th></tr>",
            v.threads.len().min(THREAD_ROWS),
            v.threads.len()
        );
        for t in v.threads.iter().take(THREAD_ROWS) {
            let thread = match &t.thread {
                Some(name) => format!("{} {}", t.tid, name),
                None => t.tid.to_string(),
            };
            let _ = write!(
                p,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                markup(&thread),
                markup(&t.name),
                count(t.time.count),
                ns(t.outer_ns),
                opt_ns(t.time.max_ns)
            );
        }
        p.push_str("</table>");
    }
    p.push_str("</section>");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analyses::functions::view::{FunctionRow, FunctionThreadRow};

    #[test]
    fn names_the_target_chose_come_out_inert_and_every_function_has_its_row() {
        let hostile = "<img src=x onerror=alert(1)>\u{1b}[2J";
        let mut v = FunctionsView::default();
        v.functions.push(FunctionRow {
            name: hostile.into(),
            module: "/lib/\"x\".so".into(),
            threads: 2,
            ..Default::default()
        });
        v.functions[0].time.count = 1234;
        v.threads.push(FunctionThreadRow {
            name: hostile.into(),
            tid: 7,
            thread: Some("<b>w</b>".into()),
            ..Default::default()
        });
        let mut p = String::new();
        render(
            &serde_json::to_value(&v).unwrap(),
            &crate::analyses::NoNames,
            &mut p,
        )
        .unwrap();
        assert!(
            !p.contains("<img") && !p.contains("<b>") && !p.contains('\u{1b}'),
            "{p}"
        );
        assert!(
            p.contains("&lt;img src=x") && p.contains("&quot;x&quot;"),
            "{p}"
        );
        assert!(
            p.contains("<td>1,234</td>") && p.contains("7 &lt;b&gt;w"),
            "{p}"
        );
        // A section of another shape is an error, not a page.
        assert!(
            render(
                &serde_json::json!({"functions": 3}),
                &crate::analyses::NoNames,
                &mut String::new()
            )
            .is_err()
        );
    }
}
