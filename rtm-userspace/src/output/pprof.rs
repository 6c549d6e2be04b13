//! `--pprof FILE`: the contended waits' call stacks as a gzip-compressed pprof profile
//! (github.com/google/pprof, proto/profile.proto), like Go's mutex and block profiles:
//! sample types `contentions`/`count` and `delay`/`nanoseconds`, one sample per stack
//! row with the waiter's stack as its locations (innermost first) and the lock's name,
//! its wait kind and the code that woke it as labels. `go tool pprof`, Parca and
//! Pyroscope read it.
//!
//! Its size is bounded: it is built from the snapshot's stacks view, at most
//! [`crate::model::stacks::MAX_STACK_ROWS`] rows (the rest in one `[other_stacks]`
//! sample), each a capped stack, so a profile is at most a few MiB before compression.

use std::collections::HashMap;

use super::{
    dest::{Dest, DestError},
    proto::Writer,
    sink::{Moment, Sink},
    text::Shown,
};
use crate::{
    config::TraceConfig,
    model::{
        stacks::{StacksView, user_frame},
        wait_kind::WaitKind,
    },
};

/// Fields of profile.proto's messages.
mod field {
    pub const SAMPLE_TYPE: u32 = 1;
    pub const SAMPLE: u32 = 2;
    pub const MAPPING: u32 = 3;
    pub const LOCATION: u32 = 4;
    pub const FUNCTION: u32 = 5;
    pub const STRING_TABLE: u32 = 6;
    pub const TIME_NANOS: u32 = 9;
    pub const DURATION_NANOS: u32 = 10;
    pub const PERIOD_TYPE: u32 = 11;
    pub const PERIOD: u32 = 12;
    pub const DEFAULT_SAMPLE_TYPE: u32 = 14;
}

/// A frame as [`StacksView::build`] names it, `func+0xOFF (file.c:LINE)`, split into the
/// function, the file and the line (0: not known).
fn parse_frame(frame: &str) -> (&str, &str, i64) {
    let (head, file, line) = match frame.rsplit_once(" (") {
        Some((head, rest)) if rest.ends_with(')') => {
            let inner = &rest[..rest.len() - 1];
            match inner.rsplit_once(':') {
                Some((file, line)) if line.parse::<i64>().is_ok() => {
                    (head, file, line.parse().unwrap_or(0))
                }
                _ => (frame, "", 0),
            }
        }
        _ => (frame, "", 0),
    };
    let func = match head.rsplit_once('+') {
        Some((f, off)) if off.starts_with("0x") && !f.is_empty() => f,
        _ => head,
    };
    (func, file, line)
}

/// The profile's tables as they are filled: strings, functions and locations, each
/// given its id the first time it is met.
#[derive(Default)]
struct Tables {
    strings: Vec<String>,
    string_ids: HashMap<String, i64>,
    /// (name, file) -> function id.
    functions: Vec<(i64, i64)>,
    function_ids: HashMap<(i64, i64), u64>,
    /// (function id, line) per location.
    locations: Vec<(u64, i64)>,
    location_ids: HashMap<String, u64>,
}

impl Tables {
    fn new() -> Self {
        let mut t = Self::default();
        t.string("");
        t
    }

    fn string(&mut self, s: &str) -> i64 {
        if let Some(&id) = self.string_ids.get(s) {
            return id;
        }
        let id = self.strings.len() as i64;
        self.strings.push(s.to_owned());
        self.string_ids.insert(s.to_owned(), id);
        id
    }

    fn location(&mut self, frame: &str) -> u64 {
        if let Some(&id) = self.location_ids.get(frame) {
            return id;
        }
        let (func, file, line) = parse_frame(frame);
        let key = (self.string(func), self.string(file));
        let next = self.functions.len() as u64 + 1;
        let function = *self.function_ids.entry(key).or_insert(next);
        if function == next {
            self.functions.push(key);
        }
        self.locations.push((function, line));
        let id = self.locations.len() as u64;
        self.location_ids.insert(frame.to_owned(), id);
        id
    }
}

/// Whose stack a profile's samples are located at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keyed {
    /// The waiter's, where it waited (Go's block profile); the waker's first own frame
    /// is the label `woken_by`.
    Waiter,
    /// The waker's, where it ended the wait (for a mutex: its unlock, as Go's mutex
    /// profile puts delay at the unlock); the waiter's first own frame is the label
    /// `waited_in`.
    Waker,
}

/// The profile of `view` (not compressed), located at `keyed`'s stacks; `kind_of(pid, word)`: what the snapshot says
/// a word's waits are for; `start_ns`/`duration_ns`: the run's wall-clock start and
/// length.
pub fn encode(
    view: &StacksView,
    keyed: Keyed,
    kind_of: &dyn Fn(u32, u64) -> WaitKind,
    start_ns: u64,
    duration_ns: u64,
) -> Vec<u8> {
    let mut t = Tables::new();
    let mut w = Writer::default();
    for (ty, unit) in [("contentions", "count"), ("delay", "nanoseconds")] {
        let (ty, unit) = (t.string(ty), t.string(unit));
        w.begin(field::SAMPLE_TYPE).int(1, ty).int(2, unit).end();
    }
    let (lock, kind_key) = (t.string("lock"), t.string("kind"));
    let other_side = t.string(match keyed {
        Keyed::Waiter => "woken_by",
        Keyed::Waker => "waited_in",
    });
    for r in &view.rows {
        let word = r
            .object_name
            .clone()
            .unwrap_or_else(|| format!("{:#x}", r.object));
        let kind = WaitKind::of_frames(r.waiter.iter().map(String::as_str))
            .unwrap_or_else(|| kind_of(r.pid, r.object));
        let waker = if r.waker_pid == 0 {
            Some("[no_waker]".to_owned())
        } else {
            user_frame(&r.waker, &[]).or_else(|| r.waker.first().cloned())
        };
        let (stack, missing, other) = match keyed {
            Keyed::Waiter => (&r.waiter, "[waiter_stack_not_known]", waker),
            Keyed::Waker => (
                &r.waker,
                if r.waker_pid == 0 {
                    "[no_waker]"
                } else {
                    "[waker_stack_not_known]"
                },
                user_frame(&r.waiter, &[]).or_else(|| r.waiter.first().cloned()),
            ),
        };
        let locations: Vec<u64> = if stack.is_empty() {
            vec![t.location(missing)]
        } else {
            super::folded::to_last_named(stack)
                .iter()
                .map(|f| t.location(f))
                .collect()
        };
        let labels = [
            Some((lock, t.string(&word))),
            Some((kind_key, t.string(kind.name()))),
            other.map(|f| (other_side, t.string(&f))),
        ];
        w.begin(field::SAMPLE);
        for l in locations {
            w.uint(1, l);
        }
        w.int(2, r.edge.waits as i64).int(2, r.edge.wait_ns as i64);
        for (k, v) in labels.into_iter().flatten() {
            w.begin(3).int(1, k).int(2, v).end();
        }
        w.end();
    }
    if view.other_wait_ns > 0 || view.other_waits > 0 {
        let l = t.location("[other_stacks]");
        w.begin(field::SAMPLE).uint(1, l);
        w.int(2, view.other_waits as i64)
            .int(2, view.other_wait_ns as i64);
        w.end();
    }
    // One mapping that says every location is symbolized already (pprof then does not
    // look for the binaries).
    let name = t.string("rtm-trace");
    w.begin(field::MAPPING)
        .uint(1, 1)
        .int(5, name)
        .uint(7, 1)
        .uint(8, 1)
        .uint(9, 1)
        .end();
    for (i, &(function, line)) in t.locations.iter().enumerate() {
        w.begin(field::LOCATION).uint(1, i as u64 + 1).uint(2, 1);
        w.begin(4).uint(1, function).int(2, line).end();
        w.end();
    }
    for (i, &(name, file)) in t.functions.iter().enumerate() {
        w.begin(field::FUNCTION)
            .uint(1, i as u64 + 1)
            .int(2, name)
            .int(3, name)
            .int(4, file)
            .end();
    }
    let (ty, unit) = (t.string("contentions"), t.string("count"));
    for s in &t.strings {
        w.str(field::STRING_TABLE, s);
    }
    w.int(field::TIME_NANOS, start_ns as i64)
        .int(field::DURATION_NANOS, duration_ns as i64);
    w.begin(field::PERIOD_TYPE).int(1, ty).int(2, unit).end();
    w.int(field::PERIOD, 1);
    let delay = t.string_ids["delay"];
    w.int(field::DEFAULT_SAMPLE_TYPE, delay);
    w.bytes().to_vec()
}

/// The pprof file as a sink, written at the end.
pub struct PprofSink {
    dest: Dest,
}

/// The pprof file, when the config names one (checked now).
pub fn sink(c: &TraceConfig) -> Result<Option<Box<dyn Sink>>, DestError> {
    c.stacks
        .pprof
        .as_deref()
        .map(|path| {
            Ok(Box::new(PprofSink {
                dest: Dest::check(path)?,
            }) as Box<dyn Sink>)
        })
        .transpose()
}

/// The profile of a moment's stacks, gzip-compressed.
pub fn profile(at: &Moment) -> Vec<u8> {
    let kinds: HashMap<(u32, u64), WaitKind> = at
        .snapshot
        .objects
        .rows()
        .iter()
        .map(|r| ((r.key.pid, r.key.addr), r.wait_kind))
        .collect();
    let kind_of = |pid, addr| kinds.get(&(pid, addr)).copied().unwrap_or_default();
    let empty = StacksView::default();
    let raw = encode(
        at.snapshot.stacks.as_ref().unwrap_or(&empty),
        Keyed::Waiter,
        &kind_of,
        at.run.started_unix_ms.saturating_mul(1_000_000),
        at.elapsed_ns,
    );
    gzip(&raw)
}

/// `raw` gzip-compressed.
pub fn gzip(raw: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    // Writing to memory cannot fail.
    let _ = gz.write_all(raw);
    gz.finish().unwrap_or_default()
}

impl Sink for PprofSink {
    fn name(&self) -> String {
        "the pprof profile".into()
    }

    fn finish(&mut self, at: &Moment) -> Result<(), DestError> {
        let bytes = profile(at);
        let rows = at.snapshot.stacks.as_ref().map_or(0, |v| v.rows.len());
        self.dest.write(&mut |w| w.write_all(&bytes))?;
        crate::say!(
            "rtm-trace: wrote {} ({} samples)",
            Shown(&self.dest.path().display().to_string()),
            rows
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        model::stacks::{StackEdge, StackRowView},
        output::proto::{Value, fields},
    };

    #[test]
    fn frames_split_into_function_file_and_line() {
        assert_eq!(
            parse_frame("worker+0x2b (mutex.c:17)"),
            ("worker", "mutex.c", 17)
        );
        assert_eq!(parse_frame("main+0x1"), ("main", "", 0));
        assert_eq!(parse_frame("0x55aa"), ("0x55aa", "", 0));
        assert_eq!(
            parse_frame("ns::f(int) const+0x8 (a b.cc:3)"),
            ("ns::f(int) const", "a b.cc", 3)
        );
    }

    #[test]
    fn a_row_is_a_sample_with_its_stack_values_and_labels() {
        let row = |waiter: Vec<String>| StackRowView {
            pid: 1,
            object: 0x10,
            object_name: Some("counter_lock".into()),
            waker_pid: 1,
            edge: StackEdge {
                waits: 2,
                wait_ns: 500,
                max_ns: 300,
                samples: 2,
                weight_milli: 2000,
            },
            waiter,
            waker: vec!["__lll_lock_wake+0x13".into(), "unlock_c+0x8 (y.c:2)".into()],
        };
        let view = StacksView {
            rows: vec![
                row(vec![
                    "__lll_lock_wait+0x2b".into(),
                    "worker+0x8 (x.c:5)".into(),
                ]),
                row(vec!["worker+0x8 (x.c:5)".into(), "0x7fff".into()]),
            ],
            other_waits: 1,
            other_wait_ns: 70,
            ..StacksView::default()
        };
        let p = encode(&view, Keyed::Waiter, &|_, _| WaitKind::Unknown, 5, 9);
        let top = fields(&p);
        let strings: Vec<&[u8]> = top
            .iter()
            .filter_map(|(f, v)| match (f, v) {
                (6, Value::Bytes(b)) => Some(*b),
                _ => None,
            })
            .collect();
        assert_eq!(strings[0], b"");
        let of = |n: u32| -> Vec<Vec<(u32, Value<'_>)>> {
            top.iter()
                .filter_map(|(f, v)| match v {
                    Value::Bytes(b) if *f == n => Some(fields(b)),
                    _ => None,
                })
                .collect()
        };
        let samples = of(2);
        assert_eq!(samples.len(), 3);
        // The second row's trailing address is left out; its one frame is shared.
        let locs = |s: &Vec<(u32, Value)>| s.iter().filter(|(f, _)| *f == 1).count();
        assert_eq!(locs(&samples[0]), 2);
        assert_eq!(locs(&samples[1]), 1);
        let values: Vec<&Value> = samples[0]
            .iter()
            .filter(|(f, _)| *f == 2)
            .map(|(_, v)| v)
            .collect();
        assert_eq!(values, [&Value::Varint(2), &Value::Varint(500)]);
        let label_values: Vec<&[u8]> = samples[0]
            .iter()
            .filter_map(|(f, v)| match v {
                Value::Bytes(b) if *f == 3 => Some(*b),
                _ => None,
            })
            .map(|l| match fields(l)[1].1 {
                Value::Varint(i) => strings[i as usize],
                _ => panic!("label"),
            })
            .collect();
        assert_eq!(
            label_values,
            [&b"counter_lock"[..], b"mutex", b"unlock_c (y.c:2)"]
        );
        assert_eq!(of(4).len(), 3, "two frames and [other_stacks]");
        assert_eq!(of(5).len(), 3);
    }
}
