//! Maps shared by every program. Names and sizes come from `rtm_common::names`.

use aya_ebpf::{
    macros::map,
    maps::{HashMap, PerCpuArray, RingBuf},
};
use rtm_common::{
    LossCounter, PendingCall,
    names::{DEFAULT_RING_BYTES, MAX_PENDING, MAX_TRACED_TGIDS},
};

/// Events to userspace. Userspace may resize it at load time.
#[map(name = "EVENTS")]
pub static EVENTS: RingBuf = RingBuf::with_byte_size(DEFAULT_RING_BYTES, 0);

/// tgid -> 1 for each traced process.
#[map(name = "TRACED_TGIDS")]
pub static TRACED_TGIDS: HashMap<u32, u32> = HashMap::with_max_entries(MAX_TRACED_TGIDS, 0);

/// pid_tgid -> the call in flight on that thread.
#[map(name = "PENDING")]
pub static PENDING: HashMap<u64, PendingCall> = HashMap::with_max_entries(MAX_PENDING, 0);

/// Loss counters, indexed by `LossCounter`.
#[map(name = "LOSSES")]
pub static LOSSES: PerCpuArray<u64> = PerCpuArray::with_max_entries(LossCounter::COUNT, 0);

/// Counts one loss of the given kind.
#[inline(always)]
pub fn count_loss(which: LossCounter) {
    if let Some(p) = LOSSES.get_ptr_mut(which as u32) {
        // SAFETY: per-CPU slot, not shared with another CPU; programs do not nest on one CPU
        // for uprobes.
        unsafe { *p += 1 };
    }
}
