//! `cargo xtask bench agent`: what `rtm-trace agent` costs a node and what it costs
//! itself.
//! - Per system call and per context switch of untraced processes: no agent, the agent
//!   idle (nothing matches: no program loaded), the agent tracing a target.
//! - A request-serving program (Debian's memcached under memcslap) with and without
//!   the agent watching it.
//! - Scrape latency and size with 100 targets.
//! - The agent's RSS and CPU over time, with steady targets and with short-lived ones
//!   churning (`RTM_BENCH_AGENT_MINUTES`, default 10; the two agents run side by side).

use std::{
    io::{Read, Write},
    net::TcpStream,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail};

use crate::{
    measure::{Plan, Spread, figure, host, run_ok, workload},
    setup::ensure_packages,
};

/// The `i`th port of this run: several runs (a full one and CI's smoke run) may share
/// the machine.
/// A port for the `i`th agent of this run: below Linux's ephemeral range (32768 up),
/// where a connection's local port could already hold it (one run's agent "did not come
/// up" on 33684).
fn port(i: u16) -> u16 {
    20_000 + (std::process::id() % 2_000) as u16 * 5 + i
}

/// A running agent, stopped (SIGINT) when dropped.
struct Agent {
    child: Child,
    addr: String,
}

impl Drop for Agent {
    fn drop(&mut self) {
        // SAFETY: signalling our own child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGINT) };
        let _ = self.child.wait();
    }
}

/// Processes killed when dropped.
struct Procs(Vec<Child>);

impl Drop for Procs {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn get(addr: &str, path: &str, accept: &str) -> Result<(Duration, String)> {
    let (took, body) = get_bytes(addr, path, accept)?;
    Ok((took, String::from_utf8_lossy(&body).into_owned()))
}

/// A GET of a body of any bytes: (time from connect to the last byte, body).
fn get_bytes(addr: &str, path: &str, accept: &str) -> Result<(Duration, Vec<u8>)> {
    let start = Instant::now();
    let mut s = TcpStream::connect(addr).with_context(|| format!("connecting to {addr}"))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n{accept}\r\n")?;
    let mut out = Vec::new();
    s.read_to_end(&mut out)?;
    let took = start.elapsed();
    let body = out
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map_or_else(Vec::new, |i| out[i + 4..].to_vec());
    Ok((took, body))
}

/// The value of the first sample of `name` (a line starting with it) in a scrape.
fn sample(body: &str, name: &str) -> Option<f64> {
    body.lines()
        .find(|l| l.starts_with(name))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

fn start_agent(rtm: &Path, dir: &Path, port: u16, rules: &str) -> Result<Agent> {
    let config = dir.join(format!("agent-{port}.toml"));
    let addr = format!("127.0.0.1:{port}");
    std::fs::write(
        &config,
        format!(
            "[agent]\nlisten = \"{addr}\"\nupdate_interval = 5.0\ndiscovery_interval = 5.0\ngrace = 10.0\nmax_targets = 512\n{rules}\n"
        ),
    )?;
    let child = Command::new(rtm)
        .args(["agent", "--config"])
        .arg(&config)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("starting the agent")?;
    let agent = Agent { child, addr };
    let deadline = Instant::now() + Duration::from_secs(30);
    while get(&agent.addr, "/readyz", "").is_err() {
        if Instant::now() > deadline {
            bail!("the agent on {} did not come up", agent.addr);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok(agent)
}

/// Waits until the agent's scrape says `name` is `value` or more.
fn wait_metric(agent: &Agent, name: &str, value: f64, limit: Duration) -> Result<()> {
    let deadline = Instant::now() + limit;
    loop {
        let (_, body) = get(&agent.addr, "/metrics", "")?;
        if sample(&body, name).is_some_and(|v| v >= value) {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("{name} did not reach {value} within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// The agent's eBPF program descriptors now.
fn bpf_programs(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| {
            d.flatten()
                .filter(|e| {
                    std::fs::read_link(e.path())
                        .is_ok_and(|l| l.to_string_lossy() == "anon_inode:bpf-prog")
                })
                .count()
        })
        .unwrap_or(0)
}

/// (RSS in MiB, CPU seconds) of `pid`.
fn usage(pid: u32) -> (f64, f64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let rss = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
        .unwrap_or(0.0)
        / 1024.0;
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let f: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, r)| r.split_whitespace().collect())
        .unwrap_or_default();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // SAFETY: sysconf only reads a constant.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    (rss, (ticks(11) + ticks(12)) / hz)
}

/// `prog` under the name `name` (a symlink: its comm), in `dir`.
fn named(dir: &Path, prog: &Path, name: &str) -> Result<PathBuf> {
    let link = dir.join(name);
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(prog, &link)?;
    Ok(link)
}

/// many_locks started and let go at once: `threads` threads on `locks` locks for `ms`.
fn many_locks(prog: &Path, threads: u32, locks: u32, ms: u64) -> Result<Child> {
    let mut c = Command::new(prog)
        .args([threads.to_string(), locks.to_string(), ms.to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .with_context(|| format!("starting {}", prog.display()))?;
    writeln!(c.stdin.take().context("stdin")?, "go")?;
    Ok(c)
}

/// Runs the benchmark and prints its tables.
pub fn agent(root: &Path, dir: &Path, plan: Plan) -> Result<()> {
    ensure_packages(&["memcached", "libmemcached-tools"])?;
    let rtm = root.join("target/release/rtm-trace");
    let syscall = workload(root, dir, "bench_syscall")?;
    let switch = workload(root, dir, "bench_switch")?;
    let locks = workload(root, dir, "many_locks")?;
    let work = std::env::temp_dir().join(format!("rtm-bench-agent-{}", std::process::id()));
    std::fs::create_dir_all(&work)?;
    let result = run_all(&rtm, &syscall, &switch, &locks, &work, plan);
    let _ = std::fs::remove_dir_all(&work);
    result
}

fn run_all(
    rtm: &Path,
    syscall: &Path,
    switch: &Path,
    locks: &Path,
    work: &Path,
    plan: Plan,
) -> Result<()> {
    node_cost(rtm, syscall, switch, locks, work, plan)?;
    serving(rtm, work, plan)?;
    scrapes(rtm, locks, work, plan)?;
    over_time(rtm, locks, work, plan)
}

fn node_cost(
    rtm: &Path,
    syscall: &Path,
    switch: &Path,
    locks: &Path,
    work: &Path,
    plan: Plan,
) -> Result<()> {
    let calls = plan.pick("5000000", "200000");
    let trips = plan.pick("200000", "20000");
    let target = named(work, locks, "agent_target")?;
    let labels = [
        "no agent",
        "agent idle, `keep_loaded = false` (nothing matches)",
        "agent idle, programs kept loaded (`keep_loaded`, the default)",
        "agent tracing one target",
    ];
    let mut ns = vec![Vec::new(); labels.len()];
    let mut rt = vec![Vec::new(); labels.len()];
    let (mut idle_programs, mut kept_programs) = (0, 0);
    for _ in 0..plan.rounds {
        for (i, ns_i) in ns.iter_mut().enumerate() {
            let mut agent = None;
            let mut procs = Procs(Vec::new());
            if i > 0 {
                let keep = if i == 1 { "false" } else { "true" };
                let a = start_agent(
                    rtm,
                    work,
                    port(0),
                    &format!("keep_loaded = {keep}\n[[agent.select]]\ncomm = \"agent_target\"\n"),
                )?;
                if i == 1 {
                    idle_programs = idle_programs.max(bpf_programs(a.child.id()));
                } else if i == 2 {
                    kept_programs = kept_programs.max(bpf_programs(a.child.id()));
                } else {
                    procs.0.push(many_locks(&target, 4, 4, 600_000)?);
                    wait_metric(
                        &a,
                        "rtm_targets{state=\"running\"}",
                        1.0,
                        Duration::from_secs(60),
                    )?;
                }
                agent = Some(a);
            }
            let r = run_ok(Command::new(syscall).arg(calls), "bench_syscall")?;
            ns_i.push(figure(
                &String::from_utf8_lossy(&r.out.stdout),
                "ns_per_call",
            )?);
            let r = run_ok(Command::new(switch).arg(trips), "bench_switch")?;
            rt[i].push(figure(
                &String::from_utf8_lossy(&r.out.stdout),
                "ns_per_round_trip",
            )?);
            drop(agent);
            drop(procs);
        }
    }
    println!(
        "\n### The agent's cost to a node on {} ({} rounds, interleaved; median [min-max])\n",
        host(),
        plan.rounds
    );
    println!(
        "Untraced processes: `bench_syscall {calls}` (getppid calls) and `bench_switch {trips}` \
         (a pipe round trip between two processes). The target: `many_locks 4 4` (4 threads \
         on 4 contended locks). eBPF programs the idle agent held: {idle_programs} with \
         `keep_loaded = false`, {kept_programs} with it.\n"
    );
    println!("| while | ns per system call | vs. no agent | ns per round trip | vs. no agent |");
    println!("|---|---|---|---|---|");
    let (b1, b2) = (Spread::of(&ns[0]).median, Spread::of(&rt[0]).median);
    for i in 0..labels.len() {
        let (s, r) = (Spread::of(&ns[i]), Spread::of(&rt[i]));
        println!(
            "| {} | {} | {:.2}x | {} | {:.2}x |",
            labels[i],
            s.show(1),
            s.median / b1,
            r.show(0),
            r.median / b2
        );
    }
    Ok(())
}

/// memcslap's keys per second for a get run against `port`.
fn memcslap(port: u16, ops: &str) -> Result<f64> {
    let r = run_ok(
        Command::new("memcslap").args([
            "-s",
            &format!("127.0.0.1:{port}"),
            "-c",
            "16",
            "-e",
            ops,
            "-t",
            "get",
        ]),
        "memcslap",
    )?;
    let text = String::from_utf8_lossy(&r.out.stdout).into_owned()
        + &String::from_utf8_lossy(&r.out.stderr);
    // "Time to get   N keys by   T threads:   S seconds."
    let line = text
        .lines()
        .find(|l| l.starts_with("Time to get"))
        .with_context(|| format!("no timing in memcslap's output:\n{text}"))?;
    let w: Vec<&str> = line.split_whitespace().collect();
    let keys: f64 = w.get(3).and_then(|v| v.parse().ok()).context("keys")?;
    let secs: f64 = w
        .iter()
        .rev()
        .find_map(|v| v.parse().ok())
        .context("seconds")?;
    Ok(keys / secs)
}

fn serving(rtm: &Path, work: &Path, plan: Plan) -> Result<()> {
    let mc_port = 40_000 + (std::process::id() % 4_000) as u16;
    let server = Procs(vec![
        Command::new("memcached")
            .args([
                "-u",
                "root",
                "-t",
                "4",
                "-p",
                &mc_port.to_string(),
                "-U",
                "0",
                "-l",
                "127.0.0.1",
            ])
            .spawn()
            .context("starting memcached")?,
    ]);
    std::thread::sleep(Duration::from_millis(500));
    let ops = plan.pick("5000", "500");
    memcslap(mc_port, ops)?; // warm: the keys exist from here
    let mut rates = vec![Vec::new(); 2];
    for _ in 0..plan.rounds {
        for (i, r) in rates.iter_mut().enumerate() {
            let agent = if i == 1 {
                let a = start_agent(
                    rtm,
                    work,
                    port(1),
                    "[[agent.select]]\nexe = \"/usr/bin/memcached\"\n",
                )?;
                wait_metric(
                    &a,
                    "rtm_targets{state=\"running\"}",
                    1.0,
                    Duration::from_secs(60),
                )?;
                Some(a)
            } else {
                None
            };
            r.push(memcslap(mc_port, ops)?);
            drop(agent);
        }
    }
    drop(server);
    println!(
        "\nA request-serving program: Debian's memcached (`-t 4`), `memcslap -c 16 -e {ops} -t get` \
         on loopback; median [min-max] keys per second over {} rounds:\n",
        plan.rounds
    );
    println!("| while | keys/s | vs. no agent |");
    println!("|---|---|---|");
    let base = Spread::of(&rates[0]).median;
    for (label, r) in ["no agent", "the agent watching memcached"]
        .iter()
        .zip(&rates)
    {
        let s = Spread::of(r);
        println!("| {label} | {} | {:.3}x |", s.show(0), s.median / base);
    }
    Ok(())
}

fn scrapes(rtm: &Path, locks: &Path, work: &Path, plan: Plan) -> Result<()> {
    let n = plan.pick(100, 10);
    let agent = start_agent(
        rtm,
        work,
        port(2),
        "[[agent.select]]\ncmdline = \"/scr_[0-9]+ \"\n",
    )?;
    let mut procs = Procs(Vec::new());
    for i in 0..n {
        let link = named(work, locks, &format!("scr_{i:03}"))?;
        // Two threads on one lock, contended, for the whole measurement.
        procs.0.push(many_locks(&link, 2, 1, 300_000)?);
    }
    wait_metric(
        &agent,
        "rtm_target_groups",
        n as f64,
        Duration::from_secs(120),
    )?;
    // Every target has waited by now.
    std::thread::sleep(Duration::from_secs(6));
    println!(
        "\nScrapes with {n} targets (`many_locks 2 1`, each its own program name), 50 each way; \
         latency from connect to the last byte on loopback:\n"
    );
    println!("| format | bytes | series | median ms | max ms |");
    println!("|---|---|---|---|---|");
    for (label, accept) in [
        ("classic text", ""),
        (
            "OpenMetrics",
            "Accept: application/openmetrics-text; version=1.0.0\r\n",
        ),
    ] {
        let mut ms = Vec::new();
        let mut body = String::new();
        for _ in 0..50 {
            let (t, b) = get(&agent.addr, "/metrics", accept)?;
            ms.push(t.as_secs_f64() * 1e3);
            body = b;
        }
        let s = Spread::of(&ms);
        let series = sample(&body, "rtm_series{").unwrap_or(0.0);
        println!(
            "| {label} | {} | {series} | {:.2} | {:.2} |",
            body.len(),
            s.median,
            s.max
        );
    }
    let mut ms = Vec::new();
    let mut bytes = 0;
    for _ in 0..20 {
        let (t, b) = get_bytes(&agent.addr, "/debug/pprof/contention", "")?;
        ms.push(t.as_secs_f64() * 1e3);
        bytes = b.len();
    }
    let s = Spread::of(&ms);
    println!(
        "| contention profile (`/debug/pprof/contention`, since the start, gzip'd pprof) | {bytes} | - | {:.2} | {:.2} |",
        s.median, s.max
    );
    drop(procs);
    Ok(())
}

fn over_time(rtm: &Path, locks: &Path, work: &Path, plan: Plan) -> Result<()> {
    let minutes: f64 = std::env::var("RTM_BENCH_AGENT_MINUTES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(plan.pick(10.0, 0.5));
    let total = Duration::from_secs_f64(minutes * 60.0);
    let steady_agent = start_agent(
        rtm,
        work,
        port(3),
        "[[agent.select]]\ncmdline = \"/steady_\"\n",
    )?;
    let churn_agent = start_agent(rtm, work, port(4), "[[agent.select]]\ncomm = \"churn\"\n")?;
    let mut steady = Procs(Vec::new());
    let ms = (total.as_millis() as u64 + 60_000).to_string();
    for i in 0..8 {
        let link = named(work, locks, &format!("steady_{i}"))?;
        steady.0.push(many_locks(&link, 8, 16, ms.parse()?)?);
    }
    let churn = named(work, locks, "churn")?;
    let start = Instant::now();
    let mut samples: Vec<(f64, [(f64, f64); 2])> = Vec::new();
    let mut next_sample = Duration::ZERO;
    let mut started = 0u64;
    let mut running: Vec<Child> = Vec::new();
    while start.elapsed() < total {
        // A short-lived match every 100 ms: 4 threads on 8 locks for 50 ms.
        running.push(many_locks(&churn, 4, 8, 50)?);
        started += 1;
        running.retain_mut(|c| !matches!(c.try_wait(), Ok(Some(_))));
        if start.elapsed() >= next_sample {
            let s = [
                usage(steady_agent.child.id()),
                usage(churn_agent.child.id()),
            ];
            samples.push((start.elapsed().as_secs_f64() / 60.0, s));
            next_sample += Duration::from_secs_f64((minutes * 60.0 / 20.0).max(1.0));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let end = [
        usage(steady_agent.child.id()),
        usage(churn_agent.child.id()),
    ];
    samples.push((start.elapsed().as_secs_f64() / 60.0, end));
    for mut c in running {
        let _ = c.wait();
    }
    let (_, body) = get(&churn_agent.addr, "/metrics", "")?;
    let attached = sample(&body, "rtm_attached_total").unwrap_or(0.0);
    let filter = sample(&body, "rtm_bpf_map_entries{map=\"TRACED_TGIDS\"}").unwrap_or(-1.0);
    println!(
        "\nThe agent over {minutes} minutes on {}: one agent watching 8 steady targets \
         (`many_locks 8 16`), one watching short-lived ones (`many_locks 4 8 50`, one started \
         every 100 ms: {started} started, {attached} attached; entries left in the in-kernel \
         process filter at the end: {filter}). RSS in MiB:\n",
        host()
    );
    println!("| minute | steady RSS | churn RSS |");
    println!("|---|---|---|");
    let step = (samples.len() / 10).max(1);
    for (i, (m, s)) in samples.iter().enumerate() {
        if i % step == 0 || i + 1 == samples.len() {
            println!("| {m:.1} | {:.1} | {:.1} |", s[0].0, s[1].0);
        }
    }
    let first_after = |frac: f64| {
        samples
            .iter()
            .find(|(m, _)| *m >= minutes * frac)
            .map_or(samples[0].1, |s| s.1)
    };
    let early = first_after(0.1);
    let secs = start.elapsed().as_secs_f64();
    println!(
        "\nRSS at a tenth of the run vs the end: steady {:.1} -> {:.1} MiB, churn {:.1} -> {:.1} MiB. \
         CPU: steady {:.2}%, churn {:.2}% of one CPU.",
        early[0].0,
        end[0].0,
        early[1].0,
        end[1].0,
        end[0].1 / secs * 100.0,
        end[1].1 / secs * 100.0
    );
    Ok(())
}
