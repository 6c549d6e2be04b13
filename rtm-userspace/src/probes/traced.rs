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
            mapping,
            len: words * PER_WORD,
            _map: map,
        })
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
