//! Reading pprof profiles with a real client: Go's `go tool pprof` (Debian's golang-go,
//! which `cargo xtask setup` installs).

use std::{
    path::{Path, PathBuf},
    process::Command,
    time::Duration,
};

use crate::{TempDir, run};

/// `go`; a test that calls this needs `Tool("go", "golang-go")`.
pub fn go() -> PathBuf {
    crate::harness::on_path("go").expect("`go` is missing (cargo xtask setup installs golang-go)")
}

/// `go tool pprof -top -sample_index=INDEX file`'s output.
pub fn pprof_top(go: &Path, dir: &TempDir, file: &Path, index: &str) -> String {
    let out = run(
        Command::new(go)
            .args(["tool", "pprof", "-top", "-nodefraction=0"])
            .arg(format!("-sample_index={index}"))
            .arg(file)
            .env("GOCACHE", dir.join("go-cache"))
            .env("HOME", dir.join("home")),
        Duration::from_secs(120),
    );
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "go tool pprof: {}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// The total pprof prints (`... of 472.21ms total`), in its base unit (ns for times).
pub fn total(top: &str) -> f64 {
    let line = top
        .lines()
        .find(|l| l.starts_with("Showing nodes accounting for"))
        .unwrap_or_else(|| panic!("no total in {top}"));
    let v = line
        .rsplit_once(" of ")
        .and_then(|(_, t)| t.strip_suffix(" total"))
        .unwrap_or_else(|| panic!("no total in {line}"));
    parse_value(v)
}

/// A value as pprof prints it (`12.50ms`, `3.2s`, `417`), in its base unit (ns for
/// times).
pub fn parse_value(v: &str) -> f64 {
    let split = v
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(v.len());
    let (n, unit) = v.split_at(split);
    let n: f64 = n.parse().unwrap_or_else(|_| panic!("value {v}"));
    n * match unit {
        "" | "ns" => 1.0,
        "us" => 1e3,
        "ms" => 1e6,
        "s" => 1e9,
        "mins" => 60e9,
        u => panic!("unit {u} in {v}"),
    }
}

/// The cumulative value of function `func` in a `-top` listing (0 when not listed).
pub fn cum(top: &str, func: &str) -> f64 {
    top.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() >= 6 && f[5..].join(" ") == func).then(|| parse_value(f[3]))
        })
        .next()
        .unwrap_or(0.0)
}
