//! Opening and reading files that a traced program controls: its executable and
//! libraries (possibly replaced, deleted, or swapped for a FIFO or a device after it
//! started) and its /proc entries (whose size it decides).
//!
//! Every open is non-blocking (a FIFO never holds the tracer), the type is checked on
//! the descriptor (not on the path, which can change in between), and every read is
//! bounded. The running image of a mapped file is opened through
//! /proc/PID/map_files, which names the very inode the process maps, whatever is at its
//! path now.

use std::{
    fs::File,
    io::{self, Read},
    os::unix::fs::OpenOptionsExt as _,
    path::Path,
};

/// Largest /proc file read (a process's maps with the kernel's default limit of 65,530
/// mappings is about 7 MiB).
pub const MAX_PROC_BYTES: usize = 64 << 20;

/// Largest part of a process's environment read (it only needs the MPI launcher's
/// variables).
pub const MAX_ENVIRON_BYTES: usize = 4 << 20;

/// Largest object file read whole (the largest shared libraries are a few hundred MiB).
pub const MAX_OBJECT_BYTES: u64 = 1 << 31;

fn invalid(msg: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg.into())
}

/// Opens `path` for reading without blocking (a FIFO returns at once), without making it
/// a controlling terminal.
fn open_nonblocking(path: &Path) -> io::Result<File> {
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC)
        .open(path)
}

/// What a file type is called in messages.
pub fn type_name(ft: std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt as _;
    if ft.is_file() {
        "a regular file"
    } else if ft.is_dir() {
        "a directory"
    } else if ft.is_fifo() {
        "a FIFO"
    } else if ft.is_char_device() {
        "a character device"
    } else if ft.is_block_device() {
        "a block device"
    } else if ft.is_socket() {
        "a socket"
    } else if ft.is_symlink() {
        "a symbolic link"
    } else {
        "not a regular file"
    }
}

/// Opens a regular file of at most `max` bytes; anything else (a FIFO, a device, a
/// directory) is refused without blocking.
pub fn open_regular(path: &Path, max: u64) -> io::Result<File> {
    let file = open_nonblocking(path)?;
    regular_of_at_most(file, path, max)
}

/// `file` (opened as `path`) if it is a regular file of at most `max` bytes.
fn regular_of_at_most(file: File, path: &Path, max: u64) -> io::Result<File> {
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(invalid(format!(
            "{} is {}",
            path.display(),
            type_name(meta.file_type())
        )));
    }
    if meta.len() > max {
        return Err(invalid(format!(
            "{} is {} bytes, more than the {max} read at most",
            path.display(),
            meta.len()
        )));
    }
    Ok(file)
}

/// Reads at most `max` bytes of an open file; more is an error.
pub(super) fn read_at_most(mut file: impl Read, max: usize, what: &Path) -> io::Result<Vec<u8>> {
    let mut out = Vec::new();
    file.by_ref().take(max as u64 + 1).read_to_end(&mut out)?;
    if out.len() > max {
        return Err(invalid(format!(
            "{} is longer than the {max} bytes read at most",
            what.display()
        )));
    }
    Ok(out)
}

/// Opens `path` inside the directory tree `root` (a process's root, held open), resolved
/// as if `root` were `/`: no symbolic link or `..` leads out of it. A regular file of at
/// most `max` bytes, as [`open_regular`].
pub fn open_regular_in(
    root: std::os::fd::BorrowedFd<'_>,
    path: &Path,
    max: u64,
) -> io::Result<File> {
    use rustix::fs::{Mode, OFlags, ResolveFlags};
    let rel = path.strip_prefix("/").unwrap_or(path);
    let fd = rustix::fs::openat2(
        root,
        rel,
        OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC,
        Mode::empty(),
        ResolveFlags::IN_ROOT | ResolveFlags::NO_MAGICLINKS,
    )?;
    let file = File::from(fd);
    regular_of_at_most(file, path, max)
}

/// Reads a whole regular file of at most `max` bytes.
pub fn read_regular(path: &Path, max: u64) -> io::Result<Vec<u8>> {
    let file = open_regular(path, max)?;
    read_at_most(file, max as usize, path)
}

/// Reads a /proc (or /sys) file of at most `max` bytes. Such files report size 0, so
/// the bound is on what is read.
pub fn read_proc(path: impl AsRef<Path>, max: usize) -> io::Result<Vec<u8>> {
    let path = path.as_ref();
    let file = open_nonblocking(path)?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(invalid(format!(
            "{} is {}",
            path.display(),
            type_name(meta.file_type())
        )));
    }
    read_at_most(file, max, path)
}

/// Reads the first `max` bytes of a /proc file (the rest is not needed).
pub fn read_proc_prefix(path: impl AsRef<Path>, max: usize) -> io::Result<Vec<u8>> {
    let path = path.as_ref();
    let file = open_nonblocking(path)?;
    if !file.metadata()?.is_file() {
        return Err(invalid(format!("{} is not a regular file", path.display())));
    }
    let mut out = Vec::new();
    file.take(max as u64).read_to_end(&mut out)?;
    Ok(out)
}

/// A /proc text file, bounded, with invalid UTF-8 replaced (a thread name is bytes).
pub fn read_proc_text(path: impl AsRef<Path>) -> io::Result<String> {
    read_proc(path, MAX_PROC_BYTES).map(|b| match String::from_utf8(b) {
        Ok(s) => s,
        Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
    })
}

/// The device number /proc/PID/maps prints ("fd:01", major:minor in hex) as the
/// st_dev of the file.
pub fn parse_dev(dev: &str) -> Option<u64> {
    let (major, minor) = dev.split_once(':')?;
    let major = u32::from_str_radix(major, 16).ok()?;
    let minor = u32::from_str_radix(minor, 16).ok()?;
    Some(libc::makedev(major, minor))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fifo_is_refused_at_once() {
        let dir = std::env::temp_dir().join(format!("rtm-files-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let fifo = dir.join("fifo");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let t = std::time::Instant::now();
        let e = read_regular(&fifo, 1 << 20).unwrap_err();
        assert!(e.to_string().contains("a FIFO"), "{e}");
        assert!(read_proc(&fifo, 100).is_err());
        assert!(t.elapsed() < std::time::Duration::from_secs(1));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn reads_are_bounded() {
        assert!(read_regular(Path::new("/dev/zero"), 1 << 20).is_err());
        assert!(read_proc("/dev/zero", 100).is_err());
        let e = read_proc("/proc/self/maps", 10).unwrap_err();
        assert!(e.to_string().contains("longer than"), "{e}");
        assert!(read_proc("/proc/self/maps", MAX_PROC_BYTES).unwrap().len() > 10);
        assert_eq!(read_proc_prefix("/proc/self/maps", 10).unwrap().len(), 10);
        let exe = read_regular(Path::new("/proc/self/exe"), MAX_OBJECT_BYTES).unwrap();
        assert!(exe.starts_with(b"\x7fELF"));
        assert!(read_regular(Path::new("/proc/self/exe"), 100).is_err());
    }

    #[test]
    fn device_numbers_parse_as_maps_prints_them() {
        assert_eq!(parse_dev("fd:01"), Some(libc::makedev(0xfd, 1)));
        assert_eq!(parse_dev("00:00"), Some(0));
        assert_eq!(parse_dev("zz"), None);
    }
}
