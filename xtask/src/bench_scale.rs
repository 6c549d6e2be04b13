//! `cargo xtask bench ingest|attach|memory`: the tracer's own speed and size.
//! - ingest: events per second the reader + decoder + aggregator sustain on one core
//!   (records from memory), then real events from the kernel at offered rates of 1, 2
//!   and 5 million per second: what arrived, what was lost, and that the two add up.
//! - attach: from start to probes live, and from Ctrl-C to exit, for 1, 10 and 100
//!   processes.
//! - memory: rtm-trace's peak RSS with 10, 1,000 and 100,000 mutexes over 64 threads.

use std::{
    io::{BufRead, BufReader},
    path::Path,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail};

use crate::measure::{Plan, Spread, figure, host, run_ok, workload};

fn json(path: &Path) -> Result<serde_json::Value> {
    let text = std::fs::read_to_string(path).with_context(|| format!("{}", path.display()))?;
    Ok(serde_json::from_str(&text)?)
}

/// Ingest speed: in memory on one core, and from the kernel at offered rates.
pub fn ingest(env: &crate::setup::Env, root: &Path, dir: &Path, plan: Plan) -> Result<()> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    // The build script builds the eBPF object: bpf-linker must be on PATH.
    crate::setup::status(
        Command::new(&cargo)
            .current_dir(root)
            .env("PATH", &env.path)
            .args([
                "build",
                "--release",
                "-p",
                "rtm-userspace",
                "--example",
                "ingest",
            ]),
    )?;
    let ex = root.join("target/release/examples/ingest");
    let n = plan.pick("4000000", "200000");
    let rates: Vec<f64> = (0..plan.rounds)
        .map(|_| {
            let r = run_ok(Command::new(&ex).args([n, "64", "1000"]), "ingest")?;
            figure(&String::from_utf8_lossy(&r.out.stdout), "rate")
        })
        .collect::<Result<_>>()?;
    let s = Spread::of(&rates);
    println!(
        "\n### Ingest on {} ({} rounds)\n\nDecode + aggregate, one core, records from memory \
         ({n} mutex events, 64 threads, 1,000 mutexes): **{:.2} M events/s** [{:.2}-{:.2}]\n",
        host(),
        plan.rounds,
        s.median / 1e6,
        s.min / 1e6,
        s.max / 1e6
    );
    // The same with the timeline written (`--timeline`), rounds alternating with the
    // baseline so both see the same machine.
    let timeline = dir.join("ingest.pftrace");
    let (mut base, mut with) = (Vec::new(), Vec::new());
    for _ in 0..plan.rounds {
        let r = run_ok(Command::new(&ex).args([n, "64", "1000"]), "ingest")?;
        base.push(figure(&String::from_utf8_lossy(&r.out.stdout), "rate")?);
        let r = run_ok(
            Command::new(&ex)
                .env("INGEST_TIMELINE", &timeline)
                .args([n, "64", "1000"]),
            "ingest with the timeline",
        )?;
        with.push(figure(&String::from_utf8_lossy(&r.out.stdout), "rate")?);
    }
    let (b, w) = (Spread::of(&base), Spread::of(&with));
    println!(
        "With the timeline written (`--timeline`, to a file in {}): **{:.2} M events/s** \
         [{:.2}-{:.2}] against {:.2} M/s without it in the same rounds: {:.2}x.\n",
        dir.display(),
        w.median / 1e6,
        w.min / 1e6,
        w.max / 1e6,
        b.median / 1e6,
        w.median / b.median
    );
    timeline_size(root, dir)?;
    let html = dir.join("big.html");
    let r = run_ok(
        Command::new(&ex).env("INGEST_HTML", &html).args([
            plan.pick("800000", "200000"),
            "64",
            plan.pick("100000", "10000"),
        ]),
        "the HTML of a large graph",
    )?;
    let text = String::from_utf8_lossy(&r.out.stdout);
    println!(
        "The HTML report of a graph of {:.0} mutexes (`--html`): {:.0} KiB (its tables \
         carry the top 500 objects; the JSON document it is made from is {:.0} MiB), made \
         in {:.2} s.\n",
        figure(&text, "objects")?,
        figure(&text, "html_bytes")? / 1024.0,
        figure(&text, "doc_bytes")? / 1048576.0,
        figure(&text, "html_secs")?
    );
    let rate_bin = workload(root, dir, "bench_rate")?;
    let rtm = root.join("target/release/rtm-trace");
    let out = dir.join("ingest.json");
    println!(
        "From the kernel (`rtm-trace --mode full -- bench_rate 2 PAIRS/S SECS`: two threads \
         lock and unlock their own mutex at a paced rate, two events a pair):\n"
    );
    println!(
        "| offered events/s | ring | seconds | events made | achieved events/s | read | lost (ring full) | read + lost - made |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    // The last run gives the tracer a 64 KiB ring, which cannot hold a 20 ms drain
    // interval at 1 M/s: losses happen, and must be counted to the event.
    let runs: [(f64, &str, &str); 4] = [
        (1e6, plan.pick("60", "2"), "8388608"),
        (2e6, plan.pick("10", "1"), "8388608"),
        (5e6, plan.pick("10", "1"), "8388608"),
        (1e6, plan.pick("10", "1"), "65536"),
    ];
    for (rate, secs, ring) in runs {
        let pairs = format!("{}", rate / 2.0);
        let r = run_ok(
            Command::new(&rtm)
                .args([
                    "--mode",
                    "full",
                    "-o",
                    "/dev/null",
                    "--ring-size",
                    ring,
                    "--json",
                ])
                .arg(&out)
                .arg("--")
                .arg(&rate_bin)
                .args(["2", &pairs, secs]),
            "bench_rate under rtm-trace",
        )?;
        let text = String::from_utf8_lossy(&r.out.stdout);
        let made = 2.0 * figure(&text, "pairs")?;
        let took = figure(&text, "secs")?;
        let doc = json(&out)?;
        let read = doc["run"]["reader"]["records"].as_f64().unwrap_or(0.0);
        let lost = doc["run"]["losses"]["ring_full"].as_f64().unwrap_or(0.0)
            + doc["run"]["losses"]["pending_full"].as_f64().unwrap_or(0.0);
        println!(
            "| {:.0}M | {} KiB | {took:.1} | {made:.0} | {:.2}M | {read:.0} | {lost:.0} | {:+.0} |",
            rate / 1e6,
            ring.parse::<u64>().unwrap_or(0) / 1024,
            made / took / 1e6,
            read + lost - made
        );
    }
    println!(
        "\n`read + lost - made` is what the tracer saw beyond the workload's own lock and \
         unlock events (thread creation and exit, the exec, the loader's locks): a few, \
         the same at every rate. Every event made is either read or counted as lost. The \
         offered rate is an upper bound: each probe costs the workload ~1 us, so two \
         threads on this 2-vCPU VM cannot make 5 M events/s.\n"
    );
    Ok(())
}

/// The timeline's size per wait on a many-lock program with every wait's call stacks
/// (`--stack-rate all`), the case where it was largest: stacks as interned callstacks.
fn timeline_size(root: &Path, dir: &Path) -> Result<()> {
    use std::io::Write as _;
    let bin = workload(root, dir, "many_locks")?;
    let (timeline, out) = (dir.join("sizes.pftrace"), dir.join("sizes.json"));
    let mut child = Command::new(root.join("target/release/rtm-trace"))
        .args(["--stack-rate", "all", "-o", "/dev/null", "--timeline"])
        .arg(&timeline)
        .arg("--json")
        .arg(&out)
        .arg("--")
        .arg(&bin)
        .args(["4", "8", "3000"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .context("rtm-trace on many_locks")?;
    writeln!(child.stdin.take().context("stdin")?, "go")?;
    if !child.wait()?.success() {
        bail!("rtm-trace on many_locks failed");
    }
    let doc = json(&out)?;
    let waits: u64 = doc["sync_graph"]["objects"]
        .as_array()
        .context("no objects")?
        .iter()
        .filter_map(|o| o["contended"].as_u64())
        .sum();
    let bytes = std::fs::metadata(&timeline)?.len();
    if waits == 0 {
        bail!("many_locks made no wait that slept");
    }
    println!(
        "The timeline of `rtm-trace --stack-rate all --timeline` on many_locks (4 threads, \
         8 heap mutexes, 3 s; every wait's stacks): {bytes} bytes for {waits} waits that \
         slept, **{:.0} bytes a wait**.\n",
        bytes as f64 / waits as f64
    );
    Ok(())
}

/// Waits for `needle` on the child's stderr; returns when it appeared.
pub fn wait_line(child: &mut Child, needle: &str, limit: Duration) -> Result<Instant> {
    let err = child.stderr.take().context("stderr")?;
    let (tx, rx) = std::sync::mpsc::channel();
    let wanted = needle.to_owned();
    std::thread::spawn(move || {
        for line in BufReader::new(err).lines().map_while(Result::ok) {
            if line.contains(&wanted) {
                let _ = tx.send(Instant::now());
            }
        }
    });
    rx.recv_timeout(limit)
        .with_context(|| format!("no '{needle}' within {limit:?}"))
}

/// Attach and detach latency for 1, 10 and 100 processes.
pub fn attach(root: &Path, dir: &Path, plan: Plan) -> Result<()> {
    let rate_bin = workload(root, dir, "bench_rate")?;
    let rtm = root.join("target/release/rtm-trace");
    println!(
        "\n### Attach and detach on {} ({} rounds; median [min-max] ms)\n\nTargets: `bench_rate 1 \
         100 600` processes (pthread programs, idle). Attach: from starting rtm-trace to \
         its \"attached\" line (probes live). Exit: from SIGINT to rtm-trace's exit, \
         results written. Probes gone: from SIGINT until the background process that \
         removes the uprobes has finished (they trace nothing after the exit).\n",
        host(),
        plan.rounds
    );
    println!("| processes | mode | attach ms | exit ms | probes gone ms |");
    println!("|---|---|---|---|---|");
    let counts: &[(usize, &str)] = if plan.smoke {
        &[(1, "contention"), (1, "full"), (10, "contention")]
    } else {
        &[
            (1, "contention"),
            (10, "contention"),
            (100, "contention"),
            (1, "full"),
            (10, "full"),
            (100, "full"),
        ]
    };
    for &(n, mode) in counts {
        let mut targets: Vec<Child> = (0..n)
            .map(|_| {
                Command::new(&rate_bin)
                    .args(["1", "100", "600"])
                    .stdout(Stdio::null())
                    .spawn()
                    .context("starting a target")
            })
            .collect::<Result<_>>()?;
        std::thread::sleep(Duration::from_millis(300));
        let (mut att, mut det, mut gone) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..plan.rounds {
            let mut cmd = Command::new(&rtm);
            cmd.args(["--mode", mode, "--no-mpi", "-o", "/dev/null"]);
            for t in &targets {
                cmd.arg("--pid").arg(t.id().to_string());
            }
            let start = Instant::now();
            let mut tracer = cmd
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .context("starting rtm-trace")?;
            let live = wait_line(&mut tracer, "attached to PID", Duration::from_secs(600))?;
            att.push((live - start).as_secs_f64() * 1e3);
            std::thread::sleep(Duration::from_millis(500));
            let stop = Instant::now();
            // SAFETY: signalling our own child.
            unsafe { libc::kill(tracer.id() as i32, libc::SIGINT) };
            let st = tracer.wait()?;
            if !st.success() {
                bail!("rtm-trace exited with {st}");
            }
            det.push(stop.elapsed().as_secs_f64() * 1e3);
            crate::measure::wait_for_probes_gone();
            gone.push(stop.elapsed().as_secs_f64() * 1e3);
        }
        for t in &mut targets {
            let _ = t.kill();
            let _ = t.wait();
        }
        println!(
            "| {n} | {mode} | {} | {} | {} |",
            Spread::of(&att).show(0),
            Spread::of(&det).show(0),
            Spread::of(&gone).show(0)
        );
    }
    println!(
        "\nFull mode attached with --pid places uprobes for each process (uprobe_multi \
         links: one per program and process); rtm-trace exits once the results are written, \
         and a background process removes the probes.\n"
    );
    Ok(())
}

/// Peak memory of rtm-trace against the number of distinct mutexes.
pub fn memory(root: &Path, dir: &Path, plan: Plan) -> Result<()> {
    let bin = workload(root, dir, "bench_mutexes")?;
    let rtm = root.join("target/release/rtm-trace");
    let out = dir.join("memory.json");
    println!(
        "\n### Memory on {} (`rtm-trace --mode full -- bench_mutexes N 64 2`: 64 threads, \
         every mutex used by two of them, twice; {} rounds)\n",
        host(),
        plan.rounds
    );
    println!(
        "| distinct mutexes | rtm-trace peak RSS MiB: median [min-max] | mutexes seen | edges | events lost (ring full) | not recorded (over caps) |"
    );
    println!("|---|---|---|---|---|---|");
    let sizes: &[&str] = if plan.smoke {
        &["10", "1000"]
    } else {
        &["10", "1000", "100000"]
    };
    for n in sizes {
        let mut rss = Vec::new();
        // Per round: mutexes seen, edges, events lost, events over the caps.
        let mut seen: [Vec<u64>; 4] = Default::default();
        for _ in 0..plan.rounds {
            let r = run_ok(
                Command::new(&rtm)
                    .args(["--mode", "full", "-o", "/dev/null", "--json"])
                    .arg(&out)
                    .arg("--")
                    .arg(&bin)
                    .args([n, "64", "2"]),
                "bench_mutexes under rtm-trace",
            )?;
            let doc = json(&out)?;
            // The tracer's own high-water mark (wait4's figure also counts the
            // launched program, which starts as a copy of the tracer).
            let hwm = doc["run"]["tracer_max_rss_kib"].as_f64();
            rss.push(hwm.unwrap_or(r.max_rss_kib as f64) / 1024.0);
            let objects = doc["sync_graph"]["objects"]
                .as_array()
                .map_or(0, |o| o.iter().filter(|o| o["kind"] == "mutex").count());
            let edges = doc["sync_graph"]["edges"].as_array().map_or(0, Vec::len);
            for (list, v) in seen.iter_mut().zip([
                objects as u64,
                edges as u64,
                doc["run"]["losses"]["ring_full"].as_u64().unwrap_or(0),
                doc["sync_graph"]["model"]["dropped_over_limits"]
                    .as_u64()
                    .unwrap_or(0),
            ]) {
                list.push(v);
            }
        }
        let [objects, edges, lost, over] = seen.map(|v| every_round(&v));
        println!(
            "| {n} | {} | {objects} | {edges} | {lost} | {over} |",
            Spread::of(&rss).show(1),
        );
    }
    println!(
        "\nThe last four columns give one figure when every round gave it, else each \
         round's. The caps (`--max-objects`, default 200,000 objects and 400,000 edges; \
         `--max-histograms`, 2,048 distributions with percentiles) bound memory whatever \
         the target does; what is over them is counted in `dropped_over_limits`.\n"
    );
    over_time(root, dir, plan)
}

/// The tracer's resident memory over a long run: attached to a process taking locks a
/// thousand times a second, sampling the system 100 times a second
/// (`-i 0.01`), so that a minute holds the samples of 100 minutes at the default
/// interval. The model keeps at most 1,024 samples (coarser as the run goes on).
fn over_time(root: &Path, dir: &Path, plan: Plan) -> Result<()> {
    let rate = workload(root, dir, "bench_rate")?;
    let rtm = root.join("target/release/rtm-trace");
    let secs: u64 = if plan.smoke { 12 } else { 60 };
    let mut target = Command::new(&rate)
        .args(["2", "500", &(secs + 30).to_string()])
        .stdout(Stdio::null())
        .spawn()
        .context("starting bench_rate")?;
    std::thread::sleep(Duration::from_millis(300));
    let mut tracer = Command::new(&rtm)
        .args([
            "-p",
            &target.id().to_string(),
            "-i",
            "0.01",
            "-o",
            "/dev/null",
        ])
        .args(["-d", &secs.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("starting rtm-trace")?;
    let rss = |pid: u32| -> Option<f64> {
        std::fs::read_to_string(format!("/proc/{pid}/status"))
            .ok()?
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))?
            .split_whitespace()
            .next()?
            .parse::<f64>()
            .ok()
            .map(|k| k / 1024.0)
    };
    let mut marks = Vec::new();
    let started = Instant::now();
    for at in [secs / 10, secs / 2, secs - 2] {
        std::thread::sleep(Duration::from_secs(at).saturating_sub(started.elapsed()));
        marks.push((at * 100, rss(tracer.id()).unwrap_or(f64::NAN)));
    }
    tracer.wait()?;
    let _ = target.kill();
    let _ = target.wait();
    println!(
        "\n### Memory over time on {} (`rtm-trace -p PID -i 0.01 -d {secs}` on `bench_rate 2 \
         500`: 100 samples a second)\n\n| samples taken (the default 1 s interval: minutes) | \
         rtm-trace RSS MiB |\n|---|---|",
        host()
    );
    for (n, m) in &marks {
        println!("| {n} ({:.0} min) | {m:.1} |", *n as f64 / 60.0);
    }
    let growth = marks.last().map_or(0.0, |l| l.1) - marks[0].1;
    println!(
        "\nFrom {} to {} samples the RSS changed by {growth:+.1} MiB: the model keeps at most \
         1,024 samples (thinned by half when full), whose interrupt names are shared.\n",
        marks[0].0,
        marks.last().map_or(0, |l| l.0)
    );
    Ok(())
}

/// The eBPF side: time per program run in each mode and map memory, from runs of the
/// contended lock loop with the kernel's statistics on.
pub fn ebpf(root: &Path, dir: &Path, plan: Plan) -> Result<()> {
    let bin = workload(root, dir, "bench_lock")?;
    let rtm = root.join("target/release/rtm-trace");
    let pairs = plan.pick("100000", "5000");
    let mut docs = Vec::new();
    for mode in ["contention", "full"] {
        let out = dir.join(format!("ebpf-{mode}.json"));
        run_ok(
            Command::new(&rtm)
                .args(["--mode", mode, "--bpf-stats", "-o", "/dev/null", "--json"])
                .arg(&out)
                .arg("--")
                .arg(&bin)
                .args(["2", pairs, "200"]),
            "bench_lock under rtm-trace --bpf-stats",
        )?;
        docs.push((mode, json(&out)?));
    }
    println!(
        "\n### eBPF run time on {} (`rtm-trace --mode MODE --bpf-stats -- bench_lock 2 {pairs} \
         200`; the kernel's BPF statistics, on only for these runs)\n",
        host(),
    );
    println!("| mode | program | runs | ns per run | JITed bytes |");
    println!("|---|---|---|---|---|");
    for (mode, doc) in &docs {
        for p in doc["run"]["bpf"]["programs"]
            .as_array()
            .context("no bpf stats")?
        {
            if p["runs"].as_u64().unwrap_or(0) > 0 {
                println!(
                    "| {mode} | {} | {} | {:.0} | {} |",
                    p["name"].as_str().unwrap_or("?"),
                    p["runs"],
                    p["ns_per_run"].as_f64().unwrap_or(0.0),
                    p["jited_bytes"]
                );
            }
        }
    }
    let bpf = &docs.last().context("no runs")?.1["run"]["bpf"];
    println!("\nMaps (full mode):\n\n| map | max entries | locked KiB |");
    println!("|---|---|---|");
    for m in bpf["maps"].as_array().context("no map stats")? {
        println!(
            "| {} | {} | {} |",
            m["name"].as_str().unwrap_or("?"),
            m["max_entries"],
            m["memlock_bytes"].as_u64().unwrap_or(0) / 1024
        );
    }
    println!(
        "\nMaps in all: {} KiB (the event ring is `--ring-size`, 8 MiB by default). The \
         statistics themselves add a little to each run (two clock reads).\n",
        bpf["map_bytes"].as_u64().unwrap_or(0) / 1024
    );
    Ok(())
}

/// One figure when every round gave it, else each round's, in order.
fn every_round(v: &[u64]) -> String {
    if v.windows(2).all(|w| w[0] == w[1]) {
        v.first().map_or_else(String::new, u64::to_string)
    } else {
        v.iter().map(u64::to_string).collect::<Vec<_>>().join(" / ")
    }
}
