//! What the timeline remembers between events, and what an event is written with.

use super::{
    messages::Messages,
    names::{Names, Obj},
    proto::Writer,
    tracks::Tracks,
    write::Map,
};

/// A lock held since `since`.
pub struct Hold {
    pub object: u64,
    pub since: u64,
    pub obj: Obj,
}

/// A pthread_mutex_lock seen at its entry only (full mode): its thread's next event
/// settles it (a futex wait on its word is part of it; anything else means it returned,
/// holding the lock).
pub struct Pending {
    pub object: u64,
    pub start: u64,
    pub acquired: u64,
    pub obj: Obj,
}

/// What the timeline remembers between events.
#[derive(Default)]
pub struct State {
    /// Each thread's lock call seen at entry only.
    pub(super) pending: Map<(u32, u32), Pending>,
    /// Flow ids given so far.
    pub(super) flows: u64,
    /// Each thread's holds, oldest first.
    pub(super) holds: Map<(u32, u32), Vec<Hold>>,
    /// Collectives called so far on each communicator, per process.
    pub(super) collectives: Map<(u32, u32), u64>,
    /// MPI messages' ends not matched yet.
    pub messages: Messages,
    /// Barriers numbered, per process, and each thread's waits on each so far: the
    /// k-th wait of every thread on a barrier is its round k.
    pub(super) barriers: Map<(u32, u64), u32>,
    pub(super) barrier_waits: Map<(u32, u64), u32>,
    /// The timed functions' names, by index (`--func`).
    pub(super) functions: Vec<Box<str>>,
    /// Call stacks given ids.
    pub(super) callstacks: super::callstacks::Callstacks,
}

/// What an event is written with.
pub struct Ctx<'a> {
    pub w: &'a mut Writer,
    pub tracks: &'a mut Tracks,
    pub state: &'a mut State,
    pub names: &'a mut Names,
}
