//! Call stacks on the timeline as Perfetto's interned callstacks: each function name,
//! source file, frame and stack is written once per trace (InternedData), and an event
//! carries its stack's id (`TrackEvent.callstack_iid`), which Perfetto's UI shows as
//! the event's stack and as a flame graph of a selection. A wait's stacks were two
//! strings of every frame, repeated in each wait (~830 bytes a wait).

use super::{names::NEEDS_STATE, packet, proto::Writer, write::Map};

/// Frames and stacks interned; past either bound a stack goes unwritten (counted).
const MAX_FRAMES: usize = 262_144;
const MAX_STACKS: usize = 262_144;
/// TracePacket.interned_data and sequence_flags; InternedData's fields.
const INTERNED_DATA: u32 = 12;
const SEQUENCE_FLAGS: u32 = 13;
const FUNCTION_NAMES: u32 = 5;
const FRAMES: u32 = 6;
const CALLSTACKS: u32 = 7;
const MAPPING_PATHS: u32 = 17;
const SOURCE_PATHS: u32 = 18;
const MAPPINGS: u32 = 19;
/// The one mapping every frame names: frames arrive symbolized, their files unknown.
const MAPPING: u64 = 1;

/// What a frame's text says: `function+0xOFF (file:line) [inlined: ...]`, or a file
/// and offset (`app+0x1234`, a stripped file), or an address.
#[derive(Debug, PartialEq, Eq)]
pub struct FrameText<'a> {
    /// The function (without its offset when a source line names where in it), or the
    /// text's first word.
    pub function: &'a str,
    pub offset: Option<u64>,
    pub source: Option<(&'a str, u32)>,
}

/// Splits a frame's text (see [`FrameText`]).
pub fn parse(text: &str) -> FrameText<'_> {
    let (head, rest) = text.split_once(' ').unwrap_or((text, ""));
    let source = rest
        .strip_prefix('(')
        .and_then(|r| r.split_once(')'))
        .and_then(|(loc, _)| loc.rsplit_once(':'))
        .and_then(|(file, line)| Some((file, line.parse().ok()?)));
    let (function, offset) = match head.rsplit_once("+0x") {
        Some((f, off)) if !f.is_empty() => match u64::from_str_radix(off, 16) {
            Ok(o) if source.is_some() => (f, Some(o)),
            Ok(o) => (head, Some(o)),
            Err(_) => (head, None),
        },
        _ => (head, None),
    };
    FrameText {
        function,
        offset,
        source,
    }
}

/// The stacks given ids so far.
#[derive(Default)]
pub struct Callstacks {
    functions: Map<Box<str>, u64>,
    sources: Map<Box<str>, u64>,
    frames: Map<Box<str>, u64>,
    stacks: Map<Vec<u64>, u64>,
    /// Stacks left out past the bounds.
    pub left_out: u64,
}

impl Callstacks {
    /// The id of the stack `frames` (innermost first), written into `w` (as a packet of
    /// interned data, before the event that uses it) when new. None when empty or past
    /// the bounds.
    pub fn intern(&mut self, w: &mut Writer, frames: &[String]) -> Option<u64> {
        if frames.is_empty() {
            return None;
        }
        if self.stacks.len() >= MAX_STACKS || self.frames.len() + frames.len() > MAX_FRAMES {
            // A known stack still has its id.
            let ids: Option<Vec<u64>> = frames
                .iter()
                .rev()
                .map(|f| self.frames.get(f.as_str()).copied())
                .collect();
            let found = ids.and_then(|ids| self.stacks.get(&ids).copied());
            if found.is_none() {
                self.left_out += 1;
            }
            return found;
        }
        let mut started = false;
        let mut start = |w: &mut Writer| {
            if !started {
                started = true;
                packet::start(w, None);
                w.uint(SEQUENCE_FLAGS, NEEDS_STATE);
                w.begin(INTERNED_DATA);
            }
        };
        if self.frames.is_empty() && self.stacks.is_empty() {
            start(w);
            w.begin(MAPPING_PATHS)
                .uint(1, MAPPING)
                .str(2, "symbolized by rtm-trace")
                .end();
            w.begin(MAPPINGS).uint(1, MAPPING).uint(7, MAPPING).end();
        }
        // Perfetto's callstacks list the outermost frame first.
        let mut ids = Vec::with_capacity(frames.len());
        for text in frames.iter().rev() {
            if let Some(&id) = self.frames.get(text.as_str()) {
                ids.push(id);
                continue;
            }
            start(w);
            let f = parse(text);
            let function = intern_string(&mut self.functions, w, FUNCTION_NAMES, f.function);
            let source = f.source.map(|(file, line)| {
                (
                    intern_string(&mut self.sources, w, SOURCE_PATHS, file),
                    line,
                )
            });
            let id = self.frames.len() as u64 + 1;
            w.begin(FRAMES)
                .uint(1, id)
                .uint(2, function)
                .uint(3, MAPPING);
            if let Some(off) = f.offset {
                w.uint(4, off);
            }
            if let Some((file, line)) = source {
                w.uint(5, file).uint(6, u64::from(line));
            }
            w.end();
            self.frames.insert(text.as_str().into(), id);
            ids.push(id);
        }
        if let Some(&id) = self.stacks.get(&ids) {
            if started {
                w.end();
                packet::done(w);
            }
            return Some(id);
        }
        start(w);
        let id = self.stacks.len() as u64 + 1;
        w.begin(CALLSTACKS).uint(1, id);
        for f in &ids {
            w.uint(2, *f);
        }
        w.end();
        w.end();
        packet::done(w);
        self.stacks.insert(ids, id);
        Some(id)
    }
}

/// The id of string `s` in table `field` (a new entry written into the open
/// InternedData when new).
fn intern_string(table: &mut Map<Box<str>, u64>, w: &mut Writer, field: u32, s: &str) -> u64 {
    if let Some(&id) = table.get(s) {
        return id;
    }
    let id = table.len() as u64 + 1;
    w.begin(field).uint(1, id).str(2, s).end();
    table.insert(s.into(), id);
    id
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output::timeline::proto::{Value, fields};

    #[test]
    fn a_frame_text_splits_into_function_offset_and_line() {
        assert_eq!(
            parse("worker+0x2c (many_locks.c:35) [inlined: f (x.h:3)]"),
            FrameText {
                function: "worker",
                offset: Some(0x2c),
                source: Some(("many_locks.c", 35)),
            }
        );
        // A stripped file's offset stays in its name: it is all that tells frames apart.
        assert_eq!(
            parse("memcached+0x13061"),
            FrameText {
                function: "memcached+0x13061",
                offset: Some(0x13061),
                source: None,
            }
        );
        assert_eq!(parse("0x7f00").function, "0x7f00");
        assert_eq!(parse("a+b (c)").source, None);
    }

    /// The InternedData of the one packet in `w`: (field, message) pairs.
    fn interned(w: &Writer) -> Vec<(u32, Vec<(u32, u64)>)> {
        let Value::Bytes(p) = fields(w.bytes())[0].1 else {
            panic!()
        };
        let (_, Value::Bytes(data)) = fields(p)
            .into_iter()
            .find(|(f, _)| *f == INTERNED_DATA)
            .unwrap()
        else {
            panic!()
        };
        fields(data)
            .into_iter()
            .map(|(f, v)| {
                let Value::Bytes(m) = v else { panic!() };
                let ints = fields(m)
                    .into_iter()
                    .filter_map(|(k, v)| match v {
                        Value::Varint(n) => Some((k, n)),
                        _ => None,
                    })
                    .collect();
                (f, ints)
            })
            .collect()
    }

    #[test]
    fn each_frame_and_stack_is_written_once() {
        let mut c = Callstacks::default();
        let stack = |v: &[&str]| v.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        let a = stack(&["lock_wait+0x2b (lll.c:49)", "worker+0x10 (w.c:35)", "start"]);
        let mut w = Writer::default();
        assert_eq!(c.intern(&mut w, &a), Some(1));
        let got = interned(&w);
        let stacks: Vec<_> = got.iter().filter(|(f, _)| *f == CALLSTACKS).collect();
        assert_eq!(stacks.len(), 1);
        // Outermost first: start (frame 1), worker (2), lock_wait (3).
        assert_eq!(stacks[0].1, vec![(1, 1), (2, 1), (2, 2), (2, 3)]);
        assert_eq!(got.iter().filter(|(f, _)| *f == FRAMES).count(), 3);
        assert_eq!(got.iter().filter(|(f, _)| *f == MAPPINGS).count(), 1);
        // The same stack again: its id, nothing written.
        let mut w = Writer::default();
        assert_eq!(c.intern(&mut w, &a), Some(1));
        assert!(w.bytes().is_empty());
        // Another stack sharing two frames: one new frame, one new stack.
        let b = stack(&["other+0x5 (o.c:7)", "worker+0x10 (w.c:35)", "start"]);
        let mut w = Writer::default();
        assert_eq!(c.intern(&mut w, &b), Some(2));
        let got = interned(&w);
        assert_eq!(got.iter().filter(|(f, _)| *f == FRAMES).count(), 1);
        assert_eq!(got.iter().filter(|(f, _)| *f == MAPPINGS).count(), 0);
        assert_eq!(c.intern(&mut Writer::default(), &[]), None);
    }
}
