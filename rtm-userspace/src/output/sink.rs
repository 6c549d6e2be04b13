//! Sinks: what the engine writes results to. The engine calls a sink for each decoded
//! event (if it wants them: a timeline), at each interval with a snapshot (if it wants
//! them: periodic summaries), and once at the end with the final snapshot. Outputs
//! read the model's snapshot and the run's facts, never the model itself.
//!
//! Adding an output is a file under `output/` that implements [`Sink`] and one line in
//! [`super::SINKS`] that builds it from the config.

use rtm_common::decode::Event;

use super::{RunInfo, dest::DestError};
use crate::{model::Snapshot, symbolize::objects::ObjectNamer};

/// The call stacks of a wait a thread woke, frames named, innermost first.
pub struct WaitStacks<'a> {
    /// The waiting thread.
    pub pid: u32,
    /// See `pid`.
    pub tid: u32,
    /// When the wake came (CLOCK_MONOTONIC ns).
    pub wake_ns: u64,
    /// Where it waited (empty: not known).
    pub waiter: &'a [String],
    /// Where the wake came from (empty: not known).
    pub waker: &'a [String],
    /// The thread that woke it (process, thread; process 0: no thread woke it, though
    /// its stack may be unknown when one did).
    pub waker_thread: (u32, u32),
}

/// One point of the trace at which sinks are shown the state.
pub struct Moment<'a> {
    /// Time traced so far, ns.
    pub elapsed_ns: u64,
    /// Facts about the run.
    pub run: &'a RunInfo,
    /// The model's views.
    pub snapshot: &'a Snapshot<'a>,
}

/// An output of the engine.
pub trait Sink {
    /// What it writes, for messages ("the report", "the JSON").
    fn name(&self) -> String;

    /// Whether it wants every decoded event (the engine skips the calls otherwise).
    fn wants_events(&self) -> bool {
        false
    }

    /// A decoded event, in the order read, after the model took it in. Must be quick:
    /// it runs on the event path. `names` names objects from the mappings already
    /// known ([`ObjectNamer::name_known`]: no /proc read here).
    fn event(&mut self, _event: &Event, _names: &mut ObjectNamer) {}

    /// The call stacks of a woken wait, unwound and named (only to sinks that want
    /// events; it comes before or after the wait's own record).
    fn stacks(&mut self, _stacks: &WaitStacks) {}

    /// The functions timed (`--func`), by index, whenever the table grows: timed-call
    /// records name them by index.
    fn functions(&mut self, _functions: &[crate::analyses::functions::TimedFunction]) {}

    /// Whether it wants a snapshot at each interval (the engine builds one only when a
    /// sink or a watcher of the summary wants it).
    fn wants_intervals(&self) -> bool {
        false
    }

    /// The state at an interval. An error stops this sink's intervals (the trace and
    /// the other sinks go on) and is the run's error at the end.
    fn interval(&mut self, _at: &Moment) -> Result<(), DestError> {
        Ok(())
    }

    /// The final state, once. Every sink is called even if another failed.
    fn finish(&mut self, at: &Moment) -> Result<(), DestError>;
}
