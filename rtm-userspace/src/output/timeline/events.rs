//! Events to trace packets: what each record becomes on the timeline.

use std::collections::HashMap;

use rtm_common::{
    COMM_ID_UNKNOWN, LifecycleOp, MPI_FLAG_COMPLETION, Primitive, RANK_UNKNOWN, SyncOp,
    WAIT_IN_PROGRESS, WAIT_INTERRUPTED,
    decode::{Event, LifecycleRecord, MpiRecord, SyncRecord},
};

use super::{
    messages::{End, Messages, Side},
    packet,
    proto::Writer,
    tracks::{Lane, Tracks},
};
use crate::model::{sync::semantics, system::interval::Interval};

/// TrackEvent.Type.
const SLICE_BEGIN: u64 = 1;
const SLICE_END: u64 = 2;
const INSTANT: u64 = 3;
const COUNTER: u64 = 4;
/// Holds remembered per thread; a thread holding more has its oldest shown at once.
const MAX_HOLDS: usize = 64;
/// Communicators whose collectives are numbered, per process.
const MAX_COMMS: usize = 4_096;
const ETIMEDOUT: i32 = -110;

/// A debug annotation's value.
pub enum Arg<'a> {
    Int(i64),
    Str(&'a str),
}

/// One TrackEvent.
#[derive(Default)]
pub struct Ev<'a> {
    pub ty: u64,
    pub name: Option<&'a str>,
    pub flow: Option<u64>,
    pub terminating_flow: Option<u64>,
    pub correlation: Option<u64>,
    pub args: &'a [(&'a str, Arg<'a>)],
    pub value: Option<f64>,
}

/// Writes a TrackEvent packet at `ts` on `track`.
pub fn track_event(w: &mut Writer, ts: u64, track: u64, ev: &Ev) {
    packet::start(w, Some(ts));
    w.begin(packet::TRACK_EVENT).uint(9, ev.ty).uint(11, track);
    if let Some(n) = ev.name {
        w.str(23, n);
    }
    if let Some(f) = ev.flow {
        w.fixed64(47, f);
    }
    if let Some(f) = ev.terminating_flow {
        w.fixed64(48, f);
    }
    if let Some(c) = ev.correlation {
        w.uint(52, c);
    }
    if let Some(v) = ev.value {
        w.double(44, v);
    }
    for (name, arg) in ev.args {
        w.begin(4).str(10, name);
        match arg {
            Arg::Int(i) => w.int(4, *i),
            Arg::Str(s) => w.str(6, s),
        };
        w.end();
    }
    w.end();
    packet::done(w);
}

/// A slice from `begin` to `end` on `track`.
fn slice(w: &mut Writer, track: u64, begin: u64, end: u64, ev: Ev) {
    track_event(
        w,
        begin,
        track,
        &Ev {
            ty: SLICE_BEGIN,
            ..ev
        },
    );
    track_event(
        w,
        end.max(begin),
        track,
        &Ev {
            ty: SLICE_END,
            ..Ev::default()
        },
    );
}

/// A value of counter track `name` at `ts`.
pub fn counter(
    w: &mut Writer,
    tracks: &mut Tracks,
    ts: u64,
    name: &str,
    unit: &str,
    pid: Option<u32>,
    value: f64,
) {
    let track = tracks.counter(w, name, unit, pid);
    track_event(
        w,
        ts,
        track,
        &Ev {
            ty: COUNTER,
            value: Some(value),
            ..Ev::default()
        },
    );
}

/// A lock held since `since`.
struct Hold {
    object: u64,
    since: u64,
    name: Box<str>,
}

/// A pthread_mutex_lock seen at its entry only (full mode): its thread's next event
/// settles it, as the model does (a futex wait on its word is part of it; anything else
/// means it returned, holding the lock).
struct Pending {
    object: u64,
    start: u64,
    acquired: u64,
    name: Box<str>,
}

/// What the timeline remembers between events.
#[derive(Default)]
pub struct State {
    /// Each thread's lock call seen at entry only.
    pending: HashMap<(u32, u32), Pending>,
    /// Flow ids given so far.
    flows: u64,
    /// Each thread's holds, oldest first.
    holds: HashMap<(u32, u32), Vec<Hold>>,
    /// Collectives called so far on each communicator, per process.
    collectives: HashMap<(u32, u32), u64>,
    /// MPI messages' ends not matched yet.
    pub messages: Messages,
}

/// What an event is written with.
pub struct Ctx<'a> {
    pub w: &'a mut Writer,
    pub tracks: &'a mut Tracks,
    pub state: &'a mut State,
}

/// Whether a sync record is shown (its object then needs a name).
pub fn shown(s: &SyncRecord) -> bool {
    if s.raw.flags & rtm_common::SYNC_FLAG_BEGIN != 0 {
        // The start of a call: a lock seen at entry only, or a condition-variable wait
        // releasing its mutex (others end with a record of their own).
        return matches!(
            (s.primitive, s.op),
            (Primitive::Mutex, SyncOp::Lock) | (Primitive::Cond, _)
        );
    }
    match (s.primitive, s.op) {
        (Primitive::Futex, SyncOp::Wait) => s.raw.wait_ns > 0,
        (_, SyncOp::Wake) => false,
        _ => true,
    }
}

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

impl Ctx<'_> {
    /// Writes `event`; `object`: the name of a sync record's object; `mutex`: a
    /// condition-variable record's mutex's.
    pub fn event(&mut self, event: &Event, object: Option<&str>, mutex: Option<&str>) {
        let h = event.header();
        if !self.state.pending.is_empty() {
            self.settle(h.pid, h.tid, event);
        }
        match event {
            Event::Sync(s) => {
                if let Some(o) = object {
                    if s.primitive == Primitive::Futex {
                        self.futex_wait(s, o);
                    } else if s.raw.flags & rtm_common::SYNC_FLAG_BEGIN != 0 {
                        self.begin(s, o);
                    } else {
                        self.call(s, o, mutex);
                    }
                }
            }
            Event::Lifecycle(l) => self.lifecycle(l),
            Event::Mpi(m) => self.mpi(m),
        }
    }

    /// Settles the thread's lock call seen at entry only, if any, with its next event.
    fn settle(&mut self, pid: u32, tid: u32, event: &Event) {
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
            let name = format!("lock {}", p.name);
            slice(
                self.w,
                track,
                p.start,
                p.acquired,
                Ev {
                    name: Some(&name),
                    ..Ev::default()
                },
            );
        }
        self.hold(pid, tid, p.object, p.acquired, &p.name);
    }

    /// The start of a call: a lock seen at entry only waits for its settling; a
    /// condition-variable wait releases its mutex.
    fn begin(&mut self, s: &SyncRecord, object: &str) {
        let h = &s.raw.header;
        if s.primitive == Primitive::Mutex {
            self.state.pending.insert(
                (h.pid, h.tid),
                Pending {
                    object: s.raw.object,
                    start: h.ts_ns,
                    acquired: h.ts_ns,
                    name: object.into(),
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
    fn hold(&mut self, pid: u32, tid: u32, object: u64, since: u64, name: &str) {
        let holds = self.state.holds.entry((pid, tid)).or_default();
        if holds.len() >= MAX_HOLDS {
            let oldest = holds.remove(0);
            let t = self.tracks.thread(self.w, pid, tid, Lane::HoldsOverlapping);
            hold_slice(self.w, t, &oldest, since);
        }
        self.state.holds.entry((pid, tid)).or_default().push(Hold {
            object,
            since,
            name: format!("hold {name}").into(),
        });
    }

    fn track(&mut self, pid: u32, tid: u32, lane: Lane) -> u64 {
        self.tracks.thread(self.w, pid, tid, lane)
    }

    /// A futex wait: the sleep, then the time runnable after the wake, and the wake on
    /// the waker with an arrow to the woken thread.
    fn futex_wait(&mut self, s: &SyncRecord, object: &str) {
        let h = &s.raw.header;
        let end = h.ts_ns;
        let begin = end.saturating_sub(s.raw.wait_ns);
        let runnable = u64::from(s.runnable_ns).min(s.raw.wait_ns);
        let woken = end - runnable;
        let (waker, waker_pid) = (s.raw.extra, s.raw.caller as u32);
        let result = match s.raw.ret {
            0 => "woken",
            ETIMEDOUT => "timed out",
            WAIT_INTERRUPTED => "interrupted (signal or no waker seen)",
            WAIT_IN_PROGRESS => "still asleep when the trace ended",
            _ => "returned an error",
        };
        let track = self.track(h.pid, h.tid, Lane::Main);
        let name = format!("wait {object}");
        let mut args = vec![("result", Arg::Str(result))];
        if waker != 0 {
            args.push(("waker tid", Arg::Int(i64::from(waker))));
        }
        if s.raw.repeats > 0 {
            args.push((
                "waits before it that did not sleep",
                Arg::Int(i64::from(s.raw.repeats)),
            ));
        }
        slice(
            self.w,
            track,
            begin,
            woken,
            Ev {
                name: Some(&name),
                args: &args,
                ..Ev::default()
            },
        );
        let flow = (waker != 0).then(|| {
            self.state.flows += 1;
            let id = self.state.flows;
            let pid = if waker_pid != 0 { waker_pid } else { h.pid };
            let wt = self.track(pid, waker, Lane::Main);
            let wake = format!("wake {object}");
            track_event(
                self.w,
                woken,
                wt,
                &Ev {
                    ty: INSTANT,
                    name: Some(&wake),
                    flow: Some(id),
                    args: &[("woken tid", Arg::Int(i64::from(h.tid)))],
                    ..Ev::default()
                },
            );
            id
        });
        if flow.is_some() || runnable > 0 {
            slice(
                self.w,
                track,
                woken,
                end,
                Ev {
                    name: Some("runnable"),
                    terminating_flow: flow,
                    ..Ev::default()
                },
            );
        }
    }

    /// A pthread call (full mode): blocking calls as slices, releases end holds,
    /// wakes as instants.
    fn call(&mut self, s: &SyncRecord, object: &str, mutex: Option<&str>) {
        let h = &s.raw.header;
        let sem = semantics::of(s.primitive, s.op);
        let op = op_name(s.op);
        if sem.releases {
            self.release(h.pid, h.tid, s.raw.object, h.ts_ns);
            return;
        }
        let track = self.track(h.pid, h.tid, Lane::Main);
        let name = format!("{op} {object}");
        if sem.wakes {
            let mut args = vec![];
            if matches!(s.op, SyncOp::Signal | SyncOp::Broadcast) {
                args.push(("threads woken", Arg::Int(i64::from(s.raw.extra))));
            }
            track_event(
                self.w,
                h.ts_ns,
                track,
                &Ev {
                    ty: INSTANT,
                    name: Some(&name),
                    args: &args,
                    ..Ev::default()
                },
            );
            return;
        }
        if s.raw.wait_ns > 0 {
            let contended = s.raw.flags & rtm_common::SYNC_FLAG_CONTENDED != 0;
            slice(
                self.w,
                track,
                h.ts_ns - s.raw.wait_ns.min(h.ts_ns),
                h.ts_ns,
                Ev {
                    name: Some(&name),
                    args: &[
                        ("return value", Arg::Int(i64::from(s.raw.ret))),
                        ("contended", Arg::Int(i64::from(contended))),
                    ],
                    ..Ev::default()
                },
            );
        }
        if sem.holds.is_some() && s.raw.ret == 0 {
            self.hold(h.pid, h.tid, s.raw.object, h.ts_ns, object);
        }
        if let (Primitive::Cond, Some(m)) = (s.primitive, mutex) {
            // The wait released its mutex (if its start was not seen) and took it back.
            let start = h.ts_ns.saturating_sub(s.raw.wait_ns);
            self.release(h.pid, h.tid, s.raw.aux, start);
            self.hold(h.pid, h.tid, s.raw.aux, h.ts_ns, m);
        }
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
        hold_slice(self.w, t, &hold, ts);
    }

    fn lifecycle(&mut self, l: &LifecycleRecord) {
        let h = &l.raw.header;
        match l.op {
            LifecycleOp::Spawn if l.raw.clone_flags & rtm_common::CLONE_THREAD != 0 => {
                let track = self.track(h.pid, h.tid, Lane::Main);
                let name = format!("create thread {}", l.raw.child);
                track_event(
                    self.w,
                    h.ts_ns,
                    track,
                    &Ev {
                        ty: INSTANT,
                        name: Some(&name),
                        ..Ev::default()
                    },
                );
                self.track(h.pid, l.raw.child, Lane::Main);
                let comm = l.comm();
                if !comm.is_empty() {
                    self.tracks.name_thread(self.w, h.pid, l.raw.child, comm);
                }
            }
            LifecycleOp::Exit => {
                let track = self.track(h.pid, h.tid, Lane::Main);
                track_event(
                    self.w,
                    h.ts_ns,
                    track,
                    &Ev {
                        ty: INSTANT,
                        name: Some("thread exit"),
                        ..Ev::default()
                    },
                );
            }
            LifecycleOp::Exec => {
                let track = self.track(h.pid, h.tid, Lane::Main);
                let comm = l.comm();
                track_event(
                    self.w,
                    h.ts_ns,
                    track,
                    &Ev {
                        ty: INSTANT,
                        name: Some("exec"),
                        args: &[("program", Arg::Str(comm))],
                        ..Ev::default()
                    },
                );
                if !comm.is_empty() {
                    self.tracks.name_process(self.w, h.pid, comm);
                }
            }
            LifecycleOp::Spawn => {}
        }
    }

    /// An MPI call as a slice; collectives carry the instance's correlation id; sends
    /// and receives become arrows once matched.
    fn mpi(&mut self, m: &MpiRecord) {
        let r = &m.raw;
        let h = &r.header;
        let sides = [
            self.state.messages.side(m),
            self.state.messages.sendrecv_recv(m),
        ];
        let bytes = if r.count >= 0 && r.dtype_size > 0 {
            i64::from(r.count) * i64::from(r.dtype_size)
        } else {
            -1
        };
        for side in sides {
            if matches!(side, Side::None) {
                continue;
            }
            let track = self.track(h.pid, h.tid, Lane::Main);
            let flows = &mut self.state.flows;
            match side {
                Side::Send(pair) => {
                    let end = End {
                        ts: r.start_ns.min(h.ts_ns),
                        track,
                        tag: r.tag,
                        bytes,
                    };
                    self.state.messages.send(self.w, flows, pair, end);
                }
                Side::Recv(pair, tag) => {
                    let received = if r.status_bytes == rtm_common::BYTES_UNKNOWN {
                        -1
                    } else {
                        r.status_bytes as i64
                    };
                    let end = End {
                        ts: h.ts_ns,
                        track,
                        tag,
                        bytes: received,
                    };
                    self.state.messages.recv(self.w, flows, pair, end);
                }
                Side::None => {}
            }
        }
        if r.flags & MPI_FLAG_COMPLETION != 0 {
            return;
        }
        let track = self.track(h.pid, h.tid, Lane::Main);
        let name = format!("MPI_{:?}", m.op);
        let correlation = (m.op.is_collective() && r.comm_id != COMM_ID_UNKNOWN)
            .then(|| {
                let n = self.state.collectives.len();
                let key = (h.pid, r.comm_id);
                let seq = match self.state.collectives.get_mut(&key) {
                    Some(s) => s,
                    None if n < MAX_COMMS => self.state.collectives.entry(key).or_default(),
                    None => return None,
                };
                *seq += 1;
                Some((u64::from(r.comm_id) << 32) | (*seq & 0xffff_ffff))
            })
            .flatten();
        let mut args = vec![
            ("bytes", Arg::Int(bytes)),
            ("tag", Arg::Int(i64::from(r.tag))),
        ];
        if r.peer_world != RANK_UNKNOWN {
            args.push(("peer (world rank)", Arg::Int(i64::from(r.peer_world))));
        }
        if let Some(c) = correlation {
            args.push(("instance", Arg::Int((c & 0xffff_ffff) as i64)));
        }
        slice(
            self.w,
            track,
            r.start_ns.min(h.ts_ns),
            h.ts_ns,
            Ev {
                name: Some(&name),
                correlation,
                args: &args,
                ..Ev::default()
            },
        );
    }
}

fn hold_slice(w: &mut Writer, track: u64, hold: &Hold, end: u64) {
    slice(
        w,
        track,
        hold.since,
        end,
        Ev {
            name: Some(&hold.name),
            ..Ev::default()
        },
    );
}

/// The holds still open at `end`, shown up to it.
pub fn close_open(w: &mut Writer, tracks: &mut Tracks, state: &mut State, end: u64) {
    for ((pid, tid), holds) in state.holds.drain() {
        let t = tracks.thread(w, pid, tid, Lane::Holds);
        for h in holds.iter().rev() {
            hold_slice(w, t, h, end);
        }
    }
}

/// A system interval's statistics as counters at its end (`start_ns`: the trace's
/// start, CLOCK_MONOTONIC).
pub fn interval(w: &mut Writer, tracks: &mut Tracks, start_ns: u64, iv: &Interval) {
    let ts = start_ns + ((iv.t_s + iv.dur_s) * 1e9) as u64;
    let mut c = |name: &str, unit: &str, v: f64| counter(w, tracks, ts, name, unit, None, v);
    c("CPU busy %", "%", iv.cpu.busy);
    c("CPU iowait %", "%", iv.cpu.iowait);
    c("CPU steal %", "%", iv.cpu.steal);
    c("run queue (tasks running)", "", iv.procs_running as f64);
    c("tasks blocked", "", iv.procs_blocked as f64);
    c("load average (1 min)", "", iv.load1);
    c("context switches/s", "/s", iv.context_switches_per_s);
    c("memory available %", "%", iv.mem_available_pct);
    c("swap used", "bytes", iv.swap_used as f64);
    c("major faults/s", "/s", iv.major_faults_per_s);
    if let Some(p) = &iv.psi {
        c("PSI cpu some %", "%", p.cpu_some);
        c("PSI memory some %", "%", p.memory_some);
        c("PSI io some %", "%", p.io_some);
    }
    for p in &iv.procs {
        let cpu = format!("CPU % (pid {})", p.pid);
        let rss = format!("RSS (pid {})", p.pid);
        counter(
            w,
            tracks,
            ts,
            &cpu,
            "%",
            Some(p.pid),
            p.user_pct + p.system_pct,
        );
        counter(
            w,
            tracks,
            ts,
            &rss,
            "bytes",
            Some(p.pid),
            p.rss_bytes as f64,
        );
    }
}
