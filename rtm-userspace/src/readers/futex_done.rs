//! Futex waits that ended and are not yet sent: each thread's last one waits in its slot
//! of FUTEX_DONE until the thread next waits or exits (see `names::MAP_FUTEX_DONE`).
//! This reader takes the ones left behind: those of threads that have not waited since
//! a while (so that a live view is not held back by a thread gone quiet), and all of
//! them when the trace ends.
//!
//! A slot's first 8 bytes (the header's kind and cpu) mark a wait not yet sent; whoever
//! swaps them to zero, the thread's next program run or this reader, sends it, so no
//! wait is counted twice or lost.

use std::{
    io,
    sync::atomic::{AtomicU64, Ordering},
};

use aya::maps::MapData;
use rtm_common::{
    FutexWaitEvent,
    decode::{Event, decode},
    names::futex_slot_index,
};

use super::ring_map::Mapping;

/// The FUTEX_DONE map, mapped into this process.
pub struct LeftWaits {
    mapping: Mapping,
    /// Slots minus one.
    mask: u32,
    /// Owns the descriptor; declared last so the mapping goes first.
    _map: MapData,
}

impl LeftWaits {
    /// Maps the array `map` of `slots` waits (a power of two).
    pub fn new(map: MapData, slots: u32) -> io::Result<Self> {
        debug_assert!(slots.is_power_of_two());
        Ok(Self {
            mapping: Mapping::array(&map, slots as usize * size_of::<FutexWaitEvent>())?,
            mask: slots - 1,
            _map: map,
        })
    }

    /// Takes the waits left in the slots of threads `tids` that ended before `before_ns`
    /// (CLOCK_MONOTONIC; all of them when None) and hands each to `sink`. Only the slots
    /// of these threads are read, so the pages of the others are never touched.
    pub fn take(
        &self,
        tids: impl IntoIterator<Item = u32>,
        before_ns: Option<u64>,
        sink: &mut dyn FnMut(&Event),
    ) {
        for tid in tids {
            let Some(slot) = futex_slot_index(tid, self.mask) else {
                continue;
            };
            // SAFETY: slot <= mask, so the slot lies within the mapping, which holds
            // mask + 1 records of FutexWaitEvent's size (8-byte aligned, page-aligned start).
            let at = unsafe {
                self.mapping
                    .ptr()
                    .as_ptr()
                    .add(slot as usize * size_of::<FutexWaitEvent>())
                    .cast::<FutexWaitEvent>()
            };
            if let Some(wait) = take_one(at, before_ns) {
                match decode(bytes_of(&wait)) {
                    Ok(ev) => sink(&ev),
                    Err(e) => log::debug!("futex slot of {tid}: {e}"),
                }
            }
        }
    }
}

/// Takes the wait at `at` if it is marked and ended before `before_ns`.
fn take_one(at: *mut FutexWaitEvent, before_ns: Option<u64>) -> Option<FutexWaitEvent> {
    // SAFETY: `at` points at a slot of the mapping (see the caller). The programs write
    // it concurrently: the copy is checked against the mark taken below.
    let mark = unsafe { AtomicU64::from_ptr(at.cast::<u64>()) };
    if mark.load(Ordering::Acquire) == 0 {
        return None;
    }
    // SAFETY: as above; a volatile copy of plain data.
    let copy = unsafe { at.read_volatile() };
    if before_ns.is_some_and(|b| copy.header.ts_ns >= b) {
        return None;
    }
    let taken = mark.swap(0, Ordering::AcqRel);
    if taken == 0 {
        // The thread sent it first.
        return None;
    }
    // The thread may have sent the wait copied above and ended another since; the mark
    // taken is that of the wait in the slot now, which its thread leaves alone until it
    // has waited again.
    // SAFETY: as above.
    let mut wait = unsafe { at.read_volatile() };
    wait.header.kind = taken as u32;
    wait.header.cpu = (taken >> 32) as u32;
    Some(wait)
}

fn bytes_of(wait: &FutexWaitEvent) -> &[u8] {
    // SAFETY: FutexWaitEvent is plain data without padding (56 bytes, asserted in
    // rtm-common).
    unsafe {
        std::slice::from_raw_parts(
            (wait as *const FutexWaitEvent).cast::<u8>(),
            size_of::<FutexWaitEvent>(),
        )
    }
}

#[cfg(test)]
mod tests {
    use rtm_common::{EventHeader, EventKind};

    use super::*;

    fn wait(ts_ns: u64) -> FutexWaitEvent {
        FutexWaitEvent {
            header: EventHeader {
                kind: EventKind::FutexWait as u32,
                cpu: 1,
                ts_ns,
                pid: 10,
                tid: 11,
            },
            uaddr: 0x1000,
            aux: 0,
            wait_ns: 500,
            ret: 0,
            waker: 12,
        }
    }

    #[test]
    fn a_marked_wait_is_taken_once() {
        let mut slot = wait(1_000);
        assert_eq!(take_one(&mut slot, None), Some(wait(1_000)));
        assert_eq!(slot.header.kind, 0);
        assert_eq!(take_one(&mut slot, None), None);
    }

    #[test]
    fn a_recent_wait_is_left_to_its_thread() {
        let mut slot = wait(5_000);
        assert_eq!(take_one(&mut slot, Some(5_000)), None);
        assert_eq!(slot.header.kind, EventKind::FutexWait as u32);
        assert_eq!(take_one(&mut slot, Some(5_001)), Some(wait(5_000)));
    }
}
