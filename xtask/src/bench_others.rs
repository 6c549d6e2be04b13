//! `cargo xtask bench others`: what rtm-trace costs the processes it does not trace.
//! Its tracepoints see every process's system calls (the futex entry is a raw
//! tracepoint on sys_enter, and any syscall tracepoint puts every task on the kernel's
//! slow system-call path) and, in contention mode, every wakeup and context switch
//! (sched_waking, sched_switch); the in-kernel filter drops what is not traced. A loop
//! of getppid calls, the cheapest system call, and a pipe ping-pong between two
//! processes, two wakeups and their context switches a round trip, run untraced while
//! rtm-trace traces an unrelated idle process in each mode, interleaved.

use std::{
    path::Path,
    process::{Child, Command, Stdio},
    time::Duration,
};

use anyhow::{Context, Result};

use crate::{
    bench_scale::wait_line,
    measure::{Plan, Spread, figure, host, run_ok, workload},
};

/// Stops the tracer (SIGINT) and the idle target when dropped.
struct Attached {
    tracer: Option<Child>,
    target: Child,
}

impl Drop for Attached {
    fn drop(&mut self) {
        if let Some(t) = self.tracer.as_mut() {
            // SAFETY: signalling our own child.
            unsafe { libc::kill(t.id() as i32, libc::SIGINT) };
            let _ = t.wait();
        }
        let _ = self.target.kill();
        let _ = self.target.wait();
    }
}

/// Starts an idle process and, for `Some(mode)`, rtm-trace attached to it.
fn attach(rtm: &Path, idle: &Path, mode: Option<&str>) -> Result<Attached> {
    let target = Command::new(idle)
        .args(["1", "100", "600"])
        .stdout(Stdio::null())
        .spawn()
        .context("starting the idle target")?;
    let mut a = Attached {
        tracer: None,
        target,
    };
    if let Some(m) = mode {
        let mut tracer = Command::new(rtm)
            .args(["--mode", m, "--no-mpi", "-o", "/dev/null", "--pid"])
            .arg(a.target.id().to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .context("starting rtm-trace")?;
        let live = wait_line(&mut tracer, "attached to PID", Duration::from_secs(60));
        a.tracer = Some(tracer);
        live?;
    }
    Ok(a)
}

/// Runs the benchmark and prints its table.
pub fn others(root: &Path, dir: &Path, plan: Plan) -> Result<()> {
    let bin = workload(root, dir, "bench_syscall")?;
    let switch = workload(root, dir, "bench_switch")?;
    let idle = workload(root, dir, "bench_rate")?;
    let rtm = root.join("target/release/rtm-trace");
    let calls = plan.pick("5000000", "200000");
    let rounds = plan.pick("200000", "20000");
    let configs: [(&str, Option<&str>); 3] = [
        ("nothing traced", None),
        (
            "rtm-trace --mode contention on another process",
            Some("contention"),
        ),
        ("rtm-trace --mode full on another process", Some("full")),
    ];
    let mut samples = vec![Vec::new(); configs.len()];
    let mut trips = vec![Vec::new(); configs.len()];
    for _ in 0..plan.rounds {
        for (i, (_, mode)) in configs.iter().enumerate() {
            let _attached = attach(&rtm, &idle, *mode)?;
            let r = run_ok(Command::new(&bin).arg(calls), "bench_syscall")?;
            samples[i].push(figure(
                &String::from_utf8_lossy(&r.out.stdout),
                "ns_per_call",
            )?);
            let r = run_ok(Command::new(&switch).arg(rounds), "bench_switch")?;
            trips[i].push(figure(
                &String::from_utf8_lossy(&r.out.stdout),
                "ns_per_round_trip",
            )?);
        }
    }
    println!(
        "\n### Cost to other processes on {} (`bench_syscall {calls}`: getppid calls in an \
         untraced process; {} rounds, interleaved; median [min-max] ns per call)\n",
        host(),
        plan.rounds
    );
    println!("| while | ns per system call | vs. nothing traced | added ns |");
    println!("|---|---|---|---|");
    let base = Spread::of(&samples[0]).median;
    for ((label, _), s) in configs.iter().zip(&samples) {
        let s = Spread::of(s);
        println!(
            "| {label} | {} | {:.2}x | {:.1} |",
            s.show(1),
            s.median / base,
            s.median - base
        );
    }
    println!(
        "\nThe cost is per system call, whatever the call does: getppid is the worst case \
         (~0.2 us of work). Processes that make no system calls pay nothing.\n"
    );
    println!(
        "`bench_switch {rounds}` (a byte back and forth between two untraced processes \
         through pipes: two wakeups and their context switches per round trip; median \
         [min-max] ns per round trip):\n"
    );
    println!("| while | ns per round trip | vs. nothing traced | added ns |");
    println!("|---|---|---|---|");
    let base = Spread::of(&trips[0]).median;
    for ((label, _), s) in configs.iter().zip(&trips) {
        let s = Spread::of(s);
        println!(
            "| {label} | {} | {:.2}x | {:.1} |",
            s.show(1),
            s.median / base,
            s.median - base
        );
    }
    Ok(())
}
