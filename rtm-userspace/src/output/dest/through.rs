//! Writing through a destination that is not a regular file (/dev/null, a terminal, a
//! FIFO, the tracer's own standard output): opening it as it is, and a writer that
//! waits for a slow reader until Ctrl-C or SIGTERM.

use std::{
    fs::File,
    io::{self, Write},
    os::fd::{AsFd as _, OwnedFd},
    path::Path,
};

use rustix::fs::{self as rfs, FileType, Mode, OFlags, Stat};

use super::{DestError, errno, io_err, type_name_of};
use crate::interrupt;

/// How long a FIFO without a reader is waited for: a reader started just before or
/// after rtm-trace comes in time, and a reader that never comes does not hold the
/// tracer (and, at the end of a run, its probes) forever.
pub const READER_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// Opens `name` in `dir`, a destination that is not a regular file, for writing, as it
/// is: no creating, no truncating, no following a link, and only if it is still the
/// file checked (`id`). A FIFO without a reader is waited for, until Ctrl-C or for
/// [`READER_WAIT`].
pub(super) fn open_through(
    dir: &OwnedFd,
    name: &std::ffi::OsStr,
    id: (u64, u64),
    path: &Path,
) -> Result<File, DestError> {
    let mut told = false;
    let started = std::time::Instant::now();
    let fd = loop {
        match rfs::openat(
            dir,
            name,
            OFlags::WRONLY | OFlags::NOCTTY | OFlags::NONBLOCK | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        ) {
            Ok(fd) => break fd,
            Err(rustix::io::Errno::NXIO) => {
                // A FIFO with no reader yet.
                if !told {
                    told = true;
                    crate::say!(
                        "rtm-trace: waiting up to {} s for a reader on {} (Ctrl-C to give up)",
                        READER_WAIT.as_secs(),
                        crate::format::text::escape(&path.display().to_string())
                    );
                }
                if interrupt::requested() {
                    return Err(io_err(path)(io::Error::other(
                        "interrupted (Ctrl-C or SIGTERM) while waiting for a reader",
                    )));
                }
                if started.elapsed() >= READER_WAIT {
                    return Err(DestError::NoReader {
                        path: path.display().to_string(),
                        secs: READER_WAIT.as_secs(),
                    });
                }
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            Err(rustix::io::Errno::LOOP) => {
                return Err(DestError::Changed {
                    path: path.display().to_string(),
                    kind: "a symbolic link",
                });
            }
            Err(e) => return Err(errno(path)(e)),
        }
    };
    let st = rfs::fstat(&fd).map_err(errno(path))?;
    if (st.st_dev, st.st_ino) != id {
        // It was checked as a device or FIFO; something else is there now.
        return Err(DestError::Changed {
            path: path.display().to_string(),
            kind: type_name_of(FileType::from_raw_mode(st.st_mode)),
        });
    }
    Ok(File::from(fd))
}

/// Whether the character device `st` is one of /dev's (a terminal, /dev/null): those
/// are written whoever owns them. Only root makes device nodes; the check only keeps a
/// device elsewhere, on a file system someone else mounted, to the ownership rule.
pub(super) fn under_dev(st: &Stat) -> bool {
    rfs::stat("/dev").is_ok_and(|dev| dev.st_dev == st.st_dev)
        || rfs::stat("/dev/pts").is_ok_and(|pts| pts.st_dev == st.st_dev)
}

/// A writer over a pipe, FIFO, terminal or device that waits, until Ctrl-C or SIGTERM,
/// when the other end does not take more: a reader that never reads holds it only until
/// the first SIGTERM. A descriptor the tracer opened is non-blocking. One it was given
/// (its standard output, /dev/fd/N) stays as it is, since others share it: each write
/// waits for room first and writes at most PIPE_BUF bytes, which a pipe with room takes
/// without blocking.
pub(super) struct Patient {
    file: File,
    /// Wait for room before each write (a blocking pipe, FIFO, terminal or socket).
    poll_first: bool,
}

impl Patient {
    pub(super) fn new(file: File) -> Self {
        let blocking = rfs::fcntl_getfl(&file).is_ok_and(|f| !f.contains(OFlags::NONBLOCK));
        let regular = rfs::fstat(&file)
            .is_ok_and(|st| FileType::from_raw_mode(st.st_mode) == FileType::RegularFile);
        Self {
            file,
            poll_first: blocking && !regular,
        }
    }

    /// A copy of the tracer's own descriptor `fd`; None when it is not open.
    pub(super) fn own(fd: i32) -> Option<Self> {
        // SAFETY: a descriptor number; fcntl only duplicates it if it is open.
        let dup = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 3) };
        // SAFETY: fcntl returned a new descriptor that we own.
        (dup >= 0).then(|| Self::new(unsafe { <File as std::os::fd::FromRawFd>::from_raw_fd(dup) }))
    }
}

impl Write for Patient {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.poll_first {
            // Written to as long as it takes more, a stop requested or not.
            if !ready_now(self.file.as_fd()) {
                interrupt::poll_fd(self.file.as_fd(), libc::POLLOUT)?;
            }
            return self.file.write(&buf[..buf.len().min(libc::PIPE_BUF)]);
        }
        loop {
            match self.file.write(buf) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    interrupt::poll_fd(self.file.as_fd(), libc::POLLOUT)?;
                }
                r => return r,
            }
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        self.file.flush()
    }
}

/// Whether `fd` takes a write now.
fn ready_now(fd: std::os::fd::BorrowedFd<'_>) -> bool {
    let mut p = libc::pollfd {
        fd: std::os::fd::AsRawFd::as_raw_fd(&fd),
        events: libc::POLLOUT,
        revents: 0,
    };
    // SAFETY: one valid pollfd; no wait.
    unsafe { libc::poll(&mut p, 1, 0) == 1 }
}

/// Standard output as a [`Patient`] writer, after what was printed to it before;
/// where it is closed, what is written goes nowhere (as `print!` does).
pub(super) fn stdout_writer() -> Box<dyn Write + Send> {
    let _ = io::stdout().flush();
    match Patient::own(1) {
        Some(p) => Box::new(p),
        None => Box::new(io::sink()),
    }
}
