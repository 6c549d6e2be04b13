//! The one definition of rtm-trace's kernel/user ABI.
//!
//! Everything the eBPF programs write and userspace reads is declared here: event
//! layouts, their discriminants, the names of maps and programs, the indexes of the
//! loss counters, and (in [`arch`]) what both sides assume about the CPU architecture:
//! x86-64 only. The crate is `no_std` so the eBPF crate can use it; the `user` feature
//! adds `aya::Pod`, serde and a safe decoder for userspace.
#![no_std]
#![deny(missing_docs)]

// First: its `abi_enum!` is used by the modules after it.
#[macro_use]
mod macros;

pub mod agg;
pub mod arch;
pub mod cookie;
pub mod func;
pub mod futex;
pub mod glibc;
pub mod map_values;
pub mod mpi;
pub mod names;
pub mod records;
pub mod stack;

#[cfg(feature = "user")]
pub mod decode;

pub use agg::*;
pub use cookie::*;
pub use func::*;
pub use futex::*;
pub use glibc::*;
pub use map_values::*;
pub use mpi::*;
pub use records::*;
pub use stack::*;
