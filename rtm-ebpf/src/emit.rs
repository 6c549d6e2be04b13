//! Writing records to the ring buffers; a full ring is counted, never silent.

use aya_ebpf::{
    helpers::{bpf_get_smp_processor_id, bpf_ktime_get_ns},
    maps::RingBuf,
};
use rtm_common::{
    EventHeader, EventKind, FUNC_BATCH, FuncEvent, FuncStack, FutexWaitEvent, LifecycleEvent,
    LossCounter, MpiEvent, SyncEvent,
};

use crate::maps::{
    EVENTS, EVENTS_1, EVENTS_2, EVENTS_3, SYNC_RING_MASK, WAKEUP_BYTES, count_loss, count_losses,
};

const BPF_RB_NO_WAKEUP: u64 = 1;
const BPF_RB_FORCE_WAKEUP: u64 = 2;
const BPF_RB_AVAIL_DATA: u64 = 0;

/// Submit flags: wake the reader when this record takes the backlog across a multiple of
/// WAKEUP_BYTES, and never otherwise. Waking it for every record costs an interrupt and a
/// context switch per record; waking it for every record while the backlog is above the
/// mark (a reader falling behind in a burst) costs an inter-processor interrupt per record,
/// a VM exit on a virtual machine, which slowed producers and reader alike. A reader that
/// is awake drains until the ring is empty, and it also drains on a short timer, so a
/// wakeup lost to racing producers costs at most that timer's delay.
#[inline(always)]
fn wakeup_flags<T>(ring: &RingBuf) -> u64 {
    wakeup_flags_for(ring, size_of::<T>() as u64)
}

/// [`wakeup_flags`] for a record of `record` bytes.
#[inline(always)]
pub fn wakeup_flags_for(ring: &RingBuf, record: u64) -> u64 {
    let mark = WAKEUP_BYTES.load().max(1);
    let avail = ring.query(BPF_RB_AVAIL_DATA);
    // The ring buffer's 8-byte header is part of each record's footprint.
    let before = avail.saturating_sub(record + 8);
    if avail / mark != before / mark {
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

/// Writes `event` to `ring`, or counts it lost when the ring is full.
#[inline(always)]
fn put<T: 'static>(ring: &RingBuf, event: T) {
    match ring.reserve::<T>(0) {
        Some(mut entry) => {
            entry.write(event);
            entry.submit(wakeup_flags::<T>(ring));
        }
        None => count_loss(LossCounter::RingFull),
    }
}

/// Writes `event` to the ring of CPU `cpu` when there are several (contention mode:
/// its records are self-contained, so their order across rings does not matter). On a
/// contended lock the CPUs' reservations on one ring took turns at its lock and
/// positions.
#[inline(always)]
fn per_cpu<T: 'static>(cpu: u32, event: T) {
    // Branches, not a table of maps: each reservation names its map.
    match cpu & SYNC_RING_MASK.load() {
        0 => put(&EVENTS, event),
        1 => put(&EVENTS_1, event),
        2 => put(&EVENTS_2, event),
        _ => put(&EVENTS_3, event),
    }
}

/// Sends a sync record.
#[inline(always)]
pub fn sync(event: SyncEvent) {
    per_cpu(event.header.cpu, event);
}

/// Sends a thread's finished timed calls kept in `st` (the first `st.done`), to the
/// current CPU's ring (the record is self-contained); a full ring counts each call lost.
#[inline(always)]
pub fn func_calls(st: &FuncStack, pid_tgid: u64, ts_ns: u64) {
    let n = st.done.min(FUNC_BATCH as u64);
    // SAFETY: helper without preconditions.
    let cpu = unsafe { bpf_get_smp_processor_id() };
    let reserved = match cpu & SYNC_RING_MASK.load() {
        0 => EVENTS.reserve::<FuncEvent>(0).map(|e| (e, &EVENTS)),
        1 => EVENTS_1.reserve::<FuncEvent>(0).map(|e| (e, &EVENTS_1)),
        2 => EVENTS_2.reserve::<FuncEvent>(0).map(|e| (e, &EVENTS_2)),
        _ => EVENTS_3.reserve::<FuncEvent>(0).map(|e| (e, &EVENTS_3)),
    };
    let Some((mut entry, ring)) = reserved else {
        count_losses(LossCounter::RingFull, n);
        return;
    };
    let e = entry.as_mut_ptr();
    // SAFETY: the reserved record, written field by field (a whole copy would not fit
    // the BPF stack); every byte is written before it is submitted.
    unsafe {
        (*e).header = header(EventKind::Func, pid_tgid, ts_ns);
        (*e).count = n as u32;
        (*e).pad = 0;
        crate::bounds::copy_words(&raw mut (*e).calls, &raw const st.finished);
    }
    entry.submit(wakeup_flags::<FuncEvent>(ring));
}

/// Sends a futex wait in its compact form, to the ring of the CPU sending it (which may
/// not be the one the wait ended on).
#[inline(always)]
pub fn futex_wait(event: FutexWaitEvent) {
    // SAFETY: helper without preconditions.
    per_cpu(unsafe { bpf_get_smp_processor_id() }, event);
}

/// Sends a task record. `urgent` wakes the reader at once: a new process or program
/// must have its maps read while it is alive, and a short one may be gone by the time
/// the reader's timer comes by.
#[inline(always)]
pub fn lifecycle(event: LifecycleEvent, urgent: bool) {
    match EVENTS.reserve::<LifecycleEvent>(0) {
        Some(mut entry) => {
            entry.write(event);
            entry.submit(if urgent {
                BPF_RB_FORCE_WAKEUP
            } else {
                wakeup_flags::<LifecycleEvent>(&EVENTS)
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
            // SAFETY: the reserved record, all of it written before it is submitted; the
            // copy goes word by word, not through the stack.
            unsafe { crate::bounds::copy_words(entry.as_mut_ptr(), event) };
            entry.submit(wakeup_flags::<MpiEvent>(&EVENTS));
        }
        None => count_loss(LossCounter::RingFull),
    }
}
