//! The BPF ring buffer's memory, mapped once.
//!
//! The kernel offers the data pages twice in a row so that a record wrapping around the
//! end reads as one slice; every mapped page counts in the reader's resident memory, so
//! that doubles the ring's apparent cost (a 16 MiB ring showed as 32 MiB of RSS). Here
//! the data pages are mapped once and the rare record that wraps is copied into a
//! scratch buffer. The protocol (positions, busy and discard bits, orderings) is the
//! kernel's, as in kernel/bpf/ringbuf.c and libbpf's ringbuf.c.

use std::{
    io,
    os::fd::{AsFd, AsRawFd, BorrowedFd},
    sync::atomic::{self, AtomicU32, AtomicUsize, Ordering},
};

use aya::maps::MapData;

use crate::{probes::shared_memory::SharedMemory, proc::host::page_size};

/// Set in a record's length word while the producer still writes it.
const BUSY_BIT: u32 = 1 << 31;
/// Set in a record's length word when the producer discarded it.
const DISCARD_BIT: u32 = 1 << 30;
/// Every record starts with an 8-byte header: length word and page offset.
const HEADER: usize = 8;

/// A BPF ring buffer read from a single mapping of its data pages.
pub struct RingBuffer {
    /// The consumer position page (read-write).
    consumer: SharedMemory,
    /// The producer position page, then the data pages once (read-only).
    producer: SharedMemory,
    /// Data bytes: a power of two.
    size: usize,
    /// Our consumer position (the kernel's copy is in `consumer`).
    pos: usize,
    /// The producer position last read.
    prod_cache: usize,
    /// Set after publishing a new consumer position: the next time the reader finds
    /// nothing, it must fence before concluding so, or a wakeup could be missed.
    needs_wakeup: bool,
    /// A record that wraps around the end, made contiguous.
    scratch: Vec<u8>,
    /// Owns the map's descriptor; declared last so the mappings go first.
    map: MapData,
}

// SAFETY: the mappings are owned by this value and only read through `&mut self`.
unsafe impl Send for RingBuffer {}

impl RingBuffer {
    /// Maps the ring buffer map `map`.
    pub fn new(map: MapData) -> io::Result<Self> {
        let size = map
            .info()
            .map_err(|e| io::Error::other(format!("ring buffer map info: {e}")))?
            .max_entries() as usize;
        if !size.is_power_of_two() {
            return Err(io::Error::other(format!(
                "ring buffer of {size} bytes is not a power of two"
            )));
        }
        let page = page_size();
        let fd = map.fd().as_fd();
        let consumer = SharedMemory::new(fd, page, libc::PROT_READ | libc::PROT_WRITE, 0)?;
        let producer = SharedMemory::new(fd, page + size, libc::PROT_READ, page)?;
        let mut ring = Self {
            consumer,
            producer,
            size,
            pos: 0,
            prod_cache: 0,
            needs_wakeup: false,
            scratch: Vec::new(),
            map,
        };
        ring.pos = ring.consumer_pos().load(Ordering::Acquire);
        ring.prod_cache = ring.producer_pos();
        Ok(ring)
    }

    fn consumer_pos(&self) -> &AtomicUsize {
        // SAFETY: the consumer page is mapped, aligned and shared with the kernel, which
        // only reads it; all our writes go through this atomic.
        unsafe { self.consumer.ptr().cast::<AtomicUsize>().as_ref() }
    }

    fn producer_pos(&self) -> usize {
        // SAFETY: the producer position is the first word of the producer page; the
        // kernel writes it with release ordering.
        unsafe { self.producer.ptr().cast::<AtomicUsize>().as_ref() }.load(Ordering::Acquire)
    }

    fn data(&self) -> &[u8] {
        let page = self.producer.len() - self.size;
        // SAFETY: the data pages follow the producer page in the mapping; the kernel
        // writes only records the consumer position says are free.
        unsafe { std::slice::from_raw_parts(self.producer.ptr().as_ptr().add(page), self.size) }
    }

    /// Whether the producer is ahead of us, refreshing its position when needed.
    fn available(&mut self) -> bool {
        if self.pos == self.prod_cache {
            if self.needs_wakeup {
                // Either this load sees a new record, or its producer sees our updated
                // position and signals.
                atomic::fence(Ordering::SeqCst);
                self.needs_wakeup = false;
            }
            self.prod_cache = self.producer_pos();
        }
        self.pos != self.prod_cache
    }

    fn consume(&mut self, len: usize) {
        self.pos += (HEADER + len).next_multiple_of(8);
        // The kernel pairs this release with an acquire before reusing the space.
        self.consumer_pos().store(self.pos, Ordering::Release);
        self.needs_wakeup = true;
    }

    /// Hands the next committed record to `f`; false when there is none yet.
    pub fn read(&mut self, f: &mut dyn FnMut(&[u8])) -> bool {
        while self.available() {
            let off = self.pos & (self.size - 1);
            // SAFETY: records are 8-byte aligned inside the data pages, so the length
            // word is in bounds and aligned.
            let word = unsafe { &*self.data().as_ptr().add(off).cast::<AtomicU32>() };
            // The kernel commits with a fully ordered exchange: acquire pairs with it.
            let header = word.load(Ordering::Acquire);
            if header & BUSY_BIT != 0 {
                if !self.needs_wakeup {
                    return false;
                }
                atomic::fence(Ordering::SeqCst);
                self.needs_wakeup = false;
                continue;
            }
            let len = (header & !(BUSY_BIT | DISCARD_BIT)) as usize;
            if header & DISCARD_BIT == 0 {
                let start = off + HEADER;
                let end = start + len;
                if end <= self.size {
                    let data = self.data();
                    f(&data[start..end]);
                } else {
                    // Wraps around the end: copy the two parts.
                    let mut scratch = std::mem::take(&mut self.scratch);
                    scratch.clear();
                    let data = self.data();
                    scratch.extend_from_slice(&data[start..]);
                    scratch.extend_from_slice(&data[..end - self.size]);
                    f(&scratch);
                    self.scratch = scratch;
                }
            }
            self.consume(len);
            if header & DISCARD_BIT == 0 {
                return true;
            }
        }
        false
    }
}

impl AsFd for RingBuffer {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.map.fd().as_fd()
    }
}

impl AsRawFd for RingBuffer {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.as_fd().as_raw_fd()
    }
}
