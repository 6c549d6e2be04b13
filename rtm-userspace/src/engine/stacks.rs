//! Call stacks of futex waits on their way into the model: each stack record is
//! unwound (kept until its process's mappings are known, at most
//! [`MAX_DEFERRED`]), and the two records of a wait are joined by (process, thread,
//! start of the wait): the waiter's, taken when it went to sleep, and the waker's, taken
//! at the wake. A wait that no thread woke (timed out, interrupted, ended by a thread's
//! exit, still asleep when the trace ended) is joined with its own wait record instead,
//! and counted with no waker. What waits too long for its other half is counted with
//! that half unknown, so nothing is held without bound.

use std::collections::{HashMap, HashSet, VecDeque};

use rtm_common::{
    STACK_MISSING_OTHER_PROCESS, STACK_MISSING_WAKE_BEFORE_SLEEP, STACK_SIDE_WAITER, StackRegs,
    StacksHead,
};

use crate::{
    model::stacks::{Side, StackTable},
    symbolize::{ObjectNamer, StackUnwinder, unwind::Capture},
};

/// Most stack records kept waiting for their process's mappings.
pub const MAX_DEFERRED: usize = 1024;

/// Most halves of waits kept waiting for their other half.
const MAX_HALVES: usize = 65_536;

/// How long (in the records' time) a half waits for its other half, ns.
const HORIZON_NS: u64 = 2_000_000_000;

/// A wait's identity: process, thread, and when it started.
type WaitKey = (u32, u32, u64);

/// A waiter's stack waiting for its wake (or its wait's end).
struct WaiterHalf {
    uaddr: u64,
    side: Side,
    /// The waits the sample stands for, thousandths.
    weight: u32,
    /// When its wait's own record said it ended, woken by a thread (its wake's record
    /// is then due); None while the wait may still be asleep.
    ended: Option<u64>,
}

/// A wake waiting for the waiter's stack.
struct WakeHalf {
    uaddr: u64,
    wait_ns: u64,
    weight: u32,
    waker_pid: u32,
    waker_tid: u32,
    side: Side,
    ts: u64,
}

/// A joined wait's unwound frames, for the sinks that want events.
pub(super) struct Unwound {
    pub pid: u32,
    pub tid: u32,
    /// The wake, or the end of a wait no thread woke.
    pub at_ns: u64,
    pub waker_pid: u32,
    pub waker_tid: u32,
    pub waiter: Vec<u64>,
    pub waker: Vec<u64>,
}

/// The join of stack records into the stack table.
#[derive(Default)]
pub(super) struct StackJoin {
    unwinder: StackUnwinder,
    deferred: VecDeque<(StacksHead, Vec<u8>, Vec<u8>)>,
    waiters: HashMap<WaitKey, WaiterHalf>,
    wakes: HashMap<WaitKey, WakeHalf>,
    /// The newest record time seen.
    latest_ns: u64,
    /// Stacks unwound, and the time it took, ns.
    pub unwinding: (u64, u64),
    /// Keep each joined wait's frames for the sinks ([`StackJoin::take_unwound`]).
    pub keep_unwound: bool,
    unwound: Vec<Unwound>,
}

impl StackJoin {
    /// Forgets the processes `pids`.
    pub fn forget(&mut self, pids: &HashSet<u32>) {
        self.unwinder.forget(pids);
        self.waiters.retain(|k, _| !pids.contains(&k.0));
        self.wakes.retain(|k, _| !pids.contains(&k.0));
    }

    /// The unwinder (its files are shared with other readers of stacks).
    pub fn unwinder(&mut self) -> &mut StackUnwinder {
        &mut self.unwinder
    }

    fn unwind(
        &mut self,
        namer: &mut ObjectNamer,
        pid: u32,
        regs: &StackRegs,
        stack: &[u8],
    ) -> Side {
        if regs.missing == STACK_MISSING_OTHER_PROCESS {
            return Side::OtherProcess;
        }
        if regs.missing == STACK_MISSING_WAKE_BEFORE_SLEEP {
            return Side::WakeUnseen;
        }
        if stack.is_empty() {
            return Side::Unreadable;
        }
        let fixes: Vec<(u64, u64)> = regs
            .fixes
            .iter()
            .filter(|f| f.slot != 0)
            .map(|f| (f.slot, f.ret))
            .collect();
        let capture = Capture {
            ip: regs.ip,
            sp: regs.sp,
            bp: regs.bp,
            stack,
            fixes: &fixes,
        };
        let started = std::time::Instant::now();
        let frames = self.unwinder.unwind(namer, pid, &capture);
        self.unwinding.0 += 1;
        self.unwinding.1 += started.elapsed().as_nanos() as u64;
        if frames.is_empty() {
            Side::NotUnwound
        } else {
            Side::Frames(frames.into())
        }
    }

    /// A stacks record: unwound now when its process's mappings are known, else kept
    /// until [`StackJoin::retry`] (`last_try`: unwound as far as it goes).
    pub fn record(
        &mut self,
        namer: &mut ObjectNamer,
        table: &mut StackTable,
        head: &StacksHead,
        waiter: &[u8],
        waker: &[u8],
        last_try: bool,
    ) {
        let has_waiter = head.sides & STACK_SIDE_WAITER != 0;
        let (pid, ip) = if has_waiter {
            (head.header.pid, head.waiter_regs.ip)
        } else {
            (head.waker_pid, head.waker_regs.ip)
        };
        // A record with no copy (the waker's side said missing) has nothing to unwind.
        let copies = head.sides != 0;
        if copies
            && !last_try
            && !self.unwinder.covers(namer, pid, ip)
            && self.deferred.len() < MAX_DEFERRED
        {
            self.deferred
                .push_back((*head, waiter.to_vec(), waker.to_vec()));
            return;
        }
        self.latest_ns = self.latest_ns.max(head.header.ts_ns);
        let h = &head.header;
        let key = (h.pid, h.tid, head.start_ns);
        let waiter_side = has_waiter.then(|| self.unwind(namer, h.pid, &head.waiter_regs, waiter));
        let weight = head.weight_milli;
        let wake = (head.waker_pid != 0).then(|| WakeHalf {
            uaddr: head.uaddr,
            wait_ns: head.wait_ns,
            weight,
            waker_pid: head.waker_pid,
            waker_tid: head.waker,
            side: self.unwind(namer, head.waker_pid, &head.waker_regs, waker),
            ts: h.ts_ns,
        });
        match (waiter_side, wake) {
            (Some(w), Some(k)) => self.join(table, key, w, k),
            (None, Some(k)) => {
                // The waiter's stack was taken at its sleep (or cannot be had).
                if let Some(w) = self.waiters.remove(&key) {
                    self.join(table, key, w.side, k);
                } else if head.waiter_regs.missing == STACK_MISSING_OTHER_PROCESS {
                    self.join(table, key, Side::OtherProcess, k);
                } else if self.wakes.len() < MAX_HALVES {
                    self.wakes.insert(key, k);
                } else {
                    self.join(table, key, Side::NotUnwound, k);
                }
            }
            (Some(w), None) => {
                if let Some(k) = self.wakes.remove(&key) {
                    self.join(table, key, w, k);
                } else if self.waiters.len() < MAX_HALVES {
                    self.waiters.insert(
                        key,
                        WaiterHalf {
                            uaddr: head.uaddr,
                            side: w,
                            weight,
                            ended: None,
                        },
                    );
                } else {
                    self.alone(
                        table,
                        key,
                        head.uaddr,
                        (w, weight),
                        0,
                        h.ts_ns,
                        Side::NoWaker,
                    );
                }
            }
            (None, None) => {}
        }
    }

    fn join(&mut self, table: &mut StackTable, key: WaitKey, waiter: Side, k: WakeHalf) {
        if self.keep_unwound {
            self.unwound.push(Unwound {
                pid: key.0,
                tid: key.1,
                at_ns: k.ts,
                waker_pid: k.waker_pid,
                waker_tid: k.waker_tid,
                waiter: frames(&waiter),
                waker: frames(&k.side),
            });
        }
        table.add(
            key.0,
            k.uaddr,
            k.wait_ns,
            waiter,
            k.waker_pid,
            k.side,
            k.weight,
        );
    }

    /// A waiter's stack whose wait no thread woke (or whose wake was not seen).
    #[allow(clippy::too_many_arguments)]
    fn alone(
        &mut self,
        table: &mut StackTable,
        key: WaitKey,
        uaddr: u64,
        (w, weight): (Side, u32),
        wait_ns: u64,
        at: u64,
        waker: Side,
    ) {
        if self.keep_unwound {
            self.unwound.push(Unwound {
                pid: key.0,
                tid: key.1,
                at_ns: at,
                waker_pid: 0,
                waker_tid: 0,
                waiter: frames(&w),
                waker: Vec::new(),
            });
        }
        table.add(key.0, uaddr, wait_ns, w, 0, waker, weight);
    }

    /// A futex wait's own record (`key`: process, thread and start; its length; whether
    /// a thread woke it): a wait no thread woke is counted with its waiter's stack now;
    /// a woken one waits for its wake's record, from now on for a while only.
    pub fn wait_ended(&mut self, table: &mut StackTable, key: WaitKey, wait_ns: u64, woken: bool) {
        if self.waiters.is_empty() {
            return;
        }
        let end = key.2.saturating_add(wait_ns);
        self.latest_ns = self.latest_ns.max(end);
        if woken {
            if let Some(w) = self.waiters.get_mut(&key) {
                w.ended = Some(end);
            }
        } else if let Some(w) = self.waiters.remove(&key) {
            self.alone(
                table,
                key,
                w.uaddr,
                (w.side, w.weight),
                wait_ns,
                end,
                Side::NoWaker,
            );
        }
    }

    /// Between batches: the records kept for mappings that are known now (all of them
    /// when `last`), and the halves that waited too long for their other half (all of
    /// them when `last`: the trace is over).
    pub fn retry(&mut self, namer: &mut ObjectNamer, table: &mut StackTable, last: bool) {
        for (head, waiter, waker) in std::mem::take(&mut self.deferred) {
            let (pid, ip) = if head.sides & STACK_SIDE_WAITER != 0 {
                (head.header.pid, head.waiter_regs.ip)
            } else {
                (head.waker_pid, head.waker_regs.ip)
            };
            if last || self.unwinder.covers(namer, pid, ip) {
                self.record(namer, table, &head, &waiter, &waker, true);
            } else {
                self.deferred.push_back((head, waiter, waker));
            }
        }
        let latest = self.latest_ns;
        let old = move |ts: u64| last || ts.saturating_add(HORIZON_NS) < latest;
        // A waiter whose wait is still asleep waits for it, however long.
        let stale: Vec<WaitKey> = self
            .waiters
            .iter()
            .filter(|(_, w)| last || w.ended.is_some_and(old))
            .map(|(k, _)| *k)
            .collect();
        for key in stale {
            if let Some(w) = self.waiters.remove(&key) {
                // Its wake's record never came (a wait still asleep at the end has had
                // its own record, which settled it).
                let end = w.ended.unwrap_or(latest);
                self.alone(
                    table,
                    key,
                    w.uaddr,
                    (w.side, w.weight),
                    0,
                    end,
                    Side::WakeUnseen,
                );
            }
        }
        let stale: Vec<WaitKey> = self
            .wakes
            .iter()
            .filter(|(_, k)| old(k.ts))
            .map(|(k, _)| *k)
            .collect();
        for key in stale {
            if let Some(k) = self.wakes.remove(&key) {
                self.join(table, key, Side::NotUnwound, k);
            }
        }
    }

    /// Whether anything waits for [`StackJoin::retry`].
    pub fn waiting(&self) -> bool {
        !(self.deferred.is_empty() && self.waiters.is_empty() && self.wakes.is_empty())
    }

    /// The waits joined since the last call.
    pub fn take_unwound(&mut self) -> std::vec::Drain<'_, Unwound> {
        self.unwound.drain(..)
    }
}

fn frames(s: &Side) -> Vec<u64> {
    match s {
        Side::Frames(f) => f.to_vec(),
        _ => Vec::new(),
    }
}
