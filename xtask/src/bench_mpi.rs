//! `cargo xtask bench mpi`: what tracing costs an MPI program, on a small-message ring
//! (tests/workloads/bench_mpi.c, 2 ranks: this machine has 2 cores) under Open MPI and
//! MPICH, untraced and under `rtm-trace -- mpirun ...`, interleaved, ROUNDS each. The
//! time is measured by the ranks themselves between two barriers, so launching,
//! MPI_Init and detaching are not in it. Prints Markdown for BENCHMARKS.md.

use std::{path::Path, process::Command};

use anyhow::{Context, Result, bail};

use crate::{
    measure::{Plan, Spread},
    setup::status,
};

struct Implementation {
    name: &'static str,
    mpicc: &'static str,
    launcher: &'static [&'static str],
}

const IMPLEMENTATIONS: [Implementation; 2] = [
    Implementation {
        name: "Open MPI 4.1",
        mpicc: "mpicc.openmpi",
        launcher: &[
            "mpirun.openmpi",
            "--allow-run-as-root",
            "--oversubscribe",
            "-np",
            "2",
        ],
    },
    Implementation {
        name: "MPICH 4.0",
        mpicc: "mpicc.mpich",
        launcher: &["mpiexec.mpich", "-n", "2"],
    },
];

fn ns_per_call(out: &std::process::Output) -> Result<f64> {
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .find_map(|l| {
            l.split_whitespace()
                .find_map(|w| w.strip_prefix("ns_per_call="))
        })
        .and_then(|v| v.parse().ok())
        .with_context(|| {
            format!(
                "no ns_per_call in the output:\n{text}\n{}",
                String::from_utf8_lossy(&out.stderr)
            )
        })
}

fn run_one(traced: Option<&Path>, argv: &[String]) -> Result<f64> {
    let mut cmd = match traced {
        Some(rtm) => {
            let mut c = Command::new(rtm);
            c.args(["-o", "/dev/null", "--"]).args(argv);
            c
        }
        None => {
            let mut c = Command::new(&argv[0]);
            c.args(&argv[1..]);
            c
        }
    };
    let out = cmd.output().with_context(|| format!("running {argv:?}"))?;
    if !out.status.success() {
        bail!("{argv:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    ns_per_call(&out)
}

/// Runs the MPI overhead benchmark and prints the table.
pub fn mpi(out: &Path, root: &Path, plan: Plan) -> Result<()> {
    let iterations = plan.pick("20000", "1000");
    let rtm = root.join("target/release/rtm-trace");
    println!(
        "\n### MPI call cost on {} (2 ranks, 8-byte messages, {iterations} ring steps, {} \
         rounds each, interleaved; median [min-max] ns per MPI_Send/MPI_Recv call)\n",
        crate::measure::host(),
        plan.rounds
    );
    println!("| implementation | no tracing | rtm-trace | vs. no tracing | added us per call |");
    println!("|---|---|---|---|---|");
    for imp in &IMPLEMENTATIONS {
        let bin = out.join(format!(
            "bench_mpi_{}",
            imp.mpicc.trim_start_matches("mpicc.")
        ));
        status(
            Command::new(imp.mpicc)
                .args(["-O2", "-o"])
                .arg(&bin)
                .arg(root.join("tests/workloads/bench_mpi.c")),
        )?;
        let mut argv: Vec<String> = imp.launcher.iter().map(|s| s.to_string()).collect();
        argv.push(bin.display().to_string());
        argv.push(iterations.into());
        let (mut plain, mut traced) = (Vec::new(), Vec::new());
        for _ in 0..plan.rounds {
            plain.push(run_one(None, &argv)?);
            traced.push(run_one(Some(&rtm), &argv)?);
        }
        let (p, t) = (Spread::of(&plain), Spread::of(&traced));
        println!(
            "| {} | {} | {} | {:.1}x | {:.2} |",
            imp.name,
            p.show(0),
            t.show(0),
            t.median / p.median,
            (t.median - p.median) / 1000.0
        );
    }
    println!(
        "\nEach traced call takes an entry uprobe and a return uprobe; in a ring, the \
         partner's probes are on the critical path too.\n"
    );
    Ok(())
}
