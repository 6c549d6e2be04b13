//! The loaded eBPF object: process filter, attachments per process, loss counters.

use std::{collections::HashMap, num::NonZeroU32, path::Path};

use aya::{
    Ebpf, EbpfLoader,
    maps::{HashMap as BpfHashMap, MapData, MapError, PerCpuArray, RingBuf},
    programs::{
        ProgramError, UProbe,
        uprobe::{UProbeAttachLocation, UProbeAttachPoint, UProbeLinkId, UProbeScope},
    },
};
use rtm_common::{LossCounter, names};

use super::pthread::{self, LibraryError, MUTEX_PROBES, ProbeKind, PthreadLibrary};

/// Errors loading or attaching probes.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    /// The kernel refused the eBPF object.
    #[error(
        "cannot load the eBPF programs: {source}\n  rtm-trace needs root (or CAP_BPF and \
         CAP_PERFMON) and a kernel with BPF and uprobes (CONFIG_BPF_SYSCALL, CONFIG_UPROBE_EVENTS)"
    )]
    Load {
        /// Why.
        #[source]
        source: aya::EbpfError,
    },
    /// A program of the object could not be loaded into the kernel.
    #[error("cannot load eBPF program {name}: {source}")]
    Program {
        /// Program name.
        name: &'static str,
        /// Why.
        #[source]
        source: ProgramError,
    },
    /// The object lacks a program or map this binary expects (build mismatch).
    #[error("the eBPF object has no {0}: rebuild rtm-trace")]
    Missing(&'static str),
    /// A map operation failed.
    #[error("eBPF map {name}: {source}")]
    Map {
        /// Map name.
        name: &'static str,
        /// Why.
        #[source]
        source: MapError,
    },
    /// No pthread library was found in the process.
    #[error(transparent)]
    Library(#[from] LibraryError),
    /// Attaching a uprobe failed.
    #[error("cannot attach to {function} in {path} for PID {pid}: {source}")]
    Attach {
        /// Function.
        function: &'static str,
        /// Library.
        path: String,
        /// Process.
        pid: u32,
        /// Why.
        #[source]
        source: ProgramError,
    },
}

/// Where one probe went, for `--verbose`.
#[derive(Debug, Clone)]
pub struct Placement {
    /// Function.
    pub function: &'static str,
    /// Entry or return.
    pub kind: ProbeKind,
    /// File offset used.
    pub offset: u64,
}

/// What attaching to one process did.
#[derive(Debug)]
pub struct AttachReport {
    /// The library probed (path inside the process's namespace).
    pub library: std::path::PathBuf,
    /// Probes placed.
    pub placed: Vec<Placement>,
    /// Functions the library does not define (e.g. an old libc without timedlock).
    pub missing: Vec<&'static str>,
}

/// The loaded eBPF object.
pub struct Probes {
    ebpf: Ebpf,
    links: HashMap<u32, Vec<(&'static str, UProbeLinkId)>>,
}

fn map_err(name: &'static str) -> impl FnOnce(MapError) -> ProbeError {
    move |source| ProbeError::Map { name, source }
}

impl Probes {
    /// Loads the object with a ring buffer of `ring_bytes` and loads every program.
    pub fn load(object: &[u8], ring_bytes: u32) -> Result<Self, ProbeError> {
        let mut ebpf = EbpfLoader::new()
            .map_max_entries(names::MAP_EVENTS, ring_bytes)
            .load(object)
            .map_err(|source| ProbeError::Load { source })?;
        for name in [
            names::PROG_MUTEX_LOCK_ENTER,
            names::PROG_MUTEX_LOCK_RETURN,
            names::PROG_MUTEX_UNLOCK_ENTER,
        ] {
            let prog: &mut UProbe = ebpf
                .program_mut(name)
                .ok_or(ProbeError::Missing(name))?
                .try_into()
                .map_err(|source| ProbeError::Program { name, source })?;
            prog.load()
                .map_err(|source| ProbeError::Program { name, source })?;
        }
        Ok(Self {
            ebpf,
            links: HashMap::new(),
        })
    }

    /// Takes the event ring buffer (once).
    pub fn take_ring(&mut self) -> Result<RingBuf<MapData>, ProbeError> {
        let map = self
            .ebpf
            .take_map(names::MAP_EVENTS)
            .ok_or(ProbeError::Missing(names::MAP_EVENTS))?;
        RingBuf::try_from(map).map_err(map_err(names::MAP_EVENTS))
    }

    /// Adds or removes a process from the in-kernel filter.
    pub fn set_traced(&mut self, pid: u32, traced: bool) -> Result<(), ProbeError> {
        let map = self
            .ebpf
            .map_mut(names::MAP_TRACED_TGIDS)
            .ok_or(ProbeError::Missing(names::MAP_TRACED_TGIDS))?;
        let mut tgids: BpfHashMap<_, u32, u32> =
            BpfHashMap::try_from(map).map_err(map_err(names::MAP_TRACED_TGIDS))?;
        if traced {
            tgids.insert(pid, 1, 0)
        } else {
            match tgids.remove(&pid) {
                Err(MapError::KeyNotFound) => Ok(()),
                r => r,
            }
        }
        .map_err(map_err(names::MAP_TRACED_TGIDS))
    }

    /// Attaches the mutex probes for `pid` to the pthread library `probe_pid` maps. The two
    /// differ in launch mode, where the child has not exec'd yet and the tracer's own libc
    /// stands in for the one the program will load.
    pub fn attach_mutex(&mut self, pid: u32, probe_pid: u32) -> Result<AttachReport, ProbeError> {
        let lib = pthread::find(probe_pid)?;
        self.attach_library(pid, &lib)
    }

    fn attach_library(
        &mut self,
        pid: u32,
        lib: &PthreadLibrary,
    ) -> Result<AttachReport, ProbeError> {
        let scope = UProbeScope::OneProcess(NonZeroU32::new(pid).expect("pid 0 is never traced"));
        let mut report = AttachReport {
            library: lib.path.clone(),
            placed: Vec::new(),
            missing: Vec::new(),
        };
        for spec in MUTEX_PROBES {
            let Some(offset) = lib.symbols.function_offset(spec.function) else {
                if !report.missing.contains(&spec.function) {
                    report.missing.push(spec.function);
                }
                continue;
            };
            let prog: &mut UProbe = self
                .ebpf
                .program_mut(spec.program)
                .ok_or(ProbeError::Missing(spec.program))?
                .try_into()
                .map_err(|source| ProbeError::Program {
                    name: spec.program,
                    source,
                })?;
            let point = UProbeAttachPoint {
                location: UProbeAttachLocation::AbsoluteOffset(offset),
                cookie: spec.cookie.map(|op| op as u64),
            };
            let link = prog
                .attach(point, Path::new(&lib.host_path), scope)
                .map_err(|source| ProbeError::Attach {
                    function: spec.function,
                    path: lib.path.display().to_string(),
                    pid,
                    source,
                })?;
            self.links
                .entry(pid)
                .or_default()
                .push((spec.program, link));
            report.placed.push(Placement {
                function: spec.function,
                kind: spec.kind,
                offset,
            });
        }
        Ok(report)
    }

    /// Stops event collection for `pids` at once: the in-kernel filter drops them, so the
    /// programs return before doing any work. The breakpoints stay until [`detach_all`].
    ///
    /// [`detach_all`]: Probes::detach_all
    pub fn stop(&mut self, pids: &[u32]) {
        for pid in pids {
            if let Err(e) = self.set_traced(*pid, false) {
                log::debug!("untracing {pid}: {e}");
            }
        }
    }

    /// Detaches every probe. The kernel unregisters uprobes one at a time, each waiting
    /// for an RCU grace period (about 0.1 s per probe on this kind of machine).
    pub fn detach_all(&mut self) {
        for (pid, links) in std::mem::take(&mut self.links) {
            for (program, link) in links {
                if let Some(Ok(prog)) = self.ebpf.program_mut(program).map(<&mut UProbe>::try_from)
                    && let Err(e) = prog.detach(link)
                {
                    log::debug!("detaching {program} for {pid}: {e}");
                }
            }
        }
    }

    /// Current loss counters, summed over CPUs, in `LossCounter` order.
    pub fn losses(&self) -> Result<[u64; LossCounter::COUNT as usize], ProbeError> {
        let map = self
            .ebpf
            .map(names::MAP_LOSSES)
            .ok_or(ProbeError::Missing(names::MAP_LOSSES))?;
        let arr: PerCpuArray<_, u64> =
            PerCpuArray::try_from(map).map_err(map_err(names::MAP_LOSSES))?;
        let mut out = [0u64; LossCounter::COUNT as usize];
        for c in LossCounter::ALL {
            let values = arr
                .get(&(c as u32), 0)
                .map_err(map_err(names::MAP_LOSSES))?;
            out[c as usize] = values.iter().sum();
        }
        Ok(out)
    }
}
