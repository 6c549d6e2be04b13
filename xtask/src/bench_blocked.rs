//! `cargo xtask bench blocked`: how long `rtm-trace --blocked` takes on a hung process:
//! a two-thread deadlock, and 16 to 256 threads blocked on one mutex (each thread's
//! syscall, word and stack read, unwound and named).

use std::{
    io::{BufRead as _, BufReader},
    path::Path,
    process::{Command, Stdio},
    time::Instant,
};

use anyhow::{Context, Result, bail};

use crate::measure::{Plan, Spread, host};

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
    Ok(())
}
