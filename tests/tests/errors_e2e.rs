//! End-to-end: bad input gets a clear error and the right exit code.

use std::{os::unix::process::CommandExt, process::Command, time::Duration};

use rtm_tests::*;
use rtm_tests::{e2e, harness::E2e};

/// This file's tests, each with what it needs besides the tracer.
pub(crate) const TESTS: &[E2e] = &[
    e2e!(usage_errors_exit_2_with_a_hint),
    e2e!(not_root_is_refused_with_what_to_do, Root),
    e2e!(unknown_pid_is_refused, Root),
    e2e!(process_without_libc_is_refused_in_full_mode, Root),
    e2e!(missing_command_exits_127, Root),
];

const T: Duration = Duration::from_secs(30);

fn stderr_of(cmd: &mut Command) -> (Option<i32>, String) {
    let out = run(cmd, T);
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn usage_errors_exit_2_with_a_hint() {
    let (code, err) = stderr_of(&mut Command::new(rtm_bin()));
    assert_eq!(code, Some(2));
    assert!(err.contains("nothing to trace"), "{err}");
    let (code, err) = stderr_of(Command::new(rtm_bin()).arg("--bogus"));
    assert_eq!(code, Some(2));
    assert!(err.contains("unexpected argument '--bogus'"), "{err}");
    let (code, err) = stderr_of(Command::new(rtm_bin()).args(["-p", "1", "--", "true"]));
    assert_eq!(code, Some(2));
    assert!(err.contains("not both"), "{err}");
    // Subcommands are clap's: their help names them, and a trace option before one is
    // refused rather than dropped.
    for args in [&["help", "agent"][..], &["agent", "--help"]] {
        let out = run(Command::new(rtm_bin()).args(args), T);
        let help = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(0), "{args:?}");
        assert!(help.contains("Usage: rtm-trace agent "), "{args:?}: {help}");
    }
    let (code, err) = stderr_of(Command::new(rtm_bin()).args(["-p", "1", "report", "x.json"]));
    assert_eq!(code, Some(2), "{err}");
}

fn not_root_is_refused_with_what_to_do() {
    // Runs as nobody; needs root to switch user.
    let (code, err) = stderr_of(
        Command::new(rtm_bin())
            .args(["--pid", "1"])
            .uid(65534)
            .gid(65534),
    );
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("needs root") && err.contains("sudo"), "{err}");
}

fn unknown_pid_is_refused() {
    let (code, err) = stderr_of(Command::new(rtm_bin()).args(["--pid", "2147483000"]));
    assert_eq!(code, Some(1));
    assert!(err.contains("no process with PID 2147483000"), "{err}");
}

fn process_without_libc_is_refused_in_full_mode() {
    let p = spawn(&mut Command::new(workload("nolibc")));
    let (code, err) =
        stderr_of(Command::new(rtm_bin()).args(["--mode", "full", "--pid", &p.pid().to_string()]));
    assert_eq!(code, Some(1));
    assert!(
        err.contains("has no library defining pthread_mutex_lock"),
        "{err}"
    );
    // Contention mode needs no library: the futex tracepoints see any process.
    let (code, err) = stderr_of(Command::new(rtm_bin()).args([
        "--duration",
        "0.2",
        "--pid",
        &p.pid().to_string(),
    ]));
    assert_eq!(code, Some(0), "{err}");
}

fn missing_command_exits_127() {
    let (code, err) = stderr_of(Command::new(rtm_bin()).args(["--", "/nonexistent/prog"]));
    assert_eq!(code, Some(127));
    assert!(err.contains("/nonexistent/prog"), "{err}");
    let (code, err) = stderr_of(Command::new(rtm_bin()).args(["--", "no-such-command-rtm"]));
    assert_eq!(code, Some(127));
    assert!(err.contains("command not found"), "{err}");
}
