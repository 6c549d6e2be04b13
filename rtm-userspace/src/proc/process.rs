//! What /proc says about a target process.

use std::{
    fs,
    path::{Path, PathBuf},
};

/// Errors about a target process.
#[derive(Debug, thiserror::Error)]
pub enum ProcessError {
    /// No process has this id.
    #[error("no process with PID {0}: check the PID (`pgrep NAME` finds it by name)")]
    NoSuchProcess(u32),
    /// The process is a kernel thread, which has no user code to probe.
    #[error("PID {0} is a kernel thread: it has no user-space code to trace")]
    KernelThread(u32),
    /// The process has exited and waits to be reaped.
    #[error(
        "PID {pid} has exited: it is a zombie waiting for its parent (PID {parent}) to reap \
         it, with no threads left to trace"
    )]
    Zombie {
        /// The process.
        pid: u32,
        /// Its parent, which has not reaped it.
        parent: u32,
    },
    /// /proc could not be read for the process.
    #[error("cannot read {path}: {source}")]
    Proc {
        /// The file.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

pub use super::address_space::Module;
use super::files::{MAX_ENVIRON_BYTES, read_proc_prefix, read_proc_text};

/// Kernel threads carry this flag in /proc/PID/stat (field 9).
const PF_KTHREAD: u64 = 0x0020_0000;

/// The fields of /proc/PID/stat after the command name: (state, parent, flags).
fn stat_fields(stat: &str) -> Option<(char, u32, u64)> {
    let rest = stat.rsplit_once(')')?.1;
    let mut f = rest.split_whitespace();
    let state = f.next()?.chars().next()?;
    let parent = f.next()?.parse().ok()?;
    // pgrp, session, tty_nr, tpgid, then flags.
    let flags = f.nth(4)?.parse().ok()?;
    Some((state, parent, flags))
}

/// Checks that `pid` is a user-space process with at least one live thread. A process
/// whose main thread called pthread_exit while others run (its leader is a zombie) is
/// traceable; a real zombie and a kernel thread are not.
pub fn check(pid: u32) -> Result<(), ProcessError> {
    let path = format!("/proc/{pid}/stat");
    let stat = match read_proc_text(&path) {
        Ok(s) => s,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(ProcessError::NoSuchProcess(pid));
        }
        Err(source) => return Err(ProcessError::Proc { path, source }),
    };
    let Some((state, parent, flags)) = stat_fields(&stat) else {
        return Err(ProcessError::Proc {
            path,
            source: std::io::Error::new(std::io::ErrorKind::InvalidData, "unexpected format"),
        });
    };
    if flags & PF_KTHREAD != 0 {
        return Err(ProcessError::KernelThread(pid));
    }
    if matches!(state, 'Z' | 'X') && live_task(pid).is_none() {
        return Err(ProcessError::Zombie { pid, parent });
    }
    Ok(())
}

/// Whether the process still exists (a zombie counts as gone).
pub fn alive(pid: u32) -> bool {
    match read_proc_text(format!("/proc/{pid}/stat")) {
        Ok(s) => !matches!(stat_state(&s), Some('Z' | 'X')) || live_task(pid).is_some(),
        Err(_) => false,
    }
}

fn stat_state(stat: &str) -> Option<char> {
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

/// A thread of `pid` that has not exited: the process itself while its main thread
/// lives, else another (a main thread that called pthread_exit stays a zombie, and its
/// /proc entries for the address space, root and environment read as empty).
pub fn live_task(pid: u32) -> Option<u32> {
    let state = |path: String| read_proc_text(path).ok().and_then(|s| stat_state(&s));
    if !matches!(state(format!("/proc/{pid}/stat"))?, 'Z' | 'X') {
        return Some(pid);
    }
    thread_ids(pid).into_iter().find(|&tid| {
        tid != pid
            && state(format!("/proc/{pid}/task/{tid}/stat"))
                .is_some_and(|s| !matches!(s, 'Z' | 'X'))
    })
}

/// The /proc directory to read `pid`'s address space, root and environment from: its
/// own while its main thread lives, a live thread's otherwise.
pub fn proc_dir(pid: u32) -> PathBuf {
    match live_task(pid) {
        Some(t) if t != pid => PathBuf::from(format!("/proc/{pid}/task/{t}")),
        _ => PathBuf::from(format!("/proc/{pid}")),
    }
}

/// A /proc text file's content without its trailing newline.
fn proc_line(path: String) -> Option<String> {
    read_proc_text(path)
        .ok()
        .map(|s| s.trim_end_matches('\n').to_owned())
}

/// The process thread `tid` belongs to (None when there is no such thread).
pub fn tgid_of(tid: u32) -> Option<u32> {
    read_proc_text(format!("/proc/{tid}/status"))
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("Tgid:"))?
        .trim()
        .parse()
        .ok()
}

/// The process's command name (bytes that are not UTF-8 replaced).
pub fn comm(pid: u32) -> Option<String> {
    proc_line(format!("/proc/{pid}/comm"))
}

/// Processes (other than this one) whose command name is `name` (the kernel keeps 15
/// bytes of it) or whose program file is named `name`, in pid order.
pub fn named(name: &str) -> Vec<u32> {
    let me = std::process::id();
    let short: String = name.chars().take(15).collect();
    let mut out: Vec<u32> = fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| pid != me)
        .filter(|&pid| {
            comm(pid).is_some_and(|c| c == short && name.starts_with(&c))
                || fs::read_link(format!("/proc/{pid}/exe"))
                    .is_ok_and(|p| p.file_name().is_some_and(|f| f == name))
        })
        .collect();
    out.sort_unstable();
    out
}

/// A thread's name (bytes that are not UTF-8 replaced).
pub fn thread_name(pid: u32, tid: u32) -> Option<String> {
    proc_line(format!("/proc/{pid}/task/{tid}/comm"))
}

/// Whether a thread still exists.
pub fn thread_alive(pid: u32, tid: u32) -> bool {
    Path::new(&format!("/proc/{pid}/task/{tid}")).exists()
}

/// A thread's start time as /proc says it: clock ticks since boot (`stat` field 22),
/// the same on every read. With the pid, it names a process apart from any later one
/// given the same pid (one started within the same tick, 10 ms, aside).
pub fn start_ticks(pid: u32, tid: u32) -> Option<u64> {
    let stat = read_proc_text(format!("/proc/{pid}/task/{tid}/stat")).ok()?;
    // Field 22 (starttime), counting from the state (field 3) after the comm's ')'.
    let after = stat.rsplit_once(')')?.1;
    after.split_whitespace().nth(19)?.parse().ok()
}

/// A thread's start time on the CLOCK_MONOTONIC scale (10 ms resolution), when readable.
pub fn thread_start_ns(pid: u32, tid: u32) -> Option<u64> {
    let ticks = start_ticks(pid, tid)?;
    let hz = ticks_per_second()?;
    let since_boot_ns = ticks.checked_mul(1_000_000_000)? / hz;
    // starttime counts from boot on CLOCK_BOOTTIME; shift it onto CLOCK_MONOTONIC. The two
    // clocks differ by the time spent suspended (often zero: then jitter decides the sign).
    let mono = clock_ns(libc::CLOCK_MONOTONIC) as i128;
    let offset = clock_ns(libc::CLOCK_BOOTTIME) as i128 - mono;
    Some((since_boot_ns as i128 - offset).clamp(0, mono) as u64)
}

/// Clock ticks per second, the unit of `stat`'s times.
pub(crate) fn ticks_per_second() -> Option<u64> {
    // SAFETY: sysconf has no memory-safety preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    (hz > 0).then_some(hz as u64)
}

/// Reads a clock in nanoseconds.
pub fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid out-pointer.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// CLOCK_MONOTONIC now, the clock bpf_ktime_get_ns uses.
pub fn monotonic_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

/// The files mapped into `pid`, in address order.
pub fn modules(pid: u32) -> Result<Vec<Module>, ProcessError> {
    Ok(super::address_space::modules_of(&mappings(pid)?))
}

/// The mappings of `pid`, in address order.
pub fn mappings(pid: u32) -> Result<Vec<super::address_space::Mapping>, ProcessError> {
    let path = proc_dir(pid).join("maps").display().to_string();
    let text = read_proc_text(&path).map_err(|source| {
        if source.kind() == std::io::ErrorKind::NotFound {
            ProcessError::NoSuchProcess(pid)
        } else {
            ProcessError::Proc { path, source }
        }
    })?;
    Ok(super::address_space::parse_mappings(&text))
}

/// This process's peak resident memory so far (VmHWM), KiB.
pub fn peak_rss_kib() -> Option<u64> {
    read_proc_text("/proc/self/status")
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// The threads of `pid` now (empty when it is gone).
pub fn thread_ids(pid: u32) -> Vec<u32> {
    fs::read_dir(format!("/proc/{pid}/task"))
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// The path under which the tracer can open a file of `pid`'s mount namespace.
pub fn host_path(pid: u32, path: &Path) -> PathBuf {
    let rel = path.strip_prefix("/").unwrap_or(path);
    proc_dir(pid).join("root").join(rel)
}

/// What an MPI launcher put in a rank's environment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RankEnv {
    /// Job id (Open MPI's PMIx namespace, MPICH's PMI kvs name or the launcher pid).
    pub job: Option<String>,
    /// World rank.
    pub rank: Option<i32>,
    /// World size.
    pub size: Option<i32>,
}

/// What the MPI launcher put in `pid`'s environment: world rank and size, and the job
/// (Open MPI: OMPI_COMM_WORLD_RANK/SIZE, PMIX_NAMESPACE; MPICH's hydra: PMI_RANK/SIZE,
/// PMI_KVSNAME or the launcher's pid). Empty when unreadable (the process is gone).
pub fn mpi_env(pid: u32) -> RankEnv {
    let Ok(raw) = read_proc_prefix(proc_dir(pid).join("environ"), MAX_ENVIRON_BYTES) else {
        return Default::default();
    };
    let vars: std::collections::HashMap<&str, &str> = raw
        .split(|&b| b == 0)
        .filter_map(|kv| std::str::from_utf8(kv).ok()?.split_once('='))
        .collect();
    let first = |keys: &[&str]| keys.iter().find_map(|k| vars.get(k).copied());
    RankEnv {
        job: first(&["PMIX_NAMESPACE", "OMPI_MCA_ess_base_jobid", "PMI_KVSNAME"])
            .map(str::to_owned),
        rank: first(&["OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK"])
            .and_then(|v| v.parse().ok()),
        size: first(&["OMPI_COMM_WORLD_SIZE", "PMI_SIZE"]).and_then(|v| v.parse().ok()),
    }
}

/// This node's host name.
pub fn host_name() -> String {
    read_proc_text("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_owned())
        .unwrap_or_else(|_| "localhost".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_state_parses_names_with_parens() {
        assert_eq!(stat_state("12 (a (b) c) S 1 2"), Some('S'));
        assert_eq!(stat_state("12 (x) Z 1"), Some('Z'));
        assert_eq!(
            stat_fields("12 (a) b) Z 7 12 12 0 -1 4227084 0"),
            Some(('Z', 7, 4227084))
        );
        assert_eq!(
            stat_fields("2 (kthreadd) S 0 0 0 0 -1 2129984"),
            Some(('S', 0, 2129984))
        );
        assert_eq!(stat_fields("garbage"), None);
    }

    #[test]
    fn kernel_threads_are_named_as_such() {
        assert!(matches!(check(2), Err(ProcessError::KernelThread(2))));
    }

    #[test]
    fn host_path_goes_through_proc_root() {
        assert_eq!(
            host_path(7, Path::new("/lib/libc.so.6")),
            PathBuf::from("/proc/7/root/lib/libc.so.6")
        );
    }

    #[test]
    fn this_process_checks_out() {
        let me = std::process::id();
        check(me).unwrap();
        assert!(alive(me));
        assert!(modules(me).unwrap().iter().any(|m| m.executable));
        assert!(thread_start_ns(me, me).unwrap() <= monotonic_ns());
        assert!(matches!(
            check(u32::MAX - 1),
            Err(ProcessError::NoSuchProcess(_))
        ));
    }
}

/// Property tests: /proc/PID/stat text of any shape parses without panicking.
#[cfg(test)]
mod fuzz {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        #[test]
        fn any_stat_line_parses(comm in ".{0,20}", rest in "[ -~]{0,80}") {
            let line = format!("12 ({comm}) {rest}");
            let _ = stat_fields(&line);
            let _ = stat_state(&line);
        }
    }
}
