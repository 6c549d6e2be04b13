//! `cargo xtask bench blocked`: how long `rtm-trace --blocked` takes on a hung process:
//! a two-thread deadlock, and 16 to 256 threads blocked on one mutex (each thread's
//! syscall, word and stack read, unwound and named); and what the deadlock work costs
//! the contended lock benchmarks in contention mode: the holder read at each futex
//! wait's entry and the live check (`[deadlocks] detect`, on by default, against off,
//! paired by round).

use std::{
    io::{BufRead as _, BufReader},
    path::Path,
    process::{Command, Stdio},
    time::Instant,
};

use anyhow::{Context, Result, bail};

use crate::measure::{Plan, Spread, figure, host, run_ok, workload};

/// Starts `deadlock ARGS` and waits until it says it is ready.
fn start(bin: &Path, args: &[&str]) -> Result<std::process::Child> {
    let mut child = Command::new(bin)
        .args(args)
        .stdout(Stdio::piped())
        .spawn()
        .context("starting the deadlock workload")?;
    let out = child.stdout.take().context("its stdout")?;
    for line in BufReader::new(out).lines() {
        if line? == "ready" {
            return Ok(child);
        }
    }
    bail!("the deadlock workload ended before it was ready")
}

/// The benchmark.
pub fn blocked(root: &Path, dir: &Path, plan: Plan) -> Result<()> {
    let bin = dir.join("deadlock");
    crate::setup::status(
        Command::new("cc")
            .args(["-O2", "-g", "-pthread", "-Wall", "-o"])
            .arg(&bin)
            .arg(root.join("tests/workloads/deadlock.c")),
    )?;
    let rtm = root.join("target/release/rtm-trace");
    println!(
        "\n### `rtm-trace --blocked` on {} ({} rounds; median [min-max] ms, wall clock of the \
         whole command)\n",
        host(),
        plan.rounds
    );
    println!("| target | blocked threads | ms |");
    println!("|---|---|---|");
    let cases: Vec<(String, Vec<String>)> = [
        ("abba".to_string(), vec!["abba".to_string()]),
        (
            "16 threads on one mutex".into(),
            vec!["many".into(), "16".into()],
        ),
        (
            "256 threads on one mutex".into(),
            vec!["many".into(), "256".into()],
        ),
    ]
    .into_iter()
    .collect();
    for (label, args) in cases {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let mut child = start(&bin, &args)?;
        let mut ms = Vec::new();
        let mut blocked = 0;
        for _ in 0..plan.rounds {
            let t = Instant::now();
            let out = Command::new(&rtm)
                .args(["--blocked", "--pid", &child.id().to_string()])
                .output()
                .context("rtm-trace --blocked")?;
            ms.push(t.elapsed().as_secs_f64() * 1e3);
            let text = String::from_utf8_lossy(&out.stdout);
            blocked = text
                .split_whitespace()
                .nth(2)
                .and_then(|n| n.replace(',', "").parse().ok())
                .unwrap_or(0);
            if !matches!(out.status.code(), Some(0 | 3)) {
                bail!(
                    "rtm-trace --blocked failed: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
            }
        }
        let _ = child.kill();
        let _ = child.wait();
        println!("| {label} | {blocked} | {} |", Spread::of(&ms).show(1));
    }
    println!();
    live_check(root, dir, plan)
}

/// The contended workloads of the probes benchmark.
const CONTENDED: [(&str, [&str; 3]); 2] = [
    (
        "2 threads, 200 ns in and out of the lock",
        ["2", "2000000", "200"],
    ),
    (
        "4 threads, 2 us in and out of the lock",
        ["4", "100000", "2000"],
    ),
];

/// The live deadlock check's cost: contention mode with it (the default) and without.
fn live_check(root: &Path, dir: &Path, plan: Plan) -> Result<()> {
    let bin = workload(root, dir, "bench_lock")?;
    let rtm = root.join("target/release/rtm-trace");
    let off = dir.join("no-deadlock-check.toml");
    std::fs::write(&off, "[deadlocks]\ndetect = false\n")?;
    println!(
        "### Holders at wait start and the live deadlock check, in contention mode, on {} ({} \
         rounds, interleaved; median [min-max] ns per pair)\n",
        host(),
        plan.rounds
    );
    println!("| workload | `detect = false` | on (default) | paired on/off |");
    println!("|---|---|---|---|");
    for (label, args) in CONTENDED {
        let pairs = (args[1].parse::<u64>()? / plan.pick(1, 40)).to_string();
        let args = [args[0], pairs.as_str(), args[2]];
        let (mut with, mut without) = (Vec::new(), Vec::new());
        for _ in 0..plan.rounds {
            for (config, out) in [(Some(&off), &mut without), (None, &mut with)] {
                let mut cmd = Command::new(&rtm);
                cmd.args(["-o", "/dev/null"]);
                if let Some(c) = config {
                    cmd.arg("--config").arg(c);
                }
                let r = run_ok(cmd.arg("--").arg(&bin).args(args), "bench_lock")?;
                out.push(figure(
                    &String::from_utf8_lossy(&r.out.stdout),
                    "ns_per_pair",
                )?);
            }
        }
        let ratio: Vec<f64> = with.iter().zip(&without).map(|(a, b)| a / b).collect();
        println!(
            "| {label} | {} | {} | {} |",
            Spread::of(&without).show(1),
            Spread::of(&with).show(1),
            Spread::of(&ratio).show(3)
        );
    }
    println!();
    Ok(())
}
