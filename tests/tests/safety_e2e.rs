//! End-to-end: rtm-trace runs as root, so nothing a traced program or another user
//! controls may turn it against the person running it: planted links, device nodes,
//! FIFOs in place of files, endless inputs, terminal escapes in names, replaced
//! executables, odd processes, absurd numbers.

use std::{
    os::unix::fs::{FileTypeExt as _, PermissionsExt as _},
    path::Path,
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use rtm_tests::*;
use rtm_tests::{e2e, harness::E2e};

/// This file's tests, each with what it needs besides the tracer.
pub(crate) const TESTS: &[E2e] = &[
    e2e!(a_link_planted_at_the_old_temporary_name_is_not_followed, Root),
    e2e!(a_link_planted_at_the_destination_is_refused_before_anything_runs, Root),
    e2e!(devices_are_written_through_never_replaced, Root),
    e2e!(unwritable_destinations_are_refused_before_anything_runs, Root),
    e2e!(a_report_that_cannot_be_written_fails_the_run_but_the_json_is_written, Root),
    e2e!(a_fifo_in_place_of_the_executable_never_holds_the_tracer, Root),
    e2e!(a_replaced_executable_is_probed_as_it_runs, Root),
    e2e!(sigterm_ends_a_run_within_a_second_with_results_written, Root),
    e2e!(inputs_are_bounded_and_devices_refused, Root),
    e2e!(hostile_names_are_inert_in_every_text_output, Root),
    e2e!(numbers_that_once_panicked_are_refused_before_anything_runs),
    e2e!(a_process_whose_main_thread_exited_is_traced_and_a_zombie_is_named, Root),
    e2e!(a_stripped_static_executable_is_refused_with_its_own_pid, Root),
    e2e!(a_closed_stderr_does_not_stop_the_tracer_before_its_results, Root),
    e2e!(a_reader_that_never_reads_holds_the_tracer_only_until_the_first_sigterm, Root),
    e2e!(a_fifo_with_no_reader_holds_the_tracer_neither_past_sigterm_nor_forever, Root),
    e2e!(a_directory_link_planted_in_the_path_is_refused, Root),
    e2e!(another_users_fifo_is_refused, Root),
];

const T: Duration = Duration::from_secs(60);

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A world-writable directory with a file only root may read, as in the issue.
fn public_dir(dir: &TempDir) -> (std::path::PathBuf, std::path::PathBuf) {
    let public = dir.join("pub");
    std::fs::create_dir(&public).unwrap();
    std::fs::set_permissions(&public, std::fs::Permissions::from_mode(0o777)).unwrap();
    std::fs::set_permissions(&dir.0, std::fs::Permissions::from_mode(0o755)).unwrap();
    let victim = dir.join("victim");
    std::fs::write(&victim, "secret\n").unwrap();
    std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o600)).unwrap();
    (public, victim)
}

/// A symbolic link made by user nobody.
fn plant_link(target: &Path, at: &Path) {
    let st = Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "ln",
            "-s",
        ])
        .arg(target)
        .arg(at)
        .status()
        .expect("setpriv (util-linux)");
    assert!(st.success(), "planting {}", at.display());
}

/// No byte a terminal would act on, other than the line breaks the renderer wrote.
fn assert_inert(what: &str, bytes: &[u8]) {
    let bad: Vec<(usize, u8)> = bytes
        .iter()
        .copied()
        .enumerate()
        .filter(|&(_, b)| (b < 0x20 && b != b'\n') || b == 0x7f)
        .collect();
    assert!(
        bad.is_empty(),
        "{what}: control bytes {:?} in:\n{}",
        &bad[..bad.len().min(10)],
        text(bytes)
    );
    // C1 controls (U+0080..U+009F) and bidirectional overrides as UTF-8.
    let s = text(bytes);
    let c1: Vec<char> = s
        .chars()
        .filter(|c| ('\u{80}'..='\u{9f}').contains(c) || ('\u{202a}'..='\u{202e}').contains(c))
        .collect();
    assert!(c1.is_empty(), "{what}: {c1:?} in:\n{s}");
}

fn a_link_planted_at_the_old_temporary_name_is_not_followed() {
    let dir = TempDir::new("planted");
    let (public, victim) = public_dir(&dir);
    // Versions before this one wrote OUT.json.tmp (Path::with_extension) through links.
    plant_link(&victim, &public.join("out.json.tmp"));
    plant_link(&victim, &public.join("out.json.json.tmp"));
    let out = run(
        Command::new(rtm_bin())
            .args(["-d", "1", "--json"])
            .arg(public.join("out.json"))
            .args(["--", "/bin/true"]),
        T,
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "secret\n");
    let doc = read_json(&public.join("out.json"));
    assert_eq!(doc["format"], "rtm-trace");
    // Only the planted links and the result are there: no temporary left behind.
    let mut names: Vec<String> = std::fs::read_dir(&public)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["out.json", "out.json.json.tmp", "out.json.tmp"]);
}

fn a_link_planted_at_the_destination_is_refused_before_anything_runs() {
    let dir = TempDir::new("planted-dest");
    let (public, victim) = public_dir(&dir);
    plant_link(&victim, &public.join("out.json"));
    let marker = dir.join("ran");
    let out = run(
        Command::new(rtm_bin())
            .args(["-d", "1", "--json"])
            .arg(public.join("out.json"))
            .args(["--", "touch"])
            .arg(&marker),
        T,
    );
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("symbolic link owned by user 65534"), "{err}");
    assert!(!marker.exists(), "the command ran before the error");
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "secret\n");
}

fn devices_are_written_through_never_replaced() {
    let dir = TempDir::new("devices");
    let link = dir.join("discard.json");
    std::os::unix::fs::symlink("/dev/null", &link).unwrap();
    for dest in [Path::new("/dev/null"), &link] {
        let out = run(
            Command::new(rtm_bin())
                .args(["-d", "1", "--json"])
                .arg(dest)
                .arg("-o")
                .arg(dest)
                .args(["--", "/bin/true"]),
            T,
        );
        assert!(out.status.success(), "{}", text(&out.stderr));
        let m = std::fs::metadata("/dev/null").unwrap();
        assert!(m.file_type().is_char_device(), "/dev/null was replaced");
        assert!(
            std::fs::symlink_metadata(&link)
                .unwrap()
                .file_type()
                .is_symlink()
        );
    }
    // A block device is never written.
    let out = run(
        Command::new(rtm_bin()).args(["-d", "1", "--json", "/dev/loop0", "--", "/bin/true"]),
        T,
    );
    if Path::new("/dev/loop0").exists() {
        assert_eq!(out.status.code(), Some(1));
        assert!(
            text(&out.stderr).contains("block device"),
            "{}",
            text(&out.stderr)
        );
    }
}

fn unwritable_destinations_are_refused_before_anything_runs() {
    let dir = TempDir::new("unwritable");
    let marker = dir.join("ran");
    for (args, says) in [
        (vec!["--json", "/proc/version"], "on /proc"),
        (vec!["--json", "/nonexistent-rtm/x.json"], "does not exist"),
        (vec!["-o", "/tmp"], "directory"),
        (vec!["-o", "/etc/hostname/report.txt"], "not a directory"),
    ] {
        let started = Instant::now();
        let out = run(
            Command::new(rtm_bin())
                .args(&args)
                .args(["-d", "5", "--", "touch"])
                .arg(&marker),
            T,
        );
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
        assert!(
            !marker.exists(),
            "{args:?}: the command ran before the error"
        );
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "{args:?}: found late"
        );
    }
}

fn a_report_that_cannot_be_written_fails_the_run_but_the_json_is_written() {
    let dir = TempDir::new("full");
    let json = dir.join("out.json");
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .unwrap();
    let out = Command::new(rtm_bin())
        .args(["-d", "1", "--json"])
        .arg(&json)
        .args(["--", "/bin/true"])
        .stdout(Stdio::from(full))
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("No space left on device"), "{err}");
    assert_eq!(read_json(&json)["format"], "rtm-trace");
}

/// A copy of mutex_workload started from `dir/v`, whose file is then replaced by what
/// `replace` puts there.
fn started_then_replaced(dir: &TempDir, replace: impl FnOnce(&Path)) -> (Proc, LineWatch) {
    let v = dir.join("v");
    std::fs::copy(workload("mutex_workload"), &v).unwrap();
    let mut p = spawn(Command::new(&v).args([
        "--threads",
        "2",
        "--iters",
        "100000000",
        "--hold-us",
        "50",
        "--private",
        "0",
        "--wait-stdin",
    ]));
    let mut lines = LineWatch::new(p.child.stdout.take().unwrap());
    lines.wait_for("ready", T);
    replace(&v);
    use std::io::Write as _;
    writeln!(p.child.stdin.as_mut().unwrap(), "go").unwrap();
    (p, lines)
}

fn a_fifo_in_place_of_the_executable_never_holds_the_tracer() {
    let dir = TempDir::new("fifo-exe");
    let (p, _lines) = started_then_replaced(&dir, |v| {
        std::fs::remove_file(v).unwrap();
        let c = std::ffi::CString::new(v.to_str().unwrap()).unwrap();
        // SAFETY: a valid path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
    });
    for mode in ["contention", "full"] {
        let started = Instant::now();
        let out = run(
            Command::new(rtm_bin()).args(["-p", &p.pid().to_string(), "-d", "1", "--mode", mode]),
            Duration::from_secs(20),
        );
        let report = text(&out.stdout);
        assert!(out.status.success(), "{mode}: {}", text(&out.stderr));
        // The running image is read through its mapping: the lock is named.
        assert!(report.contains("shared_lock"), "{mode}: {report}");
        println!("{mode}: {:.1} s", started.elapsed().as_secs_f64());
    }
}

fn a_replaced_executable_is_probed_as_it_runs() {
    let dir = TempDir::new("replaced-exe");
    // What a package upgrade does: a new file renamed over the old name.
    let (p, _lines) = started_then_replaced(&dir, |v| {
        let new = v.with_extension("new");
        std::fs::copy("/bin/sleep", &new).unwrap();
        std::fs::rename(&new, v).unwrap();
    });
    let dir_json = dir.join("out.json");
    let out = run(
        Command::new(rtm_bin())
            .args([
                "-p",
                &p.pid().to_string(),
                "-d",
                "1",
                "--mode",
                "full",
                "--json",
            ])
            .arg(&dir_json),
        T,
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let doc = read_json(&dir_json);
    let lock = object(&doc, "shared_lock").expect("shared_lock traced through the old image");
    let acquired = lock["acquisitions"].as_u64().unwrap();
    println!("acquisitions of shared_lock in 1 s: {acquired}");
    assert!(acquired > 100, "{lock}");
}

fn sigterm_ends_a_run_within_a_second_with_results_written() {
    let dir = TempDir::new("sigterm");
    let json = dir.join("out.json");
    // Launch mode: the command keeps running past the trace.
    let mut tracer = spawn(
        Command::new(rtm_bin())
            .arg("--json")
            .arg(&json)
            .args(["--", "sleep", "30"]),
    );
    let mut err = LineWatch::new(tracer.child.stderr.take().unwrap());
    err.wait_for("launched", T);
    std::thread::sleep(Duration::from_millis(300));
    let t = Instant::now();
    tracer.signal(libc::SIGTERM);
    // It writes the results, then waits for the command; a second SIGTERM ends that.
    err.wait_for("waiting for PID", Duration::from_secs(1));
    tracer.signal(libc::SIGTERM);
    // Its output pipes stay open in the command it launched: wait for its exit alone.
    let status = loop {
        if let Some(st) = tracer.child.try_wait().unwrap() {
            break st;
        }
        assert!(t.elapsed() < Duration::from_secs(10), "still running");
        std::thread::sleep(Duration::from_millis(10));
    };
    let took = t.elapsed();
    println!("SIGTERM to exit: {took:?}");
    let doc = read_json(&json);
    // The command it launched goes on; this test ends it.
    if let Some(pid) = doc["run"]["targets"][0]["pid"].as_i64() {
        // SAFETY: a signal to the sleep this test launched through rtm-trace.
        unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    }
    assert!(took < Duration::from_secs(1), "{took:?}");
    assert_eq!(status.code(), Some(143));
    assert_eq!(doc["run"]["end_reason"], "signal");
}

fn inputs_are_bounded_and_devices_refused() {
    let dir = TempDir::new("inputs");
    let big = dir.join("big.toml");
    std::fs::write(&big, vec![b'#'; 2 << 20]).unwrap();
    let bad = dir.join("bad.toml");
    std::fs::write(&bad, "[thresholds]\ncpu_busy_pct = -5\nstall_pct = nan\n").unwrap();
    let nan = dir.join("nan.toml");
    std::fs::write(&nan, "[thresholds]\nstall_pct = nan\n").unwrap();
    for (args, says) in [
        (vec!["--config", "/dev/zero"], "character device"),
        (vec!["--config", big.to_str().unwrap()], "read at most"),
        (
            vec!["--config", bad.to_str().unwrap()],
            "thresholds.cpu_busy_pct = -5",
        ),
        (
            vec!["--config", nan.to_str().unwrap()],
            "thresholds.stall_pct = NaN",
        ),
    ] {
        let started = Instant::now();
        let out = run(
            Command::new(rtm_bin())
                .args(&args)
                .args(["-d", "1", "--", "/bin/true"]),
            T,
        );
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
        assert!(started.elapsed() < Duration::from_secs(5), "{args:?}");
    }
    let out = run(
        Command::new(rtm_bin()).args(["merge", "/dev/zero", "/dev/zero"]),
        T,
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("character device"),
        "{}",
        text(&out.stderr)
    );
}

fn hostile_names_are_inert_in_every_text_output() {
    let dir = TempDir::new("hostile");
    for mode in ["full", "contention"] {
        let json = dir.join(&format!("{mode}.json"));
        let out = run(
            Command::new(rtm_bin())
                .args(["--mode", mode, "-i", "0.2", "-v", "--json"])
                .arg(&json)
                .arg("--")
                .arg(workload("hostile_names"))
                // Milliseconds (~3,000 acquisitions on an idle machine).
                .arg("600"),
            T,
        );
        assert!(out.status.success(), "{mode}: {}", text(&out.stderr));
        // The workload's own line is the only raw output it makes, and it is plain.
        assert_inert(&format!("{mode} stdout"), &out.stdout);
        assert_inert(&format!("{mode} stderr"), &out.stderr);
        let report = text(&out.stdout);
        assert!(report.contains("\\x1b]0;pwned\\x07"), "{mode}: {report}");
        assert!(report.contains("a\\rb\\nc\\x1b[2J"), "{mode}: {report}");
        if mode == "full" {
            assert!(report.contains("evil\\x1b[2J\\x07lock"), "{report}");
        }
        // The JSON keeps the names as they are (escaped the JSON way).
        let doc = read_json(&json);
        let names: Vec<&str> = doc["sync_graph"]["threads"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|t| t["name"].as_str())
            .collect();
        assert!(names.contains(&"a\rb\nc\x1b[2J"), "{mode}: {names:?}");
    }
}

fn numbers_that_once_panicked_are_refused_before_anything_runs() {
    let dir = TempDir::new("numbers");
    let marker = dir.join("ran");
    for args in [
        ["-d", "1e30"],
        ["-d", "1.8e19"],
        ["-i", "1e30"],
        ["-d", "NaN"],
        ["--ring-size", "4294967296"],
    ] {
        let out = run(
            Command::new(rtm_bin())
                .args(args)
                .args(["--", "touch"])
                .arg(&marker),
            T,
        );
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert!(!marker.exists(), "{args:?}: the command ran");
    }
}

fn a_process_whose_main_thread_exited_is_traced_and_a_zombie_is_named() {
    let mut p = spawn(&mut Command::new(workload("main_exits")));
    let mut lines = LineWatch::new(p.child.stdout.take().unwrap());
    lines.wait_for("ready", T);
    std::thread::sleep(Duration::from_millis(100));
    for mode in ["contention", "full"] {
        let dir = TempDir::new("main-exits");
        let json = dir.join("out.json");
        let out = run(
            Command::new(rtm_bin())
                .args([
                    "-p",
                    &p.pid().to_string(),
                    "-d",
                    "1",
                    "--mode",
                    mode,
                    "--json",
                ])
                .arg(&json),
            T,
        );
        assert!(out.status.success(), "{mode}: {}", text(&out.stderr));
        let doc = read_json(&json);
        let lock = object(&doc, "exit_lock").unwrap_or_else(|| panic!("{mode}: {doc}"));
        println!("{mode}: {lock}");
        let seen = if mode == "full" {
            "acquisitions"
        } else {
            "contended"
        };
        assert!(lock[seen].as_u64().unwrap() > 0, "{mode}: {lock}");
    }
    drop(p);
    // A real zombie: a child its parent has not reaped.
    let parent = spawn(Command::new("sh").args(["-c", "sleep 0.1 & exec sleep 10"]));
    std::thread::sleep(Duration::from_millis(500));
    let zombie = std::fs::read_to_string(format!(
        "/proc/{}/task/{}/children",
        parent.pid(),
        parent.pid()
    ))
    .unwrap()
    .trim()
    .to_owned();
    assert!(!zombie.is_empty(), "the sleep 0.1 child is a zombie by now");
    let out = run(Command::new(rtm_bin()).args(["-p", &zombie, "-d", "1"]), T);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("is a zombie"), "{err}");
    assert!(
        err.contains(&format!("parent (PID {})", parent.pid())),
        "{err}"
    );
}

fn a_stripped_static_executable_is_refused_with_its_own_pid() {
    let dir = TempDir::new("stripped-static");
    let exe = dir.join("static_stripped");
    std::fs::copy(workload("sync_workload_static"), &exe).unwrap();
    assert!(Command::new("strip").arg(&exe).status().unwrap().success());
    let out = run(
        Command::new(rtm_bin())
            .args(["--mode", "full", "--"])
            .arg(&exe),
        T,
    );
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(!err.contains("PID 0 "), "{err}");
    assert!(err.contains("statically linked"), "{err}");
}

fn a_closed_stderr_does_not_stop_the_tracer_before_its_results() {
    let dir = TempDir::new("closed-stderr");
    let json = dir.join("t.json");
    // stderr is a pipe whose reader is gone from the start: every message fails
    // (EPIPE), and the tracer must go on to write its results and exit as the program.
    let mut child = Command::new(rtm_bin())
        .arg("--json")
        .arg(&json)
        .args(["-o", "/dev/null", "--"])
        .arg(workload("stack_workload"))
        .args(["2", "100", "20"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("rtm-trace");
    drop(child.stderr.take());
    let status = child.wait().expect("wait");
    assert!(status.success(), "{status}");
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert!(
        doc["sync_graph"]["objects"]
            .as_array()
            .is_some_and(|o| !o.is_empty())
    );
}

/// A sticky world-writable directory like /tmp (`pub` in `dir`), where any user may
/// plant names.
fn sticky_dir(dir: &TempDir) -> std::path::PathBuf {
    std::fs::set_permissions(&dir.0, std::fs::Permissions::from_mode(0o755)).unwrap();
    let public = dir.join("pub");
    std::fs::create_dir(&public).unwrap();
    std::fs::set_permissions(&public, std::fs::Permissions::from_mode(0o1777)).unwrap();
    public
}

/// A command run as user nobody, as the attacker.
fn as_nobody(program: &str) -> Command {
    let mut c = Command::new("setpriv");
    c.args(["--reuid=65534", "--regid=65534", "--clear-groups", program]);
    c
}

fn mkfifo(at: &Path) {
    let c = std::ffi::CString::new(at.to_str().unwrap()).unwrap();
    // SAFETY: a valid path.
    let r = unsafe { libc::mkfifo(c.as_ptr(), 0o644) };
    assert_eq!(r, 0, "{}", at.display());
}

/// A reader, as user nobody, that opens `fifo` and never reads from it.
fn reader_that_never_reads(fifo: &Path) -> Proc {
    // Opening for reading is all it does: then the writer's opens succeed and its
    // writes fill the pipe.
    spawn(
        as_nobody("sh")
            .args(["-c", "exec sleep 600 < \"$0\""])
            .arg(fifo),
    )
}

/// The BPF programs and perf events (probes) process `pid` holds open.
fn bpf_fds(pid: u32) -> usize {
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return 0;
    };
    fds.filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter(|l| {
            let l = l.to_string_lossy();
            l.contains("bpf-prog") || l.contains("bpf_link") || l.contains("[perf_event]")
        })
        .count()
}

/// Probes still attached by process `pid`, as the kernel lists them (bpftool); None
/// when bpftool is missing.
fn attached_by(pid: u32) -> Option<usize> {
    let out = Command::new("bpftool")
        .args(["perf", "list"])
        .output()
        .ok()?;
    let prefix = format!("pid {pid} ");
    Some(
        text(&out.stdout)
            .lines()
            .filter(|l| l.starts_with(&prefix))
            .count(),
    )
}

/// The PID in rtm-trace's "launched ... as PID N" line.
fn launched_pid(line: &str) -> i32 {
    let rest = line.split("as PID ").nth(1).expect("as PID N");
    rest.split(|c: char| !c.is_ascii_digit())
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

/// Kills a process rtm-trace launched (and left running) when the test ends.
struct KillOnDrop(i32);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        // SAFETY: a signal to the workload this test launched through rtm-trace.
        unsafe { libc::kill(self.0, libc::SIGKILL) };
    }
}

/// Waits at most `limit` for `p` to exit.
fn exits_within(p: &mut Proc, limit: Duration) -> std::process::ExitStatus {
    let t = Instant::now();
    loop {
        if let Some(st) = p.child.try_wait().unwrap() {
            return st;
        }
        assert!(
            t.elapsed() < limit,
            "rtm-trace still running {limit:?} after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn a_reader_that_never_reads_holds_the_tracer_only_until_the_first_sigterm() {
    let dir = TempDir::new("stuck-reader");
    let public = sticky_dir(&dir);
    // Root's own FIFO (another user's is refused, below), opened by nobody for reading.
    let fifo = public.join("timeline");
    mkfifo(&fifo);
    let _reader = reader_that_never_reads(&fifo);
    let json = dir.join("out.json");
    let mut tracer = spawn(
        Command::new(rtm_bin())
            .args(["-m", "full", "-d", "30", "--timeline"])
            .arg(&fifo)
            .arg("--json")
            .arg(&json)
            .arg("--")
            .arg(workload("mutex_workload"))
            // Holds of 20 us: ~100 KB/s of timeline fills the pipe and the buffer in
            // under a second, without the backlog of millions of events a second that
            // a debug build then drains at its end (what this checks is the reader).
            .args(["--threads", "4", "--iters", "100000000", "--hold-us", "20"]),
    );
    let mut err = LineWatch::new(tracer.child.stderr.take().unwrap());
    let _workload = KillOnDrop(launched_pid(&err.wait_for("launched", T)));
    // Time for the pipe and the tracer's buffer to fill: its writes now wait.
    std::thread::sleep(Duration::from_secs(2));
    let held = bpf_fds(tracer.pid());
    assert!(held > 0, "no probes attached while tracing");
    let t = Instant::now();
    tracer.signal(libc::SIGTERM);
    let status = exits_within(&mut tracer, Duration::from_secs(2));
    let took = t.elapsed();
    println!("SIGTERM to exit with a reader that never reads: {took:?} ({held} BPF fds held)");
    let rest = err.rest(Duration::from_secs(5)).join("\n");
    // The timeline is lost (said, and the run exits 1); the JSON is written anyway.
    assert_eq!(status.code(), Some(1), "{rest}");
    assert!(
        rest.contains("interrupted (Ctrl-C or SIGTERM)") && rest.contains("timeline"),
        "{rest}"
    );
    assert_eq!(read_json(&json)["run"]["end_reason"], "signal");
    if let Some(n) = attached_by(tracer.pid()) {
        assert_eq!(n, 0, "probes still attached");
    }
}

fn a_fifo_with_no_reader_holds_the_tracer_neither_past_sigterm_nor_forever() {
    let dir = TempDir::new("no-reader");
    let public = sticky_dir(&dir);
    let fifo = public.join("timeline");
    mkfifo(&fifo);
    let marker = dir.join("ran");
    let tracer_cmd = || {
        let mut c = Command::new(rtm_bin());
        c.args(["-m", "full", "-d", "5", "--timeline"])
            .arg(&fifo)
            .args(["--", "touch"])
            .arg(&marker);
        c
    };
    // The first SIGTERM ends the wait for a reader.
    let mut tracer = spawn(&mut tracer_cmd());
    let mut err = LineWatch::new(tracer.child.stderr.take().unwrap());
    err.wait_for("for a reader", T);
    let t = Instant::now();
    tracer.signal(libc::SIGTERM);
    let status = exits_within(&mut tracer, Duration::from_secs(2));
    println!("SIGTERM to exit waiting for a reader: {:?}", t.elapsed());
    let rest = err.rest(Duration::from_secs(5)).join("\n");
    assert_eq!(status.code(), Some(1), "{rest}");
    assert!(
        rest.contains("interrupted (Ctrl-C or SIGTERM) while waiting for a reader"),
        "{rest}"
    );
    assert!(!marker.exists(), "the command ran");
    // Without one, it gives up on its own.
    let t = Instant::now();
    let out = run(&mut tracer_cmd(), Duration::from_secs(30));
    let took = t.elapsed();
    let err = text(&out.stderr);
    println!("gave up waiting for a reader after {took:?}");
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("no reader opened the FIFO within 10 s"),
        "{err}"
    );
    assert!(took < Duration::from_secs(15), "{took:?}");
    assert!(!marker.exists(), "the command ran");
}

fn a_directory_link_planted_in_the_path_is_refused() {
    let dir = TempDir::new("planted-dir");
    let public = sticky_dir(&dir);
    let secret = dir.join("root-only");
    std::fs::create_dir(&secret).unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o700)).unwrap();
    let victim = secret.join("victim.json");
    std::fs::write(&victim, "secret\n").unwrap();
    let planted = public.join("outdir");
    plant_link(&secret, &planted);
    let marker = dir.join("ran");
    for option in ["--json", "-o", "--timeline"] {
        let out = run(
            Command::new(rtm_bin())
                .args(["-d", "1", option])
                .arg(planted.join("victim.json"))
                .args(["--", "touch"])
                .arg(&marker),
            T,
        );
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{option}: {err}");
        assert!(
            err.contains(&format!(
                "{} is a symbolic link owned by user 65534",
                planted.display()
            )),
            "{option}: {err}"
        );
        assert!(
            !marker.exists(),
            "{option}: the command ran before the error"
        );
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "secret\n");
        let names: Vec<_> = std::fs::read_dir(&secret).unwrap().collect();
        assert_eq!(
            names.len(),
            1,
            "{option}: a file was made in the root-only directory"
        );
    }
}

fn another_users_fifo_is_refused() {
    let dir = TempDir::new("foreign-fifo");
    let public = sticky_dir(&dir);
    let fifo = public.join("out.json");
    let st = as_nobody("mkfifo").arg(&fifo).status().unwrap();
    assert!(st.success());
    let marker = dir.join("ran");
    for option in ["--json", "-o", "--timeline"] {
        // Its owner reads it.
        let _reader = spawn(
            as_nobody("sh")
                .args(["-c", "exec cat < \"$0\" > /dev/null"])
                .arg(&fifo),
        );
        let out = run(
            Command::new(rtm_bin())
                .args(["-d", "1", option])
                .arg(&fifo)
                .args(["--", "touch"])
                .arg(&marker),
            T,
        );
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{option}: {err}");
        assert!(
            err.contains("refusing a FIFO owned by user 65534"),
            "{option}: {err}"
        );
        assert!(
            !marker.exists(),
            "{option}: the command ran before the error"
        );
    }
}
