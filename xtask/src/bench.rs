//! `cargo xtask bench probes`: what tracing costs a lock-heavy program, measured side by
//! side in one run: no tracing, contention mode, full mode, and bpftrace probing the same
//! two functions. Each configuration runs ROUNDS times, interleaved so drift hits all of
//! them alike; medians and ratios to the untraced baseline are printed as a Markdown
//! table for BENCHMARKS.md.

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context, Result, bail};

use crate::{
    measure::{Plan, Spread},
    setup::{Env, ensure_packages, status},
};

/// How many times more pairs the untraced and contention-mode runs make.
const SCALE: u64 = 20;

struct Workload {
    name: &'static str,
    args: [&'static str; 3],
}

const WORKLOADS: [Workload; 3] = [
    Workload {
        name: "uncontended (1 thread, empty critical section)",
        args: ["1", "1000000", "0"],
    },
    Workload {
        name: "contended (2 threads, 200 ns in and out of the lock)",
        args: ["2", "100000", "200"],
    },
    Workload {
        name: "contended (2 threads, 2 us in and out of the lock)",
        args: ["2", "20000", "2000"],
    },
];

#[derive(Clone, Copy, PartialEq, Eq)]
enum Config {
    Baseline,
    Contention,
    Full,
    Bpftrace,
}

impl Config {
    fn label(self) -> &'static str {
        match self {
            Config::Baseline => "no tracing",
            Config::Contention => "rtm-trace --mode contention",
            Config::Full => "rtm-trace --mode full",
            Config::Bpftrace => "bpftrace (lock+unlock uprobes, count)",
        }
    }
}

fn libc_path() -> Result<PathBuf> {
    let maps = std::fs::read_to_string("/proc/self/maps")?;
    maps.lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .find(|p| p.contains("/libc.so"))
        .map(PathBuf::from)
        .context("this process maps no libc")
}

fn ns_per_pair(out: &std::process::Output) -> Result<f64> {
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .find_map(|l| l.strip_prefix("ns_per_pair="))
        .and_then(|v| v.trim().parse().ok())
        .with_context(|| {
            format!(
                "no ns_per_pair in the output:\n{text}\n{}",
                String::from_utf8_lossy(&out.stderr)
            )
        })
}

fn run_one(cfg: Config, rtm: &Path, bench: &Path, args: &[&str], libc: &Path) -> Result<f64> {
    let mut cmd = match cfg {
        Config::Baseline => Command::new(bench),
        Config::Contention | Config::Full => {
            let mut c = Command::new(rtm);
            c.args(["-o", "/dev/null", "--mode"])
                .arg(if cfg == Config::Full {
                    "full"
                } else {
                    "contention"
                })
                .arg("--")
                .arg(bench);
            c
        }
        Config::Bpftrace => {
            let l = libc.display();
            let mut c = Command::new("bpftrace");
            c.arg("-e")
                .arg(format!(
                    "uprobe:{l}:pthread_mutex_lock {{ @l = count(); }} \
                     uprobe:{l}:pthread_mutex_unlock {{ @u = count(); }}"
                ))
                .arg("-c")
                .arg(format!("{} {}", bench.display(), args.join(" ")));
            c
        }
    };
    if cfg != Config::Bpftrace {
        cmd.args(args);
    }
    let out = cmd
        .output()
        .with_context(|| format!("running {}", cfg.label()))?;
    if !out.status.success() {
        bail!(
            "{} failed: {}",
            cfg.label(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    ns_per_pair(&out)
}

/// Builds the release binary (target/release/rtm-trace); returns the directory the
/// benchmarks build their workloads in.
pub fn build_release(env: &Env, root: &Path) -> Result<PathBuf> {
    let mut build = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    build.current_dir(root).env("PATH", &env.path).args([
        "build",
        "--release",
        "-p",
        "rtm-userspace",
    ]);
    status(&mut build)?;
    let out = root.join("target/bench");
    std::fs::create_dir_all(&out)?;
    Ok(out)
}

/// Runs the probe-cost benchmark and prints the table.
pub fn probes(out: &Path, root: &Path, plan: Plan) -> Result<()> {
    // A smoke run leaves bpftrace out (installing it and its start-up take longer than
    // the rest).
    if !plan.smoke {
        ensure_packages(&["bpftrace"])?;
    }
    let bench = crate::measure::workload(root, out, "bench_lock")?;
    let rtm = root.join("target/release/rtm-trace");
    let libc = libc_path()?;
    let mut configs = vec![Config::Baseline, Config::Contention, Config::Full];
    if !plan.smoke {
        configs.push(Config::Bpftrace);
    }
    println!(
        "\n### Probe cost on {} ({} rounds each, interleaved; median [min-max] ns per \
         lock+unlock pair)\n",
        crate::measure::host(),
        plan.rounds
    );
    for w in &WORKLOADS {
        let mut samples: Vec<Vec<f64>> = vec![Vec::new(); configs.len()];
        // The cheap configurations get SCALE times more pairs so that they run long
        // enough (hundreds of ms) to measure; figures are per pair either way.
        let pairs = w.args[1].parse::<u64>()? / plan.pick(1, 20);
        let scaled = (pairs * SCALE).to_string();
        let short_pairs = pairs.to_string();
        let long = [w.args[0], scaled.as_str(), w.args[2]];
        let short = [w.args[0], short_pairs.as_str(), w.args[2]];
        for _ in 0..plan.rounds {
            for (i, cfg) in configs.iter().enumerate() {
                let args: &[&str] = match cfg {
                    Config::Baseline | Config::Contention => &long,
                    _ => &short,
                };
                samples[i].push(run_one(*cfg, &rtm, &bench, args, &libc)?);
            }
        }
        let spreads: Vec<Spread> = samples.iter().map(|s| Spread::of(s)).collect();
        let base = spreads[0].median;
        println!(
            "#### {} (`bench_lock {}`; x{SCALE} pairs without tracing and in contention mode)\n",
            w.name,
            short.join(" ")
        );
        println!(
            "| configuration | ns per pair: median [min-max] | vs. no tracing | added ns per pair | \
             paired: per round vs. that round's no tracing, median [min-max] |"
        );
        println!("|---|---|---|---|---|");
        for ((cfg, s), runs) in configs.iter().zip(&spreads).zip(&samples) {
            // The untraced time on this VM jumps between levels from one run to the next;
            // a ratio within each round, to the untraced run just before, follows it.
            let paired: Vec<f64> = runs.iter().zip(&samples[0]).map(|(t, b)| t / b).collect();
            println!(
                "| {} | {} | {:.2}x | {:.1} | {} |",
                cfg.label(),
                s.show(1),
                s.median / base,
                s.median - base,
                Spread::of(&paired).show(2)
            );
        }
        let full = spreads[2].median - base;
        match spreads.get(3) {
            Some(b) => {
                let bpft = b.median - base;
                println!(
                    "\nfull mode adds {:.2} us per pair; bpftrace adds {:.2} us: rtm-trace is {:.1}x cheaper\n",
                    full / 1000.0,
                    bpft / 1000.0,
                    bpft / full.max(1.0)
                );
            }
            None => println!("\nfull mode adds {:.2} us per pair\n", full / 1000.0),
        }
    }
    Ok(())
}
