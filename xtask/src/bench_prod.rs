//! `cargo xtask bench production`: what contention mode (the mode meant to stay attached
//! to production processes) costs programs shaped like real software, against the same
//! program untraced and a bpftrace script counting its futex waits, interleaved rounds.
//!
//! Shapes (tests/workloads/bench_shapes.c): critical sections that call sched_yield();
//! a request loop (a condition-variable queue, a shared stats lock, a system call per
//! request); a futex word handed between two threads; and Debian's stress-ng mutex
//! stressor, a real program making 100k+ sleeping waits a second. Each program is gated:
//! it waits for the tracer to be attached and settled before its timed part, which it
//! times itself, so the figures are the steady state. The tracer's CPU is read from
//! /proc over that part.

use std::{
    io::{BufRead, BufReader, Write},
    path::Path,
    process::{Child, ChildStdin, Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail};

use crate::measure::{Plan, Spread, figure, host, wait_for_probes_gone, workload};

/// The bpftrace script the issue compares with: futex waits of one process counted by
/// result (sys_enter/sys_exit_futex, one hash update per call).
const BPFTRACE: &str = "tracepoint:syscalls:sys_enter_futex /pid == $1 && \
    ((args->op & 127) == 0 || (args->op & 127) == 9)/ { @w[tid] = 1; } \
    tracepoint:syscalls:sys_exit_futex /@w[tid]/ { @ret[args->ret] = count(); delete(@w[tid]); }";

/// How one configuration runs a shape.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Config {
    Untraced,
    Rtm,
    Bpftrace,
}

/// One run's figures.
#[derive(Default, Clone, Debug)]
struct Figures {
    ops_per_s: f64,
    /// The tracer's CPU over the timed part, % of one core.
    tracer_cpu_pct: Option<f64>,
    /// Sleeping waits a second rtm-trace counted (contention mode).
    waits_per_s: Option<f64>,
    /// Records rtm-trace lost.
    lost: Option<u64>,
}

/// CPU time (user + system) of a process so far, seconds.
fn cpu_s(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, r)| r.split_whitespace().collect())
        .unwrap_or_default();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // utime and stime are fields 14 and 15 (1-based); after "pid (comm)" they are 11, 12.
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    (ticks(11) + ticks(12)) / hz
}

/// Reads lines of a child's stdout on a thread.
fn lines(child: &mut Child) -> Result<std::sync::mpsc::Receiver<String>> {
    let out = child.stdout.take().context("stdout")?;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    Ok(rx)
}

fn wait_for(
    rx: &std::sync::mpsc::Receiver<String>,
    prefix: &str,
    limit: Duration,
) -> Result<String> {
    let deadline = Instant::now() + limit;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = rx
            .recv_timeout(left)
            .with_context(|| format!("no line starting {prefix:?} within {limit:?}"))?;
        if line.starts_with(prefix) {
            return Ok(line);
        }
    }
}

fn open_gate(stdin: &mut Option<ChildStdin>) -> Result<()> {
    let mut s = stdin.take().context("the gate")?;
    s.write_all(b"go\n")?;
    Ok(())
}

/// Runs `bench_shapes --gate SHAPE...` in configuration `config`.
fn run_shape(
    rtm: &Path,
    bin: &Path,
    shape: &[String],
    config: Config,
    dir: &Path,
) -> Result<Figures> {
    let json = dir.join("prod.json");
    let _ = std::fs::remove_file(&json);
    let mut cmd = match config {
        Config::Rtm => {
            let mut c = Command::new(rtm);
            c.arg("--json").arg(&json).args(["-o", "/dev/null", "--"]);
            c.arg(bin);
            c
        }
        _ => Command::new(bin),
    };
    let mut child = cmd
        .arg("--gate")
        .args(shape)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .context("starting the workload")?;
    let rx = lines(&mut child)?;
    let ready = wait_for(&rx, "ready ", Duration::from_secs(60))?;
    let pid: u32 = ready["ready ".len()..].trim().parse()?;
    let mut bpftrace = None;
    if config == Config::Bpftrace {
        let mut b = Command::new("bpftrace")
            .args(["-e", BPFTRACE])
            .arg(pid.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .context("bpftrace")?;
        let brx = lines(&mut b)?;
        wait_for(&brx, "Attaching", Duration::from_secs(60))?;
        bpftrace = Some(b);
    }
    // The tracer's start (symbols, the first stacks) is done before the timed part.
    std::thread::sleep(Duration::from_secs(2));
    let tracer_pid = child.id();
    let cpu0 = (config == Config::Rtm).then(|| cpu_s(tracer_pid));
    let t0 = Instant::now();
    let mut stdin = child.stdin.take();
    open_gate(&mut stdin)?;
    let result = wait_for(&rx, "ops=", Duration::from_secs(600))?;
    let wall = t0.elapsed().as_secs_f64();
    let cpu = cpu0.map(|c| (cpu_s(tracer_pid) - c) / wall * 100.0);
    let st = child.wait()?;
    if let Some(mut b) = bpftrace {
        // SAFETY: signalling our own child.
        unsafe { libc::kill(b.id() as i32, libc::SIGINT) };
        let _ = b.wait();
    }
    if !st.success() {
        bail!("{shape:?} under {config:?} exited {st}");
    }
    let mut f = Figures {
        ops_per_s: figure(&result, "ops_per_s")?,
        tracer_cpu_pct: cpu,
        ..Figures::default()
    };
    if config == Config::Rtm {
        let doc: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json)?)?;
        let seconds = figure(&result, "seconds")?;
        let sleeps: u64 = doc["sync_graph"]["objects"]
            .as_array()
            .map(|a| a.iter().filter_map(|o| o["contended"].as_u64()).sum())
            .unwrap_or(0);
        f.waits_per_s = Some(sleeps as f64 / seconds);
        f.lost = doc["run"]["losses"]["ring_full"].as_u64();
    }
    wait_for_probes_gone();
    Ok(f)
}

/// stress-ng's mutex stressor for `secs` seconds under `config`: its bogo-ops a second.
fn run_stress(rtm: &Path, secs: &str, config: Config) -> Result<Figures> {
    let args = ["--mutex", "4", "-t", secs, "--metrics-brief"];
    let mut cmd = match config {
        Config::Rtm => {
            let mut c = Command::new(rtm);
            c.args(["-o", "/dev/null", "--", "stress-ng"]);
            c
        }
        _ => Command::new("stress-ng"),
    };
    let out = cmd.args(args).output().context("stress-ng")?;
    if !out.status.success() {
        bail!("stress-ng: {}", String::from_utf8_lossy(&out.stderr));
    }
    let text = String::from_utf8_lossy(&out.stderr);
    // "metrc: [N] mutex  OPS  REAL  USR  SYS  OPS/S(real)  OPS/S(usr+sys)"
    let line = text
        .lines()
        .find(|l| l.contains("metrc") && l.split_whitespace().nth(3) == Some("mutex"))
        .with_context(|| format!("no metrics line in {text}"))?;
    let f: Vec<&str> = line.split_whitespace().collect();
    wait_for_probes_gone();
    Ok(Figures {
        ops_per_s: f
            .get(8)
            .and_then(|v| v.parse().ok())
            .context("bogo ops/s")?,
        ..Figures::default()
    })
}

/// Runs the benchmark and prints its tables.
pub fn production(root: &Path, dir: &Path, plan: Plan) -> Result<()> {
    let bin = workload(root, dir, "bench_shapes")?;
    let rtm = root.join("target/release/rtm-trace");
    let secs = plan.pick("5", "1").to_string();
    let shapes: [(&str, Vec<String>); 3] = [
        (
            "yield in the critical section (8 threads, 4 mutexes)",
            vec!["yield".into(), "8".into(), "4".into(), secs.clone()],
        ),
        (
            "request loop (producer, 4 workers, cond-var queue, stats lock, a syscall each)",
            vec!["serve".into(), "4".into(), secs.clone()],
        ),
        (
            "futex ping-pong (two threads)",
            vec!["pingpong".into(), secs.clone()],
        ),
    ];
    let configs = [Config::Untraced, Config::Rtm, Config::Bpftrace];
    println!(
        "\n### Production mode on real software shapes ({}, {} interleaved rounds; each run \
         gated until the tracer is settled, timed by the program; median [min-max])\n",
        host(),
        plan.rounds
    );
    println!(
        "| shape | untraced ops/s | rtm-trace (contention) | vs. untraced | bpftrace counting \
         futex waits | vs. untraced | rtm-trace CPU, % of a core | sleeping waits/s | lost |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for (label, shape) in &shapes {
        let mut runs: Vec<Vec<Figures>> = vec![Vec::new(); configs.len()];
        for _ in 0..plan.rounds {
            for (i, c) in configs.iter().enumerate() {
                runs[i].push(run_shape(&rtm, &bin, shape, *c, dir)?);
            }
        }
        let ops = |i: usize| Spread::of(&runs[i].iter().map(|f| f.ops_per_s).collect::<Vec<_>>());
        let (u, r, b) = (ops(0), ops(1), ops(2));
        let cpu = Spread::of(
            &runs[1]
                .iter()
                .filter_map(|f| f.tracer_cpu_pct)
                .collect::<Vec<_>>(),
        );
        let waits = Spread::of(
            &runs[1]
                .iter()
                .filter_map(|f| f.waits_per_s)
                .collect::<Vec<_>>(),
        );
        let lost: u64 = runs[1].iter().filter_map(|f| f.lost).sum();
        println!(
            "| {label} | {} | {} | {:.2}x | {} | {:.2}x | {} | {:.0} | {lost} |",
            u.show(0),
            r.show(0),
            r.median / u.median,
            b.show(0),
            b.median / u.median,
            cpu.show(1),
            waits.median,
        );
    }
    // A real program: Debian's stress-ng, 4 mutex stressors.
    let mut runs: Vec<Vec<Figures>> = vec![Vec::new(); configs.len()];
    for _ in 0..plan.rounds {
        for (i, c) in [Config::Untraced, Config::Rtm].iter().enumerate() {
            runs[i].push(run_stress(&rtm, &secs, *c)?);
        }
    }
    let ops = |i: usize| Spread::of(&runs[i].iter().map(|f| f.ops_per_s).collect::<Vec<_>>());
    println!(
        "| stress-ng --mutex 4 (Debian's; launched under the tracer, its start included) | {} \
         | {} | {:.2}x | - | - | - | - | - |",
        ops(0).show(0),
        ops(1).show(0),
        ops(1).median / ops(0).median
    );
    println!(
        "\nrtm-trace runs as `cargo xtask demo` builds it (release), default options: waits \
         summed in the kernel, no program on system calls, stacks sampled. The bpftrace \
         script counts the same process's futex waits on the syscall tracepoints.\n"
    );
    Ok(())
}
