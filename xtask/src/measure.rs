//! What every benchmark shares: how many rounds (a full run or a CI smoke run), medians
//! with their spread, running a command while watching its peak memory, and reading
//! `key=value` figures from a program's output.

use std::{
    os::unix::process::ExitStatusExt,
    process::{Command, Output, Stdio},
};

use anyhow::{Context, Result, bail};

/// How much to measure.
#[derive(Clone, Copy, Debug)]
pub struct Plan {
    /// Repetitions of each configuration (interleaved).
    pub rounds: usize,
    /// A short run that proves the benchmark works (CI), not one to quote.
    pub smoke: bool,
}

impl Plan {
    /// `full` when measuring, `smoke` size otherwise.
    pub fn pick<T>(&self, full: T, smoke: T) -> T {
        if self.smoke { smoke } else { full }
    }
}

/// Median, minimum and maximum.
#[derive(Clone, Copy, Debug)]
pub struct Spread {
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

impl Spread {
    pub fn of(v: &[f64]) -> Self {
        let mut v = v.to_vec();
        v.sort_by(|a, b| a.total_cmp(b));
        Self {
            median: v[v.len() / 2],
            min: v[0],
            max: v[v.len() - 1],
        }
    }

    /// "12.3 [11.9-13.0]" with `prec` decimals.
    pub fn show(&self, prec: usize) -> String {
        format!(
            "{:.p$} [{:.p$}-{:.p$}]",
            self.median,
            self.min,
            self.max,
            p = prec
        )
    }
}

/// A finished command: its output and peak RSS (KiB, from wait4).
pub struct Run {
    pub out: Output,
    pub max_rss_kib: u64,
}

/// Runs `cmd` to the end, capturing its output, and measures it.
pub fn run(cmd: &mut Command) -> Result<Run> {
    let child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("starting {cmd:?}"))?;
    let pid = child.id() as libc::pid_t;
    // Read the pipes on threads so a chatty child cannot block on them.
    let (mut so, mut se) = (child.stdout, child.stderr);
    let t_out = std::thread::spawn(move || {
        let mut v = Vec::new();
        if let Some(s) = so.as_mut() {
            let _ = std::io::Read::read_to_end(s, &mut v);
        }
        v
    });
    let t_err = std::thread::spawn(move || {
        let mut v = Vec::new();
        if let Some(s) = se.as_mut() {
            let _ = std::io::Read::read_to_end(s, &mut v);
        }
        v
    });
    let mut status = 0;
    // SAFETY: rusage is plain data, filled by wait4 for our own child.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: waiting for our own child with valid out-pointers.
    let r = unsafe { libc::wait4(pid, &mut status, 0, &mut ru) };
    if r < 0 {
        bail!("wait4: {}", std::io::Error::last_os_error());
    }
    let out = Output {
        status: std::process::ExitStatus::from_raw(status),
        stdout: t_out.join().unwrap_or_default(),
        stderr: t_err.join().unwrap_or_default(),
    };
    Ok(Run {
        out,
        max_rss_kib: ru.ru_maxrss as u64,
    })
}

/// Runs `cmd` and fails with its stderr unless it succeeds.
pub fn run_ok(cmd: &mut Command, what: &str) -> Result<Run> {
    let r = run(cmd)?;
    if !r.out.status.success() {
        bail!(
            "{what} failed ({}): {}\n{}",
            r.out.status,
            String::from_utf8_lossy(&r.out.stderr),
            String::from_utf8_lossy(&r.out.stdout)
        );
    }
    Ok(r)
}

/// The number after `key=` in `text`.
pub fn figure(text: &str, key: &str) -> Result<f64> {
    let pat = format!("{key}=");
    text.split_whitespace()
        .find_map(|w| w.strip_prefix(&pat))
        .and_then(|v| v.parse().ok())
        .with_context(|| format!("no {key}= in:\n{text}"))
}

/// Compiles tests/workloads/NAME.c into `dir`; returns the program.
pub fn workload(
    root: &std::path::Path,
    dir: &std::path::Path,
    name: &str,
) -> Result<std::path::PathBuf> {
    let bin = dir.join(name);
    crate::setup::status(
        Command::new("cc")
            .args(["-O2", "-g", "-pthread", "-Wall", "-o"])
            .arg(&bin)
            .arg(root.join(format!("tests/workloads/{name}.c"))),
    )?;
    Ok(bin)
}

/// This machine's name, for table headings.
pub fn host() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .unwrap_or_default()
        .trim()
        .to_owned()
}

/// Waits (up to 20 s) until no rtm-trace process is left: the one that removes a run's
/// probes in the background after it exited, so that the next measurement does not
/// meet them.
pub fn wait_for_probes_gone() {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while std::time::Instant::now() < deadline {
        let busy = std::fs::read_dir("/proc")
            .into_iter()
            .flatten()
            .flatten()
            .any(|e| {
                e.file_name()
                    .to_str()
                    .is_some_and(|p| p.bytes().all(|b| b.is_ascii_digit()))
                    && std::fs::read_to_string(e.path().join("comm"))
                        .is_ok_and(|c| c.trim() == "rtm-trace")
            });
        if !busy {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}
