//! `cargo xtask`: what cargo alone cannot do. Installs the eBPF toolchain, runs the demo,
//! runs the whole test suite (root, real eBPF).

mod bench;
mod bench_agent;
mod bench_app;
mod bench_blocked;
mod bench_func;
mod bench_mpi;
mod bench_others;
mod bench_prod;
mod bench_scale;
mod bench_stacks;
mod dist;
mod measure;
mod setup;
mod tasks;
mod vm;

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
    /// Set up, build the release binary, and make the Debian packages in target/dist:
    /// rtm-trace (stripped binary, man pages, completions, the agent's unit and config,
    /// docs) and rtm-trace-dbg (its debug info).
    Dist,
    /// Set up, then run the whole suite: fmt, clippy, unit tests, eBPF tests (needs root).
    Test,
    /// The kernel matrix (needs root): the end-to-end smoke set inside QEMU guests booted
    /// with Debian 12's (6.1) and Debian 13's (6.12) own kernels.
    Vm {
        /// Only these kernels (6.1, 6.12, bookworm, trixie); all when none is named.
        #[arg(long)]
        kernel: Vec<String>,
        /// Only the smoke tests whose `file::name` contains one of these.
        #[arg(long)]
        test: Vec<String>,
        /// Run this shell script in each guest instead of the smoke set (after `rtm-trace
        /// check`), and print its output: a measurement on another kernel.
        #[arg(long)]
        script: Option<std::path::PathBuf>,
    },
    /// Benchmarks (needs root): all of them side by side, or those named (e.g. `bench
    /// probes ingest memory`); prints Markdown for BENCHMARKS.md.
    Bench {
        /// Which (all when none is named).
        #[arg(value_enum)]
        which: Vec<BenchCmd>,
        /// A short run proving the benchmarks work (CI), not figures to quote.
        #[arg(long)]
        smoke: bool,
        /// Rounds per configuration (default 5; 1 with --smoke).
        #[arg(long)]
        rounds: Option<usize>,
    },
}

#[derive(clap::ValueEnum, Clone, Copy, PartialEq, Eq, Debug)]
enum BenchCmd {
    /// What tracing costs a lock/unlock loop: no tracing, contention mode, full mode and
    /// bpftrace, side by side.
    Probes,
    /// What tracing costs an MPI program: a small-message ring under Open MPI and MPICH,
    /// untraced and traced.
    Mpi,
    /// What tracing costs a realistic multi-threaded program.
    App,
    /// Events per second the tracer ingests, and loss accounting at 1, 2 and 5 M/s.
    Ingest,
    /// Attach and detach latency for 1, 10 and 100 processes.
    Attach,
    /// rtm-trace's peak memory with 10 to 100,000 mutexes over 64 threads.
    Memory,
    /// eBPF program run time and map memory.
    Ebpf,
    /// What tracing one process costs the system calls of the others.
    Others,
    /// What contention mode's call stacks cost: contended locks with and without them,
    /// the eBPF capture, and the unwinding rate.
    Stacks,
    /// What `--func` adds to each call of a timed function.
    Func,
    /// How long `rtm-trace --blocked` takes on a hung process.
    Blocked,
    /// What contention mode costs real software shapes (critical sections that yield, a
    /// request loop, a futex ping-pong, stress-ng's mutexes), against bpftrace.
    Production,
    /// What `rtm-trace agent` costs a node (idle and tracing), a serving program, its
    /// scrapes, and its own memory and CPU over time.
    Agent,
}

/// Runs the benchmarks `which` names (all when it names none), in the usual order.
fn bench(which: Vec<BenchCmd>, smoke: bool, rounds: Option<usize>) -> anyhow::Result<()> {
    let env = setup::run()?;
    let root = tasks::root();
    let dir = bench::build_release(&env, &root)?;
    let plan = measure::Plan {
        rounds: rounds.unwrap_or(if smoke { 1 } else { 5 }),
        smoke,
    };
    let all = [
        BenchCmd::Probes,
        BenchCmd::App,
        BenchCmd::Mpi,
        BenchCmd::Ingest,
        BenchCmd::Attach,
        BenchCmd::Memory,
        BenchCmd::Ebpf,
        BenchCmd::Others,
        BenchCmd::Stacks,
        BenchCmd::Func,
        BenchCmd::Blocked,
        BenchCmd::Production,
        BenchCmd::Agent,
    ];
    let started = std::time::Instant::now();
    for b in all
        .into_iter()
        .filter(|b| which.is_empty() || which.contains(b))
    {
        match b {
            BenchCmd::Probes => bench::probes(&dir, &root, plan)?,
            BenchCmd::Mpi => bench_mpi::mpi(&dir, &root, plan)?,
            BenchCmd::App => bench_app::app(&root, &dir, plan)?,
            BenchCmd::Ingest => bench_scale::ingest(&env, &root, &dir, plan)?,
            BenchCmd::Attach => bench_scale::attach(&root, &dir, plan)?,
            BenchCmd::Memory => bench_scale::memory(&root, &dir, plan)?,
            BenchCmd::Ebpf => bench_scale::ebpf(&root, &dir, plan)?,
            BenchCmd::Others => bench_others::others(&root, &dir, plan)?,
            BenchCmd::Stacks => bench_stacks::stacks(&root, &dir, plan)?,
            BenchCmd::Func => bench_func::func(&root, &dir, plan)?,
            BenchCmd::Blocked => bench_blocked::blocked(&root, &dir, plan)?,
            BenchCmd::Production => bench_prod::production(&root, &dir, plan)?,
            BenchCmd::Agent => bench_agent::agent(&root, &dir, plan)?,
        }
    }
    eprintln!(
        "benchmarks done in {:.0} s{}",
        started.elapsed().as_secs_f64(),
        if smoke {
            " (smoke run: not figures to quote)"
        } else {
            ""
        }
    );
    Ok(())
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().cmd {
        Cmd::Setup => setup::run().map(|_| ()),
        Cmd::Build { release } => {
            let env = setup::run()?;
            tasks::build(&env, release)
        }
        Cmd::Demo => tasks::demo(&setup::run()?),
        Cmd::Dist => {
            let packages = dist::dist(&setup::run()?)?;
            eprintln!("xtask: built {}", packages.debug.display());
            println!("{}", packages.main.display());
            Ok(())
        }
        Cmd::Test => tasks::test(&setup::run()?),
        Cmd::Vm {
            kernel,
            test,
            script,
        } => vm::run(&setup::run()?, &kernel, &test, script.as_deref()),
        Cmd::Bench {
            which,
            smoke,
            rounds,
        } => bench(which, smoke, rounds),
    }
}
