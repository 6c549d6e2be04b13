//! `--timeline FILE.pftrace`: a Perfetto trace (protobuf TracePackets, appended one after
//! another) written while tracing, for ui.perfetto.dev or trace_processor.
//!
//! - A track per thread under its process, named when the naming worker knows the name.
//! - Each futex wait a slice on the waiter (`wait <object>`), then a `runnable` slice
//!   from its wake to when it got a CPU; the wake an instant on the waker with a flow
//!   arrow to the woken thread's `runnable` slice.
//! - Full mode: every blocking pthread call a slice, holds as slices on the thread's
//!   `holds` track, signals and posts as instants.
//! - MPI: calls as slices; a collective's slices in every rank share a correlation id
//!   (its communicator and its number on it: ranks call collectives in the same order).
//! - The system statistics, the traced processes' CPU and RSS, and the tracer's event
//!   rate as counter tracks on the same (CLOCK_MONOTONIC) axis.
//! - A clock snapshot (monotonic, boot time, real time) first, so traces of several
//!   nodes line up when opened together.
//!
//! Buffering is bounded (the stream's buffer and one packet); past the size cap nothing
//! more is written and the events left out are counted and reported.

mod calls;
mod callstacks;
mod counters;
mod events;
mod messages;
mod names;
pub(crate) use super::proto;
mod state;
#[cfg(test)]
mod tests;
mod tracks;
mod write;

use std::path::PathBuf;

use rtm_common::{
    Primitive, SyncOp,
    decode::{Event, SyncRecord},
};

use self::{proto::Writer, tracks::Tracks};
use super::{
    dest::{Dest, DestError, stream::Stream},
    sink::{Moment, Sink},
};
use crate::{config::TraceConfig, symbolize::objects::ObjectNamer};

/// Trace packets and the fields of theirs written (protos/perfetto/trace/trace_packet.proto).
pub(crate) mod packet {
    use super::proto::Writer;

    /// Trace.packet.
    const PACKET: u32 = 1;
    const TIMESTAMP: u32 = 8;
    const TIMESTAMP_CLOCK_ID: u32 = 58;
    const SEQUENCE_ID: u32 = 10;
    const SEQUENCE_FLAGS: u32 = 13;
    const TRACE_PACKET_DEFAULTS: u32 = 59;
    /// SEQ_INCREMENTAL_STATE_CLEARED: the sequence's interned names start here.
    pub const STATE_CLEARED: u64 = 1;
    pub const TRACK_DESCRIPTOR: u32 = 60;
    pub const TRACK_EVENT: u32 = 11;
    pub const CLOCK_SNAPSHOT: u32 = 6;
    /// BuiltinClocks.
    pub const CLOCK_REALTIME: u64 = 1;
    pub const CLOCK_MONOTONIC: u64 = 3;
    pub const CLOCK_BOOTTIME: u64 = 6;
    /// The one writer's sequence.
    const SEQUENCE: u64 = 1;

    /// Starts a packet; `ts`: its CLOCK_MONOTONIC time (a track event, which may use
    /// interned names, and whose clock is the sequence's default).
    pub fn start(w: &mut Writer, ts: Option<u64>) {
        w.begin(PACKET);
        if let Some(t) = ts {
            w.uint(TIMESTAMP, t)
                .uint(SEQUENCE_FLAGS, super::names::NEEDS_STATE);
        }
        w.uint(SEQUENCE_ID, SEQUENCE);
    }

    /// Marks the first packet: the sequence's state starts empty, and its packets'
    /// timestamps are CLOCK_MONOTONIC unless they say otherwise
    /// (TracePacketDefaults.timestamp_clock_id: two bytes less in every event).
    pub fn first(w: &mut Writer) {
        w.uint(SEQUENCE_FLAGS, STATE_CLEARED);
        w.begin(TRACE_PACKET_DEFAULTS)
            .uint(TIMESTAMP_CLOCK_ID, CLOCK_MONOTONIC)
            .end();
    }

    /// Ends the packet.
    pub fn done(w: &mut Writer) {
        w.end();
    }
}

/// The timeline being written.
pub struct Timeline {
    path: PathBuf,
    stream: Option<Stream>,
    /// The packets of the event being written.
    w: Writer,
    tracks: Tracks,
    names: names::Names,
    state: state::State,
    /// Bytes written and the cap.
    written: u64,
    max_bytes: u64,
    /// A batch did not fit under the cap: nothing more is written, not even a smaller
    /// batch, since a later one may name what the one left out interned (a call stack,
    /// an event name) and would not decode.
    capped: bool,
    /// Events left out: over the cap, or after a write error.
    dropped: u64,
    error: Option<DestError>,
    /// Event names to rewrite at the end, where they are in the file.
    slots: Vec<names::Slot>,
    /// Events seen, and at the last interval (for the event-rate counter).
    events: u64,
    rate_mark: (u64, u64),
    /// The last system interval written (its start, seconds into the trace).
    last_interval: f64,
}

/// The timeline sink, when `--timeline` asks for one.
pub fn sink(config: &TraceConfig) -> Result<Option<Box<dyn Sink>>, DestError> {
    let Some(path) = &config.output.timeline else {
        return Ok(None);
    };
    let stream = Dest::check(path)?.stream()?;
    Ok(Some(Box::new(Timeline::new(
        path.clone(),
        stream,
        config.output.timeline_max_mb << 20,
    )?)))
}

fn clock(id: libc::clockid_t) -> u64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: writes the timespec it is given.
    unsafe { libc::clock_gettime(id, &mut t) };
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

impl Timeline {
    /// A timeline written to `stream`, at most `max_bytes` long.
    pub fn new(path: PathBuf, stream: Stream, max_bytes: u64) -> Result<Self, DestError> {
        let mut names = names::Names::default();
        names.renamable = stream.patchable();
        let mut t = Self {
            path,
            stream: Some(stream),
            w: Writer::default(),
            tracks: Tracks::default(),
            names,
            slots: Vec::new(),
            state: state::State::default(),
            written: 0,
            max_bytes,
            capped: false,
            dropped: 0,
            error: None,
            events: 0,
            rate_mark: (0, 0),
            last_interval: f64::NEG_INFINITY,
        };
        // The clocks, read together: the trace's timestamps are CLOCK_MONOTONIC, boot
        // time lines it up with other traces of this machine, real time with other
        // machines'.
        let (mono, boot, real) = (
            clock(libc::CLOCK_MONOTONIC),
            clock(libc::CLOCK_BOOTTIME),
            clock(libc::CLOCK_REALTIME),
        );
        let w = &mut t.w;
        packet::start(w, None);
        packet::first(w);
        w.begin(packet::CLOCK_SNAPSHOT);
        for (id, ts) in [
            (packet::CLOCK_MONOTONIC, mono),
            (packet::CLOCK_BOOTTIME, boot),
            (packet::CLOCK_REALTIME, real),
        ] {
            w.begin(1).uint(1, id).uint(2, ts).end();
        }
        w.uint(2, packet::CLOCK_BOOTTIME).end();
        packet::done(w);
        t.flush_packets();
        if let Some(e) = t.error.take() {
            return Err(e);
        }
        Ok(t)
    }

    /// Writes the packets built for one event (or one interval), or counts it dropped.
    fn flush_packets(&mut self) -> bool {
        let n = self.w.bytes().len() as u64;
        if n == 0 {
            return true;
        }
        let ok = match &mut self.stream {
            Some(s) if !self.capped && self.written + n <= self.max_bytes => {
                match s.write(self.w.bytes()) {
                    Ok(()) => {
                        let base = self.written;
                        self.slots
                            .extend(self.names.pending.drain(..).map(|slot| slot.moved(base)));
                        self.written += n;
                        true
                    }
                    Err(e) => {
                        self.error = Some(e);
                        self.stream = None;
                        false
                    }
                }
            }
            Some(_) => {
                self.capped = true;
                false
            }
            None => false,
        };
        if !ok {
            self.dropped += 1;
        }
        self.names.pending.clear();
        self.w.clear();
        ok
    }

    fn ctx(&mut self) -> state::Ctx<'_> {
        state::Ctx {
            w: &mut self.w,
            tracks: &mut self.tracks,
            state: &mut self.state,
            names: &mut self.names,
        }
    }

    /// Whether nothing more can be written (the cap, or an error).
    fn closed(&self) -> bool {
        self.stream.is_none() || self.capped || self.written >= self.max_bytes
    }

    /// The state at `at`: thread and process names, counters for the intervals sampled
    /// since the last call, the event rate.
    fn at_moment(&mut self, at: &Moment) {
        if self.closed() {
            return;
        }
        for t in &at.snapshot.threads {
            if let Some(n) = &t.name {
                self.tracks.name_thread(&mut self.w, t.pid, t.tid, n);
            }
        }
        for t in &at.run.targets {
            if let Some(c) = &t.comm {
                self.tracks.name_process(&mut self.w, t.pid, c);
            }
        }
        self.flush_packets();
        let now = at.snapshot.window.start_ns + at.elapsed_ns;
        let (e0, t0) = self.rate_mark;
        if t0 != 0 && now > t0 {
            let rate = (self.events - e0) as f64 * 1e9 / (now - t0) as f64;
            counters::counter(
                &mut self.w,
                &mut self.tracks,
                now,
                "rtm-trace events/s",
                "/s",
                None,
                rate,
            );
        }
        self.rate_mark = (self.events, now);
        if let Some(amb) = &crate::analyses::system::of(&at.snapshot.sections) {
            let after = self.last_interval;
            for iv in amb.intervals.iter().filter(|i| i.t_s > after) {
                counters::interval(
                    &mut self.w,
                    &mut self.tracks,
                    at.snapshot.window.start_ns,
                    iv,
                );
                self.last_interval = iv.t_s;
            }
        }
        self.flush_packets();
    }
}

impl Timeline {
    /// Objects named by kind and address while tracing, renamed as every other output
    /// names them at the end (a word on the heap by the code that waits on it).
    fn rename(&mut self, at: &Moment) {
        let Some(stream) = &mut self.stream else {
            return;
        };
        let objects = &at.snapshot.objects;
        let renamed = self.names.renamed(&self.slots, &mut |pid, addr, kind| {
            let named = |primitive| {
                objects.name(&crate::model::sync::ObjectKey {
                    pid,
                    primitive,
                    addr,
                })
            };
            named(kind)
                .or_else(|| named(Primitive::Futex))
                .map(str::to_owned)
        });
        for (slot, bytes) in renamed {
            if let Err(e) = stream.patch(slot.at, &bytes) {
                self.error = Some(e);
                self.stream = None;
                return;
            }
        }
    }
}

/// The name an event gives its object, as the report names it: a created thread is
/// "thread TID"; a futex word a thread slept on until it was woken with no waker seen,
/// expecting the TID of another thread of its process in it, is that thread's exit
/// (glibc's pthread_join: the kernel wakes it as the thread exits).
fn said_name(s: &SyncRecord, tracks: &Tracks) -> Option<String> {
    let (pid, tid) = (s.raw.header.pid, s.raw.header.tid);
    match (s.primitive, s.op) {
        (Primitive::Thread, SyncOp::Create) if s.raw.extra != 0 => {
            Some(format!("thread {}", s.raw.extra))
        }
        (Primitive::Futex, SyncOp::Wait) => {
            let val = (s.raw.aux >> 32) as u32;
            (s.raw.ret == 0
                && s.raw.extra == 0
                && s.raw.wait_ns > 0
                && val != 0
                && val != tid
                && tracks.has_thread(pid, val))
            .then(|| format!("exit of thread {val}"))
        }
        _ => None,
    }
}

/// The object of `s`, named as the report names it ([`said_name`], else its symbol,
/// else its kind and address).
fn object_of(
    names: &mut names::Names,
    namer: &mut ObjectNamer,
    tracks: &Tracks,
    s: &SyncRecord,
) -> names::Obj {
    let pid = s.raw.header.pid;
    match said_name(s, tracks) {
        Some(n) => names.object_named(pid, s.raw.object, s.primitive, n),
        None => names.object(namer, pid, s.raw.object, s.primitive),
    }
}

impl Sink for Timeline {
    fn name(&self) -> String {
        format!("the timeline ({})", self.path.display())
    }

    fn wants_events(&self) -> bool {
        true
    }

    fn event(&mut self, event: &Event, namer: &mut ObjectNamer) {
        self.events += 1;
        if self.closed() {
            self.dropped += 1;
            return;
        }
        let (object, mutex) = match event {
            Event::Sync(s) if events::shown(s) => {
                let pid = s.raw.header.pid;
                let mutex = (s.primitive == Primitive::Cond && s.raw.aux != 0)
                    .then(|| self.names.object(namer, pid, s.raw.aux, Primitive::Mutex));
                let object = object_of(&mut self.names, namer, &self.tracks, s);
                (Some(object), mutex)
            }
            _ => (None, None),
        };
        self.ctx().event(event, object, mutex);
        self.flush_packets();
    }

    fn functions(&mut self, functions: &[crate::analyses::functions::TimedFunction]) {
        self.state.functions = functions.iter().map(|f| f.name.as_str().into()).collect();
    }

    fn stacks(&mut self, st: &crate::output::sink::WaitStacks) {
        if self.closed() {
            self.dropped += 1;
            return;
        }
        self.ctx().stacks(st);
        self.flush_packets();
    }

    fn wants_intervals(&self) -> bool {
        true
    }

    fn interval(&mut self, at: &Moment) -> Result<(), DestError> {
        self.at_moment(at);
        match self.error.take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    fn finish(&mut self, at: &Moment) -> Result<(), DestError> {
        self.at_moment(at);
        // Holds still open at the end are shown up to it.
        let end = at.snapshot.window.end_ns;
        if !self.closed() {
            let mut ctx = self.ctx();
            ctx.settle_all();
            calls::close_open(&mut ctx, end);
            self.flush_packets();
        }
        self.rename(at);
        if let Some(e) = self.error.take() {
            return Err(e);
        }
        if self.dropped > 0 {
            crate::say!(
                "rtm-trace: the timeline {} reached its size cap ({} MiB): {} events after it \
                 were left out (raise it with --timeline-max-mb)",
                self.path.display(),
                self.max_bytes >> 20,
                self.dropped
            );
        }
        if self.state.callstacks.left_out > 0 {
            crate::say!(
                "rtm-trace: the timeline shows {} waits without their call stacks (more \
                 distinct frames or stacks than it keeps; the report and JSON have them all)",
                self.state.callstacks.left_out
            );
        }
        if self.state.messages.let_go > 0 {
            crate::say!(
                "rtm-trace: the timeline shows {} MPI message ends without their arrow (more \
                 were unmatched at once than it keeps)",
                self.state.messages.let_go
            );
        }
        match self.stream.take() {
            Some(s) => {
                s.finish()?;
                crate::say!(
                    "rtm-trace: wrote {} ({} KiB; open it at https://ui.perfetto.dev)",
                    super::text::Shown(&self.path.display().to_string()),
                    self.written / 1024
                );
                Ok(())
            }
            None => Ok(()),
        }
    }
}
