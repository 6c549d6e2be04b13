//! Full mode's pthread calls: blocking calls as slices, holds as slices on the thread's
//! `holds` track (from the acquisition to the release), wakes as instants; lock calls
//! seen at entry only settled by the thread's next event, as the model settles them.

use rtm_common::{Primitive, SyncOp, decode::Event, decode::SyncRecord};

use super::{
    names::{Names, Obj},
    proto::Writer,
    state::{Ctx, Hold, Pending},
    tracks::{Lane, Tracks},
    write::{Arg, Ev, INSTANT, slice, track_event},
};
use crate::model::sync::semantics;

/// Holds remembered per thread; a thread holding more has its oldest shown at once.
const MAX_HOLDS: usize = 64;
/// (thread, barrier) pairs whose rounds are numbered.
const MAX_BARRIER_THREADS: usize = 65_536;

fn op_name(op: SyncOp) -> &'static str {
    use SyncOp::*;
    match op {
        Lock => "lock",
        TryLock => "trylock",
        TimedLock => "timedlock",
        Unlock => "unlock",
        RdLock => "rdlock",
        TryRdLock => "tryrdlock",
        TimedRdLock => "timedrdlock",
        WrLock => "wrlock",
        TryWrLock => "trywrlock",
        TimedWrLock => "timedwrlock",
        Wait => "wait",
        TryWait => "trywait",
        TimedWait => "timedwait",
        Post => "post",
        Signal => "signal",
        Broadcast => "broadcast",
        Create => "create",
        Join => "join",
        Wake => "wake",
    }
}

fn hold_slice(w: &mut Writer, names: &mut Names, track: u64, hold: &Hold, end: u64) {
    let name = names.of(w, "hold", hold.obj);
    slice(
        w,
        track,
        hold.since,
        end,
        Ev {
            name: Some((&name).into()),
            ..Ev::default()
        },
    );
}

impl Ctx<'_> {
    /// Settles the thread's lock call seen at entry only, if any, with its next event.
    pub(super) fn settle(&mut self, pid: u32, tid: u32, event: &Event) {
        let Some(p) = self.state.pending.get_mut(&(pid, tid)) else {
            return;
        };
        if let Event::Sync(s) = event
            && s.primitive == Primitive::Futex
            && s.op == SyncOp::Wait
            && s.raw.object == p.object
        {
            p.acquired = s.raw.header.ts_ns;
            return;
        }
        if let Some(p) = self.state.pending.remove(&(pid, tid)) {
            self.acquired(pid, tid, p);
        }
    }

    /// A lock call seen at entry only, settled: a slice when it waited, then the hold.
    fn acquired(&mut self, pid: u32, tid: u32, p: Pending) {
        if p.acquired > p.start {
            let track = self.track(pid, tid, Lane::Main);
            let name = self.names.of(self.w, "lock", p.obj);
            slice(
                self.w,
                track,
                p.start,
                p.acquired,
                Ev {
                    name: Some((&name).into()),
                    ..Ev::default()
                },
            );
        }
        self.hold(pid, tid, p.object, p.acquired, p.obj);
    }

    /// The start of a call: a lock seen at entry only waits for its settling; a
    /// condition-variable wait releases its mutex.
    pub(super) fn begin(&mut self, s: &SyncRecord, obj: Obj) {
        let h = &s.raw.header;
        if s.primitive == Primitive::Mutex {
            self.state.pending.insert(
                (h.pid, h.tid),
                Pending {
                    object: s.raw.object,
                    start: h.ts_ns,
                    acquired: h.ts_ns,
                    obj,
                },
            );
        } else {
            self.release(h.pid, h.tid, s.raw.aux, h.ts_ns);
        }
    }

    /// Settles every lock call seen at entry only, at the end of the trace.
    pub fn settle_all(&mut self) {
        let pending: Vec<_> = self.state.pending.drain().collect();
        for ((pid, tid), p) in pending {
            self.acquired(pid, tid, p);
        }
    }

    /// The thread holds `object` from `since`.
    fn hold(&mut self, pid: u32, tid: u32, object: u64, since: u64, obj: Obj) {
        let holds = self.state.holds.entry((pid, tid)).or_default();
        if holds.len() >= MAX_HOLDS {
            let oldest = holds.remove(0);
            let t = self.tracks.thread(self.w, pid, tid, Lane::HoldsOverlapping);
            hold_slice(self.w, self.names, t, &oldest, since);
        }
        self.state
            .holds
            .entry((pid, tid))
            .or_default()
            .push(Hold { object, since, obj });
    }

    /// A thread exited: the holds it still had end there (nothing can release them
    /// later), so what is remembered stays bounded by the threads alive.
    pub(super) fn thread_exited(&mut self, pid: u32, tid: u32, ts: u64) {
        let Some(holds) = self.state.holds.remove(&(pid, tid)) else {
            return;
        };
        let t = self.tracks.thread(self.w, pid, tid, Lane::Holds);
        for h in holds.iter().rev() {
            hold_slice(self.w, self.names, t, h, ts);
        }
    }

    /// A pthread call (full mode): blocking calls as slices, releases end holds,
    /// wakes as instants.
    pub(super) fn call(&mut self, s: &SyncRecord, obj: Obj, mutex: Option<Obj>) {
        let h = &s.raw.header;
        let sem = semantics::of(s.primitive, s.op);
        if sem.releases {
            self.release(h.pid, h.tid, s.raw.object, h.ts_ns);
            return;
        }
        let track = self.track(h.pid, h.tid, Lane::Main);
        let name = self.names.of(self.w, op_name(s.op), obj);
        if sem.wakes {
            let woke = [("threads woken", Arg::Int(i64::from(s.raw.extra)))];
            let counts = matches!(s.op, SyncOp::Signal | SyncOp::Broadcast);
            track_event(
                self.w,
                h.ts_ns,
                track,
                &Ev {
                    ty: INSTANT,
                    name: Some((&name).into()),
                    args: if counts { &woke } else { &[] },
                    ..Ev::default()
                },
            );
            return;
        }
        let round = (s.primitive == Primitive::Barrier && s.op == SyncOp::Wait)
            .then(|| self.barrier_round(h.pid, h.tid, s.raw.object))
            .flatten();
        if s.raw.wait_ns > 0 || round.is_some() {
            let contended = s.raw.flags & rtm_common::SYNC_FLAG_CONTENDED != 0;
            slice(
                self.w,
                track,
                h.ts_ns - s.raw.wait_ns.min(h.ts_ns),
                h.ts_ns,
                Ev {
                    name: Some((&name).into()),
                    args: &[
                        ("return value", Arg::Int(i64::from(s.raw.ret))),
                        ("contended", Arg::Int(i64::from(contended))),
                        (
                            "round",
                            Arg::Int(round.map_or(-1, |r| (r & 0xffff_ffff) as i64)),
                        ),
                    ],
                    correlation: round,
                    ..Ev::default()
                },
            );
        }
        if sem.holds.is_some() && s.raw.ret == 0 {
            self.hold(h.pid, h.tid, s.raw.object, h.ts_ns, obj);
        }
        if let (Primitive::Cond, Some(m)) = (s.primitive, mutex) {
            // The wait released its mutex (if its start was not seen) and took it back.
            let start = h.ts_ns.saturating_sub(s.raw.wait_ns);
            self.release(h.pid, h.tid, s.raw.aux, start);
            self.hold(h.pid, h.tid, s.raw.aux, h.ts_ns, m);
        }
    }

    /// The correlation id of a thread's wait on a barrier: the barrier's number and the
    /// round (the thread's count of waits on it), the same in every thread of the round.
    fn barrier_round(&mut self, pid: u32, tid: u32, object: u64) -> Option<u64> {
        let n = self.state.barriers.len() as u32;
        let index = *self.state.barriers.entry((pid, object)).or_insert(n);
        let key = (tid, object);
        if !self.state.barrier_waits.contains_key(&key)
            && self.state.barrier_waits.len() >= MAX_BARRIER_THREADS
        {
            return None;
        }
        let round = self.state.barrier_waits.entry(key).or_default();
        *round += 1;
        Some((1 << 63) | (u64::from(index) << 32) | u64::from(*round))
    }

    /// The thread released `object`: its hold becomes a slice, on the holds track when
    /// it was the last taken (holds nest), else on the track of holds released out of
    /// order.
    fn release(&mut self, pid: u32, tid: u32, object: u64, ts: u64) {
        let Some(holds) = self.state.holds.get_mut(&(pid, tid)) else {
            return;
        };
        let Some(at) = holds.iter().rposition(|h| h.object == object) else {
            return;
        };
        let last = at + 1 == holds.len();
        let hold = holds.remove(at);
        if holds.is_empty() {
            self.state.holds.remove(&(pid, tid));
        }
        let lane = if last {
            Lane::Holds
        } else {
            Lane::HoldsOverlapping
        };
        let t = self.tracks.thread(self.w, pid, tid, lane);
        hold_slice(self.w, self.names, t, &hold, ts);
    }
}

/// The holds still open at the end (`end`), shown up to it.
pub fn close_open(ctx: &mut Ctx, end: u64) {
    let holds: Vec<_> = ctx.state.holds.drain().collect();
    for ((pid, tid), holds) in holds {
        let t: u64 = Tracks::thread(ctx.tracks, ctx.w, pid, tid, Lane::Holds);
        for h in holds.iter().rev() {
            hold_slice(ctx.w, ctx.names, t, h, end);
        }
    }
}
