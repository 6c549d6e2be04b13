//! Futex waits summed in the kernel (contention mode): each ended wait adds to one entry
//! of [`crate::names::MAP_FUTEX_AGG`], keyed by who waited on what, who ended it and
//! how, so a wait costs a map update instead of a ring record and the work userspace
//! does for it. Userspace reads the entries every interval and applies what changed
//! since its last read (the entries only grow while their threads live).
//!
//! Counts and sums are exact; the durations' distribution is kept in log-linear buckets
//! (four to each power of two), which give percentiles to within about 6%.

/// Sub-buckets per power of two in [`FutexAgg::hist`].
pub const AGG_SUB_BUCKETS: u32 = 4;
/// Powers of two covered past the first four buckets (0-3 ns): from 4 ns up to 2^42 ns
/// (73 minutes); longer waits go in the last bucket (their sum and maximum stay exact).
pub const AGG_OCTAVES: u32 = 41;
/// Buckets in [`FutexAgg::hist`].
pub const AGG_BUCKETS: usize = (AGG_SUB_BUCKETS * AGG_OCTAVES) as usize;

/// How a summed wait ended ([`FutexAggKey::outcome`]).
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum AggOutcome {
    /// A thread's futex wake ended it (the key names the waker).
    Woken = 0,
    /// Its timeout expired (the wake came from a timer).
    TimedOut = 1,
    /// Something else woke it: a signal, or the kernel.
    Interrupted = 2,
    /// Woken by a futex wake before it had left its CPU: it queued but never slept
    /// (duration 0; the key names the waker).
    WokenBeforeSleep = 3,
    /// Returned at once without sleeping: the word had changed (EAGAIN); counted only
    /// where futex calls are seen at their entry (`--unslept`, full mode).
    NotSlept = 4,
}

impl AggOutcome {
    /// The outcome a raw value names, if any.
    pub const fn from_u32(v: u32) -> Option<Self> {
        Some(match v {
            0 => AggOutcome::Woken,
            1 => AggOutcome::TimedOut,
            2 => AggOutcome::Interrupted,
            3 => AggOutcome::WokenBeforeSleep,
            4 => AggOutcome::NotSlept,
            _ => return None,
        })
    }
}

/// What a summed entry counts: waits of one thread on one futex word, ended the same
/// way by the same thread, with the same holder at their start.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FutexAggKey {
    /// The futex word's user address.
    pub uaddr: u64,
    /// The waiter's process.
    pub pid: u32,
    /// The waiter.
    pub tid: u32,
    /// The waker's process (0 when no thread woke it).
    pub waker_pid: u32,
    /// The waker (0: none).
    pub waker: u32,
    /// The mutex's holder when the wait began to sleep (0: not a glibc mutex, unknown).
    pub holder: u32,
    /// [`AggOutcome`].
    pub outcome: u32,
    /// The futex op (with its flags) of the waits.
    pub op: u32,
    /// Padding.
    pub pad: u32,
}
const _: () = assert!(core::mem::size_of::<FutexAggKey>() == 40);

/// The sums of one entry. Every field only grows (counters wrap, which a reader of
/// differences takes in its stride).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FutexAgg {
    /// Waits.
    pub count: u64,
    /// Their total duration, from the sleep to the first switch-in after the wake, ns.
    pub wait_ns: u64,
    /// Of that, the time runnable after the wake (waiting for a CPU), ns.
    pub runnable_ns: u64,
    /// The longest, ns.
    pub max_ns: u64,
    /// The shortest, ns (u64::MAX before the first).
    pub min_ns: u64,
    /// Waits per duration bucket ([`agg_bucket`]).
    pub hist: [u32; AGG_BUCKETS],
}
const _: () = assert!(core::mem::size_of::<FutexAgg>() == 40 + 4 * AGG_BUCKETS);

impl FutexAgg {
    /// No wait yet (a constant: the eBPF side inserts it from read-only memory, being
    /// too large for its stack).
    pub const EMPTY: Self = Self {
        count: 0,
        wait_ns: 0,
        runnable_ns: 0,
        max_ns: 0,
        min_ns: u64::MAX,
        hist: [0; AGG_BUCKETS],
    };
}

impl Default for FutexAgg {
    fn default() -> Self {
        Self::EMPTY
    }
}

/// The bucket of a duration of `ns` (no loops: the eBPF side computes it at every wait).
#[inline(always)]
pub const fn agg_bucket(ns: u64) -> usize {
    if ns < AGG_SUB_BUCKETS as u64 {
        return ns as usize;
    }
    // floor(log2(ns)) by halving steps.
    let mut e = 0u32;
    let mut v = ns;
    if v >= 1 << 32 {
        v >>= 32;
        e += 32;
    }
    if v >= 1 << 16 {
        v >>= 16;
        e += 16;
    }
    if v >= 1 << 8 {
        v >>= 8;
        e += 8;
    }
    if v >= 1 << 4 {
        v >>= 4;
        e += 4;
    }
    if v >= 1 << 2 {
        v >>= 2;
        e += 2;
    }
    if v >= 1 << 1 {
        e += 1;
    }
    // Buckets 0-3 hold 0-3 ns; then four to each power of two from 4 ns.
    if e > AGG_OCTAVES {
        return AGG_BUCKETS - 1;
    }
    // The two bits below the leading one pick the sub-bucket.
    let sub = (ns >> (e - 2)) & (AGG_SUB_BUCKETS as u64 - 1);
    ((e - 1) * AGG_SUB_BUCKETS) as usize + sub as usize
}

/// The smallest duration in bucket `i`, ns.
pub const fn agg_bucket_low(i: usize) -> u64 {
    let i = i as u64;
    let s = AGG_SUB_BUCKETS as u64;
    if i < s {
        return i;
    }
    let e = i / s + 1;
    let sub = i % s;
    (1 << e) | (sub << (e - 2))
}

/// A duration that stands for bucket `i` (its middle), ns.
pub const fn agg_bucket_mid(i: usize) -> u64 {
    let low = agg_bucket_low(i);
    let high = if i + 1 < AGG_BUCKETS {
        agg_bucket_low(i + 1)
    } else {
        low * 2
    };
    low + (high - low) / 2
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_ordered_and_hold_their_values() {
        for ns in [
            0u64,
            1,
            3,
            4,
            5,
            7,
            8,
            100,
            999,
            1_000_000,
            123_456_789,
            1 << 40,
        ] {
            let b = agg_bucket(ns);
            assert!(agg_bucket_low(b) <= ns, "{ns} in {b}");
            if b + 1 < AGG_BUCKETS {
                assert!(ns < agg_bucket_low(b + 1), "{ns} in {b}");
            }
        }
        for i in 1..AGG_BUCKETS {
            assert!(agg_bucket_low(i) > agg_bucket_low(i - 1), "{i}");
        }
        assert_eq!(agg_bucket(u64::MAX), AGG_BUCKETS - 1);
        // A bucket's middle is within 12.5% of anything in it.
        for ns in [5u64, 77, 1_234, 99_999, 7_777_777, 1 << 35] {
            let mid = agg_bucket_mid(agg_bucket(ns)) as f64;
            assert!((mid - ns as f64).abs() / ns as f64 <= 0.125, "{ns}: {mid}");
        }
    }
}
