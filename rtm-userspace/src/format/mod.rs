//! How text is made for people: numbers and durations, aligned tables, and target-
//! controlled text made inert. Shared by every text output (the report, the analyses'
//! sections, messages); depends on nothing else in the crate.

pub mod dot;
pub mod svg;
pub mod table;
pub mod text;

/// A duration in ns, with a unit people read at a glance: `850 ns`, `12.3 us`, `4.56 ms`.
pub fn ns(v: u64) -> String {
    let f = v as f64;
    if v < 1_000 {
        format!("{v} ns")
    } else if v < 1_000_000 {
        format!("{:.1} us", f / 1e3)
    } else if v < 1_000_000_000 {
        format!("{:.2} ms", f / 1e6)
    } else {
        format!("{:.3} s", f / 1e9)
    }
}

/// Like [`ns`] for an optional value: `-` when absent.
pub fn opt_ns(v: Option<u64>) -> String {
    v.map(ns).unwrap_or_else(|| "-".into())
}

/// Like [`ns`] for a mean.
pub fn mean_ns(v: Option<f64>) -> String {
    v.map(|m| ns(m.round() as u64))
        .unwrap_or_else(|| "-".into())
}

/// A count with thousands separators.
pub fn count(v: u64) -> String {
    let s = v.to_string();
    let mut out = String::with_capacity(s.len() + s.len() / 3);
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A share as a percentage.
pub fn pct(part: f64) -> String {
    format!("{:.1}%", part * 100.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_pick_a_readable_unit() {
        assert_eq!(ns(850), "850 ns");
        assert_eq!(ns(12_345), "12.3 us");
        assert_eq!(ns(4_560_000), "4.56 ms");
        assert_eq!(ns(1_234_000_000), "1.234 s");
        assert_eq!(opt_ns(None), "-");
    }

    #[test]
    fn counts_get_separators() {
        assert_eq!(count(0), "0");
        assert_eq!(count(999), "999");
        assert_eq!(count(1_000), "1,000");
        assert_eq!(count(1_234_567), "1,234,567");
    }
}
