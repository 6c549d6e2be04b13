//! The scrape's text: metric families encoded by prometheus-client in the OpenMetrics
//! format, and the same turned into Prometheus's classic text format for scrapers that
//! do not ask for OpenMetrics. Label values come from targets (thread and program
//! names, paths): they are escaped and stripped of control characters here, since the
//! encoder writes them as given.

use std::collections::HashMap;

use prometheus_client::{
    collector::Collector,
    encoding::DescriptorEncoder,
    metrics::{MetricType, exemplar::Exemplar},
    registry::Registry,
};

/// Longest label value, in characters.
const MAX_LABEL: usize = 256;

/// What a family measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Only grows (the name, without `_total`, which the encoders add).
    Counter,
    /// Goes up and down.
    Gauge,
    /// Labels only (the name, without `_info`).
    Info,
    /// Seconds in buckets.
    Histogram,
}

/// One series' value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// A whole number.
    Int(u64),
    /// A real number.
    Float(f64),
    /// An info series (value 1).
    Info,
    /// A histogram: sum, count, and (upper bound, count in that bucket) with the last
    /// bound f64::MAX for +Inf.
    Histogram {
        /// Sum of the observations.
        sum: f64,
        /// Number of observations.
        count: u64,
        /// Per-bucket (not cumulative) counts.
        buckets: Vec<(f64, u64)>,
    },
}

impl Value {
    /// Series this value takes in a scrape (a histogram's buckets, sum and count).
    pub fn series(&self) -> usize {
        match self {
            Value::Histogram { buckets, .. } => buckets.len() + 2,
            _ => 1,
        }
    }
}

/// Labels of one series: names are ours, values are escaped when encoded.
pub type Labels = Vec<(&'static str, String)>;

/// A metric family.
#[derive(Debug, Clone)]
pub struct Family {
    /// Its name (units in it; no `_total` or `_info`).
    pub name: &'static str,
    /// What it is.
    pub help: &'static str,
    /// Its type.
    pub kind: Kind,
    /// Its series.
    pub samples: Vec<(Labels, Value)>,
}

/// A label value as the text formats need it: backslash, double quote and newline
/// escaped, other control characters dropped, at most MAX_LABEL characters.
pub fn escape(v: &str) -> String {
    let mut out = String::with_capacity(v.len().min(MAX_LABEL));
    for c in v.chars().take(MAX_LABEL) {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c if c.is_control() => {}
            c => out.push(c),
        }
    }
    out
}

#[derive(Debug)]
struct Families(Vec<Family>);

type Escaped = Vec<(String, String)>;

fn escaped(labels: &Labels) -> Escaped {
    labels
        .iter()
        .map(|(k, v)| ((*k).to_owned(), escape(v)))
        .collect()
}

impl Collector for Families {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        for f in &self.0 {
            if f.samples.is_empty() {
                continue;
            }
            let kind = match f.kind {
                Kind::Counter => MetricType::Counter,
                Kind::Gauge => MetricType::Gauge,
                Kind::Info => MetricType::Info,
                Kind::Histogram => MetricType::Histogram,
            };
            let mut m = encoder.encode_descriptor(f.name, f.help, None, kind)?;
            for (labels, value) in &f.samples {
                let labels = escaped(labels);
                if matches!(value, Value::Info) {
                    m.encode_info(&labels)?;
                    continue;
                }
                let mut s = m.encode_family(&labels)?;
                match (f.kind, value) {
                    (Kind::Counter, Value::Int(v)) => {
                        s.encode_counter(v, None::<&Exemplar<Escaped, f64>>)?
                    }
                    (Kind::Counter, Value::Float(v)) => {
                        s.encode_counter(v, None::<&Exemplar<Escaped, f64>>)?
                    }
                    (_, Value::Int(v)) => s.encode_gauge(&(*v as i64))?,
                    (_, Value::Float(v)) => s.encode_gauge(v)?,
                    (
                        _,
                        Value::Histogram {
                            sum,
                            count,
                            buckets,
                        },
                    ) => s.encode_histogram(
                        *sum,
                        *count,
                        buckets,
                        None::<&HashMap<usize, Exemplar<Escaped, f64>>>,
                    )?,
                    (_, Value::Info) => {}
                }
            }
        }
        Ok(())
    }
}

/// The families in the OpenMetrics text format (ending in `# EOF`).
pub fn openmetrics(families: Vec<Family>) -> String {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(Families(families)));
    let mut out = String::new();
    // Writing to a String cannot fail; a failed encode leaves what was written.
    let _ = prometheus_client::encoding::text::encode(&mut out, &registry);
    out
}

/// OpenMetrics text turned into the classic text format (version 0.0.4): no `# EOF`
/// and no `# UNIT`; a counter's HELP and TYPE name its `_total` series, an info
/// family is a gauge named `_info`.
pub fn classic(openmetrics: &str) -> String {
    let mut out = String::with_capacity(openmetrics.len());
    let mut help: Option<&str> = None;
    for line in openmetrics.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        if let Some(rest) = line.strip_prefix("# HELP ") {
            help = Some(rest);
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap_or((rest, "untyped"));
            let (name, kind) = match kind {
                "counter" => (format!("{name}_total"), "counter"),
                "info" => (format!("{name}_info"), "gauge"),
                k => (name.to_owned(), k),
            };
            if let Some(h) = help.take() {
                let text = h.split_once(' ').map_or("", |(_, t)| t);
                out.push_str(&format!("# HELP {name} {text}\n"));
            }
            out.push_str(&format!("# TYPE {name} {kind}\n"));
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn families() -> Vec<Family> {
        vec![
            Family {
                name: "rtm_futex_waits",
                help: "Futex waits.",
                kind: Kind::Counter,
                samples: vec![(
                    vec![("target", "a\"b\\c\nd\u{1b}[31m".into())],
                    Value::Int(7),
                )],
            },
            Family {
                name: "rtm_target",
                help: "Targets.",
                kind: Kind::Info,
                samples: vec![(vec![("pid", "12".into())], Value::Info)],
            },
            Family {
                name: "rtm_futex_wait_seconds",
                help: "Wait lengths.",
                kind: Kind::Histogram,
                samples: vec![(
                    vec![("target", "x".into())],
                    Value::Histogram {
                        sum: 0.5,
                        count: 3,
                        buckets: vec![(0.001, 1), (1.0, 2), (f64::MAX, 0)],
                    },
                )],
            },
            Family {
                name: "rtm_empty",
                help: "Nothing.",
                kind: Kind::Gauge,
                samples: vec![],
            },
        ]
    }

    #[test]
    fn both_formats_escape_target_text() {
        let om = openmetrics(families());
        assert!(om.ends_with("# EOF\n"), "{om}");
        assert!(
            om.contains("rtm_futex_waits_total{target=\"a\\\"b\\\\c\\nd[31m\"} 7"),
            "{om}"
        );
        assert!(om.contains("# TYPE rtm_target info"), "{om}");
        assert!(om.contains("rtm_target_info{pid=\"12\"} 1"), "{om}");
        assert!(
            om.contains("rtm_futex_wait_seconds_bucket{le=\"1.0\",target=\"x\"} 3"),
            "{om}"
        );
        assert!(om.contains("le=\"+Inf\",target=\"x\"} 3"), "{om}");
        assert!(!om.contains("rtm_empty"));
        assert!(!om.contains('\u{1b}'));
        let text = classic(&om);
        assert!(!text.contains("# EOF"));
        assert!(
            text.contains(
                "# HELP rtm_futex_waits_total Futex waits.\n# TYPE rtm_futex_waits_total counter\n"
            ),
            "{text}"
        );
        assert!(
            text.contains("# TYPE rtm_target_info gauge\nrtm_target_info{pid=\"12\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("# TYPE rtm_futex_wait_seconds histogram"),
            "{text}"
        );
    }

    #[test]
    fn label_values_are_bounded() {
        assert_eq!(escape(&"x".repeat(10_000)).len(), MAX_LABEL);
        assert_eq!(escape("\t\r\0ok"), "ok");
    }
}
