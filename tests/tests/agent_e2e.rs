//! End-to-end: `rtm-trace agent` scraped by a real Prometheus (Debian's, installed by
//! setup) over loopback. The checks query Prometheus's HTTP API, not the agent: a
//! workload started after the agent is found, its lock's wait time agrees with its own
//! clock, nothing is lost, a container id is read from a cgroup named as a runtime
//! names it, and its series go after the grace period. Also: promtool lints a scrape,
//! a bad config exits 2, the endpoint refuses oversized requests.

use std::{
    io::{Read, Write},
    net::TcpStream,
    process::Command,
    time::{Duration, Instant},
};

use rtm_tests::*;
use rtm_tests::{e2e, harness::E2e};

/// This file's tests, each with what it needs besides the tracer.
pub(crate) const TESTS: &[E2e] = &[
    e2e!(prometheus_scrapes_a_workload_found_after_the_agent_started, Root),
    e2e!(the_endpoint_refuses_oversized_and_unexpected_requests, Root),
    e2e!(a_bad_config_is_refused_with_exit_2_and_the_field_named),
    e2e!(a_packaged_memcached_under_load_agrees_with_bpftrace, Root),
    e2e!(many_heap_locks_and_numbered_threads_stay_under_the_series_cap, Root),
    e2e!(an_mpi_rule_exports_exact_messages_per_rank, Root),
    e2e!(a_full_mode_rule_counts_every_acquisition, Root),
    e2e!(short_lived_targets_leave_the_process_filter, Root),
    e2e!(a_deadlock_in_a_target_shows_as_deadlocked_threads, Root),
    e2e!(the_hang_gauge_stays_low_while_main_sits_in_a_join, Root),
    e2e!(idle_connections_and_a_flood_never_keep_a_scraper_out, Root),
];

const T: Duration = Duration::from_secs(120);

/// A plain HTTP/1.0 GET; returns (status, body).
fn get(addr: &str, path: &str, headers: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    // A server that refuses a request may close before it is all written.
    let _ = write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n{headers}\r\n");
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    let text = String::from_utf8_lossy(&out).into_owned();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = text.split_once("\r\n\r\n").map_or("", |b| b.1).to_owned();
    (status, body)
}

fn wait_for(what: &str, timeout: Duration, mut ok: impl FnMut() -> bool) -> Duration {
    let start = Instant::now();
    while !ok() {
        assert!(start.elapsed() < timeout, "{what}: not within {timeout:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
    start.elapsed()
}

/// Prometheus's instant query: (labels, value) per series.
fn query(prom: &str, q: &str) -> Vec<(Value, f64)> {
    let enc: String = q
        .bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'_' | b'.' | b'-' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect();
    let (status, body) = get(prom, &format!("/api/v1/query?query={enc}"), "");
    assert_eq!(status, 200, "{q}: {body}");
    let doc: Value = serde_json::from_str(&body).unwrap();
    doc["data"]["result"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let v: f64 = r["value"][1].as_str().unwrap().parse().unwrap();
            (r["metric"].clone(), v)
        })
        .collect()
}

fn one(prom: &str, q: &str) -> Option<f64> {
    let r = query(prom, q);
    assert!(r.len() <= 1, "{q}: {r:?}");
    r.first().map(|r| r.1)
}

struct Agent {
    proc: Proc,
    addr: String,
}

fn start_agent(dir: &TempDir, port: u16, extra: &str) -> Agent {
    let config = dir.join("agent.toml");
    let addr = format!("127.0.0.1:{port}");
    std::fs::write(
        &config,
        format!(
            "[agent]\nlisten = \"{addr}\"\nupdate_interval = 1.0\ndiscovery_interval = 2.0\ngrace = 4.0\n{extra}\n"
        ),
    )
    .unwrap();
    let proc = spawn(
        Command::new(rtm_bin())
            .arg("agent")
            .arg("--config")
            .arg(&config),
    );
    wait_for("the agent's /healthz", Duration::from_secs(20), || {
        TcpStream::connect(&addr).is_ok() && get(&addr, "/healthz", "").0 == 200
    });
    wait_for("the agent's /readyz", Duration::from_secs(20), || {
        get(&addr, "/readyz", "").0 == 200
    });
    Agent { proc, addr }
}

fn start_prometheus(dir: &TempDir, port: u16, target: &str) -> (Proc, String) {
    let config = dir.join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n  - job_name: rtm\n    static_configs:\n      - targets: ['{target}']\n"
        ),
    )
    .unwrap();
    let addr = format!("127.0.0.1:{port}");
    let p = spawn(
        Command::new("prometheus")
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("tsdb").display()
            ))
            .arg(format!("--web.listen-address={addr}"))
            .arg("--log.level=warn"),
    );
    wait_for("Prometheus ready", Duration::from_secs(30), || {
        TcpStream::connect(&addr).is_ok() && get(&addr, "/-/ready", "").0 == 200
    });
    (p, addr)
}

/// A cgroup (v1 pids hierarchy, or v2) named as the kubelet's cgroupfs driver names a
/// container's: (cgroup.procs path, container id, pod uid).
fn container_cgroup() -> (std::path::PathBuf, String, String) {
    let id = format!("{:016x}", std::process::id()).repeat(4);
    let uid = "5f0c9a7e-3b1d-4c2e-8a6f-0123456789ab".to_owned();
    let base = ["/sys/fs/cgroup/pids", "/sys/fs/cgroup"]
        .into_iter()
        .find(|b| std::path::Path::new(b).join("cgroup.procs").exists())
        .expect("a cgroup hierarchy that takes processes");
    let dir = std::path::Path::new(base)
        .join("rtm-test-kubepods")
        .join(format!("pod{uid}"))
        .join(&id);
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    (dir.join("cgroup.procs"), id, uid)
}

fn prometheus_scrapes_a_workload_found_after_the_agent_started() {
    let dir = TempDir::new("agent-prom");
    let agent = start_agent(&dir, 17471, "[[agent.select]]\ncomm = \"mutex_workload\"\n");
    let (_prom, prom) = start_prometheus(&dir, 19471, &agent.addr);
    wait_for("a first scrape", Duration::from_secs(20), || {
        one(&prom, "rtm_targets{state=\"running\"}") == Some(0.0)
    });

    // The workload, in a cgroup named like a container's, waits at its gate.
    let (procs, id, uid) = container_cgroup();
    let script = format!(
        "echo $$ > {} && exec {} --threads 2 --iters 60 --hold-us 1000 --private 0 --wait-stdin --linger-ms 3000",
        procs.display(),
        workload("mutex_workload").display()
    );
    let started = Instant::now();
    let mut app = spawn(Command::new("sh").args(["-c", &script]));
    let mut lines = LineWatch::new(app.child.stdout.take().unwrap());
    lines.wait_for("ready", T);
    let found = wait_for("the target in Prometheus", Duration::from_secs(30), || {
        one(&prom, "rtm_targets{state=\"running\"}") == Some(1.0)
    });
    println!(
        "found {:.2} s after it started ({:.2} s after Prometheus saw none); discovery interval 2 s, update 1 s, scrape 1 s",
        started.elapsed().as_secs_f64(),
        found.as_secs_f64()
    );
    if times_comparable("discovery time") {
        assert!(
            started.elapsed() < Duration::from_secs(2 + 1 + 1 + 1),
            "found after {:?}",
            started.elapsed()
        );
    }
    assert_eq!(one(&prom, "rtm_programs_loaded"), Some(1.0));
    assert!(one(&prom, "rtm_bpf_map_entries{map=\"TRACED_TGIDS\"}").is_some_and(|n| n >= 1.0));
    let info = query(&prom, "rtm_target_info");
    assert_eq!(info.len(), 1, "{info:?}");
    let labels = &info[0].0;
    println!("rtm_target_info: {labels}");
    assert_eq!(labels["pid"], app.pid().to_string());
    assert_eq!(labels["container_id"], id);
    assert_eq!(labels["pod_uid"], uid);
    assert!(labels["exe"].as_str().unwrap().ends_with("/mutex_workload"));
    assert!(labels.get("instance").is_some() && labels["job"] == "rtm");

    // Release it; its own clock against Prometheus's figure.
    writeln!(app.child.stdin.as_mut().unwrap(), "go").unwrap();
    let out = lines.rest(T);
    // Its output ended: it has exited (after its linger), and its grace began.
    let exited = Instant::now();
    let truth: u64 = truths(&out.join("\n"))
        .iter()
        .map(|t| t.get("wait_ns"))
        .sum();
    // This container's series: a mutex_workload another test left lingering on this
    // machine, outside any container, would be a second series of the same lock.
    let q = format!("rtm_lock_wait_seconds_total{{lock=\"shared_lock\",container_id=\"{id}\"}}");
    let q = q.as_str();
    let mut last = -1.0;
    wait_for(
        "the lock's wait time to settle",
        Duration::from_secs(20),
        || {
            let v = one(&prom, q).unwrap_or(0.0);
            let settled = v > 0.0 && v == last;
            last = v;
            if !settled {
                std::thread::sleep(Duration::from_millis(1200));
            }
            settled
        },
    );
    if times_comparable("shared_lock wait") {
        within(
            last * 1e9,
            truth as f64,
            0.05,
            "shared_lock wait (Prometheus vs the workload's clock)",
        );
    }
    let lost = query(&prom, "rtm_events_lost_total");
    assert!(lost.iter().all(|r| r.1 == 0.0), "{lost:?}");
    let series = query(&prom, q);
    assert_eq!(series.len(), 1, "{series:?}");
    assert_eq!(series[0].0["container_id"], id);
    assert_eq!(series[0].0["target"], "mutex_workload");

    // Its series go a grace period (4 s) after its exit, counted from its exit (the
    // checks above can take seconds on a slow machine).
    let _ = app.wait_output(T);
    wait_for("its series to go", Duration::from_secs(20), || {
        query(&prom, "rtm_target_processes").is_empty()
    });
    let gone = exited.elapsed();
    println!(
        "series gone {:.1} s after it exited (grace 4 s)",
        gone.as_secs_f64()
    );
    assert!(gone >= Duration::from_secs(3), "gone too early: {gone:?}");
    let _ = std::fs::remove_dir(procs.parent().unwrap());

    // promtool (2.42) lints the classic text format; the OpenMetrics text is what
    // Prometheus itself asked for and ingested above.
    let (status, om) = get(
        &agent.addr,
        "/metrics",
        "Accept: application/openmetrics-text; version=1.0.0\r\n",
    );
    assert_eq!(status, 200);
    assert!(
        om.ends_with("# EOF\n") && om.contains("# TYPE rtm_build info"),
        "{om}"
    );
    {
        let accept = "";
        let (status, body) = get(&agent.addr, "/metrics", accept);
        assert_eq!(status, 200);
        assert!(!body.contains("# EOF"));
        let mut lint = std::process::Command::new("promtool")
            .args(["check", "metrics"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        lint.stdin
            .take()
            .unwrap()
            .write_all(body.as_bytes())
            .unwrap();
        let o = lint.wait_with_output().unwrap();
        assert!(
            o.status.success(),
            "promtool ({accept:?}): {}{}\n{body}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
    }
    drop(agent.proc);
}

fn the_endpoint_refuses_oversized_and_unexpected_requests() {
    let dir = TempDir::new("agent-http");
    let agent = start_agent(
        &dir,
        17472,
        "[[agent.select]]\ncomm = \"no-such-program\"\n",
    );
    let big = format!("X-Big: {}\r\n", "a".repeat(64 * 1024));
    let (status, _) = get(&agent.addr, "/metrics", &big);
    assert!(
        status == 431 || status == 0,
        "oversized head answered {status}"
    );
    let (status, _) = get(&agent.addr, &format!("/metrics?{}", "a".repeat(4000)), "");
    assert_eq!(status, 414);
    let mut s = TcpStream::connect(&agent.addr).unwrap();
    write!(s, "POST /metrics HTTP/1.0\r\nContent-Length: 4\r\n\r\nabcd").unwrap();
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    assert!(
        out.starts_with("HTTP/1.0 405") || out.starts_with("HTTP/1.1 405"),
        "{out}"
    );
    let (status, _) = get(&agent.addr, "/nope", "");
    assert_eq!(status, 404);
    // Still serving after all that, and nothing traced: nothing matches.
    let (status, body) = get(&agent.addr, "/metrics", "");
    assert_eq!(status, 200);
    assert!(body.contains("rtm_targets{state=\"running\"} 0"), "{body}");
    assert!(!body.contains("rtm_target_info"));
    // Nothing matches: nothing loaded.
    assert!(body.contains("rtm_programs_loaded{} 0"), "{body}");
}

fn a_bad_config_is_refused_with_exit_2_and_the_field_named() {
    let dir = TempDir::new("agent-config");
    for (text, says) in [
        ("[agent]\nlisten = \"127.0.0.1:1\"\n", "agent.select"),
        (
            "[agent]\nbogus = 1\n[[agent.select]]\ncomm = \"x\"\n",
            "bogus",
        ),
        (
            "[agent]\n[[agent.select]]\ncmdline = \"(\"\n",
            "agent.select[0].cmdline",
        ),
        (
            "[agent]\ntop_locks = 0\n[[agent.select]]\ncomm = \"x\"\n",
            "agent.top_locks",
        ),
        ("[agent]\n[[agent.select]]\n", "agent.select[0]"),
        (
            "[agent]\n[[agent.exclude]]\nexe = \"[\"\n[[agent.select]]\ncomm = \"x\"\n",
            "agent.exclude[0].exe",
        ),
    ] {
        let f = dir.join("bad.toml");
        std::fs::write(&f, text).unwrap();
        let out = run(
            Command::new(rtm_bin())
                .args(["agent", "--check-config", "--config"])
                .arg(&f),
            T,
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{text}: {err}");
        assert!(err.contains(says), "{text}: {err}");
    }
    let f = dir.join("good.toml");
    std::fs::write(&f, "[agent]\n[[agent.select]]\ncomm = \"x\"\n").unwrap();
    let out = run(
        Command::new(rtm_bin())
            .args(["agent", "--check-config", "--config"])
            .arg(&f),
        T,
    );
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("valid"));
}

/// A Debian-packaged server nobody here wrote: memcached, loaded by memcslap, found by
/// the agent; its futex waits over the load agree with bpftrace's count of the same
/// futex commands on the same process, taken at the same time.
fn a_packaged_memcached_under_load_agrees_with_bpftrace() {
    for tool in ["memcached", "memcslap", "bpftrace"] {
        let found = Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .output()
            .is_ok_and(|o| o.status.success());
        assert!(found, "{tool} is missing: cargo xtask setup installs it");
    }
    let dir = TempDir::new("agent-memcached");
    let agent = start_agent(
        &dir,
        17473,
        "[[agent.select]]\nexe = \"/usr/bin/memcached\"\n",
    );
    let port = "21473";
    let server = spawn(Command::new("memcached").args([
        "-u",
        "root",
        "-t",
        "4",
        "-p",
        port,
        "-U",
        "0",
        "-l",
        "127.0.0.1",
    ]));
    let metric = |name: &str| -> Option<f64> {
        let (_, body) = get(&agent.addr, "/metrics", "");
        body.lines()
            .find(|l| l.starts_with(&format!("{name}{{target=\"memcached\"")))
            .and_then(|l| l.rsplit(' ').next()?.parse().ok())
    };
    wait_for("memcached found", Duration::from_secs(20), || {
        metric("rtm_target_threads").is_some_and(|t| t >= 4.0)
    });
    // bpftrace counts the futex commands that wait (FUTEX_WAIT, LOCK_PI, WAIT_BITSET,
    // WAIT_REQUEUE_PI, LOCK_PI2) made by memcached's threads, but those that returned at
    // once with EAGAIN (the word had changed): contention mode sees waits from their sleep
    // and runs nothing on system calls (memcached's condition variables make mostly
    // such waits: 85% here).
    let pid = server.pid();
    let script = format!(
        "tracepoint:syscalls:sys_enter_futex /pid == {pid}/ {{ $c = args->op & 127; if ($c == 0 || $c == 6 || $c == 9 || $c == 11 || $c == 13) {{ @w[tid] = 1; }} }} tracepoint:syscalls:sys_exit_futex /@w[tid]/ {{ if (args->ret != -11) {{ @waits = count(); }} delete(@w[tid]); }}"
    );
    let mut bt = spawn(Command::new("bpftrace").args(["-e", &script]));
    let mut bt_out = LineWatch::new(bt.child.stdout.take().unwrap());
    bt_out.wait_for("Attaching", Duration::from_secs(60));
    std::thread::sleep(Duration::from_millis(1500));
    let before = metric("rtm_futex_waits_total").unwrap();
    for test in ["set", "get"] {
        let out = run(
            Command::new("memcslap").args([
                "-s",
                &format!("127.0.0.1:{port}"),
                "-c",
                "32",
                "-e",
                "20000",
                "-t",
                test,
            ]),
            T,
        );
        assert!(out.status.success(), "{out:?}");
    }
    // Every wait sent (a quiet thread's last one within a second), then both stop.
    std::thread::sleep(Duration::from_millis(3000));
    let after = metric("rtm_futex_waits_total").unwrap();
    bt.signal(libc::SIGINT);
    let counted: f64 = bt_out
        .rest(Duration::from_secs(30))
        .iter()
        .find_map(|l| l.strip_prefix("@waits: ")?.trim().parse().ok())
        .expect("bpftrace printed its count");
    let seen = after - before;
    println!("memcached futex waits during the load: rtm-trace agent {seen}, bpftrace {counted}");
    assert!(counted > 300.0, "too little load to compare: {counted}");
    // The two windows differ by a few waits at their edges (idle threads' timed waits).
    let off = (seen - counted).abs();
    println!(
        "memcached futex waits (agent vs bpftrace): {:.3}% off",
        off / counted * 100.0
    );
    assert!(off <= (counted * 0.01).max(10.0), "{seen} vs {counted}");
    let (_, body) = get(&agent.addr, "/metrics", "");
    assert!(body.contains("exe=\"/usr/bin/memcached\""), "{body}");
    assert!(
        body.contains("rtm_events_lost_total{reason=\"ring_full\"} 0"),
        "{body}"
    );
    drop(server);
}

/// 10,000 heap locks and 500 threads named worker-N: the series stay under the cap, the
/// dropped-series counter rises, and the labels are folded (`heap`, `worker-N`), as
/// Prometheus sees them.
fn many_heap_locks_and_numbered_threads_stay_under_the_series_cap() {
    const CAP: f64 = 45.0;
    let dir = TempDir::new("agent-cardinality");
    let agent = start_agent(
        &dir,
        17474,
        "max_series = 45\n[[agent.select]]\ncomm = \"many_locks\"\n",
    );
    let (_prom, prom) = start_prometheus(&dir, 19474, &agent.addr);
    let mut app = spawn(Command::new(workload("many_locks")).args(["500", "10000", "6000"]));
    let mut lines = LineWatch::new(app.child.stdout.take().unwrap());
    lines.wait_for("ready", T);
    wait_for("the target in Prometheus", Duration::from_secs(30), || {
        one(&prom, "rtm_targets{state=\"running\"}") == Some(1.0)
    });
    writeln!(app.child.stdin.as_mut().unwrap(), "go").unwrap();
    wait_for("series dropped", Duration::from_secs(30), || {
        one(&prom, "rtm_series_dropped_total").is_some_and(|d| d > 0.0)
    });
    let first = one(&prom, "rtm_series_dropped_total").unwrap();
    wait_for("more series dropped", Duration::from_secs(30), || {
        one(&prom, "rtm_series_dropped_total").is_some_and(|d| d > first)
    });
    let out = lines.rest(T);
    assert!(
        out.iter().any(|l| l.starts_with("truth acquisitions=")),
        "{out:?}"
    );
    std::thread::sleep(Duration::from_secs(2));
    // Prometheus's own count of what each scrape held.
    let most = one(
        &prom,
        "max_over_time(scrape_samples_scraped{job=\"rtm\"}[5m])",
    )
    .unwrap();
    let dropped = one(&prom, "rtm_series_dropped_total").unwrap();
    println!("most samples in a scrape: {most} (cap {CAP}); series dropped so far: {dropped}");
    assert!(most <= CAP, "{most} samples in a scrape");
    let locks = query(&prom, "rtm_lock_wait_seconds_total");
    let names: Vec<&str> = locks
        .iter()
        .map(|(l, _)| l["lock"].as_str().unwrap())
        .collect();
    println!("lock label values: {names:?}");
    assert!(names.contains(&"heap") && names.len() <= 11, "{names:?}");
    let heap = locks.iter().find(|(l, _)| l["lock"] == "heap").unwrap().1;
    assert!(heap > 0.0);
    let edges = query(&prom, "rtm_waits_for_seconds_total");
    let waiters: Vec<&str> = edges
        .iter()
        .map(|(l, _)| l["waiter"].as_str().unwrap())
        .collect();
    println!("waiter label values: {waiters:?}");
    // Edges come after the locks under the cap: what is there is folded (no thread
    // number survives), and worker-N is there when any worker's edge is.
    assert!(waiters.len() <= 11, "{waiters:?}");
    assert!(
        waiters
            .iter()
            .all(|w| !w.bytes().any(|b| b.is_ascii_digit())),
        "{waiters:?}"
    );
    assert!(
        waiters.iter().all(|w| !w.starts_with("worker-")) || waiters.contains(&"worker-N"),
        "{waiters:?}"
    );
    // No pid, tid or address label outside rtm_target_info.
    for (labels, _) in query(&prom, "{job=\"rtm\", __name__!=\"rtm_target_info\"}") {
        for k in ["pid", "tid", "addr"] {
            assert!(labels.get(k).is_none(), "{labels}");
        }
    }
}

/// A rule with `mpi = true`: the ranks of an Open MPI job, found as mpirun starts them,
/// export their MPI figures per rank; the messages each rank sent are exactly those
/// the ring documents.
fn an_mpi_rule_exports_exact_messages_per_rank() {
    let ring = workload("mpi_ring_openmpi");
    assert!(
        ring.exists(),
        "{} was not built (cargo xtask setup installs Open MPI)",
        ring.display()
    );
    let dir = TempDir::new("agent-mpi");
    let agent = start_agent(
        &dir,
        17475,
        "[[agent.select]]\nexe = \"**/mpi_ring_openmpi\"\nmpi = true\n",
    );
    // Each rank waits after MPI_Init for a file, made once the agent traces all four.
    let go = dir.join("go");
    let job = spawn(
        Command::new("mpirun.openmpi")
            .args(["--allow-run-as-root", "--oversubscribe", "-np", "4"])
            .arg(&ring)
            .args([rtm_tests::mpi::STEPS.to_string(), "0".into()])
            .arg(&go),
    );
    wait_for("the four ranks traced", Duration::from_secs(60), || {
        let (_, body) = get(&agent.addr, "/metrics", "");
        let value = |name: &str| -> f64 {
            body.lines()
                .filter(|l| l.starts_with(name))
                .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                .sum()
        };
        value("rtm_target_processes{") == 4.0 && value("rtm_uprobes_attached") > 0.0
    });
    std::fs::write(&go, "").unwrap();
    let expected = rtm_tests::mpi::expected(4, true);
    let want: Vec<u64> = (0..4)
        .map(|r| {
            expected
                .iter()
                .filter(|((s, _), _)| *s == r)
                .map(|(_, v)| v.0)
                .sum()
        })
        .collect();
    let mut last = String::new();
    let seen = wait_for("each rank's messages sent", Duration::from_secs(60), || {
        let (_, body) = get(&agent.addr, "/metrics", "");
        let got: Vec<Option<u64>> = (0..4)
            .map(|r| {
                body.lines()
                    .find(|l| {
                        l.starts_with("rtm_mpi_messages_sent_total{")
                            && l.contains(&format!("rank=\"{r}\""))
                    })
                    .and_then(|l| l.rsplit(' ').next()?.parse().ok())
            })
            .collect();
        last = format!("{got:?}");
        got.iter().zip(&want).all(|(g, w)| *g == Some(*w))
    });
    println!("messages sent per rank {want:?} seen after {seen:?}");
    let out = job.wait_output(T);
    assert!(out.status.success(), "{out:?} (last seen {last})");
    let (_, body) = get(&agent.addr, "/metrics", "");
    assert!(body.contains("rtm_mpi_calls_total{"), "{body}");
}

/// A rule with `mode = "full"` beside the file's contention mode: its processes are
/// traced in full mode (every pthread call), by a second engine, and their lock counts
/// are exact; a process of another rule stays in contention mode.
fn a_full_mode_rule_counts_every_acquisition() {
    let dir = TempDir::new("agent-full");
    let agent = start_agent(
        &dir,
        17476,
        "[[agent.select]]\ncomm = \"mutex_workload\"\nmode = \"full\"\n",
    );
    let mut app = spawn(Command::new(workload("mutex_workload")).args([
        "--threads",
        "2",
        "--iters",
        "60",
        "--hold-us",
        "200",
        "--private",
        "0",
        "--wait-stdin",
        "--linger-ms",
        "3000",
    ]));
    let mut lines = LineWatch::new(app.child.stdout.take().unwrap());
    lines.wait_for("ready", T);
    let metric = |line_start: &str| -> Option<f64> {
        let (_, body) = get(&agent.addr, "/metrics", "");
        body.lines()
            .find(|l| l.starts_with(line_start))
            .and_then(|l| l.rsplit(' ').next()?.parse().ok())
    };
    wait_for("the target traced", Duration::from_secs(30), || {
        metric("rtm_targets{state=\"running\"}") == Some(1.0)
    });
    writeln!(app.child.stdin.as_mut().unwrap(), "go").unwrap();
    let q = "rtm_lock_acquisitions_total{target=\"mutex_workload\",container_id=\"\",mode=\"full\",lock=\"shared_lock\",kind=\"mutex\"}";
    let mut last = None;
    wait_for(
        "120 acquisitions of shared_lock",
        Duration::from_secs(30),
        || {
            last = metric(q);
            last == Some(120.0)
        },
    );
    assert!(metric("rtm_uprobes_attached").is_some_and(|n| n > 0.0));
    drop(app);
}

/// Hundreds of short-lived targets: each leaves the in-kernel process filter when it
/// exits (it filled up before: 3,797 of 4,096 entries after 16,000 targets), and the
/// programs stay loaded through the churn.
fn short_lived_targets_leave_the_process_filter() {
    let dir = TempDir::new("agent-churn");
    let agent = start_agent(&dir, 17477, "[[agent.select]]\ncomm = \"many_locks\"\n");
    let metric = |line_start: &str| -> Option<f64> {
        let (_, body) = get(&agent.addr, "/metrics", "");
        body.lines()
            .find(|l| l.starts_with(line_start))
            .and_then(|l| l.rsplit(' ').next()?.parse().ok())
    };
    let n = 300;
    for _ in 0..n {
        let mut p = spawn(Command::new(workload("many_locks")).args(["2", "2", "10"]));
        writeln!(p.child.stdin.as_mut().unwrap(), "go").unwrap();
        let _ = p.wait_output(T);
    }
    std::thread::sleep(Duration::from_secs(2));
    let attached = metric("rtm_attached_total").unwrap();
    let entries = metric("rtm_bpf_map_entries{map=\"TRACED_TGIDS\"}").unwrap();
    println!("{n} short-lived targets: {attached} attached; filter entries now {entries}");
    assert!(attached >= n as f64 / 2.0, "{attached}");
    assert!(
        entries <= 2.0,
        "{entries} entries left in the process filter"
    );
    assert_eq!(metric("rtm_programs_loaded"), Some(1.0));
}

fn a_deadlock_in_a_target_shows_as_deadlocked_threads() {
    let dir = TempDir::new("agent-deadlock");
    let agent = start_agent(&dir, 17476, "[[agent.select]]\ncomm = \"deadlock\"\n");
    let mut app = spawn(Command::new(workload("deadlock")).arg("abba"));
    let mut out = rtm_tests::LineWatch::new(app.child.stdout.take().unwrap());
    out.wait_for("ready", Duration::from_secs(20));
    wait_for(
        "the deadlock in the metrics",
        Duration::from_secs(30),
        || {
            get(&agent.addr, "/metrics", "")
                .1
                .lines()
                .any(|l| l.starts_with("rtm_deadlocked_threads{") && l.ends_with(" 2"))
        },
    );
    // The agent said it on its log too, with both threads and both locks.
    drop(app);
    agent.proc.signal(libc::SIGTERM);
    let out = agent.proc.wait_output(Duration::from_secs(30));
    let log = String::from_utf8_lossy(&out.stderr);
    let line = log
        .lines()
        .find(|l| l.contains("deadlock: "))
        .unwrap_or_else(|| panic!("{log}"));
    assert!(line.contains("lock_a") && line.contains("lock_b"), "{line}");
}

/// The hang gauge is about waits that may be contention: a healthy program whose main
/// thread sits in pthread_join for the whole run, beside a thread pool idle on a
/// condition variable (thread_pool.c), keeps it low.
fn the_hang_gauge_stays_low_while_main_sits_in_a_join() {
    let dir = TempDir::new("agent-join");
    let agent = start_agent(&dir, 17477, "[[agent.select]]\ncomm = \"thread_pool\"\n");
    // Main joins once the agent traces it (its join's start is then seen).
    let mut app = spawn(Command::new(workload("thread_pool")).args(["14000", "5000"]));
    let pid = app.pid();
    let mut out = rtm_tests::LineWatch::new(app.child.stdout.take().unwrap());
    out.wait_for("stats_lock", Duration::from_secs(20));
    let gauge = |name: &str| -> Option<f64> {
        get(&agent.addr, "/metrics", "")
            .1
            .lines()
            .find(|l| l.starts_with(&format!("{name}{{")) && l.contains("target=\"thread_pool\""))
            .and_then(|l| l.rsplit(' ').next()?.parse().ok())
    };
    wait_for(
        "the target's waits in the metrics",
        Duration::from_secs(30),
        || gauge("rtm_waits_in_progress").is_some_and(|n| n >= 1.0),
    );
    out.wait_for("joining", Duration::from_secs(20));
    let started = std::time::Instant::now();
    // Main has been in its join (the kernel says so) for seconds.
    std::thread::sleep(Duration::from_secs(5));
    let syscall = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/syscall")).unwrap();
    assert!(syscall.starts_with("202 "), "main is in futex: {syscall}");
    let oldest = gauge("rtm_oldest_wait_in_progress_seconds").expect("the gauge");
    let joined_for = started.elapsed().as_secs_f64();
    println!("oldest wait in progress {oldest} s; main joined for {joined_for:.1} s");
    assert!(
        oldest < 1.0,
        "a join of {joined_for:.1} s shows as a hang: {oldest} s"
    );
    drop(app);
}

/// Connections held open without a request (four, each reopened as soon as the agent
/// drops it: what took every scrape down with `max_scrapes = 4`), then beside them
/// waves of 5,000 new connections opened as fast as they go and held: `/metrics` and
/// `/healthz` are answered all along, each within a second (plus the time the agent's
/// threads and the asking one waited for a CPU meanwhile, on a loaded machine).
fn idle_connections_and_a_flood_never_keep_a_scraper_out() {
    use std::sync::{
        Arc,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    };
    // Room for the flood's sockets in this process.
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: valid out-pointer, then the same struct in.
    unsafe {
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim);
        lim.rlim_cur = lim.rlim_max.min(16_384);
        libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
    }
    let dir = TempDir::new("agent-flood");
    let agent = start_agent(
        &dir,
        17479,
        "max_scrapes = 4\n[[agent.select]]\ncomm = \"no-such-program\"\n",
    );
    let addr: std::net::SocketAddr = agent.addr.parse().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let reopened = Arc::new(AtomicUsize::new(0));
    let holders = {
        let (stop, reopened) = (stop.clone(), reopened.clone());
        std::thread::spawn(move || {
            let open = || {
                let c = TcpStream::connect_timeout(&addr, Duration::from_millis(500)).ok()?;
                c.set_nonblocking(true).ok()?;
                Some(c)
            };
            let mut held: Vec<Option<TcpStream>> = (0..4).map(|_| open()).collect();
            while !stop.load(Ordering::Relaxed) {
                for c in held.iter_mut() {
                    let mut b = [0u8; 64];
                    // Closed by the agent (read 0 or an error): open another at once.
                    let closed = !matches!(
                        c.as_mut().map(|c| c.read(&mut b)),
                        Some(Err(ref e)) if e.kind() == std::io::ErrorKind::WouldBlock
                    );
                    if closed {
                        *c = open();
                        reopened.fetch_add(1, Ordering::Relaxed);
                    }
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        })
    };
    let scrape_all = |phase: &str| {
        let mut slowest = Duration::ZERO;
        for _ in 0..8 {
            for path in ["/metrics", "/healthz"] {
                let kept_off = || run_delay(agent.proc.pid()).unwrap_or_default() + own_run_delay();
                let (t, off) = (Instant::now(), kept_off());
                let (status, _) = get(&agent.addr, path, "");
                let (took, off) = (t.elapsed(), kept_off().saturating_sub(off));
                assert_eq!(status, 200, "{phase}: {path} answered {status}");
                assert!(
                    took < Duration::from_secs(1) + off,
                    "{phase}: {path} took {took:?}, {off:?} of it waiting for a CPU"
                );
                slowest = slowest.max(took);
                if took > Duration::from_millis(100) {
                    println!("{phase}: {path} took {took:?}");
                }
            }
            std::thread::sleep(Duration::from_millis(150));
        }
        println!("{phase}: slowest answer {slowest:?}");
    };
    // Past the head timeout, so the agent has dropped and the holders reopened.
    std::thread::sleep(Duration::from_secs(3));
    scrape_all("four idle connections held");
    let flooded = Arc::new(AtomicUsize::new(0));
    let flood = {
        let (stop, flooded) = (stop.clone(), flooded.clone());
        std::thread::spawn(move || {
            // Waves of 5,000 connections opened as fast as they go and held.
            let mut kept = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                if let Ok(c) = TcpStream::connect_timeout(&addr, Duration::from_millis(200)) {
                    kept.push(c);
                    flooded.fetch_add(1, Ordering::Relaxed);
                }
                if kept.len() >= 5_000 {
                    std::thread::sleep(Duration::from_millis(500));
                    kept.clear();
                }
            }
        })
    };
    std::thread::sleep(Duration::from_millis(500));
    scrape_all("a flood of connections");
    stop.store(true, Ordering::Relaxed);
    holders.join().unwrap();
    flood.join().unwrap();
    println!(
        "idle connections reopened {} times; flood opened {} connections",
        reopened.load(Ordering::Relaxed),
        flooded.load(Ordering::Relaxed)
    );
    assert!(
        reopened.load(Ordering::Relaxed) >= 4,
        "the agent dropped no idle connection"
    );
    assert!(flooded.load(Ordering::Relaxed) > 1_000, "too small a flood");
}
