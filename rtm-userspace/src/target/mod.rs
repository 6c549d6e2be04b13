//! Target processes: finding them, their address spaces (the mappings of
//! /proc/PID/maps) and ELF files, the host they run on, and launching them gated so no
//! user code runs before the probes are live.

pub mod address_space;
pub mod elf;
pub mod files;
pub mod host;
pub mod launch;
pub mod mapped;
pub mod process;

pub use process::{Module, ProcessError};
