//! Harness for rtm-trace's end-to-end tests: finds the binary and the workloads, runs
//! them with RAII cleanup, and parses what they print.
//!
//! The tests load real eBPF programs, so most need root; each declares what it needs
//! in its file's `TESTS` table, and [`harness`] reports one that cannot run here as
//! ignored, with the reason (in CI, CI=true, it fails).

use std::{
    collections::HashMap,
    io::{BufRead, BufReader, Read},
    path::{Path, PathBuf},
    process::{Child, Command, Output, Stdio},
    sync::mpsc,
    thread,
    time::{Duration, Instant},
};

pub use serde_json::Value;

pub mod agent;
pub mod harness;
pub mod mixin;
pub mod mpi;
pub mod pprof;
pub mod tls;

/// The rtm-trace binary: $RTM_TRACE_BIN (set by `cargo xtask test`), else target/debug.
pub fn rtm_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("RTM_TRACE_BIN") {
        return p.into();
    }
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/debug/rtm-trace");
    assert!(
        p.exists(),
        "{} is missing: build it first (cargo xtask test does)",
        p.display()
    );
    p
}

/// A compiled workload.
pub fn workload(name: &str) -> PathBuf {
    Path::new(env!("RTM_WORKLOADS")).join(name)
}

/// Whether time comparisons against the workloads' own clocks hold here: not in an
/// emulated guest (`cargo xtask vm` sets RTM_TEST_EMULATED), where each uprobe trap
/// costs ~100x what it costs on hardware, inside the workload's clock but outside the
/// probes'. Counts are checked there all the same; the host's run checks the times.
pub fn times_comparable(what: &str) -> bool {
    if std::env::var_os("RTM_TEST_EMULATED").is_some() {
        println!("{what}: time comparison left to the host's run (emulated CPUs)");
        return false;
    }
    true
}

/// How long the threads of process `pid` have been runnable but not running (each one's
/// schedstat run_delay, summed): time a loaded machine kept it off the CPUs. None once
/// it has exited, or where the kernel keeps no schedstat.
pub fn run_delay(pid: u32) -> Option<Duration> {
    let mut sum = None;
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).ok()? {
        let Ok(task) = task else { continue };
        let Ok(stat) = std::fs::read_to_string(task.path().join("schedstat")) else {
            continue;
        };
        if let Some(ns) = stat
            .split_whitespace()
            .nth(1)
            .and_then(|v| v.parse::<u64>().ok())
        {
            *sum.get_or_insert(0) += ns;
        }
    }
    sum.map(Duration::from_nanos)
}

/// How long the calling thread has been runnable but not running (its schedstat
/// run_delay); zero where the kernel keeps none.
pub fn own_run_delay() -> Duration {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(Duration::ZERO, Duration::from_nanos)
}

/// A child process killed and reaped on drop, so a failing test leaves nothing behind.
pub struct Proc {
    /// The child.
    pub child: Child,
}

impl Proc {
    /// Its pid.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends a signal.
    pub fn signal(&self, sig: i32) {
        // SAFETY: sending a signal to our own child.
        unsafe { libc::kill(self.pid() as i32, sig) };
    }

    /// Waits up to `timeout` for exit and collects stdout/stderr, with the longest
    /// [`run_delay`] its threads had (sampled while it ran, so the last few
    /// milliseconds' and those of threads gone before the last sample may be missing).
    pub fn wait_output_and_run_delay(self, timeout: Duration) -> (Output, Duration) {
        let mut delay = Duration::ZERO;
        let out = self.wait_output_sampling(timeout, |pid| {
            delay = delay.max(run_delay(pid).unwrap_or_default());
        });
        (out, delay)
    }

    /// Waits up to `timeout` for exit and collects stdout/stderr.
    pub fn wait_output(self, timeout: Duration) -> Output {
        self.wait_output_sampling(timeout, |_| {})
    }

    /// Waits up to `timeout` for exit, calling `sample` with its pid as it runs, and
    /// collects stdout/stderr, read as they come: a child that fills a pipe nobody reads
    /// (64 KiB: interval summaries of a run made long by a loaded machine) would block
    /// in its write and never exit.
    fn wait_output_sampling(mut self, timeout: Duration, mut sample: impl FnMut(u32)) -> Output {
        fn drain(pipe: Option<impl Read + Send + 'static>) -> thread::JoinHandle<Vec<u8>> {
            thread::spawn(move || {
                let mut all = Vec::new();
                if let Some(mut p) = pipe {
                    let _ = p.read_to_end(&mut all);
                }
                all
            })
        }
        let stdout = drain(self.child.stdout.take());
        let stderr = drain(self.child.stderr.take());
        let deadline = Instant::now() + timeout;
        while self.child.try_wait().expect("try_wait").is_none() {
            sample(self.pid());
            assert!(
                Instant::now() < deadline,
                "process {} did not exit within {timeout:?}",
                self.pid()
            );
            thread::sleep(Duration::from_millis(10));
        }
        let mut child =
            std::mem::replace(&mut self.child, Command::new("true").spawn().expect("true"));
        let status = child.wait().expect("wait");
        Output {
            status,
            stdout: stdout.join().expect("stdout"),
            stderr: stderr.join().expect("stderr"),
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Spawns a command with piped stdio.
pub fn spawn(cmd: &mut Command) -> Proc {
    let child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawning {cmd:?}: {e}"));
    Proc { child }
}

/// Runs a command to completion with a timeout.
pub fn run(cmd: &mut Command, timeout: Duration) -> Output {
    let mut p = spawn(cmd);
    drop(p.child.stdin.take());
    p.wait_output(timeout)
}

/// Reads lines of a pipe on a thread, forwarding each one; lets a test wait for a line.
pub struct LineWatch {
    rx: mpsc::Receiver<String>,
    /// Every line seen so far.
    pub seen: Vec<String>,
}

impl LineWatch {
    /// Starts reading `pipe`.
    pub fn new(pipe: impl Read + Send + 'static) -> Self {
        let (tx, rx) = mpsc::channel();
        thread::spawn(move || {
            for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Self {
            rx,
            seen: Vec::new(),
        }
    }

    /// Waits for a line containing `needle`.
    pub fn wait_for(&mut self, needle: &str, timeout: Duration) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.rx.recv_timeout(left) {
                Ok(l) => {
                    self.seen.push(l.clone());
                    if l.contains(needle) {
                        return l;
                    }
                }
                Err(_) => panic!(
                    "no line containing {needle:?} within {timeout:?}; saw {:?}",
                    self.seen
                ),
            }
        }
    }

    /// Waits for a line containing `needle`; None when none came within `timeout`.
    pub fn try_wait_for(&mut self, needle: &str, timeout: Duration) -> Option<String> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let l = self.rx.recv_timeout(left).ok()?;
            self.seen.push(l.clone());
            if l.contains(needle) {
                return Some(l);
            }
        }
    }

    /// Collects the remaining lines until the pipe closes.
    pub fn rest(mut self, timeout: Duration) -> Vec<String> {
        let deadline = Instant::now() + timeout;
        while let Ok(l) = self
            .rx
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
        {
            self.seen.push(l);
        }
        self.seen
    }
}

/// One `truth ...` line of mutex_workload: what a thread did, measured by itself.
#[derive(Debug, Clone, Default)]
pub struct Truth {
    /// Thread id.
    pub tid: u64,
    /// Fields by name.
    pub fields: HashMap<String, u64>,
}

impl Truth {
    /// A field's value.
    pub fn get(&self, k: &str) -> u64 {
        self.fields[k]
    }
}

/// Every `truth k=v ...` line as a map of strings (values that are not numbers).
pub fn truth_maps(stdout: &str) -> Vec<HashMap<String, String>> {
    stdout
        .lines()
        .filter_map(|l| l.trim().strip_prefix("truth "))
        .map(|rest| {
            rest.split_whitespace()
                .filter_map(|kv| kv.split_once('='))
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect()
        })
        .collect()
}

/// Parses every `truth` line.
pub fn truths(stdout: &str) -> Vec<Truth> {
    stdout
        .lines()
        .filter_map(|l| l.strip_prefix("truth "))
        .map(|rest| {
            let mut t = Truth::default();
            for kv in rest.split_whitespace() {
                let (k, v) = kv.split_once('=').expect("k=v");
                let v: u64 = v.parse().expect("number");
                if k == "tid" {
                    t.tid = v;
                } else {
                    t.fields.insert(k.to_owned(), v);
                }
            }
            t
        })
        .collect()
}

/// Runs `rtm-trace OPTIONS --json FILE -- PROGRAM ARGS` to the end (two minutes at
/// most), asserts it succeeded, and returns its stdout and the JSON document.
pub fn trace_json(options: &[&str], program: &Path, args: &[&str]) -> (String, Value) {
    let dir = TempDir::new("trace");
    let json = dir.join("out.json");
    let out = run(
        Command::new(rtm_bin())
            .args(options)
            .arg("--json")
            .arg(&json)
            .arg("--")
            .arg(program)
            .args(args),
        Duration::from_secs(120),
    );
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "rtm-trace failed: {}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    (stdout, read_json(&json))
}

/// Asserts `measured` is within `tol` (a fraction) of `truth`, printing both.
pub fn within(measured: f64, truth: f64, tol: f64, what: &str) {
    let err = (measured - truth).abs() / truth;
    println!(
        "{what}: expected {truth:.1}, measured {measured:.1} ({:.3}% off)",
        err * 100.0
    );
    assert!(
        err <= tol,
        "{what}: measured {measured} vs expected {truth}"
    );
}

/// Reads a JSON output file.
pub fn read_json(path: &Path) -> Value {
    let text =
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    serde_json::from_str(&text).expect("valid JSON")
}

/// The sync-graph object whose name is `name`.
pub fn object<'a>(doc: &'a Value, name: &str) -> Option<&'a Value> {
    doc["sync_graph"]["objects"]
        .as_array()?
        .iter()
        .find(|o| o["name"].as_str() == Some(name))
}

/// The edge from thread `tid` to the object at `addr`.
pub fn edge<'a>(doc: &'a Value, tid: u64, addr: &str) -> Option<&'a Value> {
    doc["sync_graph"]["edges"]
        .as_array()?
        .iter()
        .find(|e| e["tid"].as_u64() == Some(tid) && e["object"].as_str() == Some(addr))
}

/// A temporary directory removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    /// Creates one.
    pub fn new(tag: &str) -> Self {
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let p = std::env::temp_dir().join(format!("rtm-test-{tag}-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&p).expect("mkdir");
        Self(p)
    }

    /// A path inside it.
    pub fn join(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The Python with Perfetto's published trace schema (PyPI's `perfetto`), which
/// `cargo xtask setup` installs; a test that calls this needs `PerfettoSchema`.
pub fn perfetto_python() -> PathBuf {
    let python = harness::perfetto_python_path();
    assert!(python.exists(), "{}", harness::Need::PerfettoSchema);
    python
}

/// A timeline decoded by Perfetto's own schema (tests/scripts/decode_timeline.py).
pub fn decode_timeline(python: &Path, file: &Path) -> Value {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/decode_timeline.py");
    let json = file.with_extension("decoded.json");
    let out = run(
        Command::new(python).arg(script).arg(file).arg(&json),
        Duration::from_secs(120),
    );
    assert!(
        out.status.success(),
        "decoding {} failed: {}",
        file.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    read_json(&json)
}

/// A page's DOM after its scripts ran, from a real headless Chromium (Debian's
/// `chromium`, which `cargo xtask setup` installs); a test that calls this needs
/// `Chromium`.
pub fn chromium_dom(page: &Path) -> String {
    let chromium = harness::chromium().unwrap_or_else(|| panic!("{}", harness::Need::Chromium));
    let profile = TempDir::new("chromium");
    let out = run(
        Command::new(chromium)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--virtual-time-budget=5000",
                "--dump-dom",
            ])
            .arg(format!("--user-data-dir={}", profile.0.display()))
            .arg(format!("file://{}", page.display())),
        Duration::from_secs(120),
    );
    assert!(
        out.status.success(),
        "chromium failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}
