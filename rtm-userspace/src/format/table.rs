//! Aligned text tables, the report's building block.

use super::text::escape;

/// Renders rows as aligned columns; the first column is left-aligned, the rest right.
/// Every cell is escaped (names in them come from the traced program).
pub fn table(out: &mut String, header: &[&str], rows: &[Vec<String>]) {
    let rows: Vec<Vec<String>> = rows
        .iter()
        .map(|r| r.iter().map(|c| escape(c).into_owned()).collect())
        .collect();
    let rows = rows.as_slice();
    let mut w: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            w[i] = w[i].max(c.chars().count());
        }
    }
    let line = |out: &mut String, cells: &[String]| {
        out.push_str("  ");
        for (i, c) in cells.iter().enumerate() {
            let pad = w[i] - c.chars().count();
            if i == 0 {
                out.push_str(c);
                out.push_str(&" ".repeat(pad));
            } else {
                out.push_str("  ");
                out.push_str(&" ".repeat(pad));
                out.push_str(c);
            }
        }
        out.push('\n');
    };
    line(
        out,
        &header.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
    );
    for r in rows {
        line(out, r);
    }
}
