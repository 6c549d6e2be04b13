//! The report's pictures, drawn as SVG text: the sync graph, the MPI communication
//! matrix, barrier rounds and time series on one shared time axis. Every label is
//! escaped.

use std::fmt::Write as _;

use super::text::markup as esc;
use crate::format::ns;

/// A node of the sync graph: what tells it apart (a thread's or an object's identity,
/// not its label: two processes may each have a `queue_lock`) and its label.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    /// Its identity.
    pub id: String,
    /// What is written on it.
    pub label: String,
}

/// At most `max` characters of `label`; a number that tells objects of one name apart
/// (`... #12`) is kept at its end.
fn shortened(label: &str, max: usize) -> String {
    if label.chars().count() <= max {
        return label.to_owned();
    }
    let suffix = match label.rsplit_once(" #") {
        Some((_, n)) if !n.is_empty() && n.bytes().all(|c| c.is_ascii_digit()) => {
            format!("\u{2026} #{n}")
        }
        _ => String::new(),
    };
    let keep = max.saturating_sub(suffix.chars().count());
    label.chars().take(keep).chain(suffix.chars()).collect()
}

/// The sync graph: waiting threads (left), the objects they waited on (middle), the
/// threads whose wakes ended the waits (right); an edge's width is its time waited.
/// `waits`: (waiter, object, ns); `wakes`: (object, waker, ns).
pub fn sync_graph(waits: &[(Node, Node, u64)], wakes: &[(Node, Node, u64)]) -> String {
    let mut cols: [Vec<&Node>; 3] = Default::default();
    let ends = waits
        .iter()
        .flat_map(|(w, o, _)| [(0, w), (1, o)])
        .chain(wakes.iter().flat_map(|(o, k, _)| [(1, o), (2, k)]));
    for (c, n) in ends {
        if !cols[c].iter().any(|m| m.id == n.id) {
            cols[c].push(n);
        }
    }
    let rows = cols.iter().map(Vec::len).max().unwrap_or(0).max(1);
    let (width, row_h, top) = (960.0, 26.0, 30.0);
    let height = top + rows as f64 * row_h + 10.0;
    let x = [150.0, 480.0, 810.0];
    let y = |c: usize, n: &Node| {
        let i = cols[c].iter().position(|m| m.id == n.id).unwrap_or(0);
        top + (i as f64 + 0.5) * (rows as f64 * row_h) / cols[c].len().max(1) as f64
    };
    let max = waits
        .iter()
        .map(|e| e.2)
        .chain(wakes.iter().map(|e| e.2))
        .max()
        .unwrap_or(1)
        .max(1) as f64;
    let stroke = |v: u64| 1.0 + 11.0 * (v as f64 / max).sqrt();
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg class="chart" id="sync-graph" width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img"><title>sync graph</title>"#
    );
    for (i, t) in ["waiting threads", "objects", "woken by"]
        .iter()
        .enumerate()
    {
        let _ = write!(
            s,
            r#"<text x="{}" y="16" text-anchor="middle" font-weight="bold">{t}</text>"#,
            x[i]
        );
    }
    for (w, o, v) in waits {
        let _ = write!(
            s,
            r##"<line x1="{}" y1="{:.1}" x2="{}" y2="{:.1}" stroke="#c0392b" stroke-opacity="0.55" stroke-width="{:.1}"><title>{} waited {} on {}</title></line>"##,
            x[0] + 60.0,
            y(0, w),
            x[1] - 60.0,
            y(1, o),
            stroke(*v),
            esc(&w.label),
            ns(*v),
            esc(&o.label)
        );
    }
    for (o, k, v) in wakes {
        let _ = write!(
            s,
            r##"<line x1="{}" y1="{:.1}" x2="{}" y2="{:.1}" stroke="#2d6cdf" stroke-opacity="0.55" stroke-width="{:.1}"><title>{} woke waiters on {}: {}</title></line>"##,
            x[1] + 60.0,
            y(1, o),
            x[2] - 60.0,
            y(2, k),
            stroke(*v),
            esc(&k.label),
            esc(&o.label),
            ns(*v)
        );
    }
    for (c, names) in cols.iter().enumerate() {
        for n in names {
            let short = shortened(&n.label, 34);
            let _ = write!(
                s,
                r##"<rect x="{}" y="{:.1}" width="120" height="18" rx="3" fill="{}"/><text x="{}" y="{:.1}" text-anchor="middle">{}<title>{}</title></text>"##,
                x[c] - 60.0,
                y(c, n) - 9.0,
                if c == 1 { "#f3d9a4" } else { "#dfe6f3" },
                x[c],
                y(c, n) + 4.0,
                esc(&short),
                esc(&n.label)
            );
        }
    }
    s.push_str("</svg>");
    s
}

/// A heatmap of `cells[src][dst]` (labels along both axes), titled `what`, with the
/// value shown by `fmt` on hover.
pub fn heatmap(
    labels: &[String],
    cells: &[Vec<f64>],
    what: &str,
    fmt: &dyn Fn(f64) -> String,
) -> String {
    let n = labels.len().max(1);
    let cell = (480.0 / n as f64).clamp(4.0, 40.0);
    let left = 90.0;
    let size = left + cell * n as f64 + 10.0;
    let max = cells
        .iter()
        .flatten()
        .copied()
        .fold(0.0f64, f64::max)
        .max(f64::MIN_POSITIVE);
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg class="chart heatmap" width="{size}" height="{size}" viewBox="0 0 {size} {size}" role="img"><title>{}</title><text x="4" y="14" font-weight="bold">{}: sender (row) to receiver (column)</text>"#,
        esc(what),
        esc(what)
    );
    for (i, row) in cells.iter().enumerate() {
        let y = left + i as f64 * cell;
        if n <= 64 {
            let _ = write!(
                s,
                r#"<text x="{}" y="{:.1}" text-anchor="end">{}</text>"#,
                left - 4.0,
                y + cell * 0.7,
                esc(&labels[i])
            );
        }
        for (j, v) in row.iter().enumerate() {
            if *v <= 0.0 {
                continue;
            }
            let t = (v / max).sqrt();
            let _ = write!(
                s,
                r#"<rect x="{:.1}" y="{y:.1}" width="{cell:.1}" height="{cell:.1}" fill="rgb({},{},{})"><title>{} -> {}: {}</title></rect>"#,
                left + j as f64 * cell,
                (255.0 - 200.0 * t) as u8,
                (240.0 - 180.0 * t) as u8,
                (230.0 - 60.0 * t) as u8,
                esc(&labels[i]),
                esc(&labels[j]),
                esc(&fmt(*v))
            );
        }
    }
    s.push_str("</svg>");
    s
}

/// Bars of each barrier round's arrival spread (the first to the last thread), the
/// latest rounds; the tallest is the worst imbalance.
pub fn rounds(name: &str, spreads: &[u64]) -> String {
    let (w, h) = (720.0, 120.0);
    let max = spreads.iter().copied().max().unwrap_or(1).max(1) as f64;
    let bar = (w - 40.0) / spreads.len().max(1) as f64;
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg class="chart" width="{w}" height="{h}" role="img"><title>{n}</title><text x="4" y="14">{n}: arrival spread per round (max {})</text>"#,
        ns(max as u64),
        n = esc(name)
    );
    for (i, v) in spreads.iter().enumerate() {
        let bh = (h - 30.0) * (*v as f64 / max);
        let _ = write!(
            s,
            r##"<rect x="{:.1}" y="{:.1}" width="{:.1}" height="{bh:.1}" fill="#8e44ad"><title>round {i}: {}</title></rect>"##,
            30.0 + i as f64 * bar,
            h - 6.0 - bh,
            (bar - 1.0).max(1.0),
            ns(*v)
        );
    }
    s.push_str("</svg>");
    s
}

/// A series of a chart: its label and its (start s, end s, value) steps.
pub type Series = (String, Vec<(f64, f64, f64)>);

/// A step chart of `series` (label, intervals (start s, end s, value): each value held
/// over its interval, as sampled) over `[0, span]` seconds, `unit` after the values;
/// all charts of a report share the time axis.
pub fn lines(title: &str, unit: &str, series: &[Series], span: f64) -> String {
    let (w, h, left, right) = (960.0, 130.0, 60.0, 170.0);
    let plot = w - left - right;
    let max = series
        .iter()
        .flat_map(|(_, p)| p.iter().map(|q| q.2))
        .fold(0.0f64, f64::max)
        .max(1e-9);
    let span = span.max(1e-9);
    let colors = [
        "#2d6cdf", "#c0392b", "#27ae60", "#8e44ad", "#d35400", "#16a085",
    ];
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg class="chart" width="{w}" height="{h}" role="img"><title>{t}</title><text x="4" y="14" font-weight="bold">{t}</text><text x="4" y="30">{} {}</text><line class="axis" x1="{left}" y1="{}" x2="{}" y2="{}"/><text x="{left}" y="{}">0 s</text><text x="{}" y="{}" text-anchor="end">{:.1} s</text>"#,
        fmt_val(max),
        esc(unit),
        h - 20.0,
        left + plot,
        h - 20.0,
        h - 6.0,
        left + plot,
        h - 6.0,
        span,
        t = esc(title)
    );
    let x = |t: f64| left + plot * (t / span).clamp(0.0, 1.0);
    let y = |v: f64| (h - 20.0) - (h - 40.0) * (v / max);
    for (k, (label, pts)) in series.iter().enumerate() {
        let c = colors[k % colors.len()];
        let mut path = String::new();
        for (a, b, v) in pts {
            let _ = write!(
                path,
                "{}{:.1},{:.1} L{:.1},{:.1}",
                if path.is_empty() { "M" } else { " L" },
                x(*a),
                y(*v),
                x(*b),
                y(*v)
            );
        }
        let _ = write!(
            s,
            r#"<path d="{path}" fill="none" stroke="{c}" stroke-width="1.5"/><text x="{}" y="{}" style="fill:{c}">{}</text>"#,
            left + plot + 8.0,
            20.0 + 14.0 * (k as f64 + 1.0),
            esc(&label.chars().take(26).collect::<String>())
        );
    }
    s.push_str("</svg>");
    s
}

fn fmt_val(v: f64) -> String {
    if v >= 1e9 {
        format!("{:.1}G", v / 1e9)
    } else if v >= 1e6 {
        format!("{:.1}M", v / 1e6)
    } else if v >= 1e3 {
        format!("{:.1}k", v / 1e3)
    } else {
        format!("{v:.1}")
    }
}
