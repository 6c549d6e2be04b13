//! Names on the timeline: objects named once each (their symbol, or kind and address),
//! and event names ("wait counter_lock", "hold counter_lock", "MPI_Send") interned in
//! the trace (Perfetto's InternedData), so an event carries a small id, not its text.
//!
//! A word on the heap is named in the report by the code that waits on it, known only
//! when the stacks are read at the end. Written to a file, such an object's event names
//! are given a fixed-size slot (padded with a field EventName does not define), which
//! [`Names::renamed`] rewrites in place at the end with the name every other output
//! gives it.

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
/// The size of an EventName written to be renamed later, and the field its padding
/// goes in (EventName defines 1 and 2).
const SLOT: usize = 192;
const PADDING: u32 = 15;

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

/// An event name written in a slot, to be renamed at the end.
#[derive(Debug, Clone, Copy)]
pub struct Slot {
    /// Where its packet starts: in the writer's buffer until written, then in the file.
    pub at: u64,
    iid: u64,
    prefix: &'static str,
    obj: u32,
}

impl Slot {
    /// The slot with its packet `by` bytes further on.
    pub fn moved(self, by: u64) -> Self {
        Self {
            at: self.at + by,
            ..self
        }
    }
}

/// The names given so far.
#[derive(Default)]
pub struct Names {
    objects: Map<(u32, u64), u32>,
    texts: Vec<Box<str>>,
    interned: Map<(usize, u32), u64>,
    /// Whether names can be rewritten at the end (the trace goes to a file).
    pub renamable: bool,
    /// Objects named by kind and address for now: what they are.
    provisional: Map<u32, (u32, u64, Primitive)>,
    /// Slots in the writer's buffer, not yet written.
    pub pending: Vec<Slot>,
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
        let i = self.texts.len() as u32;
        let name = namer.name_known(pid, addr, kind).unwrap_or_else(|| {
            if self.renamable {
                self.provisional.insert(i, (pid, addr, kind));
            }
            format!("{kind} {addr:#x}")
        });
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

    /// The slots whose object `name_of` names otherwise now, each with its packet
    /// rewritten to the same size (`name_of`: an object's name from its process,
    /// address and kind).
    pub fn renamed<'s>(
        &self,
        slots: &'s [Slot],
        name_of: &mut dyn FnMut(u32, u64, Primitive) -> Option<String>,
    ) -> Vec<(&'s Slot, Vec<u8>)> {
        let mut out = Vec::new();
        for slot in slots {
            let Some(&(pid, addr, kind)) = self.provisional.get(&slot.obj) else {
                continue;
            };
            let Some(name) = name_of(pid, addr, kind) else {
                continue;
            };
            if *name == *self.texts[slot.obj as usize] {
                continue;
            }
            let mut w = Writer::default();
            slot_packet(&mut w, slot.iid, &format!("{} {name}", slot.prefix));
            out.push((slot, w.bytes().to_vec()));
        }
        out
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
            Obj::Kept(i) if self.provisional.contains_key(&i) => {
                let key = key(prefix, i);
                if let Some(&iid) = self.interned.get(&key) {
                    return Name::Iid(iid);
                }
                let text = format!("{prefix} {}", self.texts[i as usize]);
                if self.interned.len() >= MAX_INTERNED {
                    return Name::Text(text);
                }
                let iid = self.interned.len() as u64 + 1;
                self.interned.insert(key, iid);
                self.pending.push(Slot {
                    at: w.bytes().len() as u64,
                    iid,
                    prefix,
                    obj: i,
                });
                slot_packet(w, iid, &text);
                Name::Iid(iid)
            }
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
        interned_packet(w, |w| {
            w.uint(1, iid).str(2, &t);
        });
        Name::Iid(iid)
    }
}

/// A packet of interned data defining one event name, `body` writing the EventName.
fn interned_packet(w: &mut Writer, body: impl FnOnce(&mut Writer)) {
    packet::start(w, None);
    w.uint(SEQUENCE_FLAGS, NEEDS_STATE);
    w.begin(INTERNED_DATA).begin(EVENT_NAMES);
    body(w);
    w.end().end();
    packet::done(w);
}

/// The packet defining event name `iid` as `text` (cut to fit), its EventName padded
/// to [`SLOT`] bytes: the same size whatever the text, so it can be rewritten in place.
fn slot_packet(w: &mut Writer, iid: u64, text: &str) {
    /// The size of one padding field of `room` bytes in all (its tag, its length, its
    /// bytes), if one can be exactly that size.
    fn one(room: usize) -> Option<usize> {
        (1..=2).find_map(|n| {
            let p = room.checked_sub(1 + n)?;
            (Writer::varint_len(p as u64) == n).then_some(p)
        })
    }
    let mut t = text;
    let pads = loop {
        let used = 1 + Writer::varint_len(iid) + 1 + Writer::varint_len(t.len() as u64) + t.len();
        // The padding takes the room left: one field, or where no one field is exactly
        // that size (130 bytes), an empty one and the rest.
        let fits = SLOT.checked_sub(used).and_then(|room| match one(room) {
            Some(p) => Some([Some(p), None]),
            None => one(room.checked_sub(2)?).map(|p| [Some(0), Some(p)]),
        });
        if let Some(p) = fits {
            break p;
        }
        let mut end = t.len() - 1;
        while !t.is_char_boundary(end) {
            end -= 1;
        }
        t = &t[..end];
    };
    interned_packet(w, |w| {
        w.uint(1, iid).str(2, t);
        for p in pads.into_iter().flatten() {
            w.zeros(PADDING, p);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output::timeline::proto::{Value, fields};

    /// The EventName inside a packet written by [`slot_packet`] or [`Names::intern`].
    fn event_name(packet: &[u8]) -> (u64, String) {
        let Value::Bytes(p) = fields(packet)[0].1 else {
            panic!("no packet")
        };
        let (_, Value::Bytes(data)) = fields(p)
            .into_iter()
            .find(|(f, _)| *f == INTERNED_DATA)
            .unwrap()
        else {
            panic!("no interned data")
        };
        let Value::Bytes(name) = fields(data)[0].1 else {
            panic!("no event name")
        };
        assert_eq!(name.len(), SLOT, "the slot's size");
        let f = fields(name);
        let (Value::Varint(iid), Value::Bytes(text)) = (&f[0].1, &f[1].1) else {
            panic!("{f:?}")
        };
        (*iid, String::from_utf8(text.to_vec()).unwrap())
    }

    #[test]
    fn a_slot_has_one_size_whatever_the_text() {
        let mut sizes = std::collections::HashSet::new();
        for n in 0..400 {
            let text = "é".repeat(n / 2) + &"x".repeat(n % 2);
            let mut w = Writer::default();
            slot_packet(&mut w, 70_000, &text);
            sizes.insert(w.bytes().len());
            let (iid, got) = event_name(w.bytes());
            assert_eq!(iid, 70_000);
            assert!(text.starts_with(&got), "{got} is a cut of {text}");
            if text.len() < SLOT - 12 {
                assert_eq!(got, text);
            }
        }
        assert_eq!(sizes.len(), 1, "{sizes:?}");
    }

    #[test]
    fn a_heap_word_named_by_address_is_renamed_in_place() {
        let mut names = Names {
            renamable: true,
            ..Names::default()
        };
        let mut namer = ObjectNamer::default();
        let mut w = Writer::default();
        w.uint(1, 1);
        let o = names.object(&mut namer, 7, 0x5000, Primitive::Futex);
        let Name::Iid(iid) = names.of(&mut w, "wait", o) else {
            panic!("not interned")
        };
        // The same name again is the same id, and no second slot.
        assert!(matches!(names.of(&mut w, "wait", o), Name::Iid(i) if i == iid));
        let slots: Vec<Slot> = names.pending.drain(..).collect();
        assert_eq!(slots.len(), 1);
        let at = slots[0].at as usize;
        assert_eq!(at, 2);
        let (_, before) = event_name(&w.bytes()[at..]);
        assert_eq!(before, "wait futex 0x5000");
        let renamed = names.renamed(&slots, &mut |pid, addr, kind| {
            assert_eq!((pid, addr, kind), (7, 0x5000, Primitive::Futex));
            Some("in worker (many_locks.c:35) #3".to_owned())
        });
        assert_eq!(renamed.len(), 1);
        let bytes = &renamed[0].1;
        assert_eq!(
            bytes.len(),
            w.bytes().len() - at,
            "rewritten to the same size"
        );
        assert_eq!(
            event_name(bytes),
            (iid, "wait in worker (many_locks.c:35) #3".to_owned())
        );
        // A name unchanged, or none, leaves the slot alone.
        assert!(names.renamed(&slots, &mut |_, _, _| None).is_empty());
        assert!(
            names
                .renamed(&slots, &mut |_, _, _| Some("futex 0x5000".to_owned()))
                .is_empty()
        );
    }

    #[test]
    fn a_stream_that_cannot_be_rewritten_gets_no_slots() {
        let mut names = Names::default();
        let mut namer = ObjectNamer::default();
        let mut w = Writer::default();
        let o = names.object(&mut namer, 7, 0x5000, Primitive::Futex);
        names.of(&mut w, "wait", o);
        assert!(names.pending.is_empty());
        assert!(w.bytes().len() < SLOT, "an ordinary interned name");
    }
}
