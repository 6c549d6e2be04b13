//! Errors loading or attaching probes, and the object lookups that make them.

use aya::programs::ProgramError;
use aya::{Ebpf, maps::MapError};

use super::pthread::LibraryError;

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
    #[error(
        "cannot load eBPF program {name}: {source}\n  (`rtm-trace check` says which features \
         this kernel can run, and what each needs)"
    )]
    Program {
        /// Program name.
        name: &'static str,
        /// Why.
        #[source]
        source: ProgramError,
    },
    /// This binary was built without its eBPF programs (bpf-linker was missing).
    #[error(
        "this rtm-trace was built without its eBPF programs (bpf-linker was not on PATH at \
         build time): run `cargo xtask build` (or `cargo xtask setup` and build again)"
    )]
    NoObject,
    /// The object lacks a program or map this binary expects (build mismatch).
    #[error("the eBPF object has no {0}: rebuild rtm-trace")]
    Missing(&'static str),
    /// A map could not be mapped into memory.
    #[error("cannot map eBPF map {name} into memory: {source}")]
    Mmap {
        /// Which map.
        name: &'static str,
        /// Why.
        #[source]
        source: std::io::Error,
    },
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
    /// Attaching a tracepoint failed.
    #[error(
        "cannot attach to tracepoint {category}/{event}: {source}\n  rtm-trace needs tracefs \
         (mount -t tracefs nodev /sys/kernel/tracing) and a kernel with syscall tracepoints \
         (CONFIG_FTRACE_SYSCALLS)"
    )]
    Tracepoint {
        /// Category.
        category: &'static str,
        /// Event.
        event: &'static str,
        /// Why.
        #[source]
        source: ProgramError,
    },
    /// Attaching a timed function's probe failed.
    #[error("cannot attach to {what} (--func): {source}")]
    AttachFunc {
        /// The function and its file.
        what: String,
        /// Why.
        #[source]
        source: ProgramError,
    },
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

pub(super) fn map_err(name: &'static str) -> impl FnOnce(MapError) -> ProbeError {
    move |source| ProbeError::Map { name, source }
}

/// The object's program `name`, as the program type `T` it must be.
pub(super) fn program<'a, T>(
    ebpf: &'a mut Ebpf,
    name: &'static str,
) -> Result<&'a mut T, ProbeError>
where
    &'a mut T: TryFrom<&'a mut aya::programs::Program, Error = ProgramError>,
{
    ebpf.program_mut(name)
        .ok_or(ProbeError::Missing(name))?
        .try_into()
        .map_err(|source| ProbeError::Program { name, source })
}
