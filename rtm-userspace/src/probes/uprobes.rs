//! Uprobes: the full-mode probes on a pthread library (or a static executable), MPI's
//! and `--func`'s, through one uprobe_multi link per program and file where the kernel
//! has them, else one perf event per probe.

use std::{collections::HashSet, num::NonZeroU32, os::fd::OwnedFd, path::Path};

use aya::{
    maps::Array,
    programs::{
        ProgramError, UProbe,
        uprobe::{UProbeAttachLocation, UProbeAttachPoint, UProbeScope},
    },
};
use rtm_common::{Cookie, MpiLayout, mpi_cookie, names};

use crate::proc::process;

use super::{
    error::{ProbeError, map_err, program},
    load::{Probes, UPROBES},
    mpi, placement,
    pthread::{self, FULL_PROBES, ProbeKind, ProbeSpec, PthreadLibrary},
};

/// Where one probe went, for `--verbose`.
#[derive(Debug, Clone)]
pub struct Placed {
    /// Function.
    pub function: &'static str,
    /// Entry and return, or entry only.
    pub kind: ProbeKind,
    /// File offset of the function.
    pub function_offset: u64,
    /// Where in the function, and why.
    pub placement: placement::Placement,
}

/// Which processes a set of full-mode probes serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProbeScope {
    /// The one process: its children do not inherit them.
    Process,
    /// Every process that maps the library, left to the in-kernel filter: the children a
    /// traced process forks are covered from their first instruction (and, after an
    /// exec, as long as they run the same library). Other processes pay the trap
    /// (~0.8 us) on the probed functions while the trace runs.
    Library,
}

/// What attaching to one process did.
#[derive(Debug)]
pub struct AttachReport {
    /// The library probed (path inside the process's namespace).
    pub library: std::path::PathBuf,
    /// Probes added: false when the library's every process was already covered.
    pub added: bool,
    /// Probes placed.
    pub placed: Vec<Placed>,
    /// Functions the library does not define (e.g. an old libc without timedlock).
    pub missing: Vec<&'static str>,
    /// Functions not probed because nothing in the program imports them.
    pub unused: Vec<&'static str>,
}

/// The scope of uprobes for one process. The kernel matches a uprobe to a process by
/// the address space of the task it was opened for: the process's own id while its main
/// thread lives, a live thread's once the main thread has called pthread_exit (its
/// zombie has no address space left to match).
fn one_process(pid: u32) -> UProbeScope {
    let task = process::live_task(pid).unwrap_or(pid);
    NonZeroU32::new(task)
        .or(NonZeroU32::new(pid))
        .map_or(UProbeScope::AllProcesses, UProbeScope::OneProcess)
}

impl Probes {
    /// The uprobe program `name`, loaded into the kernel on first use.
    fn uprobe(&mut self, name: &'static str) -> Result<&mut UProbe, ProbeError> {
        debug_assert!(UPROBES.contains(&name));
        let first = self.loaded.insert(name);
        let prog: &mut UProbe = program(&mut self.ebpf, name)?;
        if first {
            prog.load()
                .map_err(|source| ProbeError::Program { name, source })?;
        }
        Ok(prog)
    }

    /// Attaches the full-mode probes for `pid` to the pthread library `probe_pid` maps.
    /// The two differ in launch mode, where the child has not exec'd yet and the tracer's
    /// own libc stands in for the one the program will load. Only functions in `used`
    /// are probed (None: all of them).
    pub fn attach_pthread(
        &mut self,
        pid: u32,
        probe_pid: u32,
        used: Option<&HashSet<&'static str>>,
        scope: ProbeScope,
    ) -> Result<AttachReport, ProbeError> {
        let lib = pthread::find(probe_pid)?;
        self.attach_library(pid, &lib, used, scope)
    }

    /// Attaches the full-mode probes for `pid` to a statically linked executable.
    pub fn attach_static(
        &mut self,
        pid: u32,
        exe: &Path,
        scope: ProbeScope,
    ) -> Result<AttachReport, ProbeError> {
        let lib = pthread::from_file(pid, exe)?;
        self.attach_library(pid, &lib, None, scope)
    }

    /// Where each probe of `lib` goes.
    fn placements(
        lib: &PthreadLibrary,
    ) -> Result<Vec<(ProbeSpec, u64, placement::Placement)>, ProbeError> {
        let bytes = &lib.bytes;
        let mut out = Vec::new();
        for spec in FULL_PROBES {
            let Some(offset) = lib.symbols.function_offset(spec.function) else {
                continue;
            };
            let size = lib.symbols.function_size(spec.function).unwrap_or(0) as usize;
            let start = offset as usize;
            let code = bytes
                .get(start..start.saturating_add(size).min(bytes.len()))
                .unwrap_or(&[]);
            let keep = &placement::CALL_ARGS[..spec.args as usize];
            let pass_stores = spec.check_at_entry != spec.check_further_in;
            let p = placement::place(code, offset, keep, pass_stores);
            out.push((*spec, offset, p));
        }
        Ok(out)
    }

    fn attach_library(
        &mut self,
        pid: u32,
        lib: &PthreadLibrary,
        used: Option<&HashSet<&'static str>>,
        probe_scope: ProbeScope,
    ) -> Result<AttachReport, ProbeError> {
        let mut report = AttachReport {
            library: lib.path.clone(),
            added: true,
            placed: Vec::new(),
            missing: Vec::new(),
            unused: Vec::new(),
        };
        // Probes for every process that maps the library go in once per function: a
        // process that uses functions not probed yet (a child that exec'd another
        // program) adds only those.
        let (scope, links_of, covered) = match probe_scope {
            ProbeScope::Process => (one_process(pid), pid, HashSet::new()),
            ProbeScope::Library => (
                UProbeScope::AllProcesses,
                0,
                self.library_wide.get(&lib.id).cloned().unwrap_or_default(),
            ),
        };
        for spec in FULL_PROBES {
            if lib.symbols.function_offset(spec.function).is_none() {
                report.missing.push(spec.function);
            }
        }
        // Program -> (offset, cookie, function) of each probe to attach.
        let mut points: std::collections::BTreeMap<&'static str, Vec<(u64, u64, &'static str)>> =
            Default::default();
        for (spec, offset, place) in Self::placements(lib)? {
            if used.is_some_and(|u| !u.contains(spec.function)) {
                report.unused.push(spec.function);
                continue;
            }
            if covered.contains(spec.function) {
                continue;
            }
            let check = if place.offset == 0 {
                spec.check_at_entry
            } else {
                spec.check_further_in
            };
            let cookie = Cookie::pack(spec.primitive, spec.op, check);
            let programs: &[&'static str] = match spec.kind {
                ProbeKind::Call => &[names::PROG_CALL_ENTER, names::PROG_CALL_RETURN],
                ProbeKind::Mark | ProbeKind::Begin => &[names::PROG_CALL_MARK],
            };
            for &name in programs {
                points.entry(name).or_default().push((
                    offset + place.offset,
                    cookie,
                    spec.function,
                ));
            }
            report.placed.push(Placed {
                function: spec.function,
                kind: spec.kind,
                function_offset: offset,
                placement: place,
            });
        }
        // One uprobe_multi link per program where the kernel has them, else one perf
        // event per probe.
        let multi_pid = (probe_scope == ProbeScope::Process).then_some(pid);
        for (name, pts) in points {
            let pairs: Vec<(u64, u64)> = pts.iter().map(|p| (p.0, p.1)).collect();
            if self.attach_multi(name, Path::new(&lib.host_path), &pairs, multi_pid) {
                continue;
            }
            for (at, cookie, function) in pts {
                let path = Path::new(&lib.host_path);
                self.attach_one(name, path, (at, cookie), scope, links_of, |source| {
                    ProbeError::Attach {
                        function,
                        path: lib.path.display().to_string(),
                        pid,
                        source,
                    }
                })?;
            }
        }
        if probe_scope == ProbeScope::Library {
            let set = self.library_wide.entry(lib.id).or_default();
            set.extend(report.placed.iter().map(|p| p.function));
        }
        report.added = !report.placed.is_empty();
        Ok(report)
    }

    /// Attaches the MPI entry and return probes to `lib`, for `pid` only or (None) for
    /// every process that maps it, left to the in-kernel filter (launch mode: ranks
    /// forked by the launcher are traced from their first instruction). Tells the
    /// programs how to read this implementation's handles. Returns the functions probed.
    pub fn attach_mpi(
        &mut self,
        pid: Option<u32>,
        lib: &mpi::MpiLibrary,
    ) -> Result<Vec<(&'static str, placement::Placement)>, ProbeError> {
        let map = self
            .ebpf
            .map_mut(names::MAP_MPI_LAYOUT)
            .ok_or(ProbeError::Missing(names::MAP_MPI_LAYOUT))?;
        let mut layouts: Array<_, MpiLayout> =
            Array::try_from(map).map_err(map_err(names::MAP_MPI_LAYOUT))?;
        layouts
            .set(lib.implementation as u32, lib.layout, 0)
            .map_err(map_err(names::MAP_MPI_LAYOUT))?;
        let scope = match pid {
            Some(p) => one_process(p),
            None => UProbeScope::AllProcesses,
        };
        let bytes = &lib.bytes;
        let mut probed = Vec::new();
        let mut points: Vec<(u64, u64, &'static str)> = Vec::new();
        for &(function, op) in mpi::MPI_FUNCTIONS {
            let Some(offset) = lib.symbols.function_offset(function) else {
                continue;
            };
            let size = lib.symbols.function_size(function).unwrap_or(0) as usize;
            let start = offset as usize;
            let code = bytes
                .get(start..start.saturating_add(size).min(bytes.len()))
                .unwrap_or(&[]);
            let place = placement::place(code, offset, &placement::CALL_ARGS, false);
            points.push((
                offset + place.offset,
                mpi_cookie(op, lib.implementation),
                function,
            ));
            probed.push((function, place));
        }
        for name in [names::PROG_MPI_ENTER, names::PROG_MPI_RETURN] {
            let pairs: Vec<(u64, u64)> = points.iter().map(|p| (p.0, p.1)).collect();
            if self.attach_multi(name, Path::new(&lib.host_path), &pairs, pid) {
                continue;
            }
            for &(at, cookie, function) in &points {
                let path = Path::new(&lib.host_path);
                let owner = pid.unwrap_or(0);
                self.attach_one(name, path, (at, cookie), scope, owner, |source| {
                    ProbeError::Attach {
                        function,
                        path: lib.path.display().to_string(),
                        pid: owner,
                        source,
                    }
                })?;
            }
        }
        Ok(probed)
    }

    /// Whether the file (device, inode) has probes for every process that maps it.
    pub fn covers(&self, id: (u64, u64)) -> bool {
        self.library_wide.get(&id).is_some_and(|f| !f.is_empty())
    }

    /// The uprobe programs loaded for uprobe_multi links, by name.
    pub fn multi_programs(&self) -> Vec<(&'static str, std::rc::Rc<OwnedFd>)> {
        self.multi
            .as_ref()
            .map(|m| m.programs())
            .unwrap_or_default()
    }

    /// Loads uprobe program `name` into the kernel now, as its first attach would
    /// (`rtm-trace check`), and says whether uprobe_multi links take it: Ok when they
    /// do, the reason when the perf-event path (one uprobe at a time) must serve.
    pub fn load_uprobe(&mut self, name: &'static str) -> Result<Result<(), String>, ProbeError> {
        self.uprobe(name)?;
        Ok(match &self.multi {
            Some(m) => m.links_work(name),
            None => Err("the programs could not be prepared for uprobe_multi".into()),
        })
    }

    /// Uprobes attached.
    pub fn uprobe_count(&self) -> usize {
        self.links.values().map(Vec::len).sum::<usize>()
            + self
                .multi_links
                .values()
                .flatten()
                .map(|(_, n)| n)
                .sum::<usize>()
    }

    /// Attaches the entry and return probes of timed functions (`--func`): each at its
    /// file and offset, its index the cookie; for `pid` only, or (None) for every
    /// process that maps the file, left to the in-kernel filter. Returns the probes.
    pub fn attach_funcs(
        &mut self,
        pid: Option<u32>,
        funcs: &[(&Path, u64, u64, &str)],
    ) -> Result<usize, ProbeError> {
        let mut files: Vec<&Path> = funcs.iter().map(|f| f.0).collect();
        files.sort();
        files.dedup();
        let scope = pid.map_or(UProbeScope::AllProcesses, one_process);
        for file in files {
            let here: Vec<_> = funcs.iter().filter(|f| f.0 == file).collect();
            let pairs: Vec<(u64, u64)> = here.iter().map(|f| (f.1, f.2)).collect();
            for name in [names::PROG_FUNC_ENTER, names::PROG_FUNC_RETURN] {
                if self.attach_multi(name, file, &pairs, pid) {
                    continue;
                }
                for &&(_, at, cookie, function) in &here {
                    let owner = pid.unwrap_or(0);
                    self.attach_one(name, file, (at, cookie), scope, owner, |source| {
                        ProbeError::AttachFunc {
                            what: format!("{function} in {}", file.display()),
                            source,
                        }
                    })?;
                }
            }
        }
        Ok(funcs.len() * 2)
    }

    /// Attaches program `name` at (offset, cookie) `point` of `path` through a link of
    /// its own, kept with `owner`'s (a pid, or 0 for probes of every process).
    fn attach_one(
        &mut self,
        name: &'static str,
        path: &Path,
        (at, cookie): (u64, u64),
        scope: UProbeScope,
        owner: u32,
        err: impl FnOnce(ProgramError) -> ProbeError,
    ) -> Result<(), ProbeError> {
        let point = UProbeAttachPoint {
            location: UProbeAttachLocation::AbsoluteOffset(at),
            cookie: Some(cookie),
        };
        let link = self.uprobe(name)?.attach(point, path, scope).map_err(err)?;
        self.links.entry(owner).or_default().push((name, link));
        Ok(())
    }

    /// Attaches program `name` at `points` (offset, cookie) of `path` through one
    /// uprobe_multi link, for `pid` (its live task) or every process; false when the
    /// kernel refused it (the caller attaches one by one).
    fn attach_multi(
        &mut self,
        name: &'static str,
        path: &Path,
        points: &[(u64, u64)],
        pid: Option<u32>,
    ) -> bool {
        let Some(multi) = &self.multi else {
            return false;
        };
        if points.is_empty() {
            return true;
        }
        let offsets: Vec<u64> = points.iter().map(|p| p.0).collect();
        let cookies: Vec<u64> = points.iter().map(|p| p.1).collect();
        let ret = matches!(
            name,
            names::PROG_CALL_RETURN | names::PROG_MPI_RETURN | names::PROG_FUNC_RETURN
        );
        let task = pid.map(|p| process::live_task(p).unwrap_or(p));
        match multi.attach(name, path, &offsets, &cookies, task, ret) {
            Ok(link) => {
                self.multi_links
                    .entry(pid.unwrap_or(0))
                    .or_default()
                    .push((link, points.len()));
                true
            }
            Err(e) => {
                log::info!("uprobe_multi link for {name} refused ({e}): uprobes one by one");
                self.multi = None;
                false
            }
        }
    }
}
