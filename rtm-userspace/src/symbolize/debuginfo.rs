//! Separate debug files, for programs and libraries whose distribution strips them: found
//! where Linux keeps them, by build id (`/usr/lib/debug/.build-id/xx/yyyy.debug`), by
//! `.gnu_debuglink` (next to the file, in its `.debug` directory, under
//! `/usr/lib/debug`), in the traced process's mount namespace first, then this one, and,
//! when `DEBUGINFOD_URLS` is set, from a debuginfod server through `debuginfod-find`.
//! A candidate counts only if its build id (or, without one, its CRC32) matches.

use std::{
    fs::File,
    io::Read,
    os::fd::AsFd as _,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use crate::proc::{elf::ElfSymbols, files, mapped::ProcRoot};

/// Largest debug file opened (only its symbol tables are read).
const MAX_DEBUG_BYTES: u64 = 16 << 30;

/// Largest debug file read whole; larger ones are read on demand.
const READ_WHOLE_BYTES: u64 = 64 << 20;

/// Longest a debuginfod download may take before the names are given up.
const DEBUGINFOD_TIMEOUT: Duration = Duration::from_secs(20);

/// A debug file found for a binary.
#[derive(Debug)]
pub struct DebugFile {
    /// Where the tracer opened it (for messages).
    pub path: PathBuf,
    /// The open file: kept, as the path may lead into the process's mount namespace,
    /// which goes away with it.
    pub file: File,
    /// Its symbols.
    pub symbols: ElfSymbols,
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The places a debug file of `binary` (its path in the process) may be, as absolute
/// paths in the process's file system.
fn candidates(binary: &Path, elf: &ElfSymbols) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Some(id) = elf.build_id().filter(|id| id.len() >= 2) {
        let h = hex(id);
        out.push(PathBuf::from(format!(
            "/usr/lib/debug/.build-id/{}/{}.debug",
            &h[..2],
            &h[2..]
        )));
    }
    if let Some((name, _)) = elf.debuglink()
        && !name.is_empty()
        && !name.contains('/')
        && let Some(dir) = binary.parent()
    {
        out.push(dir.join(name));
        out.push(dir.join(".debug").join(name));
        let rel = dir.strip_prefix("/").unwrap_or(dir);
        out.push(Path::new("/usr/lib/debug").join(rel).join(name));
    }
    out
}

/// Whether `debug` (opened as `file`) is the debug file of `elf`.
fn matches(elf: &ElfSymbols, debug: &ElfSymbols, file: &mut File) -> bool {
    match (elf.build_id(), debug.build_id()) {
        (Some(a), Some(b)) => a == b,
        (Some(_), None) => false,
        (None, _) => match elf.debuglink() {
            Some((_, crc)) => crc32(file).is_some_and(|c| c == crc),
            None => false,
        },
    }
}

fn crc32(file: &mut File) -> Option<u32> {
    let mut h = crc32fast::Hasher::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        match file.read(&mut buf) {
            Ok(0) => return Some(h.finalize()),
            Ok(n) => h.update(&buf[..n]),
            Err(_) => return None,
        }
    }
}

/// Opens and checks one candidate: `path` in a process's tree `root`, or in this one.
fn try_open(root: Option<&ProcRoot>, path: &Path, elf: &ElfSymbols) -> Option<DebugFile> {
    let mut file = match root {
        Some(r) => match (&r.debug, path.strip_prefix("/usr/lib/debug")) {
            (Some(debug), Ok(rel)) => files::open_regular_in(debug.as_fd(), rel, MAX_DEBUG_BYTES),
            _ => files::open_regular_in(r.root.as_fd(), path, MAX_DEBUG_BYTES),
        }
        .ok()?,
        None => files::open_regular(path, MAX_DEBUG_BYTES).ok()?,
    };
    let len = file.metadata().ok()?.len();
    // Read whole when small enough (its symbol strings are read one by one: from memory
    // that is fast, through reads it is not), else on demand.
    let symbols = if len <= READ_WHOLE_BYTES {
        let mut bytes = Vec::with_capacity(len as usize);
        (&file)
            .take(READ_WHOLE_BYTES)
            .read_to_end(&mut bytes)
            .ok()?;
        ElfSymbols::parse(&bytes).ok()?
    } else {
        ElfSymbols::parse_file(&file).ok()?
    };
    matches(elf, &symbols, &mut file).then(|| DebugFile {
        path: path.to_path_buf(),
        file,
        symbols,
    })
}

/// The debug file of `binary` (its path in the process whose root directory is `root`,
/// held open so that this works after it exited), whose own symbols are `elf`.
pub fn find(root: Option<&ProcRoot>, binary: &Path, elf: &ElfSymbols) -> Option<DebugFile> {
    for cand in candidates(binary, elf) {
        if let Some(d) = root.and_then(|r| try_open(Some(r), &cand, elf)) {
            return Some(d);
        }
        if let Some(d) = try_open(None, &cand, elf) {
            return Some(d);
        }
    }
    let id = elf.build_id()?;
    let path = debuginfod(&hex(id))?;
    try_open(None, &path, elf)
}

/// Whether a debuginfod server is configured.
pub fn debuginfod_configured() -> bool {
    std::env::var_os("DEBUGINFOD_URLS").is_some_and(|v| !v.is_empty())
}

/// Asks the configured debuginfod servers (through elfutils' `debuginfod-find`, which
/// caches what it downloads) for the debug file with build id `id`; bounded in time
/// and given up at Ctrl-C.
fn debuginfod(id: &str) -> Option<PathBuf> {
    if !debuginfod_configured() {
        return None;
    }
    let mut child = Command::new("debuginfod-find")
        .args(["debuginfo", id])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| log::debug!("debuginfod-find: {e}"))
        .ok()?;
    let started = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(st)) if st.success() => break,
            Ok(Some(_)) => return None,
            Ok(None)
                if started.elapsed() < DEBUGINFOD_TIMEOUT && !crate::interrupt::requested() =>
            {
                std::thread::sleep(Duration::from_millis(20));
            }
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
        }
    }
    let mut out = String::new();
    child
        .stdout
        .take()?
        .take(4096)
        .read_to_string(&mut out)
        .ok()?;
    let path = PathBuf::from(out.trim());
    path.is_absolute().then_some(path)
}

/// What to tell the user about `binary`, whose symbols are missing.
pub fn hint(binary: &Path) -> String {
    let name = binary.display();
    format!(
        "{name} is stripped and no debug symbols were found for it (by build id under \
         /usr/lib/debug/.build-id, by .gnu_debuglink{}): its locks and code show as \
         addresses. Install its debug symbols: on Debian or Ubuntu the -dbgsym (or -dbg) \
         package of the package that owns it (`dpkg -S {name}`){}",
        if debuginfod_configured() {
            ", or from DEBUGINFOD_URLS"
        } else {
            ""
        },
        if debuginfod_configured() {
            String::new()
        } else {
            ", or set DEBUGINFOD_URLS to a debuginfod server (with debuginfod-find \
             installed)"
                .into()
        }
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn candidates_follow_the_build_id_and_the_debuglink() {
        let mut elf =
            ElfSymbols::parse(&crate::proc::elf::read_object_file(Path::new("/bin/true")).unwrap())
                .unwrap();
        let id = hex(elf.build_id().expect("Debian builds carry build ids"));
        let c = candidates(Path::new("/usr/bin/true"), &elf);
        assert_eq!(
            c[0],
            PathBuf::from(format!(
                "/usr/lib/debug/.build-id/{}/{}.debug",
                &id[..2],
                &id[2..]
            ))
        );
        assert!(c.iter().all(|p| p.is_absolute()));
        // Without a build id or debuglink there is nowhere to look.
        elf = ElfSymbols::default();
        assert!(candidates(Path::new("/usr/bin/true"), &elf).is_empty());
    }
}
