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
    let mut s = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let _ = write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n");
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
