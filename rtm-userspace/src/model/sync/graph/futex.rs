//! Futex events in the sync graph: each wait and wake from its record, and the waits
//! the kernel summed (a wait's sleep, its waker, the waits-for and held-by edges and the
//! per-process totals).

use rtm_common::{
    AggOutcome, FUTEX_OP_OUTSIDE_CALL, Primitive, SyncOp, WAIT_IN_PROGRESS, WAIT_INTERRUPTED,
    decode::{FutexAggRecord, SyncRecord},
};

use super::{EAGAIN, ETIMEDOUT, MAX_UNWOKEN, SyncGraph};
use crate::model::sync::{
    edge::{Count, Span},
    types::*,
};

impl SyncGraph {
    pub(super) fn apply_futex(&mut self, thread: ThreadKey, s: &SyncRecord) {
        let raw = &s.raw;
        let ts = raw.header.ts_ns;
        let object = ObjectKey {
            pid: thread.pid,
            primitive: Primitive::Futex,
            addr: raw.object,
        };
        // A wait that returned without sleeping (the word had changed) waited for no
        // one; a record may carry a run of them before its own wait.
        let slept = s.op == SyncOp::Wait && raw.ret != -EAGAIN;
        let unslept = if s.op != SyncOp::Wait {
            0
        } else {
            u64::from(raw.repeats) + u64::from(!slept)
        };
        self.counters.waits_unslept = self.counters.waits_unslept.saturating_add(unslept);
        if s.op == SyncOp::Wait && raw.ret != WAIT_IN_PROGRESS {
            // Bounded like the threads: a process's first event passed the thread cap.
            let room = self.totals.len() < self.limits.max_threads;
            let totals = match self.totals.entry(thread.pid) {
                std::collections::hash_map::Entry::Occupied(e) => Some(e.into_mut()),
                std::collections::hash_map::Entry::Vacant(e) => {
                    room.then(|| e.insert_entry(ProcessTotals::default()).into_mut())
                }
            };
            if let Some(t) = totals {
                t.waits += unslept + u64::from(slept);
                t.unslept += unslept;
                if slept {
                    t.sleep(raw.wait_ns, raw.ret == -ETIMEDOUT);
                }
            }
        }
        if slept {
            if s.holder != 0 {
                let key = HeldByKey {
                    pid: thread.pid,
                    waiter: thread.tid,
                    holder: s.holder,
                    object: raw.object,
                };
                if self.held_by.contains_key(&key) || self.held_by.len() < self.limits.max_edges {
                    let h = self.held_by.entry(key).or_default();
                    h.count += 1;
                    h.wait_ns = h.wait_ns.saturating_add(raw.wait_ns);
                    h.in_progress += u64::from(raw.ret == WAIT_IN_PROGRESS);
                } else {
                    self.counters.dropped_over_limits += 1;
                }
            } else if self.futex_objects {
                self.counters.waits_holder_unknown += 1;
            }
            if raw.extra != 0 {
                // The waker's process: in `caller` for futex waits (0: the waiter's own,
                // as the fallback path knows only those).
                let waker_pid = match raw.caller {
                    0 => thread.pid,
                    p => u32::try_from(p).unwrap_or(u32::MAX),
                };
                let key = WaitsForKey {
                    pid: thread.pid,
                    waiter: thread.tid,
                    waker_pid,
                    waker: raw.extra,
                    object: raw.object,
                };
                if self.waits_for.contains_key(&key) || self.waits_for.len() < self.limits.max_edges
                {
                    let w = self.waits_for.entry(key).or_default();
                    w.count += 1;
                    w.wait.record(raw.wait_ns, &mut self.budget);
                } else {
                    self.counters.dropped_over_limits += 1;
                }
            } else if raw.ret == WAIT_IN_PROGRESS {
                self.counters.waits_in_progress += 1;
            } else {
                self.counters.waits_without_waker += 1;
                match raw.ret {
                    r if r == -ETIMEDOUT => self.counters.waits_timed_out += 1,
                    WAIT_INTERRUPTED => self.counters.waits_interrupted += 1,
                    _ => {}
                }
                // Woken (not a timeout): perhaps by a thread's exit.
                if raw.ret == 0 && self.unwoken.len() < MAX_UNWOKEN {
                    self.unwoken.push(UnwokenWait {
                        pid: thread.pid,
                        tid: thread.tid,
                        addr: raw.object,
                        val: (raw.aux >> 32) as u32,
                        start_ns: ts.saturating_sub(raw.wait_ns),
                        end_ns: ts,
                    });
                }
            }
        }
        // Full mode: a wait in no probed pthread call (a runtime's or a library's own
        // lock) has no pthread object, so its word is one; a wait inside a
        // pthread_mutex_lock probed at entry only is that mutex's.
        let outside_call = (raw.aux as u32) & FUTEX_OP_OUTSIDE_CALL != 0
            && s.op == SyncOp::Wait
            && self
                .pending_locks
                .get(&thread)
                .is_none_or(|p| p.record.raw.object != raw.object);
        if !self.futex_objects && !outside_call {
            return;
        }
        let Some((object_index, _)) = self.object(object) else {
            return;
        };
        let Some(i) = self.edge(EdgeId::new(object_index, thread.tid, Role::Use)) else {
            return;
        };
        let (budget, edge) = (&mut self.budget, &mut self.edges[i]);
        match s.op {
            SyncOp::Wait => {
                edge.add(Count::Waits, unslept + u64::from(slept));
                if slept {
                    edge.add(Count::Contended, 1);
                    edge.add(Count::ContendedWaitNs, raw.wait_ns);
                    edge.add(Count::Blocked, 1);
                    if raw.ret == -ETIMEDOUT {
                        edge.add(Count::Timeouts, 1);
                    }
                    edge.record(Span::Wait, raw.wait_ns, budget);
                }
            }
            SyncOp::Wake => edge.add(Count::Woken, raw.ret.max(0) as u64),
            _ => {}
        }
    }

    /// Futex waits the kernel summed: the same figures `apply_futex` draws from each
    /// wait's record, for `a.count` waits at once.
    pub(super) fn apply_futex_sums(&mut self, thread: ThreadKey, a: &FutexAggRecord) {
        let n = a.count;
        let k = &a.key;
        let slept = matches!(
            a.outcome,
            AggOutcome::Woken | AggOutcome::TimedOut | AggOutcome::Interrupted
        );
        let timed_out = a.outcome == AggOutcome::TimedOut;
        if !slept {
            // Waits that did not sleep: the word had changed, or a wake came first.
            self.counters.waits_unslept = self.counters.waits_unslept.saturating_add(n);
        }
        let room = self.totals.len() < self.limits.max_threads;
        let totals = match self.totals.entry(thread.pid) {
            std::collections::hash_map::Entry::Occupied(e) => Some(e.into_mut()),
            std::collections::hash_map::Entry::Vacant(e) => {
                room.then(|| e.insert_entry(ProcessTotals::default()).into_mut())
            }
        };
        if let Some(t) = totals {
            t.waits += n;
            if slept {
                t.sleeps_summed(n, a.wait_ns, timed_out, a.buckets);
            } else {
                t.unslept += n;
            }
        }
        let extremes = (a.min_ns.min(a.max_ns), a.max_ns);
        if slept {
            if k.holder != 0 {
                let key = HeldByKey {
                    pid: thread.pid,
                    waiter: thread.tid,
                    holder: k.holder,
                    object: k.uaddr,
                };
                if self.held_by.contains_key(&key) || self.held_by.len() < self.limits.max_edges {
                    let h = self.held_by.entry(key).or_default();
                    h.count += n;
                    h.wait_ns = h.wait_ns.saturating_add(a.wait_ns);
                } else {
                    self.counters.dropped_over_limits += n;
                }
            } else if self.futex_objects {
                self.counters.waits_holder_unknown += n;
            }
        }
        if a.outcome == AggOutcome::Woken || a.outcome == AggOutcome::WokenBeforeSleep {
            let key = WaitsForKey {
                pid: thread.pid,
                waiter: thread.tid,
                waker_pid: if k.waker_pid == 0 {
                    thread.pid
                } else {
                    k.waker_pid
                },
                waker: k.waker,
                object: k.uaddr,
            };
            if slept {
                if self.waits_for.contains_key(&key) || self.waits_for.len() < self.limits.max_edges
                {
                    let w = self.waits_for.entry(key).or_default();
                    w.count += n;
                    w.wait
                        .record_summed(n, a.wait_ns, extremes, a.buckets, &mut self.budget);
                } else {
                    self.counters.dropped_over_limits += n;
                }
            }
        } else if slept {
            self.counters.waits_without_waker += n;
            if timed_out {
                self.counters.waits_timed_out += n;
            } else {
                self.counters.waits_interrupted += n;
            }
        }
        if !self.futex_objects {
            return;
        }
        let object = ObjectKey {
            pid: thread.pid,
            primitive: Primitive::Futex,
            addr: k.uaddr,
        };
        let Some((object_index, _)) = self.object(object) else {
            return;
        };
        let Some(i) = self.edge(EdgeId::new(object_index, thread.tid, Role::Use)) else {
            return;
        };
        let (budget, edge) = (&mut self.budget, &mut self.edges[i]);
        edge.add(Count::Waits, n);
        if slept {
            edge.add(Count::Contended, n);
            edge.add(Count::ContendedWaitNs, a.wait_ns);
            edge.add(Count::Blocked, n);
            if timed_out {
                edge.add(Count::Timeouts, n);
            }
            edge.record_summed(Span::Wait, n, a.wait_ns, extremes, a.buckets, budget);
        }
    }
}
