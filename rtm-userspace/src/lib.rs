//! rtm-trace: attach to running Linux processes with eBPF and show where their threads
//! wait on each other.
//!
//! Data flows one way: `target` finds and launches processes, `probes` loads the eBPF
//! object and attaches it, `readers` decode what the kernel sends, `model` aggregates it
//! (pure, no aya), `symbolize` names addresses, and `output` renders snapshots.

pub mod cli;
pub mod interrupt;
pub mod model;
pub mod output;
pub mod probes;
pub mod readers;
pub mod session;
pub mod symbolize;
pub mod target;

/// The eBPF object built by build.rs from the rtm-ebpf crate.
pub static EBPF_OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/rtm-ebpf"));

#[cfg(test)]
mod fuzz_tests;
