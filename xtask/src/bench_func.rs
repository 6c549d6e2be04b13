//! `cargo xtask bench func`: what `--func` adds to each call of a timed function.
//! Interleaved rounds of the same program untraced, traced without timing anything (the
//! tracer's presence), with `--func timed_leaf`, and three references for the kernel's
//! probes by themselves: bpftrace with empty entry and return probes on the function,
//! and (tracefs, no program, in a trace instance whose buffer is off so nothing is
//! recorded) an entry and a return probe, and two plain uprobes on two emulated
//! instructions of the function (the issue's target: "at most the cost of two
//! emulated-instruction uprobes"). Each round's difference to its own untraced run is
//! the added cost per call.

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
    /// Two tracefs probes (`p`/`r` lines of uprobe_events at these file offsets),
    /// enabled in a trace instance whose buffer is off: the probes alone.
    Tracefs([(char, u64); 2]),
}

const TRACEFS: &str = "/sys/kernel/tracing";
/// The trace instance and event group the tracefs references use.
const GROUP: &str = "rtmbenchfunc";

/// Defines the two probes on `bin`, enables them in an instance whose buffer is off
/// (so the global trace is untouched and nothing is recorded), runs `cmd`, and removes
/// them whatever happened.
fn with_tracefs(
    bin: &Path,
    probes: [(char, u64); 2],
    cmd: &mut Command,
) -> Result<crate::measure::Run> {
    let t = Path::new(TRACEFS);
    let instance = t.join("instances").join(GROUP);
    let events = t.join("uprobe_events");
    let append = |line: &str| -> std::io::Result<()> {
        use std::io::Write as _;
        std::fs::OpenOptions::new()
            .append(true)
            .open(&events)?
            .write_all(format!("{line}\n").as_bytes())
    };
    let teardown = || {
        let _ = std::fs::write(instance.join("events").join(GROUP).join("enable"), "0");
        for i in 0..2 {
            let _ = append(&format!("-:{GROUP}/p{i}"));
        }
        let _ = std::fs::remove_dir(&instance);
    };
    teardown();
    let setup = || -> Result<()> {
        for (i, (kind, offset)) in probes.iter().enumerate() {
            append(&format!(
                "{kind}:{GROUP}/p{i} {}:{offset:#x}",
                bin.display()
            ))?;
        }
        std::fs::create_dir(&instance)?;
        std::fs::write(instance.join("tracing_on"), "0")?;
        std::fs::write(instance.join("events").join(GROUP).join("enable"), "1")?;
        Ok(())
    };
    let r = setup().and_then(|()| run_ok(cmd, "bench_func under tracefs probes"));
    teardown();
    r
}

/// File offsets of the first two `call` instructions of `function` in `bin` (emulated
/// by the kernel's uprobes), from objdump; for a PIE whose code is mapped at its file
/// offsets.
fn two_calls(bin: &Path, function: &str) -> Result<[u64; 2]> {
    let out = Command::new("objdump")
        .args(["-d", "--no-show-raw-insn"])
        .arg(bin)
        .output()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let calls: Vec<u64> = text
        .split("\n\n")
        .find(|block| block.contains(&format!("<{function}>:")))
        .into_iter()
        .flat_map(|block| block.lines())
        .filter(|l| l.contains("\tcall "))
        .filter_map(|l| u64::from_str_radix(l.trim().split(':').next()?, 16).ok())
        .take(2)
        .collect();
    match calls[..] {
        [a, b] => Ok([a, b]),
        _ => anyhow::bail!(
            "two call instructions not found in {function} of {}",
            bin.display()
        ),
    }
}

fn ns_per_call(rtm: &Path, bin: &Path, how: Run, calls: &str) -> Result<f64> {
    if let Run::Tracefs(probes) = how {
        let mut c = Command::new(bin);
        c.arg(calls);
        let r = with_tracefs(bin, probes, &mut c)?;
        return figure(&String::from_utf8_lossy(&r.out.stdout), "ns_per_call");
    }
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
        Run::Tracefs(_) => unreachable!("run above"),
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
        let [a, b] = two_calls(&bin, "timed_leaf")?;
        configs.push((
            "bpftrace: an empty uprobe and uretprobe on it (the kernel's two probes alone)",
            Run::KernelOnly,
            calls,
        ));
        configs.push((
            "tracefs: an entry and a return probe on it, nothing recorded",
            Run::Tracefs([('p', a), ('r', a)]),
            calls,
        ));
        configs.push((
            "tracefs: two uprobes on emulated instructions of it (its two calls), nothing recorded",
            Run::Tracefs([('p', a), ('p', b)]),
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
    if configs.len() > 5 {
        let added = |i: usize| median(i) - median(0);
        println!(
            "\nA timed call costs {:.0} ns more than an untimed one. The kernel's entry and \
             return probes alone cost {:.0} ns with bpftrace's empty programs and {:.0} ns \
             through tracefs; two uprobes on emulated instructions (the target) cost {:.0} \
             ns: rtm-trace is at {:.2}x the target.",
            added(2),
            added(3),
            added(4),
            added(5),
            added(2) / added(5)
        );
    }
    println!();
    Ok(())
}
