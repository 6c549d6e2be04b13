//! Where results go: standard output, or a file named on the command line, checked
//! before tracing starts so a typo does not cost the trace, and written as root without
//! letting anyone who can write to the destination's directory redirect the write.
//!
//! - A regular file (or a name that does not exist yet) is replaced atomically: the
//!   results go to a new, unnamed file (O_TMPFILE) in the destination's directory, made
//!   with the invoking user's umask, which is given an unpredictable name and renamed
//!   over the destination. On a file system without O_TMPFILE (9p, some NFS and FUSE
//!   mounts) the new file is made exclusively (O_CREAT|O_EXCL|O_NOFOLLOW) under an
//!   unpredictable name instead, then renamed the same way. Nothing is ever opened by a
//!   predictable name, so a link planted at one is never followed.
//! - A path that is not a regular file (/dev/null, a terminal, a FIFO) is written
//!   through, never replaced, when it belongs to root or to the invoking user (a FIFO
//!   another user made may have that user's reader on it); character devices under
//!   /dev are written whoever owns them. Block devices, directories and sockets are
//!   refused.
//! - A symbolic link, at the end of the path or anywhere in it, is followed only when it
//!   belongs to root or to the invoking user (a link planted by someone else is refused,
//!   as the kernel's protected_symlinks does in sticky directories). The path is
//!   resolved one component at a time by descriptor ([`resolve`]), and the directory
//!   found is kept open: it is never looked up by name again.
//! - /dev/stdout, /dev/stderr, /dev/fd/N and /proc/self/fd/N are the tracer's own
//!   descriptors, written to directly (as a shell does), not reopened.
//!
//! Every blocking step (a FIFO nobody reads yet, a reader that does not read, a full
//! pipe) gives up at Ctrl-C or SIGTERM, a FIFO with no reader after [`READER_WAIT`](through::READER_WAIT), and
//! every write error is reported.
//!
//! This file checks a destination ([`Dest`]); `error` holds [`DestError`], `resolve`
//! walks the path, `replace` makes the new file and puts it in place of a regular one,
//! `through` opens and writes anything else, and `stream` writes the results.

use std::{
    ffi::OsString,
    fs::File,
    io::{self, Write},
    os::fd::OwnedFd,
    path::{Path, PathBuf},
};

use rustix::fs::{self as rfs, AtFlags, FileType};

mod error;
mod replace;
mod resolve;
pub(crate) mod stream;
mod through;

pub use error::DestError;
use error::{errno, io_err};
use replace::{new_file, put_in_place};
use through::{Patient, open_through, stdout_writer, under_dev};

/// A checked destination.
#[derive(Debug)]
pub struct Dest {
    path: PathBuf,
    how: How,
}

#[derive(Debug)]
enum How {
    /// Standard output.
    Stdout,
    /// A copy of one of the tracer's descriptors.
    Descriptor(OwnedFd),
    /// Not a regular file: `name` in `dir`, opened for writing as it is at write
    /// time, if it is still the file checked (device and inode).
    Through {
        dir: OwnedFd,
        name: OsString,
        id: (u64, u64),
    },
    /// A regular file replaced by renaming a new one over it.
    Replace {
        dir: OwnedFd,
        name: OsString,
        /// The first new file, made while checking (proof the directory takes one).
        ready: Option<File>,
        /// The new file's name where the file system cannot make one without a name
        /// (no O_TMPFILE); removed unless renamed into place.
        tmp: Option<OsString>,
    },
}

impl Drop for Dest {
    /// A named new file never written (the run failed or was cut short) is removed.
    fn drop(&mut self) {
        if let How::Replace {
            dir,
            tmp: Some(tmp),
            ..
        } = &self.how
        {
            let _ = rfs::unlinkat(dir, tmp, AtFlags::empty());
        }
    }
}

/// The user who ran rtm-trace (through sudo: the one sudo names).
fn invoking_uid() -> u32 {
    std::env::var("SUDO_UID")
        .ok()
        .and_then(|v| v.parse().ok())
        // SAFETY: getuid has no preconditions.
        .unwrap_or_else(|| unsafe { libc::getuid() })
}

/// The descriptor a path names when it is one of the tracer's own.
fn own_descriptor(path: &Path) -> Option<i32> {
    let s = path.to_str()?;
    match s {
        "/dev/stdout" => Some(1),
        "/dev/stderr" => Some(2),
        _ => s
            .strip_prefix("/dev/fd/")
            .or_else(|| s.strip_prefix("/proc/self/fd/"))
            .and_then(|n| n.parse().ok())
            .filter(|n| *n >= 0),
    }
}

fn special_fs(fd: impl std::os::fd::AsFd) -> Option<&'static str> {
    let st = rfs::fstatfs(fd).ok()?;
    const PROC: i64 = 0x9fa0;
    const SYSFS: i64 = 0x6265_6572;
    #[allow(clippy::unnecessary_cast)] // f_type is not i64 on every target
    match st.f_type as i64 {
        PROC => Some("/proc"),
        SYSFS => Some("sysfs"),
        0x6462_6720 => Some("debugfs"),
        0x7472_6163 => Some("tracefs"),
        0x6367_7270 | 0x0027_e0eb => Some("a cgroup file system"),
        _ => None,
    }
}

/// What is wrong with writing to something of type `ft` (None: it can be written
/// through).
fn refuse_kind(ft: FileType) -> Option<(&'static str, &'static str)> {
    match ft {
        FileType::Directory => Some(("a directory", " inside it")),
        FileType::BlockDevice => Some((
            "a block device",
            " (rtm-trace never writes results onto a disk device)",
        )),
        FileType::Socket => Some(("a socket", "")),
        _ => None,
    }
}

impl Dest {
    /// Standard output.
    pub fn stdout() -> Self {
        Self {
            path: PathBuf::from("standard output"),
            how: How::Stdout,
        }
    }

    /// The destination as given.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether results go to standard output.
    pub fn is_stdout(&self) -> bool {
        matches!(self.how, How::Stdout) || matches!(own_descriptor(&self.path), Some(1))
    }

    /// Checks that results can be written to `path`, before anything is traced.
    pub fn check(path: &Path) -> Result<Self, DestError> {
        if path.as_os_str() == "-" {
            return Ok(Self::stdout());
        }
        if let Some(fd) = own_descriptor(path) {
            // SAFETY: a descriptor number; fcntl only duplicates it if it is open.
            let dup = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 3) };
            if dup < 0 {
                return Err(DestError::NoSuchFd {
                    path: path.display().to_string(),
                    fd,
                });
            }
            // SAFETY: fcntl returned a new descriptor that we own.
            let owned = unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(dup) };
            let st = rfs::fstat(&owned).map_err(errno(path))?;
            if let Some((kind, hint)) = refuse_kind(FileType::from_raw_mode(st.st_mode)) {
                return Err(DestError::Kind {
                    path: path.display().to_string(),
                    kind,
                    hint,
                });
            }
            return Ok(Self {
                path: path.to_path_buf(),
                how: How::Descriptor(owned),
            });
        }
        let r = resolve::resolve(path)?;
        let Some(st) = r.st else {
            return Self::replace(path, r.dir, r.name);
        };
        let ft = FileType::from_raw_mode(st.st_mode);
        if ft == FileType::RegularFile {
            return Self::replace(path, r.dir, r.name);
        }
        if let Some((kind, hint)) = refuse_kind(ft) {
            return Err(DestError::Kind {
                path: path.display().to_string(),
                kind,
                hint,
            });
        }
        // /dev's terminals and /dev/null are written whoever owns them.
        let dev = ft == FileType::CharacterDevice && under_dev(&st);
        if !dev && !resolve::trusted(st.st_uid) {
            return Err(DestError::ForeignFile {
                path: path.display().to_string(),
                kind: type_name_of(ft),
                owner: st.st_uid,
            });
        }
        Ok(Self {
            path: path.to_path_buf(),
            how: How::Through {
                dir: r.dir,
                name: r.name,
                id: (st.st_dev, st.st_ino),
            },
        })
    }

    fn replace(path: &Path, dir: OwnedFd, name: OsString) -> Result<Self, DestError> {
        let (ready, tmp) = new_file(&dir, &name, path)?;
        Ok(Self {
            path: path.to_path_buf(),
            how: How::Replace {
                dir,
                name,
                ready: Some(ready),
                tmp,
            },
        })
    }

    /// Writes the results: `body` produces them into the writer. The destination is
    /// replaced (or written through) only once `body` succeeded.
    pub fn write(
        &mut self,
        body: &mut dyn FnMut(&mut dyn Write) -> io::Result<()>,
    ) -> Result<(), DestError> {
        let path = self.path.clone();
        match &mut self.how {
            How::Stdout => {
                let mut w = io::BufWriter::with_capacity(1 << 16, stdout_writer());
                body(&mut w).and_then(|_| w.flush()).map_err(io_err(&path))
            }
            How::Descriptor(fd) => {
                let dup = fd.try_clone().map_err(io_err(&path))?;
                let mut w = io::BufWriter::new(Patient::new(File::from(dup)));
                body(&mut w).and_then(|_| w.flush()).map_err(io_err(&path))
            }
            How::Through { dir, name, id } => {
                let file = open_through(dir, name, *id, &path)?;
                let mut w = io::BufWriter::with_capacity(1 << 16, Patient::new(file));
                body(&mut w).and_then(|_| w.flush()).map_err(io_err(&path))
            }
            How::Replace {
                dir,
                name,
                ready,
                tmp,
            } => {
                let file = match ready.take() {
                    Some(f) => f,
                    None => {
                        let (f, t) = new_file(dir, name, &path)?;
                        *tmp = t;
                        f
                    }
                };
                let mut w = io::BufWriter::with_capacity(1 << 16, file);
                body(&mut w)
                    .and_then(|_| w.flush())
                    .map_err(io_err(&path))?;
                let file = w.into_inner().map_err(|e| io_err(&path)(e.into_error()))?;
                file.sync_all().map_err(io_err(&path))?;
                put_in_place(dir, name, &file, tmp, &path)
            }
        }
    }
}

fn type_name_of(ft: FileType) -> &'static str {
    match ft {
        FileType::RegularFile => "a regular file",
        FileType::Directory => "a directory",
        FileType::Symlink => "a symbolic link",
        FileType::Fifo => "a FIFO",
        FileType::Socket => "a socket",
        FileType::CharacterDevice => "a character device",
        FileType::BlockDevice => "a block device",
        FileType::Unknown => "of an unknown type",
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::MetadataExt as _;

    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("rtm-dest-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn write_text(d: &mut Dest, text: &str) -> Result<(), DestError> {
        d.write(&mut |w| w.write_all(text.as_bytes()))
    }

    #[test]
    fn a_new_file_is_created_and_an_old_one_replaced() {
        let dir = scratch("new");
        let p = dir.join("out.json");
        let mut d = Dest::check(&p).unwrap();
        // Nothing named exists until the results are written.
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
        write_text(&mut d, "one").unwrap();
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "one");
        write_text(&mut d, "two").unwrap();
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "two");
        assert_eq!(
            std::fs::read_dir(&dir).unwrap().count(),
            1,
            "no temporaries left"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_umask_applies() {
        let dir = scratch("umask");
        let p = dir.join("out");
        // SAFETY: umask only changes this process's file-creation mask.
        let old = unsafe { libc::umask(0o077) };
        let r = Dest::check(&p).and_then(|mut d| write_text(&mut d, "x"));
        // SAFETY: as above.
        unsafe { libc::umask(old) };
        r.unwrap();
        assert_eq!(std::fs::metadata(&p).unwrap().mode() & 0o777, 0o600);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_planted_temporary_name_is_never_followed() {
        let dir = scratch("planted");
        let victim = dir.join("victim");
        std::fs::write(&victim, "secret").unwrap();
        // The name the old code used for its temporary file.
        std::os::unix::fs::symlink(&victim, dir.join("out.json.json.tmp")).unwrap();
        std::os::unix::fs::symlink(&victim, dir.join("out.json.tmp")).unwrap();
        let p = dir.join("out.json");
        let mut d = Dest::check(&p).unwrap();
        write_text(&mut d, "results").unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "secret");
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "results");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn devices_are_written_through_and_never_replaced() {
        let mut d = Dest::check(Path::new("/dev/null")).unwrap();
        write_text(&mut d, "discarded").unwrap();
        let m = std::fs::symlink_metadata("/dev/null").unwrap();
        assert!(std::os::unix::fs::FileTypeExt::is_char_device(
            &m.file_type()
        ));
        // A full device is an error, not a silent loss.
        let mut d = Dest::check(Path::new("/dev/full")).unwrap();
        let e = write_text(&mut d, "x").unwrap_err();
        assert!(e.to_string().contains("No space left"), "{e}");
    }

    #[test]
    fn a_link_to_a_device_is_written_through() {
        let dir = scratch("devlink");
        let l = dir.join("null");
        std::os::unix::fs::symlink("/dev/null", &l).unwrap();
        let mut d = Dest::check(&l).unwrap();
        write_text(&mut d, "x").unwrap();
        assert!(
            std::fs::symlink_metadata(&l)
                .unwrap()
                .file_type()
                .is_symlink()
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn bad_destinations_are_refused_up_front_with_the_reason() {
        let e = Dest::check(Path::new("/nonexistent-dir/x.json")).unwrap_err();
        assert!(e.to_string().contains("does not exist"), "{e}");
        let e = Dest::check(Path::new("/proc/version")).unwrap_err();
        assert!(e.to_string().contains("/proc"), "{e}");
        let e = Dest::check(Path::new("/tmp")).unwrap_err();
        assert!(e.to_string().contains("directory"), "{e}");
        let e = Dest::check(Path::new("/etc/hostname/x")).unwrap_err();
        assert!(e.to_string().contains("not a directory"), "{e}");
        let dir = scratch("dangling");
        let l = dir.join("out.json");
        std::os::unix::fs::symlink(dir.join("nowhere"), &l).unwrap();
        let e = Dest::check(&l).unwrap_err();
        assert!(e.to_string().contains("does not exist"), "{e}");
        assert!(!dir.join("nowhere").exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_fifo_is_written_through_to_its_reader() {
        let dir = scratch("fifo");
        let f = dir.join("fifo");
        let c = std::ffi::CString::new(f.to_str().unwrap()).unwrap();
        // SAFETY: a valid path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let mut d = Dest::check(&f).unwrap();
        // With a reader it is written through.
        let reader = {
            let f = f.clone();
            std::thread::spawn(move || std::fs::read_to_string(f).unwrap())
        };
        // The reader opens the FIFO at some point; the writer waits for it.
        write_text(&mut d, "through the fifo").unwrap();
        assert_eq!(reader.join().unwrap(), "through the fifo");
        let ft = std::fs::symlink_metadata(&f).unwrap().file_type();
        assert!(std::os::unix::fs::FileTypeExt::is_fifo(&ft));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn own_descriptors_are_recognized() {
        assert_eq!(own_descriptor(Path::new("/dev/stdout")), Some(1));
        assert_eq!(own_descriptor(Path::new("/dev/fd/5")), Some(5));
        assert_eq!(own_descriptor(Path::new("/proc/self/fd/7")), Some(7));
        assert_eq!(own_descriptor(Path::new("/dev/stdoutx")), None);
        assert!(matches!(
            Dest::check(Path::new("/dev/fd/987")),
            Err(DestError::NoSuchFd { fd: 987, .. })
        ));
    }
}
