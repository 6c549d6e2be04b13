//! Loss accounting: what the eBPF side could not deliver, as the user sees it.

use rtm_common::LossCounter;
use serde::Serialize;

/// The kernel-side loss counters.
#[derive(Debug, Clone, Copy, Default, Serialize, serde::Deserialize, PartialEq, Eq)]
pub struct Losses {
    /// Events dropped because the ring buffer was full.
    pub ring_full: u64,
    /// Calls not measured because the pending-call map was full.
    pub pending_full: u64,
    /// Calls already in flight when the probes attached (a return without its entry, or
    /// an entry whose return was not probed).
    pub missed_entry: u64,
    /// Mapping records the kernel or the tracer dropped: some object and code names
    /// may be missing (no events are lost).
    pub mapping_records: u64,
    /// Not lost: futex waits sent one by one because the kernel's map of summed waits
    /// was full (raise `--futex-sums`).
    #[serde(default)]
    pub agg_full: u64,
}

impl Losses {
    /// From the counters in `LossCounter` order.
    pub fn from_counters(c: [u64; LossCounter::COUNT as usize]) -> Self {
        Self {
            ring_full: c[LossCounter::RingFull as usize],
            pending_full: c[LossCounter::PendingFull as usize],
            missed_entry: c[LossCounter::MissedEntry as usize],
            mapping_records: 0,
            agg_full: c[LossCounter::AggFull as usize],
        }
    }

    /// Events lost for good (missed entries are an attach-time artefact, not a loss).
    pub fn lost(&self) -> u64 {
        self.ring_full + self.pending_full
    }
}
