//! The timeline's tracks: a process track per traced process, a thread track per thread
//! under it (with child tracks for the locks it holds), and counter tracks for the
//! system and the tracer. Each is described once, when first used, and again when its
//! name becomes known. Uuids are given in order from 1, so events carry short ones.

use super::{packet, proto::Writer, write::Map};

/// Most threads (and processes) given a track; events of others go to one shared
/// "(other threads)" track.
pub const MAX_THREADS: usize = 65_536;

/// Which of a thread's tracks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lane {
    /// Its calls and waits.
    Main,
    /// The locks it holds.
    Holds,
    /// Holds released out of the order taken (they cannot nest on the first).
    HoldsOverlapping,
    /// Its calls of timed functions (`--func`).
    Functions,
}

#[derive(Debug)]
struct Thread {
    uuid: u64,
    name: Option<Box<str>>,
    holds: Option<u64>,
    holds2: Option<u64>,
    functions: Option<u64>,
}

#[derive(Debug)]
struct Process {
    uuid: u64,
    name: Option<Box<str>>,
}

/// The tracks described so far.
#[derive(Debug, Default)]
pub struct Tracks {
    processes: Map<u32, Process>,
    threads: Map<(u32, u32), Thread>,
    counters: Map<Box<str>, u64>,
    other: Option<u64>,
    last: u64,
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
    fn next(&mut self) -> u64 {
        self.last += 1;
        self.last
    }

    /// The uuid of a thread's track, describing it (and its process) into `w` first
    /// when new. `w` holds zero or more whole packets.
    pub fn thread(&mut self, w: &mut Writer, pid: u32, tid: u32, lane: Lane) -> u64 {
        let t = match self.threads.get(&(pid, tid)) {
            Some(t) if lane == Lane::Main => return t.uuid,
            Some(_) => self.threads.get_mut(&(pid, tid)).expect("present"),
            None => {
                if self.threads.len() >= MAX_THREADS {
                    return self.other(w);
                }
                if self.process(w, pid).is_none() {
                    return self.other(w);
                }
                let uuid = self.next();
                descriptor(w, uuid, |w| thread_fields(w, pid, tid, None));
                self.threads.entry((pid, tid)).or_insert(Thread {
                    uuid,
                    name: None,
                    holds: None,
                    holds2: None,
                    functions: None,
                })
            }
        };
        let main = t.uuid;
        let (slot, name) = match lane {
            Lane::Main => return main,
            Lane::Holds => (&mut t.holds, "holds"),
            Lane::HoldsOverlapping => (&mut t.holds2, "holds (released out of order)"),
            Lane::Functions => (&mut t.functions, "timed functions"),
        };
        if let Some(u) = *slot {
            return u;
        }
        self.last += 1;
        let uuid = self.last;
        *slot = Some(uuid);
        descriptor(w, uuid, |w| {
            w.uint(5, main).str(2, name);
        });
        uuid
    }

    fn other(&mut self, w: &mut Writer) -> u64 {
        if let Some(u) = self.other {
            return u;
        }
        let uuid = self.next();
        self.other = Some(uuid);
        descriptor(w, uuid, |w| {
            w.str(2, "(other threads: past the track limit)");
        });
        uuid
    }

    /// The process's track uuid, described first when new (None past the limit).
    fn process(&mut self, w: &mut Writer, pid: u32) -> Option<u64> {
        if let Some(p) = self.processes.get(&pid) {
            return Some(p.uuid);
        }
        if self.processes.len() >= MAX_THREADS {
            return None;
        }
        let uuid = self.next();
        self.processes.insert(pid, Process { uuid, name: None });
        descriptor(w, uuid, |w| process_fields(w, pid, None));
        Some(uuid)
    }

    /// Whether thread `tid` of `pid` has a track (an event of it, or its creation, was
    /// seen).
    pub fn has_thread(&self, pid: u32, tid: u32) -> bool {
        self.threads.contains_key(&(pid, tid))
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
        descriptor(w, t.uuid, |w| thread_fields(w, pid, tid, Some(name)));
    }

    /// Names a process's track (again) when its name is new or changed.
    pub fn name_process(&mut self, w: &mut Writer, pid: u32, name: &str) {
        let Some(p) = self.processes.get_mut(&pid) else {
            return;
        };
        if p.name.as_deref() == Some(name) {
            return;
        }
        p.name = Some(name.into());
        descriptor(w, p.uuid, |w| process_fields(w, pid, Some(name)));
    }

    /// The uuid of the counter track `name` (in `unit`: "%", "bytes", "/s", or a
    /// count), under process `pid`'s track when given.
    pub fn counter(&mut self, w: &mut Writer, name: &str, unit: &str, pid: Option<u32>) -> u64 {
        if let Some(&u) = self.counters.get(name) {
            return u;
        }
        let parent = pid.and_then(|p| self.process(w, p));
        let uuid = self.next();
        self.counters.insert(name.into(), uuid);
        descriptor(w, uuid, |w| {
            w.str(2, name);
            if let Some(p) = parent {
                w.uint(5, p);
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
