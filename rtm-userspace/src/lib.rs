//! rtm-trace: attach to running Linux processes with eBPF and show where their threads
//! wait on each other.
//!
//! Data flows one way: `proc` finds and launches processes, `probes` loads the eBPF
//! object and attaches it, `readers` decode what the kernel sends, `model` aggregates it
//! (pure, no aya), `symbolize` names addresses, `analyses` holds the analyses built as
//! vertical slices (model, document section, text), and `output` renders snapshots
//! through sinks (`format` lays out text for all of them). The `engine` drives them: it
//! owns the source of events, the model and the sinks, and runs the loop. Front ends
//! build a [`config::TraceConfig`] and drive the engine: `session` is the one-shot
//! command (`cli` is its command line).

#![deny(missing_docs)]

// Every module is private to the crate, so the dead-code lint sees what nothing uses;
// the items below are the whole public surface, each for a user outside the crate.
mod agent;
mod analyses;
mod cli;
mod config;
mod engine;
mod format;
mod interrupt;
mod live;
mod model;
mod output;
mod probes;
mod proc;
mod readers;
mod session;
mod symbolize;

// The binary (src/main.rs): its command line and one entry point per subcommand.
pub use agent::run as agent;
pub use cli::{Action, Cli, generate::run as generate};
pub use format::text::say;
pub use session::{SessionError, check, merge, report, run as trace};

// The engine driven as a daemon drives it (tests/tests/engine_e2e.rs).
pub use config::{CounterList, Mode, TraceConfig};
pub use engine::{Engine, KernelSource, Summary, Target};
pub use output::EndReason;

// Who holds a futex word, from its bytes (tests/tests/blocked_e2e.rs).
pub use model::blocked::{Holder, MUTEX_BYTES, MUTEX_KIND, MUTEX_OWNER, holder as futex_holder};

// The MPI layouts the probes use for known library builds (tests/tests/mpi_layout.rs).
pub use probes::mpi::layout_for as mpi_layout_for;

// The ingest benchmark (examples/ingest.rs): the model, the timeline sink, and the
// document as `--json` and `--html` make it.
pub use model::{Limits, Snapshot, SyncGraph, Window};
pub use output::{
    RunInfo, dest::Dest, html::render as render_html, json::to_vec as document_json, saved::Doc,
    sink::Sink, timeline::Timeline,
};
pub use symbolize::objects::ObjectNamer;

/// The eBPF object built by build.rs from the rtm-ebpf crate.
pub(crate) static EBPF_OBJECT: &[u8] =
    aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/rtm-ebpf"));

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
