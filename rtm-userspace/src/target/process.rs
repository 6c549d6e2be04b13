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

pub use super::maps::{Module, parse_maps};

/// Checks that `pid` is a live user-space process.
pub fn check(pid: u32) -> Result<(), ProcessError> {
    let dir = PathBuf::from(format!("/proc/{pid}"));
    if !dir.exists() {
        return Err(ProcessError::NoSuchProcess(pid));
    }
    match fs::read_link(dir.join("exe")) {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if dir.exists() {
                Err(ProcessError::KernelThread(pid))
            } else {
                Err(ProcessError::NoSuchProcess(pid))
            }
        }
        Err(source) => Err(ProcessError::Proc {
            path: dir.join("exe").display().to_string(),
            source,
        }),
    }
}

/// Whether the process still exists (a zombie counts as gone).
pub fn alive(pid: u32) -> bool {
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => !matches!(stat_state(&s), Some('Z' | 'X')),
        Err(_) => false,
    }
}

fn stat_state(stat: &str) -> Option<char> {
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

/// The process's command name.
pub fn comm(pid: u32) -> Option<String> {
    fs::read_to_string(format!("/proc/{pid}/comm"))
        .ok()
        .map(|s| s.trim_end().to_owned())
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

/// A thread's name.
pub fn thread_name(pid: u32, tid: u32) -> Option<String> {
    fs::read_to_string(format!("/proc/{pid}/task/{tid}/comm"))
        .ok()
        .map(|s| s.trim_end().to_owned())
}

/// Whether a thread still exists.
pub fn thread_alive(pid: u32, tid: u32) -> bool {
    Path::new(&format!("/proc/{pid}/task/{tid}")).exists()
}

/// A thread's start time on the CLOCK_MONOTONIC scale (10 ms resolution), when readable.
pub fn thread_start_ns(pid: u32, tid: u32) -> Option<u64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/task/{tid}/stat")).ok()?;
    // Field 22 (starttime), counting from the state (field 3) after the comm's ')'.
    let after = stat.rsplit_once(')')?.1;
    let ticks: u64 = after.split_whitespace().nth(19)?.parse().ok()?;
    let hz = ticks_per_second()?;
    let since_boot_ns = ticks.checked_mul(1_000_000_000)? / hz;
    // starttime counts from boot on CLOCK_BOOTTIME; shift it onto CLOCK_MONOTONIC. The two
    // clocks differ by the time spent suspended (often zero: then jitter decides the sign).
    let mono = clock_ns(libc::CLOCK_MONOTONIC) as i128;
    let offset = clock_ns(libc::CLOCK_BOOTTIME) as i128 - mono;
    Some((since_boot_ns as i128 - offset).clamp(0, mono) as u64)
}

fn ticks_per_second() -> Option<u64> {
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
    Ok(super::maps::modules_of(&mappings(pid)?))
}

/// The mappings of `pid`, in address order.
pub fn mappings(pid: u32) -> Result<Vec<super::maps::Mapping>, ProcessError> {
    let path = format!("/proc/{pid}/maps");
    let text = fs::read_to_string(&path).map_err(|source| {
        if source.kind() == std::io::ErrorKind::NotFound {
            ProcessError::NoSuchProcess(pid)
        } else {
            ProcessError::Proc { path, source }
        }
    })?;
    Ok(super::maps::parse_mappings(&text))
}

/// This process's peak resident memory so far (VmHWM), KiB.
pub fn peak_rss_kib() -> Option<u64> {
    fs::read_to_string("/proc/self/status")
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
    PathBuf::from(format!("/proc/{pid}/root")).join(rel)
}

/// What the MPI launcher put in `pid`'s environment: world rank and size, and the job
/// (Open MPI: OMPI_COMM_WORLD_RANK/SIZE, PMIX_NAMESPACE; MPICH's hydra: PMI_RANK/SIZE,
/// PMI_KVSNAME or the launcher's pid). Empty when unreadable (the process is gone).
pub fn mpi_env(pid: u32) -> crate::model::RankEnv {
    let Ok(raw) = std::fs::read(format!("/proc/{pid}/environ")) else {
        return Default::default();
    };
    let vars: std::collections::HashMap<&str, &str> = raw
        .split(|&b| b == 0)
        .filter_map(|kv| std::str::from_utf8(kv).ok()?.split_once('='))
        .collect();
    let first = |keys: &[&str]| keys.iter().find_map(|k| vars.get(k).copied());
    crate::model::RankEnv {
        job: first(&["PMIX_NAMESPACE", "OMPI_MCA_ess_base_jobid", "PMI_KVSNAME"])
            .map(str::to_owned),
        rank: first(&["OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK"])
            .and_then(|v| v.parse().ok()),
        size: first(&["OMPI_COMM_WORLD_SIZE", "PMI_SIZE"]).and_then(|v| v.parse().ok()),
    }
}

/// This node's host name.
pub fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
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
