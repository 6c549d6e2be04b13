//! The deployment files in deploy/: the systemd unit passes `systemd-analyze verify`,
//! `systemd-analyze security` scores it at most MAX_EXPOSURE, and every system call the
//! agent makes (under strace, tracing in both modes and serving over TLS) is inside its
//! filter; the Kubernetes manifests parse as YAML with the fields the README relies on,
//! and every agent config they carry passes `rtm-trace agent --check-config`, with a web
//! config made as the DaemonSet's comments say.

use std::{
    collections::BTreeSet,
    io::Write,
    path::Path,
    process::Command,
    time::{Duration, Instant},
};

use rtm_tests::{tls::Certs, *};
use rtm_tests::{e2e, harness::E2e};

/// This file's tests, each with what it needs besides the tracer.
pub(crate) const TESTS: &[E2e] = &[
    e2e!(the_systemd_unit_verifies, Tool("systemd-analyze", "systemd")),
    e2e!(the_systemd_unit_keeps_its_exposure_score, Tool("systemd-analyze", "systemd")),
    e2e!(
        the_agents_system_calls_stay_inside_the_units_filter,
        Root,
        Tool("systemd-analyze", "systemd"),
        Tool("strace", "strace"),
        Tool("curl", "curl")
    ),
    e2e!(the_manifests_parse_with_the_fields_the_readme_names, PyYaml),
];

const T: Duration = Duration::from_secs(60);

/// The unit's `systemd-analyze security` score (systemd 252): lower is better; 5.7
/// before the sandboxing of issue 31, 2.4 before sched_setaffinity was let through
/// (the deadlock check makes it; denied, the agent would be killed).
const MAX_EXPOSURE: f64 = 2.5;

/// A copy of the unit that names this build's binary.
fn unit_copy(dir: &TempDir) -> std::path::PathBuf {
    let unit = std::fs::read_to_string(deploy("rtm-trace-agent.service")).unwrap();
    let copy = dir.join("rtm-trace-agent.service");
    std::fs::write(
        &copy,
        unit.replace("/usr/bin/rtm-trace", &rtm_bin().display().to_string()),
    )
    .unwrap();
    copy
}

fn deploy(name: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../deploy")
        .join(name)
}

fn check_config(text: &str) {
    check_config_in(&TempDir::new("deploy-config"), text);
}

/// `--check-config` of `text` as `dir`/agent.toml; asserts it passed.
fn check_config_in(dir: &TempDir, text: &str) -> std::process::Output {
    let f = dir.join("agent.toml");
    std::fs::write(&f, text).unwrap();
    let out = run(
        Command::new(rtm_bin())
            .args(["agent", "--check-config", "--config"])
            .arg(&f),
        T,
    );
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn the_systemd_unit_verifies() {
    // The unit names the installed binary: verify a copy that names this build's.
    let dir = TempDir::new("deploy-unit");
    let unit = std::fs::read_to_string(deploy("rtm-trace-agent.service")).unwrap();
    // Where the package installs the binary and the config (xtask/src/dist.rs).
    assert!(unit.contains("ExecStart=/usr/bin/rtm-trace agent --config /etc/rtm-trace/agent.toml"));
    for line in [
        "NoNewPrivileges=yes",
        "DynamicUser=yes",
        "SystemCallArchitectures=native",
        "IPAddressDeny=any",
        "IPAddressAllow=localhost",
        "UMask=0077",
    ] {
        assert!(unit.lines().any(|l| l == line), "no {line}");
    }
    assert!(!unit.contains("CAP_SYS_RESOURCE") && unit.contains("CapabilityBoundingSet="));
    let copy = unit_copy(&dir);
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&copy)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    // Complaints about other units on this machine are not this unit's.
    let ours: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("rtm-trace-agent"))
        .collect();
    assert!(out.status.success() && ours.is_empty(), "{err}");
    check_config(&std::fs::read_to_string(deploy("agent.toml")).unwrap());
}

/// `systemd-analyze security` (offline: the unit file alone) scores the unit at most
/// MAX_EXPOSURE: a setting dropped, or one loosened, fails here.
fn the_systemd_unit_keeps_its_exposure_score() {
    let dir = TempDir::new("deploy-score");
    let copy = unit_copy(&dir);
    let out = Command::new("systemd-analyze")
        .args(["security", "--offline=yes", "--no-pager"])
        .arg(&copy)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let score: f64 = text
        .lines()
        .find_map(|l| l.split_once("Overall exposure level for rtm-trace-agent.service:"))
        .and_then(|(_, rest)| rest.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no score: {text}{}", String::from_utf8_lossy(&out.stderr)));
    println!("systemd-analyze security: {score} (at most {MAX_EXPOSURE})");
    assert!(
        score <= MAX_EXPOSURE,
        "exposure {score} > {MAX_EXPOSURE}:\n{text}"
    );
}

/// strace and the agent it runs: a failing test kills both (strace killed alone lets
/// its tracee run on).
struct Straced(Proc);

impl Straced {
    /// The processes strace runs (the agent).
    fn tracees(&self) -> Vec<i32> {
        let pid = self.0.pid();
        std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
            .unwrap_or_default()
            .split_whitespace()
            .filter_map(|c| c.parse().ok())
            .collect()
    }

    /// The strace process, its tracee no longer killed on drop.
    fn take(self) -> Proc {
        let me = std::mem::ManuallyDrop::new(self);
        // SAFETY: `me` is never dropped, so its field is read out exactly once.
        unsafe { std::ptr::read(&me.0) }
    }
}

impl Drop for Straced {
    fn drop(&mut self) {
        let pid = self.0.pid();
        let children =
            std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap_or_default();
        for c in children
            .split_whitespace()
            .filter_map(|c| c.parse::<i32>().ok())
        {
            // SAFETY: kill has no memory preconditions; the pid is strace's child.
            unsafe { libc::kill(c, libc::SIGKILL) };
        }
    }
}

/// The system calls in `groups` (`@system-service`, a name), as systemd 252 has them.
fn syscalls(groups: &[&str]) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for g in groups {
        if !g.starts_with('@') {
            out.insert((*g).to_owned());
            continue;
        }
        let o = Command::new("systemd-analyze")
            .args(["syscall-filter", "--no-pager", g])
            .output()
            .unwrap();
        assert!(o.status.success(), "{g}: {o:?}");
        let text = String::from_utf8_lossy(&o.stdout);
        // The group's name, its description (# lines), then its members.
        let members: Vec<&str> = text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .skip(1)
            .collect();
        assert!(!members.is_empty(), "{g}: {text}");
        out.extend(syscalls(&members));
    }
    out
}

/// What the unit's `SystemCallFilter=` lines let through: the first (an allow list)
/// then each in order, `~` taking away.
fn unit_filter(unit: &str) -> BTreeSet<String> {
    let mut allowed = BTreeSet::new();
    for v in unit
        .lines()
        .filter_map(|l| l.strip_prefix("SystemCallFilter="))
    {
        match v.strip_prefix('~') {
            Some(deny) => {
                for s in syscalls(&deny.split_whitespace().collect::<Vec<_>>()) {
                    allowed.remove(&s);
                }
            }
            None => allowed.extend(syscalls(&v.split_whitespace().collect::<Vec<_>>())),
        }
    }
    allowed
}

/// systemd is not PID 1 where the tests run, so the unit's seccomp filter cannot be
/// tried as systemd would apply it: instead the agent runs under `strace -f` while it
/// traces one process in contention mode and one in full mode, serves a scraper over
/// TLS with basic auth, and stops at SIGTERM; every system call it made must be one the
/// filter lets through. The paths it opened are checked against the file-system
/// settings too: nothing under /dev (PrivateDevices), nothing written under /sys or
/// /proc/sys (ProtectKernelTunables, ProtectControlGroups).
fn the_agents_system_calls_stay_inside_the_units_filter() {
    let unit = std::fs::read_to_string(deploy("rtm-trace-agent.service")).unwrap();
    let allowed = unit_filter(&unit);
    // Also the calls made only on some paths, which one run may not take: the deadlock
    // check's CPU pinning and the full-mode reader's catch-up priority (under load).
    for s in [
        "bpf",
        "perf_event_open",
        "read",
        "openat",
        "epoll_wait",
        "sched_setaffinity",
        "setpriority",
        "process_vm_readv",
    ] {
        assert!(allowed.contains(s), "{s} not in {allowed:?}");
    }
    for s in [
        "setuid",
        "setrlimit",
        "chown",
        "mount",
        "ptrace",
        "init_module",
    ] {
        assert!(!allowed.contains(s), "{s} let through");
    }
    let dir = TempDir::new("deploy-strace");
    let certs = Certs::make(&dir.0);
    std::fs::write(
        dir.join("web.yml"),
        format!(
            "{}basic_auth_users:\n  scraper: \"{}\"\n",
            certs.tls_server_config(None),
            bcrypt::hash("pw", 10).unwrap()
        ),
    )
    .unwrap();
    let config = dir.join("agent.toml");
    std::fs::write(
        &config,
        "[agent]\nlisten = \"127.0.0.1:17483\"\nweb_config_file = \"web.yml\"\nupdate_interval = 1.0\ndiscovery_interval = 1.0\ngrace = 2.0\n\
         [[agent.select]]\ncomm = \"mutex_workload\"\ncmdline = \"--threads 3\"\nmode = \"full\"\n\
         [[agent.select]]\ncomm = \"mutex_workload\"\n",
    )
    .unwrap();
    let trace = dir.join("strace.txt");
    let agent = Straced(spawn(
        Command::new("strace")
            .args(["-f", "-qq", "-o"])
            .arg(&trace)
            .arg(rtm_bin())
            .args(["agent", "--config"])
            .arg(&config),
    ));
    let url = |path: &str| format!("https://localhost:17483{path}");
    let ca = certs.ca.display().to_string();
    let curl = |path: &str| {
        let o = Command::new("curl")
            .args(["-s", "--max-time", "5", "--cacert", &ca, "-u", "scraper:pw"])
            .arg(url(path))
            .output()
            .unwrap();
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let wait = |what: &str, ok: &dyn Fn(&str) -> bool| {
        let start = Instant::now();
        loop {
            let m = curl("/metrics");
            if ok(&m) {
                return;
            }
            assert!(start.elapsed() < Duration::from_secs(60), "{what}: {m}");
            std::thread::sleep(Duration::from_millis(300));
        }
    };
    wait("the agent ready", &|_| curl("/readyz").starts_with("ready"));
    // Two workloads at their gates: one the full-mode rule takes, one in contention mode.
    let mut apps: Vec<(Proc, LineWatch)> = ["3", "2"]
        .iter()
        .map(|threads| {
            let mut p = spawn(Command::new(workload("mutex_workload")).args([
                "--threads",
                threads,
                "--iters",
                "400",
                "--hold-us",
                "200",
                "--private",
                "0",
                "--wait-stdin",
                "--linger-ms",
                "2000",
            ]));
            let mut lines = LineWatch::new(p.child.stdout.take().unwrap());
            lines.wait_for("ready", T);
            (p, lines)
        })
        .collect();
    wait("both traced", &|m| {
        m.lines()
            .filter(|l| l.starts_with("rtm_target_info"))
            .count()
            >= 2
    });
    for (p, _) in &mut apps {
        writeln!(p.child.stdin.as_mut().unwrap(), "go").unwrap();
    }
    // Both modes' waits, each series labelled with its mode.
    wait("both modes' waits", &|m| {
        m.contains("mode=\"full\",lock=") && m.contains("mode=\"contention\",lock=")
    });
    for (p, _) in apps {
        assert!(p.wait_output(T).status.success());
    }
    // The agent's SIGTERM (strace's own would detach it and leave it running).
    let tracees = agent.tracees();
    assert_eq!(tracees.len(), 1, "{tracees:?}");
    // SAFETY: kill has no memory preconditions; the pid is the agent strace runs.
    unsafe { libc::kill(tracees[0], libc::SIGTERM) };
    let out = agent.take().wait_output(T);
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && log.contains("every probe detached"),
        "{log}"
    );

    let text = std::fs::read_to_string(&trace).unwrap();
    let mut used = BTreeSet::new();
    let mut outside = Vec::new();
    for line in text.lines() {
        // "PID name(args" (or "<... name resumed>", "--- SIG", "+++ exited").
        let Some((_, call)) = line.split_once(' ') else {
            continue;
        };
        let call = call.trim_start();
        let Some((name, args)) = call.split_once('(') else {
            continue;
        };
        if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
            continue;
        }
        used.insert(name.to_owned());
        if name.starts_with("open") {
            let path = args.split('"').nth(1).unwrap_or("");
            let writes = args.contains("O_WRONLY") || args.contains("O_RDWR");
            let bad = (path.starts_with("/dev/") && path != "/dev/null")
                || (writes && (path.starts_with("/sys") || path.starts_with("/proc/sys")));
            if bad {
                outside.push(line.to_owned());
            }
        }
    }
    // `uretprobe` (x86_64 335, unnamed by strace 6.1) is the kernel's uretprobe
    // trampoline returning through a probed libc function in the agent itself (probes
    // are per file, and the agent maps the libc it probes); seccomp lets it through
    // whatever the filter says (Linux 6.13, "seccomp: passthrough uretprobe system
    // call", and the stable kernels since).
    let denied: Vec<&String> = used
        .iter()
        .filter(|s| !allowed.contains(*s) && *s != "uretprobe" && *s != "syscall_0x14f")
        .collect();
    println!("{} distinct system calls: {used:?}", used.len());
    assert!(
        used.contains("bpf") && used.contains("perf_event_open"),
        "{used:?}"
    );
    assert!(
        denied.is_empty(),
        "outside the unit's SystemCallFilter: {denied:?}"
    );
    assert!(outside.is_empty(), "opens the sandbox refuses: {outside:?}");
}

/// Each YAML document of a deploy/ file as JSON, by Python's yaml module (PyYAML; a
/// test that calls this needs `PyYaml`).
fn yaml_docs(name: &str) -> Vec<Value> {
    let script =
        "import sys, json, yaml\nprint(json.dumps(list(yaml.safe_load_all(open(sys.argv[1])))))";
    let out = Command::new("python3")
        .args(["-c", script])
        .arg(deploy(name))
        .output();
    match out {
        Ok(o) if o.status.success() => serde_json::from_slice(&o.stdout).unwrap(),
        other => panic!("{name}: python3 with PyYAML could not read it: {other:?}"),
    }
}

fn the_manifests_parse_with_the_fields_the_readme_names() {
    let docs = yaml_docs("daemonset.yaml");
    let kind = |k: &str| {
        docs.iter()
            .find(|d| d["kind"] == k)
            .unwrap_or_else(|| panic!("no {k}"))
    };
    // Only what every cluster has: applying it needs no Prometheus Operator.
    for d in &docs {
        let api = d["apiVersion"].as_str().unwrap();
        assert!(api == "v1" || api == "apps/v1", "{api} in daemonset.yaml");
    }
    let ds = kind("DaemonSet");
    let pod = &ds["spec"]["template"]["spec"];
    assert_eq!(pod["hostPID"], true);
    // On every node, whatever its taints; the last evicted.
    assert!(
        pod["tolerations"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["operator"] == "Exists" && t.get("key").is_none()),
        "{}",
        pod["tolerations"]
    );
    assert_eq!(pod["priorityClassName"], "system-node-critical");
    let c = &pod["containers"][0];
    let sc = &c["securityContext"];
    assert_eq!(sc["readOnlyRootFilesystem"], true);
    assert_eq!(sc["privileged"], false);
    assert_eq!(sc["allowPrivilegeEscalation"], false);
    assert_eq!(sc["capabilities"]["drop"][0], "ALL");
    let caps: Vec<&str> = sc["capabilities"]["add"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    for cap in ["BPF", "PERFMON", "SYS_PTRACE"] {
        assert!(caps.contains(&cap), "{caps:?}");
    }
    assert!(!caps.contains(&"SYS_RESOURCE"), "{caps:?}");
    // The probes over TLS, on the paths that need no password.
    for (probe, path) in [("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")] {
        assert_eq!(c[probe]["httpGet"]["path"], path);
        assert_eq!(c[probe]["httpGet"]["scheme"], "HTTPS");
    }
    assert!(
        c["env"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["name"] == "NODE_NAME")
    );
    let mounts: Vec<&str> = c["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["mountPath"].as_str().unwrap())
        .collect();
    assert!(
        mounts.contains(&"/sys/kernel/tracing") && mounts.contains(&"/sys/fs/cgroup"),
        "{mounts:?}"
    );
    // The config directory: the ConfigMap and the web config's Secret, root's only.
    let config = pod["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "config")
        .unwrap();
    assert_eq!(config["projected"]["defaultMode"], 0o400);
    let sources = config["projected"]["sources"].as_array().unwrap();
    assert!(
        sources
            .iter()
            .any(|s| s["configMap"]["name"] == "rtm-trace-agent")
    );
    assert!(
        sources
            .iter()
            .any(|s| s["secret"]["name"] == "rtm-trace-agent-web")
    );
    let annotations = &ds["spec"]["template"]["metadata"]["annotations"];
    assert_eq!(annotations["prometheus.io/port"], "7470");
    assert_eq!(annotations["prometheus.io/scheme"], "https");

    // Its agent.toml, beside a web.yml, tls.crt and tls.key made as the file's comments
    // say (openssl, a bcrypt hash): valid, TLS and basic auth on, no warning.
    let text = std::fs::read_to_string(deploy("daemonset.yaml")).unwrap();
    for said in [
        "openssl req -x509",
        "htpasswd -nbBC 10 prometheus",
        "cert_file: tls.crt",
        "key_file: tls.key",
        "create secret generic rtm-trace-agent-web",
        "--from-file=web.yml --from-file=tls.crt --from-file=tls.key",
    ] {
        assert!(text.contains(said), "daemonset.yaml does not say {said:?}");
    }
    let dir = TempDir::new("deploy-k8s");
    let certs = Certs::make(&dir.0);
    std::fs::copy(&certs.server_crt, dir.join("tls.crt")).unwrap();
    std::fs::copy(&certs.server_key, dir.join("tls.key")).unwrap();
    std::fs::write(
        dir.join("web.yml"),
        format!(
            "tls_server_config:\n  cert_file: tls.crt\n  key_file: tls.key\nbasic_auth_users:\n  prometheus: \"{}\"\n",
            bcrypt::hash("pw", 4).unwrap()
        ),
    )
    .unwrap();
    let agent_toml = kind("ConfigMap")["data"]["agent.toml"].as_str().unwrap();
    let out = check_config_in(&dir, agent_toml);
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains("serving on https://0.0.0.0:7470 (TLS, basic auth (1 user))"),
        "{said}"
    );
    assert!(
        !String::from_utf8_lossy(&out.stderr).contains("warning"),
        "{out:?}"
    );

    // The PodMonitor apart, scraping over TLS with basic auth.
    let pm = yaml_docs("podmonitor.yaml");
    assert_eq!(pm.len(), 1);
    assert_eq!(pm[0]["kind"], "PodMonitor");
    let ep = &pm[0]["spec"]["podMetricsEndpoints"][0];
    assert_eq!(ep["port"], "metrics");
    assert_eq!(ep["scheme"], "https");
    assert_eq!(ep["tlsConfig"]["serverName"], "rtm-trace-agent");
    assert!(ep["tlsConfig"]["ca"]["secret"]["key"].is_string());
    assert!(ep["basicAuth"]["username"]["key"].is_string());
    assert!(ep["basicAuth"]["password"]["key"].is_string());
}
