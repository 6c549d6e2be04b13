//! `cargo xtask bench func`: what `--func` adds to each call of a timed function.
//! Interleaved rounds of the same program untraced, traced without timing anything (the
//! tracer's presence), with `--func timed_leaf`, and under bpftrace with empty entry and
//! return probes on the same function (what the kernel's two probes cost by
//! themselves); each round's difference to its own untraced run is the added cost per
//! call.

use std::{path::Path, process::Command};

use anyhow::Result;

use crate::{
    measure::{Plan, Spread, figure, host, run_ok, workload},
    setup::ensure_packages,
};

/// How a configuration runs the workload.
#[derive(Clone, Copy, PartialEq)]
enum Run {
    /// The program alone.
    Alone,
    /// Under rtm-trace with these options.
    Traced(&'static [&'static str]),
    /// Under bpftrace with an entry and a return probe on the function doing nothing:
    /// what the kernel's two probes cost by themselves.
    KernelOnly,
}

fn ns_per_call(rtm: &Path, bin: &Path, how: Run, calls: &str) -> Result<f64> {
    let mut cmd = match how {
        Run::Alone => {
            let mut c = Command::new(bin);
            c.arg(calls);
            c
        }
        Run::Traced(o) => {
            let mut c = Command::new(rtm);
            c.args(["-o", "/dev/null"])
                .args(o)
                .arg("--")
                .arg(bin)
                .arg(calls);
            c
        }
        Run::KernelOnly => {
            let b = bin.display();
            let mut c = Command::new("bpftrace");
            c.arg("-e")
                .arg(format!(
                    "uprobe:{b}:timed_leaf {{ }} uretprobe:{b}:timed_leaf {{ }}"
                ))
                .arg("-c")
                .arg(format!("{b} {calls}"));
            c
        }
    };
    let r = run_ok(&mut cmd, "bench_func")?;
    figure(&String::from_utf8_lossy(&r.out.stdout), "ns_per_call")
}

/// The function-timing benchmark.
pub fn func(root: &Path, dir: &Path, plan: Plan) -> Result<()> {
    if !plan.smoke {
        ensure_packages(&["bpftrace"])?;
    }
    let bin = workload(root, dir, "bench_func")?;
    let rtm = root.join("target/release/rtm-trace");
    // The untimed runs are 25 times longer, to run for a measurable while.
    let calls = plan.pick("2000000", "20000");
    let many = plan.pick("50000000", "500000");
    // Where the probes went, as rtm-trace says it.
    let verbose = run_ok(
        Command::new(&rtm)
            .args(["-v", "-o", "/dev/null", "--func", "timed_leaf", "--"])
            .arg(&bin)
            .arg("1"),
        "rtm-trace -v --func",
    )?;
    let placed = String::from_utf8_lossy(&verbose.out.stderr)
        .lines()
        .find_map(|l| l.split_once("): ").map(|(_, why)| why.to_owned()))
        .unwrap_or_else(|| "?".into());
    // A smoke run leaves bpftrace out (its start-up takes longer than the rest).
    let mut configs: Vec<(&str, Run, &str)> = vec![
        ("no tracing", Run::Alone, many),
        ("rtm-trace, nothing timed", Run::Traced(&[]), many),
        (
            "rtm-trace --func timed_leaf",
            Run::Traced(&["--func", "timed_leaf"]),
            calls,
        ),
    ];
    if !plan.smoke {
        configs.push((
            "bpftrace: an empty uprobe and uretprobe on it (the kernel's two probes alone)",
            Run::KernelOnly,
            calls,
        ));
    }
    let mut samples = vec![Vec::new(); configs.len()];
    for _ in 0..plan.rounds {
        for (i, (_, how, n)) in configs.iter().enumerate() {
            samples[i].push(ns_per_call(&rtm, &bin, *how, n)?);
        }
    }
    println!(
        "\n### Timed functions on {} ({} rounds, interleaved; median [min-max])\n\n\
         `bench_func {calls}`: {calls} calls of a small function; its probes went {placed}.\n",
        host(),
        plan.rounds
    );
    println!("| configuration | ns per call | added ns per call (paired) | paired ratio |");
    println!("|---|---|---|---|");
    for (i, (label, _, _)) in configs.iter().enumerate() {
        let added: Vec<f64> = samples[i]
            .iter()
            .zip(&samples[0])
            .map(|(t, b)| t - b)
            .collect();
        let ratio: Vec<f64> = samples[i]
            .iter()
            .zip(&samples[0])
            .map(|(t, b)| t / b)
            .collect();
        println!(
            "| {label} | {} | {} | {} |",
            Spread::of(&samples[i]).show(1),
            Spread::of(&added).show(0),
            Spread::of(&ratio).show(2)
        );
    }
    let median = |i: usize| Spread::of(&samples[i]).median;
    if configs.len() > 3 {
        println!(
            "\nA timed call costs {:.0} ns more than an untimed one; the kernel's two probes \
             alone cost {:.0} ns: rtm-trace's programs and record add {:.0} ns.",
            median(2) - median(0),
            median(3) - median(0),
            median(2) - median(3)
        );
    }
    println!();
    Ok(())
}
