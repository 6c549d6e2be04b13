//! Who holds what, to turn acquire/release pairs into hold times.
//!
//! Holds are keyed by (object, thread): readers of a rwlock hold it together. An
//! exclusive object also remembers its one owner, so an acquisition by another thread
//! while the events still show it held is detected (a release was not seen) and the
//! stale hold is discarded rather than guessed.

use foldhash::HashMap;

use super::types::{ObjectKey, Role};

#[derive(Clone, Copy, Debug)]
struct Hold {
    since_ns: u64,
    depth: u32,
    role: Role,
}

/// A finished hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Released {
    /// How it was held.
    pub role: Role,
    /// For how long.
    pub held_ns: u64,
}

/// What acquiring did to earlier state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Acquired {
    /// Normal.
    Fresh,
    /// Re-entered by the same thread (a recursive mutex).
    Nested,
    /// Another thread still held it as far as the events showed; that hold was dropped.
    Interrupted,
}

/// The holds table.
#[derive(Debug, Default)]
pub struct Holds {
    held: HashMap<(ObjectKey, u32), Hold>,
    owner: HashMap<ObjectKey, u32>,
}

impl Holds {
    /// Drops the holds of objects of processes `pids`.
    pub fn forget(&mut self, pids: &std::collections::HashSet<u32>) {
        self.held.retain(|(o, _), _| !pids.contains(&o.pid));
        self.owner.retain(|o, _| !pids.contains(&o.pid));
    }

    /// `tid` acquired `object` at `ts_ns`; `exclusive` unless shared (a read lock).
    pub fn acquire(
        &mut self,
        object: ObjectKey,
        tid: u32,
        ts_ns: u64,
        role: Role,
        exclusive: bool,
    ) -> Acquired {
        let mut result = Acquired::Fresh;
        if exclusive
            && let Some(prev) = self.owner.insert(object, tid)
            && prev != tid
            && self.held.remove(&(object, prev)).is_some()
        {
            result = Acquired::Interrupted;
        }
        match self.held.get_mut(&(object, tid)) {
            Some(h) => {
                h.depth += 1;
                Acquired::Nested
            }
            None => {
                self.held.insert(
                    (object, tid),
                    Hold {
                        since_ns: ts_ns,
                        depth: 1,
                        role,
                    },
                );
                result
            }
        }
    }

    /// `tid` released `object` at `ts_ns`: the finished hold, if this ends one. `None`
    /// with `known == false` when no acquisition by `tid` was seen.
    pub fn release(&mut self, object: ObjectKey, tid: u32, ts_ns: u64) -> (Option<Released>, bool) {
        let Some(h) = self.held.get_mut(&(object, tid)) else {
            return (None, false);
        };
        if h.depth > 1 {
            h.depth -= 1;
            return (None, true);
        }
        let h = self.held.remove(&(object, tid)).expect("present");
        if self.owner.get(&object) == Some(&tid) {
            self.owner.remove(&object);
        }
        (
            Some(Released {
                role: h.role,
                held_ns: ts_ns.saturating_sub(h.since_ns),
            }),
            true,
        )
    }
}
