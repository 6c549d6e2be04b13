//! End-to-end: the agent's endpoint with a web config file (TLS, basic auth, client
//! certificates), scraped by the real Prometheus (Debian's) with `scheme: https`, its
//! `tls_config` and `basic_auth`, and probed with curl (OpenSSL), a TLS stack the agent
//! does not share. Certificates are made at test time by the openssl command. Also: a
//! TLS handshake left unfinished holds no place past the head timeout, a bad web config
//! exits 2 naming the key, and serving beyond loopback unguarded is warned about.

use std::{
    io::{Read, Write},
    net::TcpStream,
    path::Path,
    process::{Command, Output},
    time::{Duration, Instant},
};

use rtm_tests::{tls::Certs, *};
use rtm_tests::{e2e, harness::E2e};

/// This file's tests, each with what it needs besides the tracer.
pub(crate) const TESTS: &[E2e] = &[
    e2e!(prometheus_scrapes_over_tls_with_basic_auth_and_client_certificates, Root),
    e2e!(an_unfinished_tls_handshake_holds_no_place, Root),
    e2e!(a_bad_web_config_is_refused_with_exit_2_and_the_key_named),
    e2e!(serving_beyond_loopback_unguarded_is_warned_about, Root),
];

const T: Duration = Duration::from_secs(120);

const USER: &str = "prometheus";
const PASSWORD: &str = "s3cret:with colon";

fn wait_for(what: &str, timeout: Duration, mut ok: impl FnMut() -> bool) -> Duration {
    let start = Instant::now();
    while !ok() {
        assert!(start.elapsed() < timeout, "{what}: not within {timeout:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
    start.elapsed()
}

/// What curl got: its exit code, the HTTP status (0: none), the response head, the
/// body, and the time the request took by curl's own clock (connection, handshake and
/// answer; not curl's start).
struct Curl {
    code: i32,
    status: u16,
    head: String,
    body: String,
    took: Duration,
}

/// `curl -s URL ARGS`, five seconds at most; `localhost` is 127.0.0.1.
fn curl(url: &str, args: &[&str]) -> Curl {
    let dir = TempDir::new("curl");
    let (head, body) = (dir.join("head"), dir.join("body"));
    let out = Command::new("curl")
        .args(["-s", "--max-time", "5", "--resolve"])
        .arg(format!(
            "localhost:{}:127.0.0.1",
            url.rsplit_once(':')
                .map_or("443", |p| p.1.split('/').next().unwrap())
        ))
        .arg("-D")
        .arg(&head)
        .arg("-o")
        .arg(&body)
        .args(["-w", "%{http_code} %{time_total}"])
        .args(args)
        .arg(url)
        .output()
        .expect("curl (apt-get install curl)");
    let said = String::from_utf8_lossy(&out.stdout);
    let mut w = said.split_whitespace();
    Curl {
        code: out.status.code().unwrap_or(-1),
        status: w.next().and_then(|c| c.parse().ok()).unwrap_or(0),
        took: w
            .next()
            .and_then(|t| t.parse().ok())
            .map_or(Duration::MAX, Duration::from_secs_f64),
        head: std::fs::read_to_string(head).unwrap_or_default(),
        body: std::fs::read_to_string(body).unwrap_or_default(),
    }
}

/// curl's arguments that trust the servers' CA.
fn trusting(certs: &Certs) -> Vec<String> {
    vec!["--cacert".into(), certs.ca.display().to_string()]
}

fn args(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

fn hash(password: &str) -> String {
    bcrypt::hash(password, 10).unwrap()
}

/// Writes the agent's config and web config; starts it and waits for `/readyz` over
/// TLS (`client`: curl's arguments for a client certificate, when one is required).
/// Returns it and its log (kept read).
fn start_agent(
    dir: &TempDir,
    name: &str,
    port: u16,
    web: &str,
    select: &str,
    certs: &Certs,
    client: &[String],
) -> (Proc, LineWatch) {
    let web_file = dir.join(&format!("{name}-web.yml"));
    std::fs::write(&web_file, web).unwrap();
    let config = dir.join(&format!("{name}.toml"));
    std::fs::write(
        &config,
        format!(
            "[agent]\nlisten = \"127.0.0.1:{port}\"\nweb_config_file = \"{name}-web.yml\"\nupdate_interval = 1.0\ndiscovery_interval = 2.0\ngrace = 4.0\n{select}\n"
        ),
    )
    .unwrap();
    let mut p = spawn(
        Command::new(rtm_bin())
            .arg("agent")
            .arg("--config")
            .arg(&config),
    );
    let mut log = LineWatch::new(p.child.stderr.take().unwrap());
    let line = log.wait_for("serving", Duration::from_secs(20));
    assert!(
        line.contains(&format!("https://127.0.0.1:{port}")),
        "{line}"
    );
    let url = format!("https://localhost:{port}/readyz");
    let mut a = trusting(certs);
    a.extend_from_slice(client);
    wait_for(
        &format!("{name}'s /readyz"),
        Duration::from_secs(20),
        || curl(&url, &args(&a)).status == 200,
    );
    // On loopback, guarded: no warning.
    assert!(
        log.try_wait_for("warning", Duration::from_millis(300))
            .is_none(),
        "{:?}",
        log.seen
    );
    (p, log)
}

fn get(addr: &str, path: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let _ = write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n");
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    let text = String::from_utf8_lossy(&out).into_owned();
    let status = text
        .strip_prefix("HTTP/1.")
        .and_then(|t| t.split_whitespace().nth(1))
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (
        status,
        text.split_once("\r\n\r\n").map_or("", |b| b.1).to_owned(),
    )
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
    let (status, body) = get(prom, &format!("/api/v1/query?query={enc}"));
    assert_eq!(status, 200, "{q}: {body}");
    let doc: Value = serde_json::from_str(&body).unwrap();
    doc["data"]["result"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["metric"].clone(),
                r["value"][1].as_str().unwrap().parse().unwrap(),
            )
        })
        .collect()
}

/// Each scrape target's job, health and last error.
fn targets(prom: &str) -> Vec<(String, String, String)> {
    let (status, body) = get(prom, "/api/v1/targets");
    assert_eq!(status, 200, "{body}");
    let doc: Value = serde_json::from_str(&body).unwrap();
    doc["data"]["activeTargets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["labels"]["job"].as_str().unwrap_or("").to_owned(),
                t["health"].as_str().unwrap_or("").to_owned(),
                t["lastError"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect()
}

/// The real Prometheus scrapes two agents: one with TLS and basic auth, one that
/// requires a client certificate. It gets the workload's series with the right password
/// and its client certificate, and nothing with a wrong password, over plain HTTP, or
/// without a certificate; curl (OpenSSL) is refused the same way.
fn prometheus_scrapes_over_tls_with_basic_auth_and_client_certificates() {
    let dir = TempDir::new("agent-tls");
    let certs = Certs::make(&dir.0);
    let auth_web = format!(
        "{}basic_auth_users:\n  {USER}: \"{}\"\n  other: \"{}\"\n",
        certs.tls_server_config(None),
        hash(PASSWORD),
        hash("another one")
    );
    let _agent = start_agent(
        &dir,
        "auth",
        17480,
        &auth_web,
        "[[agent.select]]\ncomm = \"mutex_workload\"\n",
        &certs,
        &[],
    );
    let client = vec![
        "--cert".to_owned(),
        certs.client_crt.display().to_string(),
        "--key".to_owned(),
        certs.client_key.display().to_string(),
    ];
    let _mtls = start_agent(
        &dir,
        "mtls",
        17482,
        &certs.tls_server_config(Some("RequireAndVerifyClientCert")),
        "[[agent.select]]\ncomm = \"no-such-program\"\n",
        &certs,
        &client,
    );

    // curl first: refused without the password, with a wrong one, over plain HTTP.
    let ca = trusting(&certs);
    let url = "https://localhost:17480/metrics";
    let none = curl(url, &args(&ca));
    assert_eq!(none.status, 401, "{}", none.head);
    assert!(
        none.head
            .to_ascii_lowercase()
            .contains("www-authenticate: basic"),
        "{}",
        none.head
    );
    assert!(!none.body.contains("rtm_"), "{}", none.body);
    let mut wrong = ca.clone();
    wrong.extend(["-u".into(), format!("{USER}:not it")]);
    assert_eq!(curl(url, &args(&wrong)).status, 401);
    let mut unknown = ca.clone();
    unknown.extend(["-u".into(), format!("nobody:{PASSWORD}")]);
    assert_eq!(curl(url, &args(&unknown)).status, 401);
    let mut good = ca.clone();
    good.extend(["-u".into(), format!("{USER}:{PASSWORD}")]);
    let first = curl(url, &args(&good));
    assert_eq!(first.status, 200, "{}", first.head);
    assert!(first.body.contains("rtm_targets"), "{}", first.body);
    let again = curl(url, &args(&good));
    assert_eq!(again.status, 200);
    println!(
        "first authenticated scrape {:?} (a bcrypt check), the next {:?} (remembered)",
        first.took, again.took
    );
    // The probes' paths need no password.
    assert_eq!(
        curl("https://localhost:17480/healthz", &args(&ca)).status,
        200
    );
    // A server certificate the client does not trust; plain HTTP to the TLS port.
    let untrusted = curl(url, &["-u", &format!("{USER}:{PASSWORD}")]);
    assert!(
        untrusted.code != 0 && untrusted.status == 0,
        "rc {}",
        untrusted.code
    );
    let plain = curl("http://127.0.0.1:17480/metrics", &[]);
    assert!(
        plain.status != 200 && !plain.body.contains("rtm_"),
        "{}",
        plain.body
    );
    let (status, body) = get("127.0.0.1:17480", "/metrics");
    assert!(status == 0 && !body.contains("rtm_"), "{status} {body}");

    // Mutual TLS: no certificate, or one from a CA the agent does not know, ends the
    // handshake; the right one is served.
    let mtls = "https://localhost:17482/metrics";
    let no_cert = curl(mtls, &args(&ca));
    assert!(
        no_cert.code != 0 && no_cert.status == 0,
        "rc {}",
        no_cert.code
    );
    let mut stranger = ca.clone();
    stranger.extend([
        "--cert".into(),
        certs.stranger_crt.display().to_string(),
        "--key".into(),
        certs.stranger_key.display().to_string(),
    ]);
    let s = curl(mtls, &args(&stranger));
    assert!(s.code != 0 && s.status == 0, "rc {}", s.code);
    let mut with_cert = ca.clone();
    with_cert.extend_from_slice(&client);
    let m = curl(mtls, &args(&with_cert));
    assert_eq!(m.status, 200, "{}", m.head);
    assert!(m.body.contains("rtm_targets"));

    // Prometheus: five jobs, two of which may scrape.
    let ca_file = certs.ca.display();
    let (crt, key) = (certs.client_crt.display(), certs.client_key.display());
    let prom_config = dir.join("prometheus.yml");
    std::fs::write(
        &prom_config,
        format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n\
             - job_name: tls\n  scheme: https\n  tls_config: {{ca_file: '{ca_file}', server_name: localhost}}\n  basic_auth: {{username: {USER}, password: '{PASSWORD}'}}\n  static_configs: [{{targets: ['127.0.0.1:17480']}}]\n\
             - job_name: wrong-password\n  scheme: https\n  tls_config: {{ca_file: '{ca_file}', server_name: localhost}}\n  basic_auth: {{username: {USER}, password: 'guess'}}\n  static_configs: [{{targets: ['127.0.0.1:17480']}}]\n\
             - job_name: plain\n  static_configs: [{{targets: ['127.0.0.1:17480']}}]\n\
             - job_name: mtls\n  scheme: https\n  tls_config: {{ca_file: '{ca_file}', server_name: localhost, cert_file: '{crt}', key_file: '{key}'}}\n  static_configs: [{{targets: ['127.0.0.1:17482']}}]\n\
             - job_name: mtls-no-cert\n  scheme: https\n  tls_config: {{ca_file: '{ca_file}', server_name: localhost}}\n  static_configs: [{{targets: ['127.0.0.1:17482']}}]\n"
        ),
    )
    .unwrap();
    let prom = "127.0.0.1:17484";
    let _prom = spawn(
        Command::new("prometheus")
            .arg(format!("--config.file={}", prom_config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("tsdb").display()
            ))
            .arg(format!("--web.listen-address={prom}"))
            .arg("--log.level=warn"),
    );
    wait_for("Prometheus ready", Duration::from_secs(30), || {
        TcpStream::connect(prom).is_ok() && get(prom, "/-/ready").0 == 200
    });

    // The workload, waiting at its gate, found and scraped over TLS with basic auth.
    let mut app = spawn(Command::new(workload("mutex_workload")).args([
        "--threads",
        "2",
        "--iters",
        "60",
        "--hold-us",
        "1000",
        "--private",
        "0",
        "--wait-stdin",
        "--linger-ms",
        "4000",
    ]));
    let mut lines = LineWatch::new(app.child.stdout.take().unwrap());
    lines.wait_for("ready", T);
    let pid = app.pid().to_string();
    wait_for(
        "the workload in Prometheus",
        Duration::from_secs(30),
        || {
            query(prom, "rtm_target_info{job=\"tls\"}")
                .iter()
                .any(|(l, _)| l["pid"] == pid.as_str())
        },
    );
    writeln!(app.child.stdin.as_mut().unwrap(), "go").unwrap();
    wait_for("the workload's lock waits", Duration::from_secs(30), || {
        query(
            prom,
            "rtm_lock_wait_seconds_total{job=\"tls\",lock=\"shared_lock\"}",
        )
        .iter()
        .any(|(_, v)| *v > 0.0)
    });
    // A scrape that ran out of its 1 s (a bcrypt check on a loaded machine) says
    // nothing of the credentials: each job's last one must have been answered.
    wait_for("every job's scrape answered", Duration::from_secs(60), || {
        let t = targets(prom);
        t.len() == 5
            && t.iter().all(|(_, health, err)| {
                health != "unknown" && !err.contains("context deadline exceeded")
            })
    });
    let t = targets(prom);
    for (job, health, err) in &t {
        println!("{job}: {health} {err}");
    }
    let health = |job: &str| {
        t.iter()
            .find(|(j, _, _)| j == job)
            .map(|(_, h, e)| (h.as_str(), e.as_str()))
            .unwrap()
    };
    assert_eq!(health("tls").0, "up");
    assert_eq!(health("mtls").0, "up");
    let (h, e) = health("wrong-password");
    assert!(h == "down" && e.contains("401"), "{h}: {e}");
    assert_eq!(health("plain").0, "down");
    assert_eq!(health("mtls-no-cert").0, "down");
    for (job, up) in [
        ("tls", 1.0),
        ("mtls", 1.0),
        ("wrong-password", 0.0),
        ("plain", 0.0),
        ("mtls-no-cert", 0.0),
    ] {
        let r = query(prom, &format!("up{{job=\"{job}\"}}"));
        assert_eq!(r.len(), 1, "{job}: {r:?}");
        assert_eq!(r[0].1, up, "{job}");
    }
    // Only the jobs let in have the agents' series.
    assert!(!query(prom, "rtm_targets{job=\"mtls\"}").is_empty());
    for job in ["wrong-password", "plain", "mtls-no-cert"] {
        assert!(
            query(prom, &format!("rtm_targets{{job=\"{job}\"}}")).is_empty(),
            "{job}"
        );
    }
    let _ = app.wait_output(T);
}

/// Connections that open a TLS handshake and never finish it, or never start it, are
/// dropped within the head timeout (2 s); 300 of them held at once (more than the
/// connection cap) do not keep a scraper out, and neither does a stream of wrong
/// passwords (each a bcrypt check).
fn an_unfinished_tls_handshake_holds_no_place() {
    let dir = TempDir::new("agent-tls-idle");
    let certs = Certs::make(&dir.0);
    let web = format!(
        "{}basic_auth_users:\n  {USER}: \"{}\"\n",
        certs.tls_server_config(None),
        hash(PASSWORD)
    );
    let _agent = start_agent(
        &dir,
        "idle",
        17481,
        &web,
        "max_scrapes = 4\n[[agent.select]]\ncomm = \"no-such-program\"\n",
        &certs,
        &[],
    );
    // The first bytes of a ClientHello: a handshake record of 512 bytes, one given.
    let partial = [0x16u8, 0x03, 0x01, 0x02, 0x00, 0x01];
    let open = |send: bool| {
        let mut s = TcpStream::connect("127.0.0.1:17481").unwrap();
        if send {
            s.write_all(&partial).unwrap();
        }
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s
    };
    // Three that stall mid-handshake, three that never start one: each dropped at
    // the head timeout.
    let start = Instant::now();
    let closers: Vec<_> = (0..6)
        .map(|i| {
            let sent = i % 2 == 0;
            let mut s = open(sent);
            std::thread::spawn(move || {
                let mut b = [0u8; 64];
                // Closed: 0 bytes, a reset, or an alert and then 0.
                loop {
                    match s.read(&mut b) {
                        Ok(0) | Err(_) => break,
                        Ok(_) => {}
                    }
                }
                (sent, start.elapsed())
            })
        })
        .collect();
    for c in closers {
        let (sent, after) = c.join().unwrap();
        println!(
            "{} dropped after {after:?}",
            if sent {
                "a stalled handshake"
            } else {
                "a silent connection"
            }
        );
        assert!(
            (Duration::from_millis(1500)..Duration::from_millis(3500)).contains(&after),
            "dropped after {after:?} (sent a partial handshake: {sent})"
        );
    }
    // 300 stalled handshakes (more than the connection cap), held while a scraper asks.
    let held: Vec<TcpStream> = (0..300).map(|_| open(true)).collect();
    let mut good = trusting(&certs);
    good.extend(["-u".into(), format!("{USER}:{PASSWORD}")]);
    let mut slowest = Duration::ZERO;
    for _ in 0..5 {
        for path in ["/metrics", "/healthz"] {
            let c = curl(&format!("https://localhost:17481{path}"), &args(&good));
            assert_eq!(c.status, 200, "{path}: rc {}", c.code);
            assert!(c.took < Duration::from_secs(1), "{path} took {:?}", c.took);
            slowest = slowest.max(c.took);
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    println!("with 300 stalled handshakes held, the slowest answer took {slowest:?}");
    drop(held);

    // 400 wrong passwords, 50 at a time, while the scraper (its password remembered)
    // asks: every wrong one refused (401, or 503 while too many checks are under way),
    // the scraper answered within a second.
    let url = "https://localhost:17481/metrics";
    let mut wrong = std::process::Command::new("curl");
    wrong
        .args([
            "-s",
            "--parallel",
            "--parallel-max",
            "50",
            "--max-time",
            "20",
        ])
        .args(["--resolve", "localhost:17481:127.0.0.1", "--cacert"])
        .arg(&certs.ca)
        .args(["-u", "prometheus:wrong", "-w", "%{http_code}\n"]);
    for _ in 0..400 {
        wrong.args(["-o", "/dev/null", url]);
    }
    let flood = spawn(&mut wrong);
    let mut slowest = Duration::ZERO;
    for _ in 0..10 {
        for path in ["/metrics", "/healthz"] {
            let c = curl(&format!("https://localhost:17481{path}"), &args(&good));
            assert_eq!(c.status, 200, "{path}: rc {}", c.code);
            assert!(c.took < Duration::from_secs(1), "{path} took {:?}", c.took);
            slowest = slowest.max(c.took);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let out = flood.wait_output(T);
    let codes = String::from_utf8_lossy(&out.stdout);
    let mut counts = std::collections::BTreeMap::new();
    for c in codes.lines() {
        *counts.entry(c.to_owned()).or_insert(0) += 1;
    }
    println!("with wrong passwords streaming in ({counts:?}), the slowest answer took {slowest:?}");
    assert_eq!(counts.values().sum::<i32>(), 400, "{codes}");
    assert!(
        counts.keys().all(|c| c == "401" || c == "503"),
        "{counts:?}"
    );
    assert!(counts.get("401").is_some_and(|&n| n > 0), "{counts:?}");
}

fn check_config(dir: &Path, config: &str, web: Option<&str>, listen: Option<&str>) -> Output {
    let f = dir.join("agent.toml");
    std::fs::write(&f, config).unwrap();
    let mut cmd = Command::new(rtm_bin());
    cmd.args(["agent", "--check-config", "--config"]).arg(&f);
    if let Some(w) = web {
        let wf = dir.join("web.yml");
        std::fs::write(&wf, w).unwrap();
        cmd.arg("--web.config.file").arg(&wf);
    }
    if let Some(l) = listen {
        cmd.args(["--listen", l]);
    }
    run(&mut cmd, T)
}

/// A web config that is wrong is refused before anything runs: exit 2, the key named.
fn a_bad_web_config_is_refused_with_exit_2_and_the_key_named() {
    let dir = TempDir::new("agent-web-config");
    let certs = Certs::make(&dir.0);
    let agent = "[agent]\n[[agent.select]]\ncomm = \"x\"\n";
    let tls = certs.tls_server_config(None);
    for (web, says) in [
        (
            "tls_server_config:\n  cert_file: /nonexistent/agent.crt\n  key_file: k\n".to_owned(),
            "tls_server_config.cert_file: cannot read /nonexistent/agent.crt",
        ),
        (
            format!(
                "tls_server_config:\n  cert_file: {}\n  key_file: /nonexistent.key\n",
                certs.server_crt.display()
            ),
            "tls_server_config.key_file: cannot read",
        ),
        (
            format!(
                "tls_server_config:\n  cert_file: {}\n  key_file: {}\n",
                certs.server_crt.display(),
                certs.client_key.display()
            ),
            "tls_server_config.key_file",
        ),
        (
            "basic_auth_users:\n  prometheus: hunter2\n".to_owned(),
            "basic_auth_users.prometheus: not a bcrypt hash",
        ),
        (
            format!("{tls}cipher_suites: []\n"),
            "unknown field `cipher_suites`",
        ),
        (format!("{tls}  http2: true\n"), "unknown field `http2`"),
        (
            format!("{tls}  client_auth_type: RequireAndVerifyClientCert\n"),
            "tls_server_config.client_ca_file: missing",
        ),
        (
            format!("{tls}  client_auth_type: RequireAnyClientCert\n"),
            "tls_server_config.client_auth_type",
        ),
    ] {
        let out = check_config(&dir.0, agent, Some(&web), None);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{web}: {err}");
        assert!(
            err.contains(says) && err.contains("--web-config-file"),
            "{web}: {err}"
        );
        assert_eq!(err.lines().count(), 1, "{err}");
    }
    // Named by the config file: its path is taken from the file's directory.
    let out = check_config(
        &dir.0,
        "[agent]\nweb_config_file = \"missing.yml\"\n[[agent.select]]\ncomm = \"x\"\n",
        None,
        None,
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("agent.web_config_file")
            && err.contains(&dir.join("missing.yml").display().to_string()),
        "{err}"
    );
    // A good one says what guards the endpoint.
    let web = format!(
        "{tls}basic_auth_users:\n  {USER}: \"{}\"\n",
        bcrypt::hash("x", 4).unwrap()
    );
    let out = check_config(&dir.0, agent, Some(&web), None);
    let said = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(
        said.contains("https://127.0.0.1:7470 (TLS, basic auth (1 user))"),
        "{said}"
    );
}

/// Serving beyond loopback without TLS and auth is said in one line of the log, at
/// `--check-config` and when the agent starts; guarded, it is not.
fn serving_beyond_loopback_unguarded_is_warned_about() {
    let dir = TempDir::new("agent-web-warning");
    let certs = Certs::make(&dir.0);
    let agent = "[agent]\n[[agent.select]]\ncomm = \"no-such-program\"\n";
    let warned = |out: &Output| {
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(0), "{err}");
        err.lines()
            .find(|l| l.contains("warning"))
            .map(str::to_owned)
    };
    let w = warned(&check_config(&dir.0, agent, None, Some("0.0.0.0:17483"))).expect("a warning");
    assert!(
        w.contains("0.0.0.0:17483") && w.contains("without TLS or basic auth"),
        "{w}"
    );
    assert_eq!(
        warned(&check_config(&dir.0, agent, None, None)),
        None,
        "loopback"
    );
    let tls_only = certs.tls_server_config(None);
    let w = warned(&check_config(
        &dir.0,
        agent,
        Some(&tls_only),
        Some("0.0.0.0:17483"),
    ))
    .expect("a warning");
    assert!(
        w.contains("without basic auth or a required client certificate"),
        "{w}"
    );
    let guarded = format!(
        "{tls_only}basic_auth_users:\n  {USER}: \"{}\"\n",
        bcrypt::hash("x", 4).unwrap()
    );
    assert_eq!(
        warned(&check_config(
            &dir.0,
            agent,
            Some(&guarded),
            Some("0.0.0.0:17483")
        )),
        None
    );
    let mtls = certs.tls_server_config(Some("RequireAndVerifyClientCert"));
    assert_eq!(
        warned(&check_config(
            &dir.0,
            agent,
            Some(&mtls),
            Some("0.0.0.0:17483")
        )),
        None
    );

    // The agent itself says it when it starts.
    let f = dir.join("agent.toml");
    std::fs::write(&f, agent).unwrap();
    let mut p = spawn(
        Command::new(rtm_bin())
            .args(["agent", "--listen", "0.0.0.0:17483", "--config"])
            .arg(&f),
    );
    let mut log = LineWatch::new(p.child.stderr.take().unwrap());
    log.wait_for("serving", Duration::from_secs(20));
    let w = log.wait_for("warning", Duration::from_secs(5));
    assert!(
        w.contains("beyond loopback") && w.contains("without TLS or basic auth"),
        "{w}"
    );
    assert_eq!(get("127.0.0.1:17483", "/healthz").0, 200);
}
