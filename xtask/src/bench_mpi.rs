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

/// The figure a workload prints as `key=N`.
fn figure(out: &std::process::Output, key: &str) -> Result<f64> {
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .find_map(|l| l.split_whitespace().find_map(|w| w.strip_prefix(key)))
        .and_then(|v| v.parse().ok())
        .with_context(|| {
            format!(
                "no {key} in the output:\n{text}\n{}",
                String::from_utf8_lossy(&out.stderr)
            )
        })
}

/// Runs `argv` untraced (`rtm_args` None) or under rtm-trace with those options, and
/// returns the figure `key` it printed.
fn run_one(rtm: &Path, rtm_args: Option<&[&str]>, argv: &[String], key: &str) -> Result<f64> {
    let mut cmd = match rtm_args {
        Some(args) => {
            let mut c = Command::new(rtm);
            c.args(args).args(["-o", "/dev/null", "--"]).args(argv);
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
    crate::measure::wait_for_probes_gone();
    figure(&out, key)
}

/// The configurations compared: untraced, then rtm-trace with these options.
const CONFIGS: [(&str, Option<&[&str]>); 4] = [
    ("no tracing", None),
    ("contention mode (default: MPI not probed)", Some(&[])),
    ("contention mode --mpi", Some(&["--mpi"])),
    ("full mode (MPI probed)", Some(&["--mode", "full"])),
];

/// Builds `workload` (tests/workloads/NAME.c) for an implementation.
fn build(imp: &Implementation, out: &Path, root: &Path, name: &str) -> Result<std::path::PathBuf> {
    let bin = out.join(format!("{name}_{}", imp.mpicc.trim_start_matches("mpicc.")));
    status(
        Command::new(imp.mpicc)
            .args(["-O2", "-o"])
            .arg(&bin)
            .arg(root.join(format!("tests/workloads/{name}.c"))),
    )?;
    Ok(bin)
}

/// One table: every configuration on `workload`, interleaved, per implementation.
fn table(
    out: &Path,
    root: &Path,
    plan: Plan,
    workload: &str,
    steps: &str,
    key: &str,
) -> Result<()> {
    let rtm = root.join("target/release/rtm-trace");
    println!(
        "| implementation | configuration | {key} median [min-max] | vs. no tracing (per round) | added us per MPI call |"
    );
    println!("|---|---|---|---|---|");
    for imp in &IMPLEMENTATIONS {
        let bin = build(imp, out, root, workload)?;
        let mut argv: Vec<String> = imp.launcher.iter().map(|s| s.to_string()).collect();
        argv.push(bin.display().to_string());
        argv.push(steps.into());
        let mut figures: Vec<Vec<f64>> = vec![Vec::new(); CONFIGS.len()];
        let mut calls = 0.0;
        for _ in 0..plan.rounds {
            for (i, (_, args)) in CONFIGS.iter().enumerate() {
                figures[i].push(run_one(&rtm, *args, &argv, &format!("{key}="))?);
            }
            if key == "ns_per_step" {
                let o = Command::new(&argv[0]).args(&argv[1..]).output()?;
                calls = figure(&o, "calls_per_rank=")? / steps.parse::<f64>()?;
            }
        }
        let base = &figures[0];
        for (i, (name, _)) in CONFIGS.iter().enumerate() {
            let s = Spread::of(&figures[i]);
            let ratios: Vec<f64> = figures[i].iter().zip(base).map(|(t, b)| t / b).collect();
            let r = Spread::of(&ratios);
            // Per MPI call: a step of the polling program makes `calls` calls.
            let per_call = if key == "ns_per_step" {
                calls.max(1.0)
            } else {
                1.0
            };
            let added = (s.median - Spread::of(base).median) / per_call / 1000.0;
            println!(
                "| {} | {name} | {} | {} | {} |",
                imp.name,
                s.show(0),
                if i == 0 { "1".into() } else { r.show(2) + "x" },
                if i == 0 {
                    "-".into()
                } else {
                    format!("{added:.2}")
                }
            );
        }
    }
    Ok(())
}

/// Runs the MPI overhead benchmarks and prints the tables.
pub fn mpi(out: &Path, root: &Path, plan: Plan) -> Result<()> {
    println!(
        "\n### MPI call cost on {} (2 ranks, 8-byte messages, {} rounds each, configurations \
         interleaved)\n\nA ring of MPI_Send/MPI_Recv (`bench_mpi`, ns per call), then a polling \
         program (`bench_mpi_poll`: Irecv + Isend, then MPI_Test until both complete, ~4 MPI \
         calls per step, most of them polls; ns per step):\n",
        crate::measure::host(),
        plan.rounds
    );
    table(
        out,
        root,
        plan,
        "bench_mpi",
        plan.pick("20000", "1000"),
        "ns_per_call",
    )?;
    println!();
    table(
        out,
        root,
        plan,
        "bench_mpi_poll",
        plan.pick("100000", "2000"),
        "ns_per_step",
    )?;
    println!(
        "\nContention mode does not probe MPI unless asked (`--mpi`): a polling program makes \
         millions of MPI calls a second, and each probed call takes an entry and a return \
         uprobe. With probes, in a ring the partner's probes are on the critical path too.\n"
    );
    Ok(())
}
