//! Checks made before anything is loaded, so the user learns what to fix at once.

use std::path::Path;

/// What the machine or the user lacks.
#[derive(Debug, thiserror::Error)]
pub enum PreflightError {
    /// Not root and missing the capabilities eBPF tracing needs.
    #[error(
        "rtm-trace needs root, or the CAP_BPF and CAP_PERFMON capabilities, to load eBPF \
         programs: run it with sudo"
    )]
    NotPrivileged,
    /// The kernel has no uprobe PMU.
    #[error(
        "this kernel has no uprobe support (/sys/bus/event_source/devices/uprobe is missing): \
         rtm-trace needs CONFIG_UPROBES and CONFIG_UPROBE_EVENTS"
    )]
    NoUprobes,
    /// tracefs is not mounted and could not be mounted.
    #[error(
        "tracefs is not mounted and mounting it failed ({0}): run \
         `mount -t tracefs nodev /sys/kernel/tracing` (rtm-trace attaches to futex and sched \
         tracepoints)"
    )]
    NoTracefs(std::io::Error),
    /// The kernel has no BPF syscall.
    #[error("this kernel has no BPF support (CONFIG_BPF_SYSCALL): rtm-trace cannot run here")]
    NoBpf,
}

const CAP_SYS_ADMIN: u32 = 21;
const CAP_PERFMON: u32 = 38;
const CAP_BPF: u32 = 39;

fn effective_caps() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("CapEff:"))
                .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        })
        .unwrap_or(0)
}

/// Whether the capability set allows loading and attaching tracing programs.
pub fn caps_allow_tracing(caps: u64) -> bool {
    let has = |c: u32| caps & (1u64 << c) != 0;
    has(CAP_SYS_ADMIN) || (has(CAP_BPF) && has(CAP_PERFMON))
}

/// Where the kernel lists the uprobe PMU when it supports uprobes.
const UPROBE_PMU: &str = "/sys/bus/event_source/devices/uprobe";

/// Fails with [`PreflightError::NoUprobes`] unless `pmu` (the uprobe PMU directory) exists.
fn check_uprobes(pmu: &Path) -> Result<(), PreflightError> {
    if pmu.exists() {
        Ok(())
    } else {
        Err(PreflightError::NoUprobes)
    }
}

/// Makes sure tracefs is mounted where aya looks for tracepoint ids, mounting it at
/// /sys/kernel/tracing when it is not (a minimal container or VM may not mount it).
fn ensure_tracefs() -> Result<(), PreflightError> {
    let mounted = [
        "/sys/kernel/tracing/events",
        "/sys/kernel/debug/tracing/events",
    ]
    .iter()
    .any(|p| Path::new(p).is_dir());
    if mounted {
        return Ok(());
    }
    let target = c"/sys/kernel/tracing";
    // SAFETY: constant NUL-terminated strings; no data argument.
    let r = unsafe {
        libc::mount(
            c"nodev".as_ptr(),
            target.as_ptr(),
            c"tracefs".as_ptr(),
            0,
            std::ptr::null(),
        )
    };
    if r != 0 {
        return Err(PreflightError::NoTracefs(std::io::Error::last_os_error()));
    }
    log::info!("mounted tracefs at /sys/kernel/tracing");
    Ok(())
}

/// Runs every check.
pub fn check() -> Result<(), PreflightError> {
    if !caps_allow_tracing(effective_caps()) {
        return Err(PreflightError::NotPrivileged);
    }
    check_uprobes(Path::new(UPROBE_PMU))?;
    ensure_tracefs()?;
    // SAFETY: BPF_PROG_TYPE probing with a null attr only asks whether the syscall exists.
    let r = unsafe { libc::syscall(libc::SYS_bpf, 0, std::ptr::null::<u8>(), 0) };
    if r < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ENOSYS) {
        return Err(PreflightError::NoBpf);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capability_rules() {
        assert!(caps_allow_tracing(1 << CAP_SYS_ADMIN));
        assert!(caps_allow_tracing((1 << CAP_BPF) | (1 << CAP_PERFMON)));
        assert!(!caps_allow_tracing(1 << CAP_BPF));
        assert!(!caps_allow_tracing(0));
    }

    #[test]
    fn a_kernel_without_uprobes_is_named_as_such() {
        let err = check_uprobes(Path::new("/nonexistent/uprobe")).unwrap_err();
        assert!(matches!(err, PreflightError::NoUprobes));
        assert!(err.to_string().contains("CONFIG_UPROBE_EVENTS"));
        // This machine has them (the eBPF tests depend on it).
        check_uprobes(Path::new(UPROBE_PMU)).unwrap();
    }
}
