//! Replacing a regular file atomically: the results go to a new file in the
//! destination's directory (unnamed with O_TMPFILE, else exclusively under an
//! unpredictable name), which is then linked or renamed over the destination.

use std::{ffi::OsString, fs::File, io, os::fd::OwnedFd, path::Path};

use rustix::fs::{self as rfs, AtFlags, FileType, Mode, OFlags};

use super::{DestError, errno, type_name_of};

/// Puts the finished `file` in place of `name`: links the unnamed file, or renames the
/// named one (`tmp`, then forgotten: removed or in place).
pub(super) fn put_in_place(
    dir: &OwnedFd,
    name: &std::ffi::OsStr,
    file: &File,
    tmp: &mut Option<OsString>,
    path: &Path,
) -> Result<(), DestError> {
    match tmp.take() {
        None => link_over(dir, name, file, path),
        Some(t) => rename_over(dir, &t, name, path),
    }
}

/// A new file in `dir` for the results that will replace `name`, made with the
/// process's umask: unnamed (O_TMPFILE), or, where the file system cannot make one,
/// exclusively under an unpredictable name.
pub(super) fn new_file(
    dir: &OwnedFd,
    name: &std::ffi::OsStr,
    path: &Path,
) -> Result<(File, Option<OsString>), DestError> {
    let denied = |e: rustix::io::Errno| DestError::Io {
        path: path.display().to_string(),
        source: io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!("its directory is not writable ({})", io::Error::from(e)),
        ),
    };
    let mode = Mode::from_raw_mode(0o666);
    match rfs::openat(
        dir,
        ".",
        OFlags::TMPFILE | OFlags::WRONLY | OFlags::CLOEXEC,
        mode,
    ) {
        Ok(fd) => return Ok((File::from(fd), None)),
        Err(
            e @ (rustix::io::Errno::ACCESS | rustix::io::Errno::PERM | rustix::io::Errno::ROFS),
        ) => {
            return Err(denied(e));
        }
        // No O_TMPFILE here (EOPNOTSUPP; EISDIR or EINVAL from kernels and file systems
        // that do not know the flag): a fresh name instead.
        Err(_) => {}
    }
    let mut tries = 0;
    loop {
        let tmp = temp_name(name);
        match rfs::openat(
            dir,
            &tmp,
            OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::WRONLY | OFlags::CLOEXEC,
            mode,
        ) {
            Ok(fd) => return Ok((File::from(fd), Some(tmp))),
            Err(rustix::io::Errno::EXIST) if tries < 8 => tries += 1,
            Err(
                e @ (rustix::io::Errno::ACCESS | rustix::io::Errno::PERM | rustix::io::Errno::ROFS),
            ) => {
                return Err(denied(e));
            }
            Err(e) => return Err(errno(path)(e)),
        }
    }
}

/// An unpredictable name for the finished file before it is renamed into place.
fn temp_name(name: &std::ffi::OsStr) -> OsString {
    let mut r = [0u8; 8];
    // SAFETY: writes at most r.len() bytes into r.
    let n = unsafe { libc::getrandom(r.as_mut_ptr().cast(), r.len(), 0) };
    let v = if n == r.len() as isize {
        u64::from_ne_bytes(r)
    } else {
        // No entropy source: the name still never exists beforehand (linkat refuses
        // an existing name), it is only guessable.
        crate::proc::process::monotonic_ns() ^ u64::from(std::process::id())
    };
    let mut t = OsString::from(".");
    t.push(name);
    t.push(format!(".{v:016x}.tmp"));
    t
}

/// Gives the unnamed `file` a fresh name in `dir`, then renames it over `name`, unless
/// `name` has meanwhile become something that is not a regular file.
fn link_over(
    dir: &OwnedFd,
    name: &std::ffi::OsStr,
    file: &File,
    path: &Path,
) -> Result<(), DestError> {
    let mut tmp = temp_name(name);
    let mut tries = 0;
    loop {
        // linkat with AT_EMPTY_PATH needs CAP_DAC_READ_SEARCH; through /proc/self/fd it
        // needs nothing more than the descriptor.
        let src = format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(file));
        match rfs::linkat(rfs::CWD, src.as_str(), dir, &tmp, AtFlags::SYMLINK_FOLLOW) {
            Ok(()) => break,
            Err(rustix::io::Errno::EXIST) if tries < 8 => {
                tries += 1;
                tmp = temp_name(name);
            }
            Err(e) => return Err(errno(path)(e)),
        }
    }
    rename_over(dir, &tmp, name, path)
}

/// Renames the finished file `tmp` over `name` in `dir`, unless `name` has meanwhile
/// become something that is not a regular file; `tmp` is removed when it cannot be.
fn rename_over(
    dir: &OwnedFd,
    tmp: &std::ffi::OsStr,
    name: &std::ffi::OsStr,
    path: &Path,
) -> Result<(), DestError> {
    let unlink_tmp = || {
        let _ = rfs::unlinkat(dir, tmp, AtFlags::empty());
    };
    match rfs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) => {
            let ft = FileType::from_raw_mode(st.st_mode);
            if !matches!(ft, FileType::RegularFile | FileType::Symlink) {
                unlink_tmp();
                return Err(DestError::Changed {
                    path: path.display().to_string(),
                    kind: type_name_of(ft),
                });
            }
        }
        Err(rustix::io::Errno::NOENT) => {}
        Err(e) => {
            unlink_tmp();
            return Err(errno(path)(e));
        }
    }
    rfs::renameat(dir, tmp, dir, name).map_err(|e| {
        unlink_tmp();
        errno(path)(e)
    })
}
