//! Loading the eBPF object and attaching its programs to target processes.

mod error;
pub mod func_tables;
pub mod funcs;
pub mod kernel_btf;
pub mod layout;
mod load;
mod losses;
pub mod mpi;
pub mod multi_uprobe;
pub mod placement;
pub mod pthread;
mod release;
pub mod shared_memory;
pub mod traced;
mod tracepoints;
mod uprobes;

pub use error::ProbeError;
pub use load::{LeftWaitMaps, LoadOptions, Probes};
pub use traced::{FilterIds, FilterWriter, Traced};
pub use tracepoints::HOOKS_ENV;
pub use uprobes::{AttachReport, Placed, ProbeScope};
