//! Driving `rtm-trace agent` in a test: start it on a config, scrape it, read one
//! series of a scrape.

use std::{
    io::{Read, Write},
    net::TcpStream,
    process::Command,
    time::{Duration, Instant},
};

use crate::{Proc, TempDir, rtm_bin, spawn};

/// A plain HTTP/1.0 GET; returns (status, body).
pub fn get(addr: &str, path: &str) -> (u16, String) {
    let (status, body) = get_bytes(addr, path, Duration::from_secs(10));
    (status, String::from_utf8_lossy(&body).into_owned())
}

/// A plain HTTP/1.0 GET of a body of any bytes, waiting `timeout` at most for it;
/// returns (status, body).
pub fn get_bytes(addr: &str, path: &str, timeout: Duration) -> (u16, Vec<u8>) {
    let mut s = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    s.set_read_timeout(Some(timeout)).unwrap();
    let _ = write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n");
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    let Some(head_end) = out.windows(4).position(|w| w == b"\r\n\r\n") else {
        return (0, out);
    };
    let head = String::from_utf8_lossy(&out[..head_end]).into_owned();
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (status, out[head_end + 4..].to_vec())
}

/// Waits until `ok`, failing after `timeout`; returns how long it took.
pub fn wait_for(what: &str, timeout: Duration, mut ok: impl FnMut() -> bool) -> Duration {
    let start = Instant::now();
    while !ok() {
        assert!(start.elapsed() < timeout, "{what}: not within {timeout:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
    start.elapsed()
}

/// A running agent and its address.
pub struct Agent {
    /// The agent (killed on drop).
    pub proc: Proc,
    /// Its `host:port`.
    pub addr: String,
}

impl Agent {
    /// Starts an agent on loopback `port` with `extra` appended to its `[agent]`
    /// section, 1 s updates, 2 s rescans and a 4 s grace unless `extra` says otherwise;
    /// returns once it is ready.
    pub fn start(dir: &TempDir, port: u16, extra: &str) -> Self {
        let config = dir.join("agent.toml");
        let addr = format!("127.0.0.1:{port}");
        let mut text = format!("[agent]\nlisten = \"{addr}\"\n");
        for (key, value) in [
            ("update_interval", "1.0"),
            ("discovery_interval", "2.0"),
            ("grace", "4.0"),
        ] {
            if !extra.contains(&format!("{key} =")) {
                text += &format!("{key} = {value}\n");
            }
        }
        std::fs::write(&config, format!("{text}{extra}\n")).unwrap();
        let proc = spawn(
            Command::new(rtm_bin())
                .arg("agent")
                .arg("--config")
                .arg(&config),
        );
        wait_for("the agent's /readyz", Duration::from_secs(20), || {
            TcpStream::connect(&addr).is_ok() && get(&addr, "/readyz").0 == 200
        });
        Self { proc, addr }
    }

    /// The classic text of a scrape.
    pub fn scrape(&self) -> String {
        let (status, body) = get(&self.addr, "/metrics");
        assert_eq!(status, 200, "{body}");
        body
    }
}

/// The samples of a scrape whose line starts with `start` (a name, or a name and the
/// start of its labels): (labels text, value).
pub fn samples(scrape: &str, start: &str) -> Vec<(String, f64)> {
    scrape
        .lines()
        .filter(|l| l.starts_with(start))
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            Some((series.to_owned(), value.parse().ok()?))
        })
        .collect()
}

/// The one sample whose line starts with `start`, if there is one.
pub fn sample(scrape: &str, start: &str) -> Option<f64> {
    let s = samples(scrape, start);
    assert!(s.len() <= 1, "{start}: {s:?}");
    s.first().map(|s| s.1)
}

/// A Prometheus (Debian's) scraping `target` every second, on loopback `port`; killed
/// on drop.
pub struct Prometheus {
    /// The server.
    pub proc: Proc,
    /// Its `host:port`.
    pub addr: String,
}

impl Prometheus {
    /// Starts it with its data in `dir`, job `rtm`; returns once it is ready.
    pub fn start(dir: &TempDir, port: u16, target: &str) -> Self {
        Self::with_rules(dir, port, target, None)
    }

    /// The same, also evaluating the rules of `rules` (a file) every second.
    pub fn with_rules(
        dir: &TempDir,
        port: u16,
        target: &str,
        rules: Option<&std::path::Path>,
    ) -> Self {
        Self::scraping(dir, port, &[target], rules)
    }

    /// The same, scraping every one of `targets` (as many nodes' agents) in job `rtm`.
    pub fn scraping(
        dir: &TempDir,
        port: u16,
        targets: &[&str],
        rules: Option<&std::path::Path>,
    ) -> Self {
        let targets = targets
            .iter()
            .map(|t| format!("'{t}'"))
            .collect::<Vec<_>>()
            .join(", ");
        let config = dir.join("prometheus.yml");
        let rule_files = rules.map_or_else(String::new, |r| {
            format!(
                "  evaluation_interval: 1s\nrule_files: ['{}']\n",
                r.display()
            )
        });
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n{rule_files}scrape_configs:\n  - job_name: rtm\n    static_configs:\n      - targets: [{targets}]\n"
            ),
        )
        .unwrap();
        let addr = format!("127.0.0.1:{port}");
        let proc = spawn(
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
            TcpStream::connect(&addr).is_ok() && get(&addr, "/-/ready").0 == 200
        });
        Self { proc, addr }
    }

    /// An instant query: (labels, value) per series.
    pub fn query(&self, q: &str) -> Vec<(serde_json::Value, f64)> {
        let enc: String = q
            .bytes()
            .map(|b| match b {
                b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'_' | b'.' | b'-' => {
                    (b as char).to_string()
                }
                _ => format!("%{b:02X}"),
            })
            .collect();
        let (status, body) = get(&self.addr, &format!("/api/v1/query?query={enc}"));
        assert_eq!(status, 200, "{q}: {body}");
        let doc: serde_json::Value = serde_json::from_str(&body).unwrap();
        doc["data"]["result"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|r| {
                let v: f64 = r["value"][1].as_str()?.parse().ok()?;
                Some((r["metric"].clone(), v))
            })
            .collect()
    }
}
