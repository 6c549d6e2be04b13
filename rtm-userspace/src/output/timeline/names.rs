//! Names on the timeline: objects named once each (their symbol, or kind and address),
//! and event names ("wait counter_lock", "hold counter_lock", "MPI_Send") interned in
//! the trace (Perfetto's InternedData), so an event carries a small id, not its text.

use rtm_common::Primitive;

use super::{packet, proto::Writer};
use crate::symbolize::objects::ObjectNamer;

type Map<K, V> = foldhash::HashMap<K, V>;

/// Objects whose names are kept; others are named by kind and address each time.
const MAX_OBJECTS: usize = 65_536;
/// Event names interned; past it, names are written out in each event.
const MAX_INTERNED: usize = 262_144;
/// TracePacket.interned_data, InternedData.event_names, sequence_flags.
const INTERNED_DATA: u32 = 12;
const EVENT_NAMES: u32 = 2;
const SEQUENCE_FLAGS: u32 = 13;
/// SEQ_NEEDS_INCREMENTAL_STATE: the packet uses interned data.
pub const NEEDS_STATE: u64 = 2;

/// An object, as named.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Obj {
    /// Its name is kept: `Names::text`.
    Kept(u32),
    /// Past the bound: named by kind and address.
    Unkept(Primitive, u64),
}

/// An event's name: interned, or written out.
pub enum Name {
    /// InternedData.event_names iid.
    Iid(u64),
    /// The text.
    Text(String),
}

/// The names given so far.
#[derive(Default)]
pub struct Names {
    objects: Map<(u32, u64), u32>,
    texts: Vec<Box<str>>,
    interned: Map<(usize, u32), u64>,
}

/// A key for a name made of a static prefix and a number.
fn key(prefix: &'static str, n: u32) -> (usize, u32) {
    (prefix.as_ptr() as usize, n)
}

impl Names {
    /// The object at `addr` in `pid`.
    pub fn object(&mut self, namer: &mut ObjectNamer, pid: u32, addr: u64, kind: Primitive) -> Obj {
        if let Some(&i) = self.objects.get(&(pid, addr)) {
            return Obj::Kept(i);
        }
        if self.texts.len() >= MAX_OBJECTS {
            return Obj::Unkept(kind, addr);
        }
        let name = namer
            .name_known(pid, addr, kind)
            .unwrap_or_else(|| format!("{kind} {addr:#x}"));
        let i = self.texts.len() as u32;
        self.texts.push(name.into());
        self.objects.insert((pid, addr), i);
        Obj::Kept(i)
    }

    /// The object at `addr` in `pid`, named `name` by what its event says it is (a
    /// thread its creation names, the exit a join waits for) rather than by symbol or
    /// address, as the report names it; an object at the address named otherwise before
    /// (memory reused) keeps its own name, and events from here on get this one.
    pub fn object_named(&mut self, pid: u32, addr: u64, kind: Primitive, name: String) -> Obj {
        if let Some(&i) = self.objects.get(&(pid, addr))
            && *self.texts[i as usize] == *name
        {
            return Obj::Kept(i);
        }
        if self.texts.len() >= MAX_OBJECTS {
            return Obj::Unkept(kind, addr);
        }
        let i = self.texts.len() as u32;
        self.texts.push(name.into());
        self.objects.insert((pid, addr), i);
        Obj::Kept(i)
    }

    /// An object's name.
    pub fn text(&self, o: Obj) -> std::borrow::Cow<'_, str> {
        match o {
            Obj::Kept(i) => self.texts[i as usize].as_ref().into(),
            Obj::Unkept(kind, addr) => format!("{kind} {addr:#x}").into(),
        }
    }

    /// The name "`prefix` `object`", interned (its definition written into `w` first,
    /// as a packet of its own, when new).
    pub fn of(&mut self, w: &mut Writer, prefix: &'static str, o: Obj) -> Name {
        match o {
            Obj::Kept(i) => self.intern(w, key(prefix, i), |n| {
                format!("{prefix} {}", n.texts[i as usize])
            }),
            Obj::Unkept(..) => Name::Text(format!("{prefix} {}", self.text(o))),
        }
    }

    /// A name that is the same in every event of its kind (`text`), or one of a family
    /// (`family`, numbered `n`: an MPI operation), interned.
    pub fn fixed(
        &mut self,
        w: &mut Writer,
        family: &'static str,
        n: u32,
        text: impl FnOnce() -> String,
    ) -> Name {
        self.intern(w, key(family, n), |_| text())
    }

    fn intern(
        &mut self,
        w: &mut Writer,
        key: (usize, u32),
        text: impl FnOnce(&Self) -> String,
    ) -> Name {
        if let Some(&iid) = self.interned.get(&key) {
            return Name::Iid(iid);
        }
        let t = text(self);
        if self.interned.len() >= MAX_INTERNED {
            return Name::Text(t);
        }
        let iid = self.interned.len() as u64 + 1;
        self.interned.insert(key, iid);
        packet::start(w, None);
        w.uint(SEQUENCE_FLAGS, NEEDS_STATE);
        w.begin(INTERNED_DATA).begin(EVENT_NAMES);
        w.uint(1, iid).str(2, &t);
        w.end().end();
        packet::done(w);
        Name::Iid(iid)
    }
}
