//! Writing records to the ring buffer; a full ring is counted, never silent.

use aya_ebpf::helpers::{bpf_get_smp_processor_id, bpf_ktime_get_ns};
use rtm_common::{EventHeader, EventKind, LossCounter, MpiEvent, SyncEvent, TaskEvent};

use crate::maps::{EVENTS, WAKEUP_BYTES, count_loss};

const BPF_RB_NO_WAKEUP: u64 = 1;
const BPF_RB_FORCE_WAKEUP: u64 = 2;
const BPF_RB_AVAIL_DATA: u64 = 0;

/// Submit flags: wake the reader only once WAKEUP_BYTES are waiting. Waking it for every
/// record costs an interrupt and a context switch per record (several microseconds per
/// lock/unlock pair on a small VM); the reader also drains on a short timer.
#[inline(always)]
fn wakeup_flags() -> u64 {
    if EVENTS.query(BPF_RB_AVAIL_DATA) >= WAKEUP_BYTES.load() {
        BPF_RB_FORCE_WAKEUP
    } else {
        BPF_RB_NO_WAKEUP
    }
}

/// The common header for the current task.
#[inline(always)]
pub fn header(kind: EventKind, pid_tgid: u64, ts_ns: u64) -> EventHeader {
    EventHeader {
        kind: kind as u32,
        // SAFETY: helper without preconditions.
        cpu: unsafe { bpf_get_smp_processor_id() },
        ts_ns,
        pid: (pid_tgid >> 32) as u32,
        tid: pid_tgid as u32,
    }
}

/// Current CLOCK_MONOTONIC time.
#[inline(always)]
pub fn now() -> u64 {
    // SAFETY: helper without preconditions.
    unsafe { bpf_ktime_get_ns() }
}

/// Sends a sync record.
#[inline(always)]
pub fn sync(event: SyncEvent) {
    match EVENTS.reserve::<SyncEvent>(0) {
        Some(mut entry) => {
            entry.write(event);
            entry.submit(wakeup_flags());
        }
        None => count_loss(LossCounter::RingFull),
    }
}

/// Sends a task record. `urgent` wakes the reader at once: a new process or program
/// must have its maps read while it is alive, and a short one may be gone by the time
/// the reader's timer comes by.
#[inline(always)]
pub fn task(event: TaskEvent, urgent: bool) {
    match EVENTS.reserve::<TaskEvent>(0) {
        Some(mut entry) => {
            entry.write(event);
            entry.submit(if urgent {
                BPF_RB_FORCE_WAKEUP
            } else {
                wakeup_flags()
            });
        }
        None => count_loss(LossCounter::RingFull),
    }
}

/// Sends an MPI record.
#[inline(always)]
pub fn mpi(event: &MpiEvent) {
    match EVENTS.reserve::<MpiEvent>(0) {
        Some(mut entry) => {
            entry.write(*event);
            entry.submit(wakeup_flags());
        }
        None => count_loss(LossCounter::RingFull),
    }
}
