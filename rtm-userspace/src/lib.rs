//! rtm-trace: attach to running Linux processes with eBPF and show where their threads
//! wait on each other.
//!
//! Data flows one way: `proc` finds and launches processes, `probes` loads the eBPF
//! object and attaches it, `readers` decode what the kernel sends, `model` aggregates it
//! (pure, no aya), `symbolize` names addresses, and `output` renders snapshots through
//! sinks. The `engine` drives them: it owns the source of events, the model and the
//! sinks, and runs the loop. Front ends build a [`config::TraceConfig`] and drive the
//! engine: `session` is the one-shot command (`cli` is its command line).

#![deny(missing_docs)]

pub mod agent;
pub mod cli;
pub mod config;
pub mod engine;
pub(crate) mod interrupt;
pub(crate) mod live;
pub mod model;
pub mod output;
pub mod probes;
pub(crate) mod proc;
pub(crate) mod readers;
pub mod session;
pub mod symbolize;

/// The eBPF object built by build.rs from the rtm-ebpf crate.
pub static EBPF_OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/rtm-ebpf"));

#[cfg(test)]
mod fuzz_tests;

#[cfg(test)]
mod layering_tests;

#[cfg(test)]
mod object_tests {
    use object::{Object as _, ObjectSymbol as _};
    use rtm_common::names;

    /// Every map, program and global the loader names is in the object built here: a
    /// name changed on one side only is caught without loading anything.
    #[test]
    fn the_ebpf_object_has_every_name_the_loader_asks_for() {
        if super::EBPF_OBJECT.is_empty() {
            panic!("built without the eBPF object (bpf-linker missing): run cargo xtask setup");
        }
        let obj = object::File::parse(super::EBPF_OBJECT).expect("the eBPF object parses");
        let symbols: std::collections::HashSet<&str> =
            obj.symbols().filter_map(|s| s.name().ok()).collect();
        let wanted = names::ALL_MAPS
            .iter()
            .chain(names::MAP_SYNC_RINGS.iter())
            .chain(names::ALL_PROGRAMS)
            .chain(names::ALL_GLOBALS);
        let missing: Vec<&&str> = wanted.filter(|n| !symbols.contains(**n)).collect();
        assert!(missing.is_empty(), "not in the eBPF object: {missing:?}");
        // The check can fail: a name that is not there is not found.
        assert!(!symbols.contains("no_such_program_rtm"));
    }

    /// No program can reach a panic: a path the compiler could not prove safe (a
    /// division, an index) ends in a call that never returns, which the verifier
    /// refuses ("last insn is not an exit or jmp"), and contention mode would fall back
    /// to the raw tracepoints without saying why but in `rtm-trace check`.
    #[test]
    fn no_ebpf_program_can_reach_a_panic() {
        let obj = object::File::parse(super::EBPF_OBJECT).expect("the eBPF object parses");
        let panics: Vec<&str> = obj
            .symbols()
            .filter_map(|s| s.name().ok())
            .filter(|n| n.contains("panic"))
            .collect();
        assert!(
            panics.is_empty(),
            "panic paths in the eBPF object: {panics:?}"
        );
    }
}
