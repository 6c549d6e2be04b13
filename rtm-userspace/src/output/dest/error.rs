//! Why a destination cannot be written: [`DestError`], and helpers that attach the
//! destination's path to an I/O error.

use std::{io, path::Path};

/// Why a destination cannot be written.
#[derive(Debug, thiserror::Error)]
pub enum DestError {
    /// The destination's directory does not exist or is not a directory.
    #[error("cannot write {path}: its directory {dir} {problem}")]
    Directory {
        /// The destination.
        path: String,
        /// Its directory.
        dir: String,
        /// What is wrong with it.
        problem: String,
    },
    /// The destination is something results cannot be written to.
    #[error("cannot write {path}: it is {kind}; give a file name{hint}")]
    Kind {
        /// The destination.
        path: String,
        /// What it is.
        kind: &'static str,
        /// What to do instead.
        hint: &'static str,
    },
    /// A symbolic link, in the path or at its end, that belongs to another user.
    #[error(
        "cannot write {path}: {link} is a symbolic link owned by user {owner}, not by root \
         or you; refusing to follow it (someone who can write to {dir} may have planted \
         it). Remove it or give a path without it"
    )]
    ForeignLink {
        /// The destination.
        path: String,
        /// The link (the destination itself, or one of its directories).
        link: String,
        /// The link's owner.
        owner: u32,
        /// The directory it is in.
        dir: String,
    },
    /// Something written through (a FIFO, a device) that belongs to another user.
    #[error(
        "cannot write {path}: refusing {kind} owned by user {owner}, not by root or you \
         (its owner may be the one reading it). Remove it, or give a regular file or a \
         FIFO of your own"
    )]
    ForeignFile {
        /// The destination.
        path: String,
        /// What it is.
        kind: &'static str,
        /// Its owner.
        owner: u32,
    },
    /// A FIFO that no reader opened in time.
    #[error(
        "cannot write {path}: no reader opened the FIFO within {secs} s; start its reader \
         first"
    )]
    NoReader {
        /// The destination.
        path: String,
        /// How long it was waited for.
        secs: u64,
    },
    /// A symbolic link to nothing: writing through it would create its target.
    #[error(
        "cannot write {path}: it is a symbolic link to {target}, which does not exist; give \
         the real path"
    )]
    Dangling {
        /// The destination.
        path: String,
        /// Where the link points.
        target: String,
    },
    /// The destination's file system does not hold ordinary files.
    #[error("cannot write {path}: it is on {fs}, which holds no ordinary files; give another path")]
    SpecialFs {
        /// The destination.
        path: String,
        /// The file system.
        fs: &'static str,
    },
    /// The destination names a descriptor the tracer does not have open.
    #[error("cannot write {path}: descriptor {fd} is not open in rtm-trace")]
    NoSuchFd {
        /// The destination.
        path: String,
        /// The descriptor.
        fd: i32,
    },
    /// The destination changed between the check and the write.
    #[error(
        "cannot write {path}: it changed while tracing (it is now {kind}); nothing was replaced"
    )]
    Changed {
        /// The destination.
        path: String,
        /// What it is now.
        kind: &'static str,
    },
    /// A system call failed.
    #[error("cannot write {path}: {source}")]
    Io {
        /// The destination.
        path: String,
        /// Why.
        #[source]
        source: io::Error,
    },
}

pub(super) fn io_err(path: &Path) -> impl Fn(io::Error) -> DestError + '_ {
    move |source| DestError::Io {
        path: path.display().to_string(),
        source,
    }
}

pub(super) fn errno(path: &Path) -> impl Fn(rustix::io::Errno) -> DestError + '_ {
    move |e| DestError::Io {
        path: path.display().to_string(),
        source: e.into(),
    }
}
