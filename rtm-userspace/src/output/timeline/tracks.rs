//! The timeline's tracks: a process track per traced process, a thread track per thread
//! under it (with a child track for the locks it holds), and counter tracks for the
//! system and the tracer. Each is described once, when first used, and again when its
//! name becomes known.

use std::collections::{HashMap, hash_map::Entry};

use super::{packet, proto::Writer};

/// Most threads (and processes) given a track; events of others go to one shared
/// "(other threads)" track.
pub const MAX_THREADS: usize = 65_536;

// Track uuid spaces (the top byte), so no two kinds of track share a uuid.
const PROCESS: u64 = 1 << 56;
const THREAD: u64 = 2 << 56;
const HOLDS: u64 = 3 << 56;
const HOLDS2: u64 = 4 << 56;
const COUNTER: u64 = 5 << 56;
/// The shared track of threads past [`MAX_THREADS`].
pub const OTHER: u64 = 6 << 56;

/// A thread's track uuid (pids and tids are below 2^22).
fn thread_uuid(pid: u32, tid: u32) -> u64 {
    THREAD | (u64::from(pid) << 24) | u64::from(tid & 0xff_ffff)
}

/// Which of a thread's tracks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lane {
    /// Its calls and waits.
    Main,
    /// The locks it holds.
    Holds,
    /// Holds released out of the order taken (they cannot nest on the first).
    HoldsOverlapping,
}

#[derive(Debug, Default)]
struct Thread {
    name: Option<Box<str>>,
    holds: bool,
    holds2: bool,
}

/// The tracks described so far.
#[derive(Debug, Default)]
pub struct Tracks {
    processes: HashMap<u32, Option<Box<str>>>,
    threads: HashMap<(u32, u32), Thread>,
    counters: HashMap<Box<str>, u64>,
    other: bool,
}

/// A packet describing track `uuid`.
fn descriptor(w: &mut Writer, uuid: u64, body: impl FnOnce(&mut Writer)) {
    packet::start(w, None);
    w.begin(packet::TRACK_DESCRIPTOR).uint(1, uuid);
    body(w);
    w.end();
    packet::done(w);
}

impl Tracks {
    /// The uuid of a thread's track, describing it (and its process) into `w` first
    /// when new. `w` holds zero or more whole packets.
    pub fn thread(&mut self, w: &mut Writer, pid: u32, tid: u32, lane: Lane) -> u64 {
        self.process(w, pid);
        let n = self.threads.len();
        let t = match self.threads.entry((pid, tid)) {
            Entry::Occupied(e) => e.into_mut(),
            Entry::Vacant(e) => {
                if n >= MAX_THREADS {
                    return self.other(w);
                }
                descriptor(w, thread_uuid(pid, tid), |w| {
                    thread_fields(w, pid, tid, None)
                });
                e.insert(Thread::default())
            }
        };
        let main = thread_uuid(pid, tid);
        let (flag, space, name) = match lane {
            Lane::Main => return main,
            Lane::Holds => (&mut t.holds, HOLDS, "holds"),
            Lane::HoldsOverlapping => (&mut t.holds2, HOLDS2, "holds (released out of order)"),
        };
        let uuid = space | (main & !(0xff << 56));
        if !*flag {
            *flag = true;
            descriptor(w, uuid, |w| {
                w.uint(5, main).str(2, name);
            });
        }
        uuid
    }

    fn other(&mut self, w: &mut Writer) -> u64 {
        if !self.other {
            self.other = true;
            descriptor(w, OTHER, |w| {
                w.str(2, "(other threads: past the track limit)");
            });
        }
        OTHER
    }

    fn process(&mut self, w: &mut Writer, pid: u32) {
        if self.processes.len() >= MAX_THREADS || self.processes.contains_key(&pid) {
            return;
        }
        self.processes.insert(pid, None);
        descriptor(w, PROCESS | u64::from(pid), |w| {
            process_fields(w, pid, None)
        });
    }

    /// Names a thread's track (again) when its name is new or changed.
    pub fn name_thread(&mut self, w: &mut Writer, pid: u32, tid: u32, name: &str) {
        let Some(t) = self.threads.get_mut(&(pid, tid)) else {
            return;
        };
        if t.name.as_deref() == Some(name) {
            return;
        }
        t.name = Some(name.into());
        descriptor(w, thread_uuid(pid, tid), |w| {
            thread_fields(w, pid, tid, Some(name))
        });
    }

    /// Names a process's track (again) when its name is new or changed.
    pub fn name_process(&mut self, w: &mut Writer, pid: u32, name: &str) {
        let Some(n) = self.processes.get_mut(&pid) else {
            return;
        };
        if n.as_deref() == Some(name) {
            return;
        }
        *n = Some(name.into());
        descriptor(w, PROCESS | u64::from(pid), |w| {
            process_fields(w, pid, Some(name))
        });
    }

    /// The uuid of the counter track `name` (in `unit`: "%", "bytes", "/s", or a
    /// count), under process `pid`'s track when given.
    pub fn counter(&mut self, w: &mut Writer, name: &str, unit: &str, pid: Option<u32>) -> u64 {
        if let Some(&u) = self.counters.get(name) {
            return u;
        }
        if let Some(p) = pid {
            self.process(w, p);
        }
        let uuid = COUNTER | self.counters.len() as u64;
        self.counters.insert(name.into(), uuid);
        descriptor(w, uuid, |w| {
            w.str(2, name);
            if let Some(p) = pid {
                w.uint(5, PROCESS | u64::from(p));
            }
            w.begin(8);
            match unit {
                "bytes" => {
                    w.uint(3, 3);
                }
                "" => {
                    w.uint(3, 2);
                }
                u => {
                    w.str(6, u);
                }
            }
            w.end();
        });
        uuid
    }
}

/// A ThreadDescriptor (its pid places the track under the process's).
fn thread_fields(w: &mut Writer, pid: u32, tid: u32, name: Option<&str>) {
    w.begin(4).int(1, i64::from(pid)).int(2, i64::from(tid));
    if let Some(n) = name {
        w.str(5, n);
    }
    w.end();
}

fn process_fields(w: &mut Writer, pid: u32, name: Option<&str>) {
    w.begin(3).int(1, i64::from(pid));
    if let Some(n) = name {
        w.str(6, n);
    }
    w.end();
}
