//! `cargo xtask`: what cargo alone cannot do. Installs the eBPF toolchain, runs the demo,
//! runs the whole test suite (root, real eBPF).

mod bench;
mod bench_mpi;
mod setup;
mod tasks;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "cargo xtask")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Install what building needs: nightly rust-src, bpf-linker, a C compiler (idempotent).
    Setup,
    /// Set up, then build rtm-trace (release with --release).
    Build {
        /// Release build.
        #[arg(long)]
        release: bool,
    },
    /// Set up, build, and trace the bundled demo workload (needs root).
    Demo,
    /// Set up, then run the whole suite: fmt, clippy, unit tests, eBPF tests (needs root).
    Test,
    /// Benchmarks (needs root); prints Markdown for BENCHMARKS.md.
    Bench {
        #[command(subcommand)]
        which: BenchCmd,
    },
}

#[derive(Subcommand)]
enum BenchCmd {
    /// What tracing costs a lock/unlock loop: no tracing, contention mode, full mode and
    /// bpftrace, side by side.
    Probes,
    /// What tracing costs an MPI program: a small-message ring under Open MPI and MPICH,
    /// untraced and traced.
    Mpi,
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().cmd {
        Cmd::Setup => setup::run().map(|_| ()),
        Cmd::Build { release } => {
            let env = setup::run()?;
            tasks::build(&env, release)
        }
        Cmd::Demo => tasks::demo(&setup::run()?),
        Cmd::Test => tasks::test(&setup::run()?),
        Cmd::Bench {
            which: BenchCmd::Probes,
        } => bench::probes(&setup::run()?, &tasks::root()),
        Cmd::Bench {
            which: BenchCmd::Mpi,
        } => bench_mpi::mpi(&setup::run()?, &tasks::root()),
    }
}
