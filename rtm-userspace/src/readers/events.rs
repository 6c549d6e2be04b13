//! The event ring buffers, read asynchronously and decoded safely.

use std::{io, task::Poll};

use rtm_common::decode::{DecodeError, Event, decode};
use serde::Serialize;
use tokio::io::{Interest, unix::AsyncFd};

use super::ring_buffer::RingBuffer;

/// What the reader saw.
#[derive(Debug, Clone, Copy, Default, Serialize, serde::Deserialize, PartialEq, Eq)]
pub struct ReaderStats {
    /// Records read from the ring buffer.
    pub records: u64,
    /// Bytes read.
    pub bytes: u64,
    /// Records shorter than their kind's layout.
    pub short_records: u64,
    /// Records of a kind, primitive or operation this build does not know.
    pub unknown_records: u64,
}

impl ReaderStats {
    /// Records that could not be decoded.
    pub fn undecodable(&self) -> u64 {
        self.short_records + self.unknown_records
    }

    /// Counts a record that could not be decoded.
    pub fn count(&mut self, e: DecodeError) {
        match e {
            DecodeError::Short { .. } => self.short_records += 1,
            DecodeError::UnknownKind(_)
            | DecodeError::UnknownPrimitive(_)
            | DecodeError::UnknownOp(_)
            | DecodeError::UnknownLifecycleOp(_)
            | DecodeError::UnknownMpi(..) => self.unknown_records += 1,
        }
    }
}

/// Reads and decodes records from the ring buffers: the first carries every kind of
/// record, the others (contention mode) the sync records of some CPUs each.
pub struct EventReader {
    rings: Vec<AsyncFd<RingBuffer>>,
    /// The ring the last drain started at.
    first: usize,
    stats: ReaderStats,
    more: bool,
}

impl EventReader {
    /// Wraps the ring buffers for async reading.
    pub fn new(rings: Vec<RingBuffer>) -> io::Result<Self> {
        let rings = rings
            .into_iter()
            .map(|ring| {
                // SAFETY: the RingBuffer owns its map descriptor for as long as the
                // AsyncFd owns it.
                unsafe { AsyncFd::register_with_interest(ring, Interest::READABLE) }
                    .map_err(|e| e.into_parts().1)
            })
            .collect::<io::Result<Vec<_>>>()?;
        if rings.is_empty() {
            return Err(io::Error::other("no ring buffer to read"));
        }
        Ok(Self {
            rings,
            first: 0,
            stats: ReaderStats::default(),
            more: false,
        })
    }

    /// Waits until records may be available in any ring. Returns at once when the last
    /// [`drain`] stopped at its limit with records left (the kernel only signals a
    /// consumer that has caught up, so waiting then could stall).
    ///
    /// [`drain`]: EventReader::drain
    pub async fn ready(&mut self) -> io::Result<()> {
        if self.more {
            return Ok(());
        }
        let rings = &mut self.rings;
        std::future::poll_fn(|cx| {
            for ring in rings.iter_mut() {
                match ring.poll_read_ready_mut(cx) {
                    Poll::Ready(Ok(mut guard)) => {
                        // Cleared before draining: a record committed after this point
                        // signals anew. Every ring is drained, signalled or not.
                        guard.clear_ready();
                        return Poll::Ready(Ok(()));
                    }
                    Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                    Poll::Pending => {}
                }
            }
            Poll::Pending
        })
        .await
    }

    /// Whether the last drain stopped at its limit with records left in the ring.
    pub fn behind(&self) -> bool {
        self.more
    }

    /// Decodes up to `max` records into `sink`, from every ring in turn; returns how
    /// many were read.
    pub fn drain(&mut self, max: usize, sink: &mut dyn FnMut(&Event)) -> usize {
        let mut n = 0;
        self.more = false;
        // Each call starts at the next ring, so a busy ring cannot starve the others
        // when drains stop at their limit.
        let count = self.rings.len();
        self.first = (self.first + 1) % count;
        for i in 0..count {
            let ring = self.rings[(self.first + i) % count].get_mut();
            let (read, empty) = drain(ring, max - n, &mut self.stats, sink);
            n += read;
            self.more |= !empty;
        }
        n
    }

    /// What was read so far.
    pub fn stats(&self) -> ReaderStats {
        self.stats
    }
}

fn drain(
    ring: &mut RingBuffer,
    max: usize,
    stats: &mut ReaderStats,
    sink: &mut dyn FnMut(&Event),
) -> (usize, bool) {
    let mut n = 0;
    let mut one = |item: &[u8]| {
        stats.records += 1;
        stats.bytes += item.len() as u64;
        match decode(item) {
            Ok(ev) => sink(&ev),
            Err(e) => stats.count(e),
        }
    };
    while n < max {
        if !ring.read(&mut one) {
            return (n, true);
        }
        n += 1;
    }
    (n, false)
}
