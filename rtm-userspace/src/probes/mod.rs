//! Loading the eBPF object and attaching its programs to target processes.

mod error;
pub(crate) mod func_tables;
pub(crate) mod funcs;
pub(crate) mod kernel_btf;
pub(crate) mod layout;
mod load;
mod losses;
pub mod mpi;
pub(crate) mod multi_uprobe;
pub(crate) mod placement;
pub(crate) mod pthread;
mod release;
pub(crate) mod shared_memory;
pub(crate) mod traced;
mod tracepoints;
mod uprobes;

pub use error::ProbeError;
pub use load::{LeftWaitMaps, LoadOptions, Probes};
pub use traced::{FilterIds, FilterWriter, Traced};
pub use uprobes::{AttachReport, ProbeScope};
