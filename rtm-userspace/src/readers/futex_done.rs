//! Futex waits that ended and are not yet sent: each thread's last one waits in its slot
//! of FUTEX_DONE until the thread next waits or exits (see `names::MAP_FUTEX_DONE`).
//! This reader takes the ones left behind: those of threads that have not waited since
//! a while (so that a live view is not held back by a thread gone quiet), and all of
//! them when the trace ends.
//!
//! When the trace ends it also sends, from each thread's entry in FUTEX_SLOTS, the run
//! of waits that returned without sleeping that contention mode was still counting
//! there (`FutexWaitEvent::unslept`), and the wait a thread is still asleep in, with
//! its time so far (`WAIT_IN_PROGRESS`): a thread blocked for the whole trace shows.
//!
//! A slot's first 8 bytes (the header's kind and cpu) mark a wait not yet sent; whoever
//! swaps them to zero, the thread's next program run or this reader, sends it, so no
//! wait is counted twice or lost. A wait that ended at its wake is finished as the
//! programs finish it: at its thread's first switch-in after the wake.

use std::{
    io,
    sync::atomic::{AtomicU64, Ordering},
};

use aya::maps::{HashMap as BpfHashMap, MapData};
use rtm_common::{
    EventHeader, EventKind, FutexDone, FutexWaitEvent, PendingFutex, WAIT_IN_PROGRESS,
    arch::SYS_FUTEX,
    decode::{Event, decode},
    names::futex_slot_index,
};

use crate::probes::LeftWaitMaps;
use crate::probes::shared_memory::SharedMemory;
use crate::proc::{files::read_proc_text, process::monotonic_ns};

/// The FUTEX_DONE map, mapped into this process, and the futex entries in flight.
pub struct LeftWaits {
    mapping: SharedMemory,
    /// FUTEX_SLOTS, mapped: read when the trace ends.
    entries: SharedMemory,
    /// PENDING_FUTEX: the entries of threads past the slots.
    pending: BpfHashMap<MapData, u64, PendingFutex>,
    /// Its capacity.
    pending_capacity: Option<u32>,
    /// Slots minus one.
    mask: u32,
    /// Own the descriptors; declared last so the mappings go first.
    _map: MapData,
    _entries: MapData,
}

impl LeftWaits {
    /// Maps the arrays the probes hand over.
    pub fn new(maps: LeftWaitMaps) -> io::Result<Self> {
        let LeftWaitMaps {
            done,
            entries,
            pending,
            slots,
        } = maps;
        debug_assert!(slots.is_power_of_two());
        let pending_capacity = pending.info().ok().map(|i| i.max_entries());
        let pending = aya::maps::Map::HashMap(pending)
            .try_into()
            .map_err(io::Error::other)?;
        Ok(Self {
            mapping: SharedMemory::array(&done, slots as usize * size_of::<FutexDone>())?,
            entries: SharedMemory::array(&entries, slots as usize * size_of::<PendingFutex>())?,
            pending,
            pending_capacity,
            mask: slots - 1,
            _map: done,
            _entries: entries,
        })
    }

    /// Takes the waits left in the slots of threads `threads` (pid, tid) that ended
    /// before `before_ns` (CLOCK_MONOTONIC; all of them when None, at the end of the
    /// trace, with the runs of unslept waits) and hands each to `sink`. Only the slots
    /// of these threads are read, so the pages of the others are never touched.
    pub fn take(
        &self,
        threads: impl IntoIterator<Item = (u32, u32)>,
        before_ns: Option<u64>,
        sink: &mut dyn FnMut(&Event),
    ) {
        // The end of the trace, for the waits still asleep.
        let end_ns = before_ns.is_none().then(monotonic_ns);
        for (pid, tid) in threads {
            let mut send = |wait: &FutexWaitEvent| match decode(bytes_of(wait)) {
                Ok(ev) => sink(&ev),
                Err(e) => log::debug!("futex slot of {tid}: {e}"),
            };
            if let Some(now) = end_ns
                && let Some(wait) = self
                    .entry(pid, tid)
                    .and_then(|f| left_in_entry(pid, tid, &f, now))
            {
                send(&wait);
            }
            let Some(slot) = futex_slot_index(tid, self.mask) else {
                continue;
            };
            if let Some(done) = take_one(slot_at(&self.mapping, slot), before_ns) {
                send(&finish(&done));
            }
        }
    }

    /// The threads of `threads` (pid, tid) asleep in a futex wait now (one that began
    /// before `before_ns`, when given), each with when its wait began: read from their
    /// entries and checked against /proc/PID/task/TID/syscall (an entry outlives its
    /// wait), with its word and the value it expected there. Nothing is taken.
    pub fn asleep(
        &self,
        threads: impl IntoIterator<Item = (u32, u32)>,
        before_ns: Option<u64>,
    ) -> Vec<(u32, u32, u64, u64, u32)> {
        threads
            .into_iter()
            .filter_map(|(pid, tid)| {
                let f = self.entry(pid, tid)?;
                if f.start_ns == 0 || before_ns.is_some_and(|b| f.start_ns > b) {
                    return None;
                }
                let path = format!("/proc/{pid}/task/{tid}/syscall");
                read_proc_text(path)
                    .is_ok_and(|s| in_futex_on(&s, f.uaddr))
                    .then_some((pid, tid, f.start_ns, f.uaddr, f.val))
            })
            .collect()
    }

    /// Entries of threads past the slots (PENDING_FUTEX) and the map's capacity.
    pub fn overflow_fill(&self) -> Option<(usize, u32)> {
        Some((self.pending.keys().count(), self.pending_capacity?))
    }

    /// The futex entry of thread `tid` of `pid`.
    fn entry(&self, pid: u32, tid: u32) -> Option<PendingFutex> {
        match futex_slot_index(tid, self.mask) {
            Some(slot) => {
                // SAFETY: a slot of the FUTEX_SLOTS mapping, read once the programs are
                // detached.
                Some(unsafe { slot_at::<PendingFutex>(&self.entries, slot).read_volatile() })
            }
            None => self
                .pending
                .get(&((u64::from(pid) << 32) | u64::from(tid)), 0)
                .ok(),
        }
    }
}

/// Slot `slot` of a mapped array of `T`. `slot` is a `futex_slot_index` with the
/// array's mask, so it lies within the mapping, which holds mask + 1 values of `T`
/// (8-byte aligned, from a page-aligned start).
fn slot_at<T>(mapping: &SharedMemory, slot: u32) -> *mut T {
    // SAFETY: see above: the offset stays inside the mapping.
    unsafe {
        mapping
            .ptr()
            .as_ptr()
            .add(slot as usize * size_of::<T>())
            .cast::<T>()
    }
}

/// What a thread's entry `f` still holds when the trace ends: the wait it is asleep in
/// now (/proc/PID/task/TID/syscall), with its time so far until `now_ns`; otherwise its
/// last wait, which returned without sleeping. Either with the run of `unslept` waits
/// before it.
fn left_in_entry(pid: u32, tid: u32, f: &PendingFutex, now_ns: u64) -> Option<FutexWaitEvent> {
    if f.start_ns == 0 {
        return None;
    }
    let path = format!("/proc/{pid}/task/{tid}/syscall");
    let asleep = read_proc_text(path).is_ok_and(|s| in_futex_on(&s, f.uaddr));
    let header = |ts_ns| EventHeader {
        kind: EventKind::FutexWait as u32,
        cpu: 0,
        ts_ns,
        pid,
        tid,
    };
    if asleep {
        return Some(FutexWaitEvent {
            wait_ns: now_ns.saturating_sub(f.start_ns),
            ret: WAIT_IN_PROGRESS,
            ..f.unslept_record(header(now_ns.max(f.start_ns)), f.unslept)
        });
    }
    Some(f.unslept_record(header(f.start_ns), f.unslept))
}

/// Whether a /proc syscall line ("NR 0xADDR ...") is a futex call on `uaddr`.
fn in_futex_on(line: &str, uaddr: u64) -> bool {
    crate::proc::blocked::parse_syscall(line)
        .is_some_and(|s| s.nr == SYS_FUTEX && s.args[0] == uaddr)
}

/// The wait in `done`, ended at its thread's first switch-in after the wake (or at the
/// wake, when the thread has not run since or never left its CPU).
fn finish(done: &FutexDone) -> FutexWaitEvent {
    done.finished()
}

/// Takes the wait at `at` if it is marked and ended before `before_ns`.
fn take_one(at: *mut FutexDone, before_ns: Option<u64>) -> Option<FutexDone> {
    // SAFETY: `at` points at a slot of the mapping (see the caller). The programs write
    // it concurrently: the copy is checked against the mark taken below.
    let mark = unsafe { AtomicU64::from_ptr(at.cast::<u64>()) };
    if mark.load(Ordering::Acquire) == 0 {
        return None;
    }
    // SAFETY: as above; a volatile copy of plain data.
    let copy = unsafe { at.read_volatile() };
    if before_ns.is_some_and(|b| copy.wait.header.ts_ns >= b) {
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
    let mut done = unsafe { at.read_volatile() };
    done.wait.header.kind = taken as u32;
    done.wait.header.cpu = (taken >> 32) as u32;
    Some(done)
}

fn bytes_of(wait: &FutexWaitEvent) -> &[u8] {
    // SAFETY: FutexWaitEvent is plain data without padding (72 bytes, asserted in
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

    fn wait(ts_ns: u64) -> FutexDone {
        FutexDone {
            wait: event(ts_ns),
            ran_ns: 0,
            at_return: 1,
        }
    }

    fn event(ts_ns: u64) -> FutexWaitEvent {
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
            unslept: 0,
            waker_pid: 0,
            runnable_ns: 0,
            holder: 0,
        }
    }

    #[test]
    fn a_marked_wait_is_taken_once() {
        let mut slot = wait(1_000);
        assert_eq!(take_one(&mut slot, None), Some(wait(1_000)));
        assert_eq!(slot.wait.header.kind, 0);
        assert_eq!(take_one(&mut slot, None), None);
    }

    #[test]
    fn a_recent_wait_is_left_to_its_thread() {
        let mut slot = wait(5_000);
        assert_eq!(take_one(&mut slot, Some(5_000)), None);
        assert_eq!(slot.wait.header.kind, EventKind::FutexWait as u32);
        assert_eq!(take_one(&mut slot, Some(5_001)), Some(wait(5_000)));
    }

    #[test]
    fn a_wait_ended_at_its_wake_lasts_until_its_thread_gets_a_cpu() {
        let done = FutexDone {
            wait: event(5_000),
            ran_ns: 0,
            at_return: 0,
        };
        // Not run since the wake (or woken before it left its CPU): ends at the wake.
        assert_eq!(done.finished(), done.wait);
        // First switched in 300 ns after the wake: that is the wait's.
        let ran = FutexDone {
            ran_ns: 5_300,
            ..done
        };
        let w = ran.finished();
        assert_eq!(
            (w.wait_ns, w.header.ts_ns, w.runnable_ns),
            (800, 5_300, 300)
        );
        assert_eq!(finish(&ran), w);
        // Ended at its return: nothing to add.
        let returned = FutexDone {
            at_return: 1,
            ..ran
        };
        assert_eq!(returned.finished().wait_ns, 500);
        assert_eq!(returned.finished().runnable_ns, 0);
        assert_eq!(finish(&wait(5_000)).wait_ns, 500);
    }

    #[test]
    fn the_unslept_run_left_at_the_end_is_sent() {
        let f = PendingFutex {
            uaddr: 0x1000,
            start_ns: 9_000,
            deadline_ns: 0,
            waker: 0,
            op: 128,
            val: 2,
            flags: 0,
            unslept: 4,
            holder: 0,
            pad: 0,
            ..PendingFutex::default()
        };
        // No such thread: its last wait returned too.
        let w = left_in_entry(u32::MAX, u32::MAX, &f, 20_000).unwrap();
        assert_eq!((w.ret, w.unslept, w.wait_ns, w.uaddr), (-11, 4, 0, 0x1000));
        assert_eq!(
            left_in_entry(1, 1, &PendingFutex { start_ns: 0, ..f }, 20_000),
            None
        );
        assert!(in_futex_on(
            "202 0x1000 0x80 0x2 0x0 0x0 0x0 0x7ffc 0x7f00\n",
            0x1000
        ));
        assert!(!in_futex_on(
            "202 0x2000 0x80 0x2 0x0 0x0 0x0 0x7ffc 0x7f00",
            0x1000
        ));
        assert!(!in_futex_on("running", 0x1000));
        assert!(!in_futex_on("0 0x1000 0x80", 0x1000));
    }
}

/// Property tests: /proc syscall lines of any shape parse without panicking.
#[cfg(test)]
mod fuzz {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        #[test]
        fn any_proc_line_parses(line in ".{0,120}", addr in any::<u64>()) {
            let _ = in_futex_on(&line, addr);
        }
    }
}
