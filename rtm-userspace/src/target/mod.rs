//! Target processes: finding them, their memory maps and ELF files, and launching them
//! gated so no user code runs before the probes are live.

pub mod elf;
pub mod files;
pub mod host;
pub mod launch;
pub mod maps;
pub mod process;

pub use process::{Module, ProcessError};
