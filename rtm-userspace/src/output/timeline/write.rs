//! Writing TrackEvent packets: slices, instants and counter values with their names,
//! flows, correlation ids and annotations.

use super::{names::Name, packet, proto::Writer};

pub(super) type Map<K, V> = foldhash::HashMap<K, V>;

/// TrackEvent.Type.
pub const SLICE_BEGIN: u64 = 1;
pub const SLICE_END: u64 = 2;
pub const INSTANT: u64 = 3;
pub const COUNTER: u64 = 4;

/// InternedData's tables of annotation names and of string values.
const ANNOTATION_NAMES: u32 = 3;
const STRING_VALUES: u32 = 29;
/// An event's annotations whose names are interned; more are written out.
const MAX_ARGS: usize = 8;

/// A debug annotation's value.
#[derive(Clone, Copy)]
pub enum Arg<'a> {
    Int(i64),
    /// A text made for this event.
    Str(&'a str),
    /// One of a few texts: interned, written once per trace.
    Fixed(&'static str),
}

/// An event's name as written.
#[derive(Clone, Copy)]
pub enum NameRef<'a> {
    Iid(u64),
    Str(&'a str),
}

impl<'a> From<&'a Name> for NameRef<'a> {
    fn from(n: &'a Name) -> Self {
        match n {
            Name::Iid(i) => NameRef::Iid(*i),
            Name::Text(t) => NameRef::Str(t),
        }
    }
}

/// One TrackEvent.
#[derive(Default)]
pub struct Ev<'a> {
    pub ty: u64,
    pub name: Option<NameRef<'a>>,
    pub flow: Option<u64>,
    pub terminating_flow: Option<u64>,
    pub correlation: Option<u64>,
    pub args: &'a [(&'static str, Arg<'a>)],
    pub value: Option<f64>,
    /// An interned callstack (TrackEvent.callstack_iid).
    pub callstack: Option<u64>,
}

/// The id of `s` in interned table `table`, its definition written (as a packet of its
/// own) when new.
fn intern(w: &mut Writer, table: u32, s: &'static str) -> u64 {
    let (id, new) = w.string_id(table, s);
    if new {
        packet::start(w, None);
        w.uint(13, super::names::NEEDS_STATE);
        w.begin(12).begin(table).uint(1, id).str(2, s).end().end();
        packet::done(w);
    }
    id
}

/// Writes a TrackEvent packet at `ts` on `track`.
pub fn track_event(w: &mut Writer, ts: u64, track: u64, ev: &Ev) {
    // Annotation names (and fixed values) as ids, defined before the event.
    let mut ids = [(0u64, 0u64); MAX_ARGS];
    for ((name, arg), id) in ev.args.iter().zip(ids.iter_mut()) {
        id.0 = intern(w, ANNOTATION_NAMES, name);
        if let Arg::Fixed(v) = arg {
            id.1 = intern(w, STRING_VALUES, v);
        }
    }
    packet::start(w, Some(ts));
    w.begin(packet::TRACK_EVENT).uint(9, ev.ty).uint(11, track);
    match ev.name {
        Some(NameRef::Iid(i)) => {
            w.uint(10, i);
        }
        Some(NameRef::Str(s)) => {
            w.str(23, s);
        }
        None => {}
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
    if let Some(c) = ev.callstack {
        w.uint(56, c);
    }
    for (i, (name, arg)) in ev.args.iter().enumerate() {
        w.begin(4);
        match ids.get(i) {
            Some(&(name_id, _)) => w.uint(1, name_id),
            None => w.str(10, name),
        };
        match (arg, ids.get(i)) {
            (Arg::Int(i), _) => w.int(4, *i),
            (Arg::Str(s), _) => w.str(6, s),
            (Arg::Fixed(_), Some(&(_, value_id))) => w.uint(17, value_id),
            (Arg::Fixed(s), None) => w.str(6, s),
        };
        w.end();
    }
    w.end();
    packet::done(w);
}

/// A slice from `begin` to `end` on `track`.
pub fn slice(w: &mut Writer, track: u64, begin: u64, end: u64, ev: Ev) {
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
