//! Loading the eBPF object and attaching its programs to target processes.

pub mod func_tables;
pub mod funcs;
pub mod kernel_btf;
pub mod layout;
mod load;
pub mod mpi;
pub mod multi_uprobe;
pub mod placement;
pub mod pthread;
pub mod shared_memory;
pub mod traced;

pub use load::{
    AttachReport, HOOKS_ENV, LeftWaitMaps, LoadOptions, Placed, ProbeError, ProbeScope, Probes,
};
pub use traced::Traced;
