//! A BPF map's memory mapped into the tracer: the process filter's bytes, the futex
//! wait slots and the ring buffers are read and written through it, without a system
//! call per access.

use std::{
    io,
    os::fd::{AsFd, AsRawFd, BorrowedFd},
    ptr::NonNull,
};

use aya::maps::MapData;

use crate::proc::host::page_size;

/// One shared mapping of a BPF map (an mmapable array or a ring buffer), unmapped on
/// drop.
pub struct SharedMemory {
    ptr: NonNull<u8>,
    len: usize,
}

impl SharedMemory {
    /// Bytes mapped.
    pub fn len(&self) -> usize {
        self.len
    }

    /// The first mapped byte.
    pub fn ptr(&self) -> NonNull<u8> {
        self.ptr
    }

    /// Maps `len` bytes of the map `fd` at `offset` with protection `prot`.
    pub fn new(fd: BorrowedFd<'_>, len: usize, prot: i32, offset: usize) -> io::Result<Self> {
        // SAFETY: a fresh shared mapping of the map's descriptor; the kernel checks the
        // length, offset and protection against the map's layout.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                prot,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                offset as libc::off_t,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ptr = NonNull::new(p.cast()).ok_or_else(|| io::Error::other("mmap returned null"))?;
        Ok(Self { ptr, len })
    }

    /// Maps the first `bytes` of the mappable array `map` (whole pages) for reading and
    /// writing.
    pub fn array(map: &MapData, bytes: usize) -> io::Result<Self> {
        let page = page_size();
        let len = bytes.div_ceil(page) * page;
        Self::new(map.fd().as_fd(), len, libc::PROT_READ | libc::PROT_WRITE, 0)
    }
}

impl Drop for SharedMemory {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly what `new` mapped; nothing borrows it past `self`.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}
