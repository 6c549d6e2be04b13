//! Which pthread functions are probed, and finding the library that defines them in a
//! given process (its own libc, under /proc/PID/root for a container).

use std::path::PathBuf;

use rtm_common::{Check, Primitive, SyncOp};

use crate::proc::{
    elf::{ElfError, ElfSymbols},
    process::{self, ProcessError},
};

/// How a function is probed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProbeKind {
    /// An entry probe and a return probe: the call's duration and result are recorded.
    Call,
    /// An entry probe only: the call is recorded when it starts (releases, posts).
    Mark,
    /// An entry probe only for an acquisition whose result is known without a return
    /// probe (pthread_mutex_lock): it ends when the thread next does anything else, and
    /// the futex waits on the object in between are its wait.
    Begin,
}

/// One function to probe.
#[derive(Debug, Clone, Copy)]
pub struct ProbeSpec {
    /// Function symbol.
    pub function: &'static str,
    /// Entry and return, or entry only.
    pub kind: ProbeKind,
    /// The object kind.
    pub primitive: Primitive,
    /// The operation.
    pub op: SyncOp,
    /// Contention check when the probe sits on the first instruction.
    pub check_at_entry: Check,
    /// Contention check when the probe sits further in (the first instructions may
    /// already have changed the lock word, as a spinlock's `lock decl` does).
    pub check_further_in: Check,
    /// How many leading arguments the probe reads (they must survive to the probe point).
    pub args: u8,
}

const fn spec(
    function: &'static str,
    kind: ProbeKind,
    primitive: Primitive,
    op: SyncOp,
    check: Check,
) -> ProbeSpec {
    ProbeSpec {
        function,
        kind,
        primitive,
        op,
        check_at_entry: check,
        check_further_in: check,
        args: 1,
    }
}

use {Check as C, Primitive as P, ProbeKind::*, SyncOp as O};

/// Every function probed in full mode. A libc that lacks one (an old glibc without the
/// clock* variants) is reported, not an error.
pub const FULL_PROBES: &[ProbeSpec] = &[
    spec("pthread_mutex_lock", Begin, P::Mutex, O::Lock, C::NonZero),
    spec(
        "pthread_mutex_trylock",
        Call,
        P::Mutex,
        O::TryLock,
        C::NonZero,
    ),
    spec(
        "pthread_mutex_timedlock",
        Call,
        P::Mutex,
        O::TimedLock,
        C::NonZero,
    ),
    spec(
        "pthread_mutex_clocklock",
        Call,
        P::Mutex,
        O::TimedLock,
        C::NonZero,
    ),
    spec("pthread_mutex_unlock", Mark, P::Mutex, O::Unlock, C::None),
    spec(
        "pthread_rwlock_rdlock",
        Call,
        P::RwLock,
        O::RdLock,
        C::WriterBit,
    ),
    spec(
        "pthread_rwlock_tryrdlock",
        Call,
        P::RwLock,
        O::TryRdLock,
        C::WriterBit,
    ),
    spec(
        "pthread_rwlock_timedrdlock",
        Call,
        P::RwLock,
        O::TimedRdLock,
        C::WriterBit,
    ),
    spec(
        "pthread_rwlock_clockrdlock",
        Call,
        P::RwLock,
        O::TimedRdLock,
        C::WriterBit,
    ),
    spec("pthread_rwlock_wrlock", Call, P::RwLock, O::WrLock, C::Busy),
    spec(
        "pthread_rwlock_trywrlock",
        Call,
        P::RwLock,
        O::TryWrLock,
        C::Busy,
    ),
    spec(
        "pthread_rwlock_timedwrlock",
        Call,
        P::RwLock,
        O::TimedWrLock,
        C::Busy,
    ),
    spec(
        "pthread_rwlock_clockwrlock",
        Call,
        P::RwLock,
        O::TimedWrLock,
        C::Busy,
    ),
    spec("pthread_rwlock_unlock", Mark, P::RwLock, O::Unlock, C::None),
    ProbeSpec {
        // glibc x86-64: `lock decl (%rdi); jne spin`: 1 is free; after the decrement a
        // nonzero word means it was held.
        check_further_in: C::NonZero,
        ..spec("pthread_spin_lock", Call, P::Spin, O::Lock, C::NotOne)
    },
    spec("pthread_spin_trylock", Call, P::Spin, O::TryLock, C::NotOne),
    spec("pthread_spin_unlock", Mark, P::Spin, O::Unlock, C::None),
    spec("sem_wait", Call, P::Sem, O::Wait, C::Empty),
    spec("sem_trywait", Call, P::Sem, O::TryWait, C::Empty),
    spec("sem_timedwait", Call, P::Sem, O::TimedWait, C::Empty),
    spec("sem_clockwait", Call, P::Sem, O::TimedWait, C::Empty),
    spec("sem_post", Mark, P::Sem, O::Post, C::None),
    ProbeSpec {
        args: 2,
        ..spec("pthread_cond_wait", Call, P::Cond, O::Wait, C::None)
    },
    ProbeSpec {
        args: 2,
        ..spec(
            "pthread_cond_timedwait",
            Call,
            P::Cond,
            O::TimedWait,
            C::None,
        )
    },
    ProbeSpec {
        args: 2,
        ..spec(
            "pthread_cond_clockwait",
            Call,
            P::Cond,
            O::TimedWait,
            C::None,
        )
    },
    spec("pthread_cond_signal", Call, P::Cond, O::Signal, C::None),
    spec(
        "pthread_cond_broadcast",
        Call,
        P::Cond,
        O::Broadcast,
        C::None,
    ),
    spec("pthread_barrier_wait", Call, P::Barrier, O::Wait, C::None),
    spec("pthread_create", Call, P::Thread, O::Create, C::None),
    spec("pthread_join", Call, P::Thread, O::Join, C::None),
    spec("pthread_timedjoin_np", Call, P::Thread, O::Join, C::None),
    spec("pthread_clockjoin_np", Call, P::Thread, O::Join, C::None),
];

/// The function whose presence identifies the pthread library.
const KEY_FUNCTION: &str = "pthread_mutex_lock";

/// The library in a process that defines the pthread functions.
#[derive(Debug)]
pub struct PthreadLibrary {
    /// Path inside the process's mount namespace, for messages.
    pub path: PathBuf,
    /// A path naming the very file the process runs while it maps it (its
    /// /proc/PID/map_files entry): where the uprobes go.
    pub host_path: PathBuf,
    /// Its symbols.
    pub symbols: ElfSymbols,
    /// Its bytes (the code the probes are placed in).
    pub bytes: Vec<u8>,
    /// Its device and inode: the file every process that maps it shares.
    pub id: (u64, u64),
}

/// The (device, inode) of a file the tracer can open at `path`.
fn file_id(path: &std::path::Path) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt as _;
    std::fs::metadata(path).map_or((0, 0), |m| (m.dev(), m.ino()))
}

/// Errors finding the pthread library.
#[derive(Debug, thiserror::Error)]
pub enum LibraryError {
    /// /proc could not be read.
    #[error(transparent)]
    Process(#[from] ProcessError),
    /// No mapped file defines pthread_mutex_lock.
    #[error(
        "PID {pid} has no library defining {KEY_FUNCTION} mapped (looked at: {looked}): it \
         is not a pthread program, or it is statically linked and stripped (its symbol table \
         is needed to place probes); contention mode (the default) works without symbols"
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

/// Directories searched for a launched program's DT_NEEDED libraries.
const LIB_DIRS: [&str; 6] = [
    "/lib/x86_64-linux-gnu",
    "/usr/lib/x86_64-linux-gnu",
    "/lib64",
    "/usr/lib64",
    "/lib",
    "/usr/lib",
];

/// The probed functions some file imports. Probes on functions nobody imports are not
/// worth their detach cost.
fn imported(elf: &ElfSymbols, used: &mut std::collections::HashSet<&'static str>) {
    for spec in FULL_PROBES {
        if elf.imports(spec.function) {
            used.insert(spec.function);
        }
    }
}

/// What the probed functions used by the files a process maps come to.
#[derive(Debug, Default)]
pub struct Used {
    /// The functions some file imports.
    pub functions: std::collections::HashSet<&'static str>,
    /// Files that could not be read as the process runs them, with why: the functions
    /// they import are unknown, so everything is probed.
    pub unreadable: Vec<String>,
}

/// The probed functions used by the files `pid` maps (attach mode), read as the
/// process runs them (a file replaced on disk since is read through the mapping).
pub fn used_in_process(pid: u32, lib: &PthreadLibrary) -> Used {
    let mut out = Used::default();
    let modules = process::modules(pid).unwrap_or_default();
    for m in modules
        .iter()
        .filter(|m| m.path != lib.path && m.executable)
    {
        match ElfSymbols::open_mapped(&m.mapped_file(pid)) {
            Ok((elf, _, _)) => imported(&elf, &mut out.functions),
            // A mapped file that is not an ELF object (a font, a locale archive
            // mapped executable by mistake) imports nothing.
            Err(ElfError::Parse { .. }) => {}
            Err(e) => out.unreadable.push(e.to_string()),
        }
    }
    out
}

/// The probed functions used by `program` and the libraries it needs, found in the
/// standard directories (launch mode, before the program runs).
pub fn used_by_program(program: &std::path::Path) -> std::collections::HashSet<&'static str> {
    let mut used = std::collections::HashSet::new();
    for f in needed_closure(program) {
        if let Ok(elf) = ElfSymbols::open(&f) {
            imported(&elf, &mut used);
        }
    }
    used
}

/// `program` and the libraries it needs, directly or not, found in the standard
/// directories (at most 256 files).
pub fn needed_closure(program: &std::path::Path) -> Vec<PathBuf> {
    let mut files = vec![program.to_path_buf()];
    let mut seen = std::collections::HashSet::new();
    let mut i = 0;
    while i < files.len() && files.len() < 256 {
        if let Ok(elf) = ElfSymbols::open(&files[i]) {
            // The loader's order: the file's run path ($ORIGIN its directory), then
            // LD_LIBRARY_PATH (a launched command inherits the tracer's), then the
            // system's directories.
            let origin = files[i]
                .parent()
                .map(|p| p.display().to_string())
                .unwrap_or_default();
            let env_dirs = std::env::var("LD_LIBRARY_PATH").unwrap_or_default();
            let dirs: Vec<String> = elf
                .runpath()
                .iter()
                .map(|d| d.replace("${ORIGIN}", &origin).replace("$ORIGIN", &origin))
                .chain(
                    env_dirs
                        .split(':')
                        .filter(|d| !d.is_empty())
                        .map(str::to_owned),
                )
                .chain(LIB_DIRS.iter().map(|d| (*d).to_owned()))
                .collect();
            for name in elf.needed() {
                if !seen.insert(name.clone()) {
                    continue;
                }
                if let Some(p) = dirs
                    .iter()
                    .map(|d| std::path::Path::new(d).join(name))
                    .find(|p| p.exists())
                {
                    files.push(p);
                }
            }
        }
        i += 1;
    }
    files
}

/// Uses `path` (the statically linked executable `pid` is about to run) as the pthread
/// library.
pub fn from_file(pid: u32, path: &std::path::Path) -> Result<PthreadLibrary, LibraryError> {
    let bytes = crate::proc::elf::read_object_file(path).map_err(|source| ElfError::Read {
        path: path.display().to_string(),
        source,
    })?;
    let symbols = ElfSymbols::parse(&bytes).map_err(|source| ElfError::Parse {
        path: path.display().to_string(),
        source,
    })?;
    if symbols.function_offset(KEY_FUNCTION).is_none() {
        return Err(LibraryError::NotFound {
            pid,
            looked: format!("{} (statically linked, no symbol for it)", path.display()),
        });
    }
    Ok(PthreadLibrary {
        path: path.to_path_buf(),
        host_path: path.to_path_buf(),
        symbols,
        bytes,
        id: file_id(path),
    })
}

/// Finds the library defining the pthread functions in `pid`.
pub fn find(pid: u32) -> Result<PthreadLibrary, LibraryError> {
    let modules = process::modules(pid)?;
    let exe = std::fs::read_link(process::proc_dir(pid).join("exe"))
        .ok()
        .map(|p| strip_deleted(&p));
    let mut looked = Vec::new();
    // libc first: it is where glibc 2.34+ keeps the pthread functions.
    let mut candidates: Vec<_> = modules
        .iter()
        .filter(|m| m.executable && is_candidate(&m.path, exe.as_deref()))
        .collect();
    candidates.sort_by_key(|m| Some(m.path.as_path()) == exe.as_deref());
    let mut unreadable = None;
    for m in candidates {
        looked.push(m.path.display().to_string());
        let (symbols, bytes, host_path) = match ElfSymbols::open_mapped(&m.mapped_file(pid)) {
            Ok(s) => s,
            Err(e) => {
                log::debug!("skipping {}: {e}", m.path.display());
                unreadable.get_or_insert(e);
                continue;
            }
        };
        if symbols.function_offset(KEY_FUNCTION).is_some() {
            return Ok(PthreadLibrary {
                path: m.path.clone(),
                id: file_id(&host_path),
                host_path,
                symbols,
                bytes,
            });
        }
    }
    // What runs cannot be read: say why rather than "no library".
    if let Some(e) = unreadable {
        return Err(e.into());
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

/// A path as /proc shows a file deleted since it was opened, without the mark.
fn strip_deleted(p: &std::path::Path) -> PathBuf {
    let s = p.to_string_lossy();
    PathBuf::from(s.strip_suffix(" (deleted)").unwrap_or(&s))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_test_binary_uses_mutexes_but_no_barriers() {
        let lib = find(std::process::id()).unwrap();
        let used = used_in_process(std::process::id(), &lib);
        assert!(used.unreadable.is_empty(), "{:?}", used.unreadable);
        let used = used.functions;
        assert!(used.contains("pthread_mutex_lock"), "{used:?}");
        assert!(!used.contains("pthread_barrier_wait"), "{used:?}");
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        assert!(used_by_program(&exe).contains("pthread_mutex_lock"));
    }

    #[test]
    fn finds_libc_in_this_process() {
        let lib = find(std::process::id()).unwrap();
        assert!(
            lib.path.to_string_lossy().contains("libc"),
            "{:?}",
            lib.path
        );
        for spec in FULL_PROBES {
            assert!(
                lib.symbols.function_offset(spec.function).is_some(),
                "{} missing",
                spec.function
            );
        }
    }
}
