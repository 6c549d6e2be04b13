//! One thread -> object edge's statistics, in as few bytes as its figures allow.
//!
//! A large graph is mostly edges (one per thread, object and role: 200,000 for 100,000
//! mutexes shared by two threads), and most of them only ever count lock calls and sum
//! durations that fit in 32 bits. Those are kept narrow (64 bytes); an edge moves to the
//! wide form (every counter and two full distributions, boxed) the first time a figure
//! does not fit, a rarely used counter is needed, or a histogram is granted to it. Both
//! forms give the same exact figures; only the wide one can hold percentiles.

use std::borrow::Cow;

use super::types::Counts;
use crate::model::dist::{Dist, HistogramBudget};

/// A count an edge keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Count {
    /// [`Counts::acquisitions`].
    Acquisitions,
    /// [`Counts::contended`].
    Contended,
    /// [`Counts::contended_wait_ns`].
    ContendedWaitNs,
    /// [`Counts::waits`].
    Waits,
    /// [`Counts::blocked`].
    Blocked,
    /// [`Counts::failed_trylocks`].
    FailedTrylocks,
    /// [`Counts::timeouts`].
    Timeouts,
    /// [`Counts::errors`].
    Errors,
    /// [`Counts::posts`].
    Posts,
    /// [`Counts::signals`].
    Signals,
    /// [`Counts::broadcasts`].
    Broadcasts,
    /// [`Counts::woken`].
    Woken,
}

/// Which distribution of an edge.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Span {
    /// Time inside blocking calls.
    Wait,
    /// Time between acquisition and release.
    Hold,
}

/// Count, min and max of durations that each fit in 32 bits (the total is kept beside,
/// so that the narrow form packs without padding).
#[derive(Clone, Copy, Debug, Default)]
struct NarrowDist {
    count: u32,
    min: u32,
    max: u32,
}

impl NarrowDist {
    /// Records `ns` into this and `total`; false (nothing recorded) when it or the count
    /// would not fit.
    fn record(&mut self, total: &mut u64, ns: u64) -> bool {
        let (Ok(v), Some(count)) = (u32::try_from(ns), self.count.checked_add(1)) else {
            return false;
        };
        if self.count == 0 {
            (self.min, self.max) = (v, v);
        } else {
            self.min = self.min.min(v);
            self.max = self.max.max(v);
        }
        self.count = count;
        *total = total.saturating_add(ns);
        true
    }

    fn dist(&self, total: u64) -> Dist {
        Dist::from_parts(
            u64::from(self.count),
            total,
            u64::from(self.min),
            u64::from(self.max),
        )
    }
}

/// The narrow form (64 bytes): the counters every lock or wait uses, 32-bit where they
/// count calls, and count, total, min and max of both distributions.
#[derive(Clone, Copy, Debug, Default)]
pub struct Narrow {
    contended_wait_ns: u64,
    wait_total: u64,
    hold_total: u64,
    acquisitions: u32,
    contended: u32,
    waits: u32,
    blocked: u32,
    wait: NarrowDist,
    hold: NarrowDist,
}

impl Narrow {
    /// Adds `n` to `count`; false (nothing added) when this form cannot hold the result.
    fn add(&mut self, count: Count, n: u64) -> bool {
        let field = match count {
            Count::ContendedWaitNs => {
                self.contended_wait_ns = self.contended_wait_ns.saturating_add(n);
                return true;
            }
            Count::Acquisitions => &mut self.acquisitions,
            Count::Contended => &mut self.contended,
            Count::Waits => &mut self.waits,
            Count::Blocked => &mut self.blocked,
            _ => return false,
        };
        match u32::try_from(n).ok().and_then(|n| field.checked_add(n)) {
            Some(v) => {
                *field = v;
                true
            }
            None => false,
        }
    }

    /// The distribution `span` and its total.
    fn span(&mut self, span: Span) -> (&mut NarrowDist, &mut u64) {
        match span {
            Span::Wait => (&mut self.wait, &mut self.wait_total),
            Span::Hold => (&mut self.hold, &mut self.hold_total),
        }
    }

    fn dist(&self, span: Span) -> Dist {
        match span {
            Span::Wait => self.wait.dist(self.wait_total),
            Span::Hold => self.hold.dist(self.hold_total),
        }
    }

    fn widen(&self) -> Wide {
        Wide {
            counts: self.counts(),
            wait: self.dist(Span::Wait),
            hold: self.dist(Span::Hold),
        }
    }

    fn counts(&self) -> Counts {
        Counts {
            acquisitions: self.acquisitions.into(),
            contended: self.contended.into(),
            contended_wait_ns: self.contended_wait_ns,
            waits: self.waits.into(),
            blocked: self.blocked.into(),
            ..Counts::default()
        }
    }
}

/// The wide form: every counter, and distributions that may hold a histogram.
#[derive(Clone, Debug, Default)]
pub struct Wide {
    counts: Counts,
    wait: Dist,
    hold: Dist,
}

impl Wide {
    fn add(&mut self, count: Count, n: u64) {
        let c = &mut self.counts;
        let field = match count {
            Count::Acquisitions => &mut c.acquisitions,
            Count::Contended => &mut c.contended,
            Count::ContendedWaitNs => &mut c.contended_wait_ns,
            Count::Waits => &mut c.waits,
            Count::Blocked => &mut c.blocked,
            Count::FailedTrylocks => &mut c.failed_trylocks,
            Count::Timeouts => &mut c.timeouts,
            Count::Errors => &mut c.errors,
            Count::Posts => &mut c.posts,
            Count::Signals => &mut c.signals,
            Count::Broadcasts => &mut c.broadcasts,
            Count::Woken => &mut c.woken,
        };
        *field = field.saturating_add(n);
    }

    fn dist(&mut self, span: Span) -> &mut Dist {
        match span {
            Span::Wait => &mut self.wait,
            Span::Hold => &mut self.hold,
        }
    }
}

/// An edge's statistics: what the thread did with the object.
#[derive(Clone, Debug)]
pub enum EdgeStats {
    /// Every figure fits in the narrow form and no histogram is kept.
    Narrow(Narrow),
    /// Boxed: the narrow form could not hold a figure, or a histogram was granted.
    Wide(Box<Wide>),
}

impl Default for EdgeStats {
    fn default() -> Self {
        Self::Narrow(Narrow::default())
    }
}

impl EdgeStats {
    fn widen(&mut self) -> &mut Wide {
        if let Self::Narrow(n) = self {
            *self = Self::Wide(Box::new(n.widen()));
        }
        match self {
            Self::Wide(w) => w,
            Self::Narrow(_) => unreachable!("widened above"),
        }
    }

    /// Adds `n` to one of the counts.
    pub fn add(&mut self, count: Count, n: u64) {
        if let Self::Narrow(narrow) = self
            && narrow.add(count, n)
        {
            return;
        }
        self.widen().add(count, n);
    }

    /// Records one duration. A distribution's first duration asks the budget for a
    /// histogram (the edge then widens to hold it); granted then or never, as [`Dist`].
    pub fn record(&mut self, span: Span, ns: u64, budget: &mut HistogramBudget) {
        if let Self::Narrow(narrow) = self {
            let (d, total) = narrow.span(span);
            if d.count > 0 || !budget.has_room() {
                let first = d.count == 0;
                if d.record(total, ns) {
                    if first {
                        // Refused, as a distribution's first duration is when the
                        // budget is spent.
                        budget.refuse();
                    }
                    return;
                }
            }
        }
        self.widen().dist(span).record(ns, budget);
    }

    /// Records durations the kernel summed ([`Dist::record_summed`]).
    pub fn record_summed(
        &mut self,
        span: Span,
        count: u64,
        total: u64,
        extremes: (u64, u64),
        buckets: &[(u8, u32)],
        budget: &mut HistogramBudget,
    ) {
        self.widen()
            .dist(span)
            .record_summed(count, total, extremes, buckets, budget);
    }

    /// All counts.
    pub fn counts(&self) -> Counts {
        match self {
            Self::Narrow(n) => n.counts(),
            Self::Wide(w) => w.counts,
        }
    }

    /// One of the distributions.
    pub fn dist(&self, span: Span) -> Cow<'_, Dist> {
        match (self, span) {
            (Self::Narrow(n), span) => Cow::Owned(n.dist(span)),
            (Self::Wide(w), Span::Wait) => Cow::Borrowed(&w.wait),
            (Self::Wide(w), Span::Hold) => Cow::Borrowed(&w.hold),
        }
    }

    /// Time inside blocking calls.
    pub fn wait(&self) -> Cow<'_, Dist> {
        self.dist(Span::Wait)
    }

    /// Time between acquisition and release.
    pub fn hold(&self) -> Cow<'_, Dist> {
        self.dist(Span::Hold)
    }

    /// Total time inside blocking calls, ns.
    pub fn wait_total(&self) -> u64 {
        match self {
            Self::Narrow(n) => n.wait_total,
            Self::Wide(w) => w.wait.total(),
        }
    }

    /// Whether this edge is in the wide form.
    #[cfg(test)]
    fn is_wide(&self) -> bool {
        matches!(self, Self::Wide(_))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn narrow_edges_are_small_and_exact() {
        assert_eq!(std::mem::size_of::<EdgeStats>(), 72);
        let mut b = HistogramBudget::new(0);
        let mut e = EdgeStats::default();
        for ns in [40, 60, 50] {
            e.add(Count::Acquisitions, 1);
            e.record(Span::Wait, ns, &mut b);
            e.record(Span::Hold, ns * 2, &mut b);
        }
        e.add(Count::Contended, 1);
        e.add(Count::ContendedWaitNs, 60);
        assert!(!e.is_wide());
        let c = e.counts();
        assert_eq!(
            (c.acquisitions, c.contended, c.contended_wait_ns),
            (3, 1, 60)
        );
        let w = e.wait().summary();
        assert_eq!(
            (w.count, w.total_ns, w.min_ns, w.max_ns, w.p50_ns),
            (3, 150, Some(40), Some(60), None)
        );
        assert_eq!(e.hold().summary().max_ns, Some(120));
        // Both distributions asked for a histogram and were refused.
        assert_eq!(b.refused, 2);
    }

    #[test]
    fn an_edge_widens_for_a_long_duration_a_rare_count_or_a_histogram() {
        let mut b = HistogramBudget::new(0);
        let mut long = EdgeStats::default();
        long.record(Span::Wait, 10, &mut b);
        long.record(Span::Wait, 5_000_000_000, &mut b);
        assert!(long.is_wide());
        let w = long.wait().summary();
        assert_eq!(
            (w.count, w.total_ns, w.min_ns, w.max_ns),
            (2, 5_000_000_010, Some(10), Some(5_000_000_000))
        );

        let mut many = EdgeStats::default();
        many.add(Count::Acquisitions, u64::from(u32::MAX));
        assert!(!many.is_wide());
        many.add(Count::Acquisitions, 2);
        assert!(many.is_wide());
        assert_eq!(many.counts().acquisitions, u64::from(u32::MAX) + 2);

        let mut rare = EdgeStats::default();
        rare.add(Count::Waits, 2);
        rare.add(Count::Timeouts, 1);
        assert!(rare.is_wide());
        assert_eq!((rare.counts().waits, rare.counts().timeouts), (2, 1));

        let mut b = HistogramBudget::new(1);
        let mut hist = EdgeStats::default();
        hist.record(Span::Hold, 1_000, &mut b);
        hist.record(Span::Hold, 3_000, &mut b);
        assert!(hist.is_wide());
        assert!(hist.hold().summary().p99_ns.unwrap() >= 2_970);
        assert_eq!(b.refused, 0);
    }
}
