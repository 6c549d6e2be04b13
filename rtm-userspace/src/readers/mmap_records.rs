//! The kernel's records of new mappings, execs and forks (a perf dummy event per CPU),
//! so a process's address space is known even when it exits before the tracer reads
//! its /proc files: the names of its objects and code then still resolve.

use crate::proc::host::{online_cpus, page_size};
use std::{
    io,
    os::fd::{FromRawFd, OwnedFd},
    sync::atomic::{AtomicU64, Ordering, fence},
};

use perf_event_open_sys::{
    self as sys,
    bindings::{
        PERF_COUNT_SW_DUMMY, PERF_FLAG_FD_CLOEXEC, PERF_RECORD_COMM, PERF_RECORD_FORK,
        PERF_RECORD_LOST, PERF_RECORD_MISC_COMM_EXEC, PERF_RECORD_MMAP2, PERF_SAMPLE_TID,
        PERF_SAMPLE_TIME, PERF_TYPE_SOFTWARE, perf_event_attr, perf_event_mmap_page,
    },
};

use crate::proc::address_space::Mapping;

/// Data pages per CPU (32 KiB with 4 KiB pages): about ten program starts per CPU
/// between two drains (every 20 ms); a full ring counts what it drops.
const DATA_PAGES: usize = 8;
/// Every record ends with the sample id: pid, tid (PERF_SAMPLE_TID) and time.
const SAMPLE_ID: usize = 16;

/// What changed in an address space.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MmapRecord {
    /// `pid` mapped something.
    Map { pid: u32, mapping: Mapping },
    /// `pid` runs a new program.
    Exec { pid: u32 },
    /// `child` was forked from `parent`.
    Fork { parent: u32, child: u32 },
}

impl MmapRecord {
    /// The process the record is about.
    pub fn pid(&self) -> u32 {
        match self {
            Self::Map { pid, .. } | Self::Exec { pid } => *pid,
            Self::Fork { child, .. } => *child,
        }
    }
}

/// One CPU's perf ring.
struct Ring {
    _fd: OwnedFd,
    base: *mut u8,
    len: usize,
    page: usize,
}

// SAFETY: the ring's mapping is owned by this value alone and only touched through it.
unsafe impl Send for Ring {}

impl Drop for Ring {
    fn drop(&mut self) {
        // SAFETY: base/len are the mapping made in `open_ring` and nothing else uses it.
        unsafe { libc::munmap(self.base.cast(), self.len) };
    }
}

impl Ring {
    /// Copies out the records waiting in the ring and frees their space.
    fn take(&mut self, out: &mut Vec<(u64, Vec<u8>)>) {
        let meta = self.base.cast::<perf_event_mmap_page>();
        // SAFETY: the first page of the mapping is the kernel's control page; data_head
        // is written by the kernel, data_tail by us, both naturally aligned u64s.
        let (head_ptr, tail_ptr) = unsafe {
            (
                &*(&raw const (*meta).data_head).cast::<AtomicU64>(),
                &*(&raw const (*meta).data_tail).cast::<AtomicU64>(),
            )
        };
        let head = head_ptr.load(Ordering::Acquire);
        fence(Ordering::Acquire);
        let mut tail = tail_ptr.load(Ordering::Relaxed);
        let size = (self.len - self.page) as u64;
        // SAFETY: the data area follows the control page.
        let data = unsafe { std::slice::from_raw_parts(self.base.add(self.page), size as usize) };
        while tail + 8 <= head {
            let at = (tail % size) as usize;
            // Records are 8-byte aligned, so a header never wraps.
            let len = u16::from_ne_bytes([data[at + 6], data[at + 7]]) as u64;
            if len < 8 || tail + len > head {
                break;
            }
            let mut rec = Vec::with_capacity(len as usize);
            let first = (len as usize).min(data.len() - at);
            rec.extend_from_slice(&data[at..at + first]);
            rec.extend_from_slice(&data[..len as usize - first]);
            let time = if rec.len() >= 8 + SAMPLE_ID {
                u64::from_ne_bytes(rec[rec.len() - 8..].try_into().expect("8 bytes"))
            } else {
                0
            };
            out.push((time, rec));
            tail += len;
        }
        tail_ptr.store(tail, Ordering::Release);
    }
}

/// Reads mapping, exec and fork records of every process on every CPU.
pub struct MmapRecordReader {
    rings: Vec<Ring>,
    lost: u64,
}

impl MmapRecordReader {
    /// Opens a dummy event with a ring on every online CPU.
    pub fn open() -> io::Result<Self> {
        let page = page_size();
        let rings = online_cpus()?
            .into_iter()
            .map(|cpu| open_ring(cpu, page))
            .collect::<io::Result<Vec<_>>>()?;
        Ok(Self { rings, lost: 0 })
    }

    /// Records the kernel dropped because a ring was full (names may then be missing).
    pub fn lost(&self) -> u64 {
        self.lost
    }

    /// Hands the records about processes `wanted` accepts to `sink`, oldest first, each
    /// with its time (CLOCK_MONOTONIC ns, the clock of [`crate::proc::process::monotonic_ns`]).
    pub fn drain(
        &mut self,
        wanted: &mut dyn FnMut(u32) -> bool,
        sink: &mut dyn FnMut(u64, MmapRecord),
    ) {
        let mut raw = Vec::new();
        for r in &mut self.rings {
            r.take(&mut raw);
        }
        raw.sort_by_key(|(t, _)| *t);
        let mut verdicts = std::collections::HashMap::new();
        for (time, rec) in raw {
            match parse(&rec) {
                Some(Parsed::Lost(n)) => self.lost += n,
                Some(Parsed::Record(r))
                    if *verdicts.entry(r.pid()).or_insert_with(|| wanted(r.pid())) =>
                {
                    sink(time, r)
                }
                Some(Parsed::Record(_)) => {}
                None => {}
            }
        }
    }
}

enum Parsed {
    Record(MmapRecord),
    Lost(u64),
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_ne_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

/// Decodes one record (header included); None for kinds of no interest.
fn parse(rec: &[u8]) -> Option<Parsed> {
    let kind = u32_at(rec, 0)?;
    let misc = u16::from_ne_bytes(rec.get(4..6)?.try_into().ok()?) as u32;
    let body_end = rec.len().checked_sub(SAMPLE_ID)?;
    match kind {
        PERF_RECORD_MMAP2 => {
            let (pid, addr, len, pgoff) = (
                u32_at(rec, 8)?,
                u64_at(rec, 16)?,
                u64_at(rec, 24)?,
                u64_at(rec, 32)?,
            );
            let (maj, min, ino, prot) = (
                u32_at(rec, 40)?,
                u32_at(rec, 44)?,
                u64_at(rec, 48)?,
                u32_at(rec, 64)?,
            );
            let name = rec.get(72..body_end)?;
            let name = &name[..name.iter().position(|&c| c == 0).unwrap_or(name.len())];
            let path = String::from_utf8_lossy(name);
            let anonymous = path == "//anon" || ino == 0;
            Some(Parsed::Record(MmapRecord::Map {
                pid,
                mapping: Mapping {
                    start: addr,
                    end: addr.checked_add(len)?,
                    offset: if anonymous { 0 } else { pgoff },
                    dev: format!("{maj:02x}:{min:02x}"),
                    inode: if anonymous { 0 } else { ino },
                    path: if anonymous && path.starts_with("//") {
                        String::new()
                    } else {
                        path.into_owned()
                    },
                    executable: prot & libc::PROT_EXEC as u32 != 0,
                },
            }))
        }
        PERF_RECORD_COMM if misc & PERF_RECORD_MISC_COMM_EXEC != 0 => {
            Some(Parsed::Record(MmapRecord::Exec {
                pid: u32_at(rec, 8)?,
            }))
        }
        PERF_RECORD_FORK => {
            let (pid, ppid) = (u32_at(rec, 8)?, u32_at(rec, 12)?);
            // A new thread shares its process's address space.
            (pid != ppid).then_some(Parsed::Record(MmapRecord::Fork {
                parent: ppid,
                child: pid,
            }))
        }
        PERF_RECORD_LOST => Some(Parsed::Lost(u64_at(rec, 16)?)),
        _ => None,
    }
}

fn open_ring(cpu: i32, page: usize) -> io::Result<Ring> {
    let mut attr = perf_event_attr {
        type_: PERF_TYPE_SOFTWARE,
        size: std::mem::size_of::<perf_event_attr>() as u32,
        config: PERF_COUNT_SW_DUMMY as u64,
        sample_type: (PERF_SAMPLE_TID | PERF_SAMPLE_TIME) as u64,
        ..Default::default()
    };
    attr.set_mmap(1);
    attr.set_mmap2(1);
    attr.set_mmap_data(1);
    attr.set_comm(1);
    attr.set_comm_exec(1);
    attr.set_task(1);
    attr.set_sample_id_all(1);
    attr.set_exclude_kernel(1);
    attr.set_exclude_hv(1);
    // Times on the clock a /proc read is stamped with, so a read can be ordered
    // against the records (one made after it is applied over it).
    attr.set_use_clockid(1);
    attr.clockid = libc::CLOCK_MONOTONIC;
    // SAFETY: attr is initialized; a dummy event counts nothing and only reports
    // side-band records.
    let fd = unsafe {
        sys::perf_event_open(
            &mut attr,
            -1,
            cpu,
            -1,
            PERF_FLAG_FD_CLOEXEC as libc::c_ulong,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a descriptor we own from here on.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let len = page * (1 + DATA_PAGES);
    // SAFETY: mapping a perf event descriptor read-write for its ring buffer.
    let base = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            std::os::fd::AsRawFd::as_raw_fd(&fd),
            0,
        )
    };
    if base == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    Ok(Ring {
        _fd: fd,
        base: base.cast(),
        len,
        page,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(kind: u32, misc: u16, body: &[u8]) -> Vec<u8> {
        let len = (8 + body.len() + SAMPLE_ID) as u16;
        let mut r = kind.to_ne_bytes().to_vec();
        r.extend(misc.to_ne_bytes());
        r.extend(len.to_ne_bytes());
        r.extend(body);
        r.extend([0u8; SAMPLE_ID]);
        r
    }

    #[test]
    fn mmap2_exec_and_fork_records_decode() {
        let mut body = Vec::new();
        for v in [42u32, 43] {
            body.extend(v.to_ne_bytes());
        }
        for v in [0x5000u64, 0x2000, 0x1000] {
            body.extend(v.to_ne_bytes());
        }
        for v in [0xfdu32, 1] {
            body.extend(v.to_ne_bytes());
        }
        for v in [77u64, 0] {
            body.extend(v.to_ne_bytes());
        }
        for v in [libc::PROT_READ as u32 | libc::PROT_EXEC as u32, 0] {
            body.extend(v.to_ne_bytes());
        }
        body.extend(b"/usr/bin/app\0\0\0\0");
        let Some(Parsed::Record(MmapRecord::Map { pid, mapping })) =
            parse(&record(PERF_RECORD_MMAP2, 0, &body))
        else {
            panic!("not a mapping");
        };
        assert_eq!(pid, 42);
        assert_eq!(
            mapping,
            Mapping {
                start: 0x5000,
                end: 0x7000,
                offset: 0x1000,
                dev: "fd:01".into(),
                inode: 77,
                path: "/usr/bin/app".into(),
                executable: true,
            }
        );
        let comm = [7u32.to_ne_bytes(), 7u32.to_ne_bytes()].concat();
        let exec = record(PERF_RECORD_COMM, PERF_RECORD_MISC_COMM_EXEC as u16, &comm);
        assert!(matches!(
            parse(&exec),
            Some(Parsed::Record(MmapRecord::Exec { pid: 7 }))
        ));
        // A thread renaming itself is not an exec.
        assert!(parse(&record(PERF_RECORD_COMM, 0, &comm)).is_none());
        let fork = |pid: u32, ppid: u32| {
            let mut b = Vec::new();
            for v in [pid, ppid, pid, ppid] {
                b.extend(v.to_ne_bytes());
            }
            b.extend(0u64.to_ne_bytes());
            parse(&record(PERF_RECORD_FORK, 0, &b))
        };
        assert!(matches!(
            fork(9, 8),
            Some(Parsed::Record(MmapRecord::Fork {
                parent: 8,
                child: 9
            }))
        ));
        assert!(fork(9, 9).is_none());
    }

    /// Root only: the kernel reports this process mapping a file.
    #[test]
    fn sees_this_process_map_a_file() {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("sees_this_process_map_a_file: NOT RUN: needs root");
            assert!(
                std::env::var("CI").map_or(true, |v| v != "true"),
                "needs root in CI"
            );
            return;
        }
        let mut reader = MmapRecordReader::open().expect("perf dummy events");
        let f = std::fs::File::open("/proc/self/exe").unwrap();
        let before_ns = crate::proc::process::monotonic_ns();
        // SAFETY: mapping a readable file privately; unmapped below.
        let addr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                4096,
                libc::PROT_READ,
                libc::MAP_PRIVATE,
                std::os::fd::AsRawFd::as_raw_fd(&f),
                0,
            )
        };
        assert_ne!(addr, libc::MAP_FAILED);
        let me = std::process::id();
        let mut seen = Vec::new();
        let (before, after) = (before_ns, crate::proc::process::monotonic_ns());
        let mut times = Vec::new();
        reader.drain(&mut |pid| pid == me, &mut |t, r| {
            times.push(t);
            seen.push(r)
        });
        // Stamped on the monotonic clock, between the two readings around the mmap.
        assert!(
            times.iter().any(|&t| t >= before && t <= after),
            "{times:?} not in {before}..{after}"
        );
        // SAFETY: the mapping made above.
        unsafe { libc::munmap(addr, 4096) };
        assert!(
            seen.iter().any(|r| matches!(r, MmapRecord::Map { mapping, .. }
                if mapping.start == addr as u64 && mapping.end == addr as u64 + 4096 && mapping.inode != 0)),
            "{seen:?}"
        );
        assert!(seen.iter().all(|r| r.pid() == me));
    }
}

/// Property tests: perf records and CPU lists of any shape decode without panicking.
#[cfg(test)]
mod fuzz {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        #[test]
        fn any_record_decodes(
            kind in prop_oneof![Just(PERF_RECORD_MMAP2), Just(PERF_RECORD_COMM),
                                Just(PERF_RECORD_FORK), Just(PERF_RECORD_LOST), any::<u32>()],
            misc in any::<u16>(),
            body in prop::collection::vec(any::<u8>(), 0..200),
        ) {
            let mut rec = kind.to_ne_bytes().to_vec();
            rec.extend_from_slice(&misc.to_ne_bytes());
            rec.extend_from_slice(&body);
            let _ = parse(&rec);
        }
    }
}
