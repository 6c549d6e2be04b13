//! Full mode's uprobes, per process: placed in the library (or statically linked
//! executable) each target maps, for the functions it imports; for processes the targets
//! fork, once the tracer has seen the fork, and again while a child that has just
//! exec'd has no pthread library mapped yet.

use super::SessionError;
use crate::{
    cli::{Cli, Mode},
    probes::{
        ProbeError, Probes,
        loader::AttachReport,
        pthread::{self, LibraryError, ProbeKind},
    },
    target::process::monotonic_ns,
};

/// How long full mode keeps trying to probe a forked process whose pthread library is
/// not mapped yet.
const UNPROBED_RETRY_NS: u64 = 2_000_000_000;

fn verbose_placements(pid: u32, r: &AttachReport) {
    for p in &r.placed {
        crate::say!(
            "rtm-trace: PID {pid}: {} ({}) at {}+{:#x}: {}",
            p.function,
            match p.kind {
                ProbeKind::Call => "entry+return",
                ProbeKind::Mark => "entry",
                ProbeKind::Begin => "entry (ends at the thread's next event)",
            },
            r.library.display(),
            p.function_offset + p.placement.offset,
            p.placement.reason
        );
    }
}

/// Attaches the full-mode uprobes to `pid` and says what happened. `static_exe` is the
/// launched program when it is statically linked (the pthread code is inside it);
/// otherwise the probes go to the pthread library `probe_pid` maps.
pub(super) fn attach_full(
    probes: &mut Probes,
    cli: &Cli,
    pid: u32,
    probe_pid: u32,
    static_exe: Option<&std::path::Path>,
    launched: Option<&std::path::Path>,
    forked: bool,
) -> Result<AttachReport, SessionError> {
    let r = match static_exe {
        Some(exe) => probes.attach_static(pid, exe)?,
        None => {
            let used = if cli.probe_all {
                None
            } else if let Some(program) = launched {
                // Launch mode: what the program and the libraries it needs import.
                Some(pthread::used_by_program(program))
            } else {
                let lib = pthread::find(pid).map_err(ProbeError::from)?;
                let used = pthread::used_in_process(pid, &lib);
                if let Some(e) = used.unreadable.first() {
                    // What an unreadable file imports is unknown: probe everything.
                    crate::say!(
                        "rtm-trace: PID {pid}: {e}; probing every pthread function{}",
                        if used.unreadable.len() > 1 {
                            format!(" ({} such files)", used.unreadable.len())
                        } else {
                            String::new()
                        }
                    );
                    None
                } else {
                    Some(used.functions)
                }
            };
            // A launched or forked program that uses no pthread function at all is most
            // likely a wrapper (env, nice, sh -c, a job launcher) about to exec the real
            // program, which keeps these probes: probe everything rather than nothing.
            let used = used.filter(|u| !(u.is_empty() && (launched.is_some() || forked)));
            if used.is_none() && !cli.probe_all && cli.verbose {
                crate::say!(
                    "rtm-trace: PID {pid} uses no pthread function (a wrapper that will exec \
                     the real program?): probing them all"
                );
            }
            probes.attach_pthread(pid, probe_pid, used.as_ref())?
        }
    };
    if cli.verbose {
        verbose_placements(pid, &r);
        if !r.unused.is_empty() {
            crate::say!(
                "rtm-trace: PID {pid}: not probed, as nothing imports them (--probe-all to \
                 probe anyway): {}",
                r.unused.join(", ")
            );
        }
        for f in &r.missing {
            crate::say!(
                "rtm-trace: note: {} does not define {f}; not traced",
                r.library.display()
            );
        }
    }
    Ok(r)
}

/// Handles processes the targets forked (already in the in-kernel filter, put there by
/// the fork tracepoint): full mode gives them their own uprobes, retried in `pending`
/// (pid, first try) while a child is between its exec and its libc. Followed processes
/// that exited leave the filter.
pub(super) fn follow(
    probes: &mut Probes,
    cli: &Cli,
    spawned: Vec<u32>,
    gone: Vec<u32>,
    pending: &mut Vec<(u32, u64)>,
    followed: &mut Vec<u32>,
) {
    let now = monotonic_ns();
    let mut unprobed = std::mem::take(pending);
    for pid in spawned {
        if !cli.follow_forks() || followed.contains(&pid) {
            continue;
        }
        followed.push(pid);
        if cli.verbose {
            crate::say!("rtm-trace: following forked process {pid}");
        }
        if cli.mode == Mode::Full {
            unprobed.push((pid, now));
        }
    }
    for pid in gone {
        if let Some(i) = followed.iter().position(|p| *p == pid) {
            followed.swap_remove(i);
            probes.stop(&[pid]);
        }
    }
    // A child that has just exec'd may not have its libc mapped yet: it is tried again
    // at each wake-up for a while (its exec and its first mappings wake the reader).
    unprobed.retain(|&(pid, since)| {
        if !followed.contains(&pid) {
            return false;
        }
        match attach_full(probes, cli, pid, pid, None, None, true) {
            Ok(_) => false,
            Err(SessionError::Probe(e))
                if matches!(*e, ProbeError::Library(LibraryError::NotFound { .. }))
                    && now.saturating_sub(since) < UNPROBED_RETRY_NS =>
            {
                true
            }
            Err(_) if !std::path::Path::new(&format!("/proc/{pid}")).exists() => {
                // Gone before its libc could be probed (a program that forks short
                // children by the thousand): its futex waits were still seen. Said once.
                static TOLD: std::sync::atomic::AtomicBool =
                    std::sync::atomic::AtomicBool::new(false);
                if !TOLD.swap(true, std::sync::atomic::Ordering::Relaxed) || cli.verbose {
                    crate::say!(
                        "rtm-trace: forked process {pid} exited before its pthread calls could \
                         be probed; only its futex waits are seen (said once; --verbose for each)"
                    );
                }
                false
            }
            Err(e) => {
                crate::say!("rtm-trace: warning: cannot probe forked process {pid}: {e}");
                false
            }
        }
    });
    *pending = unprobed;
}
