//! `cargo xtask bench stacks`: what the call stacks of contention mode cost. Side by
//! side in one run, interleaved: the contended lock pairs of the probes benchmark
//! untraced, in contention mode without stacks, with the default 4 KiB stacks, and
//! with 16 KiB stacks, and full mode without and with stacks (each round's ratios to
//! that round's untraced run and to its run of the same mode without stacks); the eBPF run time of the wake program with and without a capture;
//! the bytes a capture adds to the ring; and how fast userspace unwinds them.

use std::{path::Path, process::Command};

use anyhow::{Context, Result};

use crate::measure::{Plan, Spread, figure, host, run_ok, workload};

/// The contended workloads of the probes benchmark (`bench_lock THREADS PAIRS NS`), and
/// one where far more lock attempts sleep (4 threads on 2 CPUs).
const WORKLOADS: [(&str, [&str; 3]); 3] = [
    (
        "contended (2 threads, 200 ns in and out of the lock)",
        ["2", "2000000", "200"],
    ),
    (
        "contended (2 threads, 2 us in and out of the lock)",
        ["2", "400000", "2000"],
    ),
    (
        "many sleeps (4 threads, 2 us in and out of the lock)",
        ["4", "100000", "2000"],
    ),
];

/// The configurations: a label, rtm-trace's options (None: untraced), and the
/// configuration without stacks it is paired with.
const CONFIGS: [(&str, Option<&[&str]>, usize); 6] = [
    ("no tracing", None, 0),
    ("contention mode --no-stacks", Some(&["--no-stacks"]), 1),
    ("contention mode (stacks, 4 KiB: the default)", Some(&[]), 1),
    (
        "contention mode --stack-bytes 16384",
        Some(&["--stack-bytes", "16384"]),
        1,
    ),
    (
        "full mode --no-stacks",
        Some(&["--mode", "full", "--no-stacks"]),
        4,
    ),
    (
        "full mode (stacks, 4 KiB: the default)",
        Some(&["--mode", "full"]),
        4,
    ),
];

fn json(path: &Path) -> Result<serde_json::Value> {
    let text = std::fs::read_to_string(path).with_context(|| format!("{}", path.display()))?;
    Ok(serde_json::from_str(&text)?)
}

fn ns_per_pair(rtm: &Path, bin: &Path, options: Option<&[&str]>, args: &[&str]) -> Result<f64> {
    let mut cmd = match options {
        None => Command::new(bin),
        Some(o) => {
            let mut c = Command::new(rtm);
            c.args(["-o", "/dev/null"]).args(o).arg("--").arg(bin);
            c
        }
    };
    let r = run_ok(cmd.args(args), "bench_lock")?;
    figure(&String::from_utf8_lossy(&r.out.stdout), "ns_per_pair")
}

/// The stacks benchmark.
pub fn stacks(root: &Path, dir: &Path, plan: Plan) -> Result<()> {
    let bin = workload(root, dir, "bench_lock")?;
    let rtm = root.join("target/release/rtm-trace");
    println!(
        "\n### Call stacks in contention mode on {} ({} rounds, interleaved; median [min-max])\n",
        host(),
        plan.rounds
    );
    for (name, args) in WORKLOADS {
        let pairs = (args[1].parse::<u64>()? / plan.pick(1, 40)).to_string();
        let args = [args[0], pairs.as_str(), args[2]];
        let mut samples = vec![Vec::new(); CONFIGS.len()];
        for _ in 0..plan.rounds {
            for (i, (_, options, _)) in CONFIGS.iter().enumerate() {
                samples[i].push(ns_per_pair(&rtm, &bin, *options, &args)?);
            }
        }
        println!("#### {name} (`bench_lock {}`)\n", args.join(" "));
        println!(
            "| configuration | ns per pair | paired vs. no tracing | paired vs. the same mode \
             --no-stacks |"
        );
        println!("|---|---|---|---|");
        for (i, (label, _, base)) in CONFIGS.iter().enumerate() {
            let paired = |base: usize| {
                let r: Vec<f64> = samples[i]
                    .iter()
                    .zip(&samples[base])
                    .map(|(t, b)| t / b)
                    .collect();
                Spread::of(&r).show(2)
            };
            println!(
                "| {label} | {} | {} | {} |",
                Spread::of(&samples[i]).show(1),
                paired(0),
                if i >= 1 { paired(*base) } else { "-".into() }
            );
        }
        println!();
    }
    // The wake program with and without a capture, and what userspace made of them,
    // where many waits sleep.
    let pairs = plan.pick("100000", "5000");
    let mut runs = Vec::new();
    for (label, options) in [
        ("--no-stacks", &["--no-stacks"][..]),
        ("stacks 4 KiB", &[][..]),
    ] {
        let out = dir.join("stacks-bpf.json");
        run_ok(
            Command::new(&rtm)
                .args(["--bpf-stats", "-o", "/dev/null", "--json"])
                .arg(&out)
                .args(options)
                .arg("--")
                .arg(&bin)
                .args(["4", pairs, "2000"]),
            "bench_lock under rtm-trace --bpf-stats",
        )?;
        runs.push((label, json(&out)?));
    }
    let program = |doc: &serde_json::Value, name: &str| -> (f64, f64) {
        doc["run"]["bpf"]["programs"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|p| p["name"] == name)
            .map(|p| {
                (
                    p["runs"].as_f64().unwrap_or(0.0),
                    p["ns_per_run"].as_f64().unwrap_or(0.0),
                )
            })
            .unwrap_or_default()
    };
    println!(
        "#### The capture (`rtm-trace --bpf-stats -- bench_lock 4 {pairs} 2000`)\n\n\
         | run | futex_switch (sleeps) runs, ns per run | futex_waking (wakes) runs, ns per run | \
         waits with stacks | ring bytes per record read | records lost |"
    );
    println!("|---|---|---|---|---|---|");
    for (label, doc) in &runs {
        let (sn, sns) = program(doc, "futex_switch");
        let (wn, wns) = program(doc, "futex_waking");
        let reader = &doc["run"]["reader"];
        let losses = &doc["run"]["losses"];
        println!(
            "| {label} | {sn:.0}, {sns:.0} | {wn:.0}, {wns:.0} | {} | {:.0} | {} |",
            doc["sync_graph"]["stacks"]["counters"]["records"]
                .as_u64()
                .unwrap_or(0),
            reader["bytes"].as_f64().unwrap_or(0.0) / reader["records"].as_f64().unwrap_or(1.0),
            losses["ring_full"].as_u64().unwrap_or(0)
                + losses["pending_full"].as_u64().unwrap_or(0)
        );
    }
    // Time added per wait that slept: both programs' extra time over the waits counted.
    let total = |doc: &serde_json::Value| {
        let (sn, sns) = program(doc, "futex_switch");
        let (wn, wns) = program(doc, "futex_waking");
        (sn, sns, wn, wns)
    };
    let (_, s0, _, w0) = total(&runs[0].1);
    let (sn1, s1, wn1, w1) = total(&runs[1].1);
    let waits = runs[1].1["sync_graph"]["stacks"]["counters"]["records"]
        .as_f64()
        .unwrap_or(0.0);
    let s = &runs[1].1["sync_graph"]["stacks"];
    let unwound = s["unwound"].as_f64().unwrap_or(0.0);
    let unwind_ns = s["unwind_ns"].as_f64().unwrap_or(0.0);
    println!(
        "\nStacks add {:.0} ns per wait with stacks in the kernel: {:.0} ns in sched_switch \
         (the waiter's copy, in its own context as it goes to sleep) and {:.0} ns in \
         sched_waking (the waker's, on the waker's way out of its unlock). A one-sided \
         record is {} + 4,096 bytes. Userspace unwound {unwound:.0} stacks in {:.1} ms: {:.0} \
         ns each, {:.0} stacks/s on one core.\n",
        ((s1 - s0) * sn1 + (w1 - w0) * wn1) / waits.max(1.0),
        (s1 - s0) * sn1 / waits.max(1.0),
        (w1 - w0) * wn1 / waits.max(1.0),
        std::mem::size_of::<rtm_common::StacksHead>(),
        unwind_ns / 1e6,
        unwind_ns / unwound.max(1.0),
        unwound / (unwind_ns / 1e9).max(1e-9),
    );
    Ok(())
}
