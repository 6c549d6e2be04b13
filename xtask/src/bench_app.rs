//! `cargo xtask bench app`: a realistic multi-threaded program (tests/workloads/
//! bench_app.c: a job queue feeding workers that sort and hash, results merged under a
//! lock) untraced and in each mode. The program times its own work, so starting the
//! tracer and detaching are not in the figure; its output must be the same every time.

use std::{path::Path, process::Command};

use anyhow::{Result, bail};

use crate::measure::{Plan, Spread, figure, host, run_ok};

/// Runs the benchmark and prints its table.
pub fn app(root: &Path, bench_dir: &Path, plan: Plan) -> Result<()> {
    let bin = crate::measure::workload(root, bench_dir, "bench_app")?;
    let rtm = root.join("target/release/rtm-trace");
    let jobs = plan.pick("40000", "2000");
    let args = ["4", jobs];
    let configs: [(&str, Option<&str>); 3] = [
        ("no tracing", None),
        ("rtm-trace --mode contention", Some("contention")),
        ("rtm-trace --mode full", Some("full")),
    ];
    let mut samples = vec![Vec::new(); configs.len()];
    let mut checksum: Option<String> = None;
    for _ in 0..plan.rounds {
        for (i, (_, mode)) in configs.iter().enumerate() {
            let mut cmd = match mode {
                None => Command::new(&bin),
                Some(m) => {
                    let mut c = Command::new(&rtm);
                    c.args(["-o", "/dev/null", "--mode", m, "--"]).arg(&bin);
                    c
                }
            };
            let r = run_ok(cmd.args(args), "bench_app")?;
            let text = String::from_utf8_lossy(&r.out.stdout).into_owned();
            let sum = text
                .lines()
                .find(|l| l.starts_with("checksum="))
                .unwrap_or_default()
                .to_owned();
            match &checksum {
                None => checksum = Some(sum),
                Some(c) if *c != sum => bail!("the traced program's output changed: {c} vs {sum}"),
                _ => {}
            }
            samples[i].push(figure(&text, "elapsed_ns")? / 1e6);
        }
    }
    println!(
        "\n### A realistic program (`bench_app {}`: 4 workers, {jobs} jobs of ~50 us, a queue \
         lock with two condition variables and a results lock) on {}, {} rounds\n",
        args.join(" "),
        host(),
        plan.rounds
    );
    println!("| configuration | wall ms: median [min-max] | vs. no tracing |");
    println!("|---|---|---|");
    let base = Spread::of(&samples[0]);
    for ((label, _), s) in configs.iter().zip(&samples) {
        let s = Spread::of(s);
        println!(
            "| {label} | {} | {:.3}x |",
            s.show(1),
            s.median / base.median
        );
    }
    println!(
        "\nThe untraced spread is the noise: contention mode is within it when its median \
         falls inside the untraced [min-max]. Output (checksum) identical in every run.\n"
    );
    Ok(())
}
