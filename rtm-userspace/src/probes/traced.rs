//! The fast process filter: one byte per tgid in an array map, written through a shared
//! mapping.
//!
//! Every hot program tests whether the current process is traced. A hash lookup there
//! cost the futex programs about 75 ns per call on contended locks; an array element
//! costs a few instructions. The array holds one byte per tgid below its length (pid_max
//! at load). Userspace and the programs (a followed child) write single bytes, so no
//! writer rewrites another tgid's byte, which a whole-element update from userspace
//! would. The hash map stays the whole set: tgids past the array, if pid_max is raised
//! during a trace, are found there.

use std::io;

use aya::maps::MapData;

use super::shared_memory::SharedMemory;

use super::layout::PER_WORD;

/// The TRACED map, mapped into this process.
pub struct TracedBytes {
    /// Its 8-byte elements.
    words: u32,
    mapping: SharedMemory,
    /// Tgids covered.
    len: u32,
    /// Owns the descriptor; declared last so the mapping goes first.
    _map: MapData,
}

impl TracedBytes {
    /// Maps the array `map` of `words` 8-byte elements.
    pub fn new(map: MapData, words: u32) -> io::Result<Self> {
        let mapping = SharedMemory::array(&map, words as usize * PER_WORD as usize)?;
        Ok(Self {
            words,
            mapping,
            len: words * PER_WORD,
            _map: map,
        })
    }

    /// The map's kernel id and its elements, for a writer in another thread.
    pub fn id(&self) -> Option<(u32, u32)> {
        Some((self._map.info().ok()?.id(), self.words))
    }

    /// Sets `tgid`'s byte to `value` (0: not traced); false when the array does not
    /// cover it.
    pub fn set(&self, tgid: u32, value: u8) -> bool {
        if tgid >= self.len {
            return false;
        }
        // SAFETY: within the mapping (tgid < len <= mapped bytes); a volatile byte store,
        // as the programs read and write these bytes concurrently.
        unsafe {
            self.mapping
                .ptr()
                .as_ptr()
                .add(tgid as usize)
                .write_volatile(value);
        }
        true
    }
}

/// How a process stands in the in-kernel filter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Traced {
    /// Not traced.
    No,
    /// Traced; the processes it forks are not.
    Alone,
    /// Traced, and so are the processes it forks, from birth (and theirs).
    WithForks,
}

impl Traced {
    /// Traced, following forks or not.
    pub fn new(follow_forks: bool) -> Self {
        if follow_forks {
            Traced::WithForks
        } else {
            Traced::Alone
        }
    }

    /// The filter's value.
    pub fn value(self) -> u8 {
        match self {
            Traced::No => 0,
            Traced::Alone => rtm_common::TRACED_ON,
            Traced::WithForks => rtm_common::TRACED_FOLLOW,
        }
    }
}

/// The in-kernel filter's two maps by kernel id (and the array's elements), to open a
/// writer of them elsewhere.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FilterIds {
    /// The hash set of traced tgids (TRACED_TGIDS).
    pub set: u32,
    /// The byte array (TRACED).
    pub bytes: u32,
    /// Its 8-byte elements.
    pub words: u32,
}

/// A writer of the in-kernel filter owned by another thread than the engine's (the
/// agent's exec watcher): it puts a process in as [`super::Probes::set_traced`] does,
/// the set entry first, then its byte, so that a process is traced the moment it is
/// seen, whatever the engine is busy with. Taking processes out stays the engine's.
pub struct FilterWriter {
    set: aya::maps::HashMap<MapData, u32, u32>,
    bytes: TracedBytes,
}

impl FilterWriter {
    /// Opens the maps `ids` names.
    pub fn open(ids: FilterIds) -> io::Result<Self> {
        let set = MapData::from_id(ids.set).map_err(io::Error::other)?;
        let set =
            aya::maps::HashMap::try_from(aya::maps::Map::HashMap(set)).map_err(io::Error::other)?;
        let bytes = MapData::from_id(ids.bytes).map_err(io::Error::other)?;
        Ok(Self {
            set,
            bytes: TracedBytes::new(bytes, ids.words)?,
        })
    }

    /// Puts `pid` into the filter, its forks followed; false when the set refused it
    /// (full).
    pub fn admit(&mut self, pid: u32) -> bool {
        let value = Traced::WithForks.value();
        if self.set.insert(pid, u32::from(value), 0).is_err() {
            return false;
        }
        self.bytes.set(pid, value);
        true
    }

    /// Takes `pid` out again (it ended before it went in: the kernel's exit program
    /// had nothing to take out), the byte first, then the set entry.
    pub fn remove(&mut self, pid: u32) {
        self.bytes.set(pid, 0);
        let _ = self.set.remove(&pid);
    }
}
