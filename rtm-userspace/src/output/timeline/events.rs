//! Events to trace packets: futex waits, thread lifecycles and MPI calls. Full-mode
//! pthread calls are in `calls`, the system's counters in `counters`.

use rtm_common::{
    COMM_ID_UNKNOWN, LifecycleOp, MPI_FLAG_COMPLETION, Primitive, RANK_UNKNOWN, SyncOp,
    WAIT_IN_PROGRESS, WAIT_INTERRUPTED,
    decode::{Event, LifecycleRecord, MpiRecord, SyncRecord},
};

use super::{
    messages::{End, Side},
    names::{Name, Obj},
    state::Ctx,
    tracks::Lane,
    write::{Arg, Ev, INSTANT, NameRef, slice, track_event},
};

/// Communicators whose collectives are numbered, per process.
const MAX_COMMS: usize = 4_096;
const ETIMEDOUT: i32 = -110;

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

impl Ctx<'_> {
    /// Writes `event`; `object`: a sync record's object; `mutex`: a condition-variable
    /// record's mutex.
    pub fn event(&mut self, event: &Event, object: Option<Obj>, mutex: Option<Obj>) {
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
            // Sums hold no single wait to draw (a timeline turns summing off).
            Event::Stacks(_) | Event::FutexAgg(_) => {}
            Event::Func(f) => self.func(f),
        }
    }

    /// A timed function's call: a slice on the thread's "timed functions" track
    /// (nested calls nest).
    fn func(&mut self, f: &rtm_common::FuncEvent) {
        let h = &f.header;
        for c in f.calls() {
            let Some(text) = self.state.functions.get(c.function as usize).cloned() else {
                continue;
            };
            let track = self.track(h.pid, h.tid, Lane::Functions);
            let name = self
                .names
                .fixed(self.w, "function", c.function, || text.to_string());
            let args = [("recursion depth", Arg::Int(i64::from(c.recursion)))];
            slice(
                self.w,
                track,
                c.start_ns,
                c.end_ns,
                Ev {
                    name: Some((&name).into()),
                    args: if c.recursion > 0 { &args } else { &[] },
                    ..Ev::default()
                },
            );
        }
    }

    pub(super) fn track(&mut self, pid: u32, tid: u32, lane: Lane) -> u64 {
        self.tracks.thread(self.w, pid, tid, lane)
    }

    /// An interned name that is the same for every event of its kind.
    fn fixed(&mut self, text: &'static str) -> Name {
        self.names.fixed(self.w, text, u32::MAX, || text.to_owned())
    }

    /// A futex wait: the sleep, then the time runnable after the wake, and the wake on
    /// the waker with an arrow to the woken thread.
    /// A wait's call stacks, as interned callstacks that Perfetto shows as stacks and
    /// flame graphs: a `waited in` instant on the waiter's track at the wake (or at the
    /// end of a wait no thread woke) with where it waited, and a `woke a waiter`
    /// instant on the waker's track at the same time with where the wake came from.
    /// (The wait's own record, which may be read before or after this one, draws the
    /// wait.)
    pub fn stacks(&mut self, st: &crate::output::sink::WaitStacks) {
        let waited = self.state.callstacks.intern(self.w, st.waiter);
        let woke = self.state.callstacks.intern(self.w, st.waker);
        let track = self.track(st.pid, st.tid, Lane::Main);
        let name = self.fixed("waited in");
        let unknown = [(
            "woken from",
            Arg::Fixed("(not known: the wake came before the sleep, or its record was lost)"),
        )];
        track_event(
            self.w,
            st.wake_ns,
            track,
            &Ev {
                ty: INSTANT,
                name: Some((&name).into()),
                callstack: waited,
                args: if st.waker_thread.0 != 0 && woke.is_none() {
                    &unknown
                } else {
                    &[]
                },
                ..Ev::default()
            },
        );
        let (waker_pid, waker_tid) = st.waker_thread;
        if let (Some(id), true) = (woke, waker_tid != 0) {
            let track = self.track(waker_pid, waker_tid, Lane::Main);
            let name = self.fixed("woke a waiter");
            track_event(
                self.w,
                st.wake_ns,
                track,
                &Ev {
                    ty: INSTANT,
                    name: Some((&name).into()),
                    callstack: Some(id),
                    args: &[("woken tid", Arg::Int(i64::from(st.tid)))],
                    ..Ev::default()
                },
            );
        }
    }

    fn futex_wait(&mut self, s: &SyncRecord, object: Obj) {
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
        let name = self.names.of(self.w, "wait", object);
        // On the event path: the annotations in an array, not a Vec.
        let mut args = [("result", Arg::Fixed(result)); 3];
        let mut n = 1;
        if waker != 0 {
            args[n] = ("waker tid", Arg::Int(i64::from(waker)));
            n += 1;
        }
        if s.raw.repeats > 0 {
            let unslept = Arg::Int(i64::from(s.raw.repeats));
            args[n] = ("waits before it that did not sleep", unslept);
            n += 1;
        }
        slice(
            self.w,
            track,
            begin,
            woken,
            Ev {
                name: Some((&name).into()),
                args: &args[..n],
                ..Ev::default()
            },
        );
        let flow = (waker != 0).then(|| {
            self.state.flows += 1;
            let id = self.state.flows;
            let pid = if waker_pid != 0 { waker_pid } else { h.pid };
            let wt = self.track(pid, waker, Lane::Main);
            let wake = self.names.of(self.w, "wake", object);
            track_event(
                self.w,
                woken,
                wt,
                &Ev {
                    ty: INSTANT,
                    name: Some((&wake).into()),
                    flow: Some(id),
                    args: &[("woken tid", Arg::Int(i64::from(h.tid)))],
                    ..Ev::default()
                },
            );
            id
        });
        if flow.is_some() || runnable > 0 {
            let name = self.fixed("runnable");
            slice(
                self.w,
                track,
                woken,
                end,
                Ev {
                    name: Some((&name).into()),
                    terminating_flow: flow,
                    ..Ev::default()
                },
            );
        }
    }

    fn lifecycle(&mut self, l: &LifecycleRecord) {
        let h = &l.raw.header;
        let (name, program) = match l.op {
            LifecycleOp::Spawn if l.raw.clone_flags & rtm_common::CLONE_THREAD != 0 => {
                (format!("create thread {}", l.raw.child), None)
            }
            LifecycleOp::Exit => ("thread exit".to_owned(), None),
            LifecycleOp::Exec => ("exec".to_owned(), Some(l.comm())),
            LifecycleOp::Spawn => return,
        };
        let track = self.track(h.pid, h.tid, Lane::Main);
        let args = program.map(|p| [("program", Arg::Str(p))]);
        track_event(
            self.w,
            h.ts_ns,
            track,
            &Ev {
                ty: INSTANT,
                name: Some(NameRef::Str(&name)),
                args: args.as_ref().map_or(&[], |a| &a[..]),
                ..Ev::default()
            },
        );
        match (l.op, program) {
            (LifecycleOp::Exec, Some(comm)) if !comm.is_empty() => {
                self.tracks.name_process(self.w, h.pid, comm);
            }
            (LifecycleOp::Exit, _) => self.thread_exited(h.pid, h.tid, h.ts_ns),
            (LifecycleOp::Spawn, _) => {
                self.track(h.pid, l.raw.child, Lane::Main);
                let comm = l.comm();
                if !comm.is_empty() {
                    self.tracks.name_thread(self.w, h.pid, l.raw.child, comm);
                }
            }
            _ => {}
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
            let (pair, end_ts, tag, b, send) = match side {
                Side::Send(pair) => (pair, r.start_ns.min(h.ts_ns), r.tag, bytes, true),
                Side::Recv(pair, tag) => {
                    let received = if r.status_bytes == rtm_common::BYTES_UNKNOWN {
                        -1
                    } else {
                        r.status_bytes as i64
                    };
                    (pair, h.ts_ns, tag, received, false)
                }
                Side::None => continue,
            };
            let track = self.track(h.pid, h.tid, Lane::Main);
            let end = End {
                ts: end_ts,
                track,
                tag,
                bytes: b,
            };
            let (w, flows, names) = (&mut *self.w, &mut self.state.flows, &mut *self.names);
            self.state.messages.meet(w, names, flows, pair, end, send);
        }
        if r.flags & MPI_FLAG_COMPLETION != 0 {
            return;
        }
        let track = self.track(h.pid, h.tid, Lane::Main);
        let op = m.op;
        let name = self
            .names
            .fixed(self.w, "MPI", op as u32, || format!("MPI_{op:?}"));
        let correlation = (op.is_collective() && r.comm_id != COMM_ID_UNKNOWN)
            .then(|| {
                let n = self.state.collectives.len();
                let key = (h.pid, r.comm_id);
                let seq = match self.state.collectives.get_mut(&key) {
                    Some(s) => s,
                    None if n < MAX_COMMS => self.state.collectives.entry(key).or_default(),
                    None => return None,
                };
                *seq += 1;
                Some((u64::from(r.comm_id & 0x7fff_ffff) << 32) | (*seq & 0xffff_ffff))
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
                name: Some((&name).into()),
                correlation,
                args: &args,
                ..Ev::default()
            },
        );
    }
}
