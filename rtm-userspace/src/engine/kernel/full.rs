//! Full mode's uprobes, per process: placed in the library (or statically linked
//! executable) each target maps, for the functions it imports; for processes the targets
//! fork, once the tracer has seen the fork, and again while a child that has just
//! exec'd has no pthread library mapped yet.

use super::Settings;
use crate::{
    config::Mode,
    engine::{EngineError, Launched, source::ProcessChanges},
    output::Unprobed,
    probes::{
        AttachReport, ProbeError, ProbeScope, Probes,
        pthread::{self, LibraryError, ProbeKind},
    },
    proc::{Module, files, process::monotonic_ns},
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

/// The scope of the full-mode probes: for every process of the library when children
/// are followed (they are then covered from their first instruction), else per process.
fn scope(follow_forks: bool) -> ProbeScope {
    if follow_forks {
        ProbeScope::Library
    } else {
        ProbeScope::Process
    }
}

/// Which process to probe, and how.
pub(super) struct Wanted<'a> {
    /// The process.
    pub pid: u32,
    /// The process whose pthread library is probed (the tracer's own for a launched
    /// command that has not exec'd yet).
    pub probe_pid: u32,
    /// The launched program when it is statically linked (the pthread code is inside).
    pub static_exe: Option<&'a std::path::Path>,
    /// What a launched target will run.
    pub launched: Option<&'a Launched>,
    /// Its forks are followed.
    pub follow_forks: bool,
    /// It was forked by a followed process.
    pub forked: bool,
}

/// Attaches the full-mode uprobes to a process and says what happened.
pub(super) fn attach(
    probes: &mut Probes,
    settings: &Settings,
    w: &Wanted,
) -> Result<AttachReport, EngineError> {
    let (pid, launched, forked) = (w.pid, w.launched, w.forked);
    let scope = scope(w.follow_forks);
    let r = match w.static_exe {
        Some(exe) => probes.attach_static(pid, exe, scope)?,
        None => {
            let used = if settings.probe_all {
                None
            } else if let Some(l) = launched {
                // Launch mode: what the program and the libraries it needs import, and
                // for a wrapper (env, nice, unshare, mpirun ...) what the programs named
                // in its arguments import, which it will exec.
                let mut used = pthread::used_by_program(&l.program);
                for arg in l.argv.iter().skip(1) {
                    if let Ok(p) = crate::proc::launch::resolve_program(arg) {
                        used.extend(pthread::used_by_program(&p));
                    }
                }
                Some(used)
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
            probes.attach_pthread(pid, w.probe_pid, used.as_ref(), scope)?
        }
    };
    if settings.verbose && r.added {
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
        if scope == ProbeScope::Library {
            crate::say!(
                "rtm-trace: probes in {} serve every process that maps it (the in-kernel \
                 filter keeps the traced ones), so forked children are seen from birth",
                r.library.display()
            );
        }
    }
    Ok(r)
}

/// Why a process that exited before the tracer could probe it ran unprobed, from the
/// files it mapped; None when its pthread library was covered, when it could not have
/// called one yet (a dynamic program whose libc was not loaded), or when nothing is
/// known of it.
fn uncovered(probes: &Probes, modules: &[Module]) -> Option<String> {
    let id = |m: &Module| (files::parse_dev(&m.dev).unwrap_or(0), m.inode);
    let name = |m: &Module| {
        m.path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    };
    let libcs: Vec<&Module> = modules
        .iter()
        .filter(|m| {
            let n = name(m);
            m.executable
                && (n.starts_with("libc.so")
                    || n.starts_with("libc-")
                    || n.starts_with("libpthread"))
        })
        .collect();
    if let Some(m) = libcs.first() {
        return (!libcs.iter().any(|m| probes.covers(id(m)))).then(|| {
            format!(
                "it ran {}, which no probe covered, and exited before it could be probed",
                m.path.display()
            )
        });
    }
    if modules.iter().any(|m| name(m).starts_with("ld-")) {
        return None;
    }
    let exe = modules.iter().find(|m| m.executable)?;
    (!probes.covers(id(exe))).then(|| {
        format!(
            "it ran {} (statically linked), which no probe covered, and exited before it \
             could be probed",
            exe.path.display()
        )
    })
}

/// A followed process to probe: one whose program changed (exec) or that was just
/// forked, waiting for its pthread library to be mapped.
#[derive(Debug, Clone, Copy)]
pub(super) struct ToProbe {
    pid: u32,
    /// Its fork or exec, CLOCK_MONOTONIC ns (from the kernel's record).
    since_ns: u64,
    /// When the tracer first tried.
    first_try_ns: u64,
}

/// Full mode's bookkeeping of followed processes.
#[derive(Debug, Default)]
pub(super) struct Follow {
    /// The targets attached, each with whether its forks are followed.
    pub targets: Vec<(u32, bool)>,
    /// Processes to probe.
    pending: Vec<ToProbe>,
    /// What went unprobed.
    pub unprobed: Vec<Unprobed>,
    /// Executables (device, inode) whose pthread functions probes cover for every
    /// process (full mode following children).
    handled: std::collections::HashSet<(u64, u64)>,
}

/// The (device, inode) of the program `pid` runs, from its maps.
fn exe_id(pid: u32) -> Option<(u64, u64)> {
    let exe = std::fs::read_link(crate::proc::process::proc_dir(pid).join("exe")).ok()?;
    let exe = exe.to_string_lossy();
    let exe = exe.strip_suffix(" (deleted)").unwrap_or(&exe);
    crate::proc::process::modules(pid)
        .ok()?
        .into_iter()
        .find(|m| m.path.as_os_str() == std::ffi::OsStr::new(exe))
        .map(|m| (files::parse_dev(&m.dev).unwrap_or(0), m.inode))
}

/// Most unprobed stretches listed (a fork storm of statically linked children is
/// summarized by the count).
const MAX_UNPROBED: usize = 256;

impl Follow {
    /// Records a stretch, bounded.
    fn note(&mut self, u: Unprobed) {
        if self.unprobed.len() < MAX_UNPROBED {
            self.unprobed.push(u);
        }
    }
}

/// Handles processes the targets forked (already in the in-kernel filter, put there by
/// the fork tracepoint) and traced processes that exec'd: in full mode, a process whose
/// library no probe covers gets its probes, retried while one that has just exec'd has
/// no pthread library mapped yet; the time until then is recorded as unprobed.
pub(super) fn follow(
    probes: &mut Probes,
    settings: &Settings,
    changes: ProcessChanges,
    f: &mut Follow,
    modules: &dyn Fn(u32) -> Vec<Module>,
) {
    if settings.mode != Mode::Full {
        return;
    }
    let now = monotonic_ns();
    // A forked child runs its parent's program: followed processes are probed for every
    // process of their library, which covers it already (a fork storm costs no work
    // here).
    for (pid, ts) in changes.execd {
        if !f.pending.iter().any(|p| p.pid == pid) {
            f.pending.push(ToProbe {
                pid,
                since_ns: ts,
                first_try_ns: now,
            });
        }
    }
    for pid in changes.gone {
        // Exited before the tracer could look: unprobed only if what it ran was not
        // covered (the kernel's mapping records tell what that was).
        if let Some(i) = f.pending.iter().position(|p| p.pid == pid) {
            let p = f.pending.swap_remove(i);
            if let Some(why) = uncovered(probes, &modules(pid)) {
                f.note(Unprobed {
                    pid,
                    since_ns: p.since_ns,
                    until_ns: Some(now),
                    why,
                });
            }
        }
    }
    // A child that has just exec'd may not have its libc mapped yet: it is tried again
    // at each wake-up for a while (its exec and its first mappings wake the reader).
    let mut pending = std::mem::take(&mut f.pending);
    pending.retain(|p| {
        // A target that does not follow its forks keeps probes of its own; followed
        // processes (and following targets) share probes with their library.
        let follow_forks = f.targets.iter().find(|t| t.0 == p.pid).is_none_or(|t| t.1);
        let library_wide = scope(follow_forks) == ProbeScope::Library;
        // An exec of a program whose needs were met already (a script running the same
        // commands over and over) costs a read of its maps, not of its files.
        let exe = exe_id(p.pid);
        if exe.is_some_and(|id| f.handled.contains(&id)) {
            return false;
        }
        let wanted = Wanted {
            pid: p.pid,
            probe_pid: p.pid,
            static_exe: None,
            launched: None,
            follow_forks,
            forked: true,
        };
        match attach(probes, settings, &wanted) {
            Ok(r) => {
                if let Some(id) = exe.filter(|_| library_wide) {
                    f.handled.insert(id);
                }
                // New probes for it: its calls to those functions until now were not
                // seen.
                if r.added && library_wide {
                    let functions: Vec<&str> = r.placed.iter().map(|p| p.function).collect();
                    let which = if functions.len() <= 4 {
                        functions.join(", ")
                    } else {
                        format!("{} pthread functions", functions.len())
                    };
                    f.note(Unprobed {
                        pid: p.pid,
                        since_ns: p.since_ns,
                        until_ns: Some(monotonic_ns()),
                        why: format!(
                            "its calls to {which} in {} were not probed until then",
                            r.library.display()
                        ),
                    });
                }
                false
            }
            Err(EngineError::Probe(e))
                if matches!(*e, ProbeError::Library(LibraryError::NotFound { .. }))
                    && now.saturating_sub(p.first_try_ns) < UNPROBED_RETRY_NS =>
            {
                true
            }
            Err(_) if !crate::proc::process::alive(p.pid) => {
                if let Some(why) = uncovered(probes, &modules(p.pid)) {
                    f.note(Unprobed {
                        pid: p.pid,
                        since_ns: p.since_ns,
                        until_ns: Some(now),
                        why,
                    });
                }
                false
            }
            Err(EngineError::Probe(e))
                if matches!(*e, ProbeError::Library(LibraryError::NotFound { .. })) =>
            {
                // No pthread library after a while: a program that does not use them.
                if settings.verbose {
                    crate::say!("rtm-trace: PID {}: {e}; not probed", p.pid);
                }
                false
            }
            // Its program may have changed under the attach (an exec in between): tried
            // again while the window lasts.
            Err(_) if now.saturating_sub(p.first_try_ns) < UNPROBED_RETRY_NS => true,
            Err(e) => {
                crate::say!(
                    "rtm-trace: warning: cannot probe followed process {}: {e}",
                    p.pid
                );
                f.note(Unprobed {
                    pid: p.pid,
                    since_ns: p.since_ns,
                    until_ns: None,
                    why: format!("it cannot be probed: {e}"),
                });
                false
            }
        }
    });
    f.pending.extend(pending);
}
