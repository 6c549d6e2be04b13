//! Which pthread functions are probed, and finding the library that defines them in a
//! given process (its own libc, under /proc/PID/root for a container).

use std::path::PathBuf;

use rtm_common::{SyncOp, names};

use crate::target::{
    elf::{ElfError, ElfSymbols},
    process::{self, ProcessError},
};

/// Entry or return probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProbeKind {
    /// At the function's entry.
    Entry,
    /// At its return.
    Return,
}

/// One probe to place.
#[derive(Debug, Clone, Copy)]
pub struct ProbeSpec {
    /// Function symbol.
    pub function: &'static str,
    /// eBPF program name.
    pub program: &'static str,
    /// Entry or return.
    pub kind: ProbeKind,
    /// Cookie telling a shared program which operation it is on.
    pub cookie: Option<SyncOp>,
}

const fn entry(function: &'static str, program: &'static str, op: SyncOp) -> ProbeSpec {
    ProbeSpec {
        function,
        program,
        kind: ProbeKind::Entry,
        cookie: Some(op),
    }
}

const fn ret(function: &'static str) -> ProbeSpec {
    ProbeSpec {
        function,
        program: names::PROG_MUTEX_LOCK_RETURN,
        kind: ProbeKind::Return,
        cookie: None,
    }
}

/// The mutex probes: every call of lock, trylock, timedlock and unlock.
pub const MUTEX_PROBES: [ProbeSpec; 7] = [
    entry(
        "pthread_mutex_lock",
        names::PROG_MUTEX_LOCK_ENTER,
        SyncOp::Lock,
    ),
    ret("pthread_mutex_lock"),
    entry(
        "pthread_mutex_trylock",
        names::PROG_MUTEX_LOCK_ENTER,
        SyncOp::TryLock,
    ),
    ret("pthread_mutex_trylock"),
    entry(
        "pthread_mutex_timedlock",
        names::PROG_MUTEX_LOCK_ENTER,
        SyncOp::TimedLock,
    ),
    ret("pthread_mutex_timedlock"),
    entry(
        "pthread_mutex_unlock",
        names::PROG_MUTEX_UNLOCK_ENTER,
        SyncOp::Unlock,
    ),
];

/// The function whose presence identifies the pthread library.
const KEY_FUNCTION: &str = "pthread_mutex_lock";

/// The library in a process that defines the pthread functions.
#[derive(Debug)]
pub struct PthreadLibrary {
    /// Path inside the process's mount namespace, for messages.
    pub path: PathBuf,
    /// Path the tracer opens (through /proc/PID/root).
    pub host_path: PathBuf,
    /// Its symbols.
    pub symbols: ElfSymbols,
}

/// Errors finding the pthread library.
#[derive(Debug, thiserror::Error)]
pub enum LibraryError {
    /// /proc could not be read.
    #[error(transparent)]
    Process(#[from] ProcessError),
    /// No mapped file defines pthread_mutex_lock.
    #[error(
        "PID {pid} has no library defining {KEY_FUNCTION} mapped (looked at: {looked}); \
         is it a pthread program? A statically linked or stripped executable is not supported yet"
    )]
    NotFound {
        /// The process.
        pid: u32,
        /// The files examined.
        looked: String,
    },
    /// A candidate could not be read.
    #[error(transparent)]
    Elf(#[from] ElfError),
}

fn is_candidate(path: &std::path::Path, exe: Option<&std::path::Path>) -> bool {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    name.starts_with("libc.so")
        || name.starts_with("libc-")
        || name.starts_with("libpthread")
        || Some(path) == exe
}

/// Finds the library defining the pthread functions in `pid`.
pub fn find(pid: u32) -> Result<PthreadLibrary, LibraryError> {
    let modules = process::modules(pid)?;
    let exe = std::fs::read_link(format!("/proc/{pid}/exe")).ok();
    let mut looked = Vec::new();
    // libc first: it is where glibc 2.34+ keeps the pthread functions.
    let mut candidates: Vec<_> = modules
        .iter()
        .filter(|m| m.executable && is_candidate(&m.path, exe.as_deref()))
        .collect();
    candidates.sort_by_key(|m| Some(m.path.as_path()) == exe.as_deref());
    for m in candidates {
        let host_path = process::host_path(pid, &m.path);
        looked.push(m.path.display().to_string());
        let symbols = match ElfSymbols::open(&host_path) {
            Ok(s) => s,
            Err(e) => {
                log::debug!("skipping {}: {e}", m.path.display());
                continue;
            }
        };
        if symbols.function_offset(KEY_FUNCTION).is_some() {
            return Ok(PthreadLibrary {
                path: m.path.clone(),
                host_path,
                symbols,
            });
        }
    }
    Err(LibraryError::NotFound {
        pid,
        looked: if looked.is_empty() {
            "no libc or executable mapping".into()
        } else {
            looked.join(", ")
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_libc_in_this_process() {
        let lib = find(std::process::id()).unwrap();
        assert!(
            lib.path.to_string_lossy().contains("libc"),
            "{:?}",
            lib.path
        );
        for spec in MUTEX_PROBES {
            assert!(
                lib.symbols.function_offset(spec.function).is_some(),
                "{} missing",
                spec.function
            );
        }
    }
}
