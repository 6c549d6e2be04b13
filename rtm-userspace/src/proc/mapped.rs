//! Files of a target process, opened as the process sees them: its root directory and
//! /usr/lib/debug held open ([`ProcRoot`]), and the files it maps, opened through the
//! mapping itself ([`MappedFile`]). Built on the bounded, non-blocking opens of
//! [`super::files`].

use std::{fs::File, io, os::unix::fs::MetadataExt as _, path::PathBuf};

use super::{
    address_space::Module,
    files::{MAX_OBJECT_BYTES, open_regular, parse_dev, read_at_most},
    process,
};

/// Directories of a process's mount namespace held open, to open files there later, even
/// after it has exited: its root, and its `/usr/lib/debug` (when the namespace goes
/// away the mounts under the root are detached from it, but a mount whose directory is
/// held open stays reachable through it).
#[derive(Debug)]
pub struct ProcRoot {
    /// Its root directory.
    pub root: std::os::fd::OwnedFd,
    /// Its /usr/lib/debug, when it has one.
    pub debug: Option<std::os::fd::OwnedFd>,
}

/// The directories of `pid`'s mount namespace (see [`ProcRoot`]).
pub fn open_root(pid: u32) -> io::Result<ProcRoot> {
    use rustix::fs::{Mode, OFlags, ResolveFlags};
    let path = process::proc_dir(pid).join("root");
    let root = rustix::fs::open(
        &path,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let debug = rustix::fs::openat2(
        &root,
        "usr/lib/debug",
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
        ResolveFlags::IN_ROOT | ResolveFlags::NO_MAGICLINKS,
    )
    .ok();
    Ok(ProcRoot { root, debug })
}

/// Where a file a process maps can be opened, best first: the mapping itself (the inode
/// the process runs, even if the path now names another file or nothing), the path
/// through the process's root (its mount namespace), then the same path here.
#[derive(Debug, Clone)]
pub struct MappedFile {
    /// The process.
    pub pid: u32,
    /// One mapping of the file, `(start, end)`, as /proc/PID/map_files names it.
    pub range: Option<(u64, u64)>,
    /// The path inside the process's mount namespace.
    pub path: PathBuf,
    /// The device and inode the process maps (0 when not known).
    pub dev: u64,
    /// The inode.
    pub inode: u64,
}

/// Why a mapped file could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum MappedFileError {
    /// The path now names another file than the one the process runs, and the mapping
    /// itself could not be opened (the process is gone).
    #[error(
        "{path} was replaced on disk after PID {pid} started (it maps inode {mapped}, the \
         path now names inode {found}), and the running image cannot be read (is the \
         process gone?)"
    )]
    Replaced {
        /// The path.
        path: String,
        /// The process.
        pid: u32,
        /// The inode the process maps.
        mapped: u64,
        /// The inode the path names now.
        found: u64,
    },
    /// Nothing could be opened.
    #[error("cannot open {path}: {source}")]
    Open {
        /// The path.
        path: String,
        /// Why (the last attempt's error).
        #[source]
        source: io::Error,
    },
}

impl MappedFile {
    /// The map_files entry of the mapping.
    pub fn map_files_path(&self) -> Option<PathBuf> {
        self.range
            .map(|(s, e)| PathBuf::from(format!("/proc/{}/map_files/{s:x}-{e:x}", self.pid)))
    }

    /// Opens the file the process maps (a regular file of at most `max` bytes) and
    /// returns it with a path that names that same inode for as long as the process
    /// maps it (for APIs that take a path: uprobes, the symbolizer). The path is the
    /// map_files entry when it opens, else the one that opened with a matching inode.
    pub fn open(&self, max: u64) -> Result<(File, PathBuf), MappedFileError> {
        let mut last: Option<io::Error> = None;
        if let Some(p) = self.map_files_path() {
            match open_regular(&p, max) {
                Ok(f) => return Ok((f, p)),
                Err(e) => last = Some(e),
            }
        }
        let host = process::host_path(self.pid, &self.path);
        for p in [host, self.path.clone()] {
            match open_regular(&p, max) {
                Ok(f) => {
                    let meta = f.metadata().map_err(|source| MappedFileError::Open {
                        path: p.display().to_string(),
                        source,
                    })?;
                    if self.inode != 0
                        && (meta.ino() != self.inode || (self.dev != 0 && meta.dev() != self.dev))
                    {
                        return Err(MappedFileError::Replaced {
                            path: self.path.display().to_string(),
                            pid: self.pid,
                            mapped: self.inode,
                            found: meta.ino(),
                        });
                    }
                    return Ok((f, p));
                }
                Err(e) => last = Some(e),
            }
        }
        Err(MappedFileError::Open {
            path: self.path.display().to_string(),
            source: last.unwrap_or_else(|| io::Error::from(io::ErrorKind::NotFound)),
        })
    }

    /// Reads the whole file the process maps.
    pub fn read(&self) -> Result<(Vec<u8>, PathBuf), MappedFileError> {
        let (f, p) = self.open(MAX_OBJECT_BYTES)?;
        let bytes = read_at_most(f, MAX_OBJECT_BYTES as usize, &p).map_err(|source| {
            MappedFileError::Open {
                path: self.path.display().to_string(),
                source,
            }
        })?;
        Ok((bytes, p))
    }
}

impl Module {
    /// How to open the file `pid` maps here (its running image, not what its path
    /// names now).
    pub fn mapped_file(&self, pid: u32) -> MappedFile {
        MappedFile {
            pid,
            range: self.range,
            path: self.path.clone(),
            dev: parse_dev(&self.dev).unwrap_or(0),
            inode: self.inode,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::proc::files::{MAX_PROC_BYTES, read_proc};

    #[test]
    fn the_running_image_opens_through_map_files() {
        let me = std::process::id();
        let maps =
            String::from_utf8(read_proc("/proc/self/maps", MAX_PROC_BYTES).unwrap()).unwrap();
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        let m = super::super::address_space::parse_mappings(&maps)
            .into_iter()
            .find(|m| Path::new(&m.path) == exe)
            .unwrap();
        let f = MappedFile {
            pid: me,
            range: Some((m.start, m.end)),
            path: exe.clone(),
            dev: parse_dev(&m.dev).unwrap(),
            inode: m.inode,
        };
        let (file, path) = f.open(MAX_OBJECT_BYTES).unwrap();
        assert!(path.starts_with("/proc"), "{}", path.display());
        assert_eq!(file.metadata().unwrap().ino(), m.inode);
        // The path fallback checks the inode: a different file at the path is refused.
        let wrong = MappedFile {
            range: None,
            inode: m.inode + 1,
            ..f
        };
        assert!(matches!(
            wrong.open(MAX_OBJECT_BYTES),
            Err(MappedFileError::Replaced { .. })
        ));
    }
}
