//! Writing TrackEvent packets: slices, instants and counter values with their names,
//! flows, correlation ids and annotations.

use super::{names::Name, packet, proto::Writer};

pub(super) type Map<K, V> = foldhash::HashMap<K, V>;

/// TrackEvent.Type.
pub const SLICE_BEGIN: u64 = 1;
pub const SLICE_END: u64 = 2;
pub const INSTANT: u64 = 3;
pub const COUNTER: u64 = 4;

/// A debug annotation's value.
#[derive(Clone, Copy)]
pub enum Arg<'a> {
    Int(i64),
    Str(&'a str),
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
    pub args: &'a [(&'a str, Arg<'a>)],
    pub value: Option<f64>,
}

/// Writes a TrackEvent packet at `ts` on `track`.
pub fn track_event(w: &mut Writer, ts: u64, track: u64, ev: &Ev) {
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
