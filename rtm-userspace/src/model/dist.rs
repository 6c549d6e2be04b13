//! Time distributions: exact count, total, min and max always; percentiles from an
//! HdrHistogram while the shared histogram budget lasts (memory stays bounded however
//! many objects a target creates).

use hdrhistogram::Histogram;
use serde::Serialize;

/// Significant figures kept by every histogram (1% relative precision).
const SIGFIG: u8 = 2;

/// How many histograms may still be created; shared by every distribution of a model.
#[derive(Debug, Clone)]
pub struct HistogramBudget {
    left: usize,
    /// Distributions that wanted a histogram after the budget ran out.
    pub refused: u64,
}

impl HistogramBudget {
    /// A budget of `n` histograms.
    pub fn new(n: usize) -> Self {
        Self {
            left: n,
            refused: 0,
        }
    }

    /// Whether a histogram may still be created.
    pub fn has_room(&self) -> bool {
        self.left > 0
    }

    /// Counts a distribution that wanted a histogram and got none.
    pub fn refuse(&mut self) {
        self.refused += 1;
    }

    fn take(&mut self) -> bool {
        if self.left > 0 {
            self.left -= 1;
            true
        } else {
            self.refused += 1;
            false
        }
    }
}

/// A distribution of nanosecond durations (40 bytes: one per edge and role).
///
/// A histogram is taken from the budget at the first duration or never: a distribution
/// with durations but no histogram has none for good, so percentiles are never computed
/// from a partial one.
#[derive(Debug, Clone, Default)]
pub struct Dist {
    count: u64,
    total: u64,
    min: u64,
    max: u64,
    hist: Option<Box<Histogram<u32>>>,
}

impl Dist {
    /// A distribution of `count` durations summing to `total`, without percentiles.
    pub fn from_parts(count: u64, total: u64, min: u64, max: u64) -> Self {
        Self {
            count,
            total,
            min,
            max,
            hist: None,
        }
    }

    /// Records one duration.
    pub fn record(&mut self, ns: u64, budget: &mut HistogramBudget) {
        if self.count == 0 {
            self.min = ns;
            self.max = ns;
            if budget.take() {
                // Starts tiny and grows with the largest value recorded.
                let mut h = Histogram::<u32>::new_with_bounds(1, 2, SIGFIG)
                    .expect("constant histogram bounds are valid");
                h.auto(true);
                self.hist = Some(Box::new(h));
            }
        } else {
            self.min = self.min.min(ns);
            self.max = self.max.max(ns);
        }
        self.count += 1;
        self.total = self.total.saturating_add(ns);
        // `record` grows the histogram to fit and saturates counts; it fails only for
        // values no resize can hold, and then percentiles are withdrawn rather than skewed.
        if let Some(h) = self.hist.as_mut()
            && h.record(ns.max(1)).is_err()
        {
            self.hist = None;
        }
    }

    /// Records `count` durations summing to `total`, between `min` and `max` (over all
    /// of them, or more), spread over `buckets` of the kernel's sums: (bucket, how many);
    /// each stands at its bucket's middle in the histogram (`rtm_common::agg`).
    pub fn record_summed(
        &mut self,
        count: u64,
        total: u64,
        (min, max): (u64, u64),
        buckets: &[(u8, u32)],
        budget: &mut HistogramBudget,
    ) {
        if count == 0 {
            return;
        }
        if self.count == 0 {
            self.min = min;
            self.max = max;
            if budget.take() {
                let mut h = Histogram::<u32>::new_with_bounds(1, 2, SIGFIG)
                    .expect("constant histogram bounds are valid");
                h.auto(true);
                self.hist = Some(Box::new(h));
            }
        } else {
            self.min = self.min.min(min);
            self.max = self.max.max(max);
        }
        self.count += count;
        self.total = self.total.saturating_add(total);
        if let Some(h) = self.hist.as_mut() {
            for &(b, n) in buckets {
                let mid = rtm_common::agg_bucket_mid(usize::from(b)).clamp(min, max);
                if h.record_n(mid.max(1), n).is_err() {
                    self.hist = None;
                    break;
                }
            }
        }
    }

    /// Number of durations recorded.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// Sum of all durations.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// Adds another distribution into this one. Used for transient totals (per object, per
    /// thread) when a snapshot is taken, so it draws nothing from the budget.
    pub fn merge(&mut self, other: &Dist) {
        if other.count == 0 {
            return;
        }
        if self.count == 0 {
            *self = other.clone();
            return;
        }
        self.min = self.min.min(other.min);
        self.max = self.max.max(other.max);
        self.count += other.count;
        self.total = self.total.saturating_add(other.total);
        let merged = match (&mut self.hist, &other.hist) {
            (Some(h), Some(o)) => h.add(o.as_ref()).is_ok(),
            _ => false,
        };
        if !merged {
            self.hist = None;
        }
    }

    /// The summary shown in reports and JSON.
    pub fn summary(&self) -> DistSummary {
        // A histogram bucket's value is the highest it holds (1% wide) and zero is
        // recorded as 1: kept within the exact min and max, a percentile never says
        // more than the largest value seen, nor 1 ns of a distribution of zeros.
        let pct = |q: f64| {
            self.hist
                .as_ref()
                .filter(|_| self.count > 0)
                .map(|h| h.value_at_quantile(q).clamp(self.min, self.max))
        };
        DistSummary {
            count: self.count,
            total_ns: self.total,
            min_ns: if self.count > 0 { Some(self.min) } else { None },
            mean_ns: if self.count > 0 {
                Some(self.total as f64 / self.count as f64)
            } else {
                None
            },
            p50_ns: pct(0.50),
            p90_ns: pct(0.90),
            p99_ns: pct(0.99),
            max_ns: if self.count > 0 { Some(self.max) } else { None },
        }
    }
}

/// What a [`Dist`] reports. Percentiles are `None` when no histogram was kept
/// (histogram budget exhausted) and everything but count and total is `None` when empty.
#[derive(Debug, Clone, Copy, Default, Serialize, serde::Deserialize, PartialEq)]
#[serde(default)]
pub struct DistSummary {
    /// Number of durations.
    pub count: u64,
    /// Sum of durations, ns.
    pub total_ns: u64,
    /// Smallest, ns.
    pub min_ns: Option<u64>,
    /// Mean, ns.
    pub mean_ns: Option<f64>,
    /// Median, ns (1% precision).
    pub p50_ns: Option<u64>,
    /// 90th percentile, ns.
    pub p90_ns: Option<u64>,
    /// 99th percentile, ns.
    pub p99_ns: Option<u64>,
    /// Largest, ns.
    pub max_ns: Option<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_stay_within_min_and_max() {
        let mut b = HistogramBudget::new(8);
        // One sample: every percentile is that sample, not its bucket's upper edge.
        let mut one = Dist::default();
        one.record(1_234_567, &mut b);
        let s = one.summary();
        assert_eq!(
            (s.p50_ns, s.p99_ns, s.max_ns),
            (Some(1_234_567), Some(1_234_567), Some(1_234_567))
        );
        // Only zeros: zero, not 1 ns.
        let mut zeros = Dist::default();
        for _ in 0..100 {
            zeros.record(0, &mut b);
        }
        let s = zeros.summary();
        assert_eq!(
            (s.p50_ns, s.p99_ns, s.max_ns, s.mean_ns),
            (Some(0), Some(0), Some(0), Some(0.0))
        );
        // Mostly small values and a few large: p99 between min and max.
        let mut mixed = Dist::default();
        for i in 0..1000u64 {
            mixed.record(if i % 100 == 0 { 25_000_000 } else { 1_000 + i }, &mut b);
        }
        let s = mixed.summary();
        let (min, max) = (s.min_ns.unwrap(), s.max_ns.unwrap());
        for p in [s.p50_ns, s.p90_ns, s.p99_ns] {
            let p = p.unwrap();
            assert!(min <= p && p <= max, "{p} outside [{min}, {max}]");
        }
        assert!(Dist::default().summary().p99_ns.is_none());
    }

    #[test]
    fn exact_moments_and_percentiles() {
        let mut b = HistogramBudget::new(1);
        let mut d = Dist::default();
        for v in 1..=1000u64 {
            d.record(v * 1000, &mut b);
        }
        let s = d.summary();
        assert_eq!(s.count, 1000);
        assert_eq!(s.total_ns, 500_500_000);
        assert_eq!(s.min_ns, Some(1000));
        assert_eq!(s.max_ns, Some(1_000_000));
        assert_eq!(s.mean_ns, Some(500_500.0));
        let p50 = s.p50_ns.unwrap() as f64;
        assert!((p50 - 500_000.0).abs() / 500_000.0 < 0.01, "p50 {p50}");
        let p99 = s.p99_ns.unwrap() as f64;
        assert!((p99 - 990_000.0).abs() / 990_000.0 < 0.01, "p99 {p99}");
    }

    #[test]
    fn exhausted_budget_keeps_exact_figures_without_percentiles() {
        let mut b = HistogramBudget::new(0);
        let mut d = Dist::default();
        d.record(5, &mut b);
        d.record(7, &mut b);
        let s = d.summary();
        assert_eq!(
            (s.count, s.total_ns, s.min_ns, s.max_ns),
            (2, 12, Some(5), Some(7))
        );
        assert_eq!(s.p50_ns, None);
        assert_eq!(b.refused, 1);
    }

    #[test]
    fn merge_adds_counts_and_histograms() {
        let mut b = HistogramBudget::new(2);
        let (mut a, mut c) = (Dist::default(), Dist::default());
        a.record(100, &mut b);
        c.record(300, &mut b);
        let mut m = Dist::default();
        m.merge(&a);
        m.merge(&c);
        let s = m.summary();
        assert_eq!(
            (s.count, s.total_ns, s.min_ns, s.max_ns),
            (2, 400, Some(100), Some(300))
        );
        assert!(s.p99_ns.unwrap() >= 297);
    }

    #[test]
    fn merge_with_a_histogramless_side_drops_percentiles_only() {
        let mut b = HistogramBudget::new(1);
        let (mut a, mut c) = (Dist::default(), Dist::default());
        a.record(100, &mut b);
        c.record(300, &mut b);
        let mut m = Dist::default();
        m.merge(&a);
        m.merge(&c);
        let s = m.summary();
        assert_eq!((s.count, s.total_ns), (2, 400));
        assert_eq!(s.p50_ns, None);
    }

    #[test]
    fn a_histogram_is_taken_at_the_first_duration_or_never() {
        let mut b = HistogramBudget::new(0);
        let mut d = Dist::default();
        d.record(5, &mut b);
        // Budget returned later (e.g. a larger one): still no partial histogram.
        let mut more = HistogramBudget::new(1);
        d.record(6, &mut more);
        assert_eq!(d.summary().p50_ns, None);
        assert_eq!(more.left, 1);
        assert_eq!(std::mem::size_of::<Dist>(), 40);
    }

    #[test]
    fn empty_summary_has_no_moments() {
        let s = Dist::default().summary();
        assert_eq!(s.count, 0);
        assert_eq!(s.mean_ns, None);
        assert_eq!(s.max_ns, None);
    }
}
