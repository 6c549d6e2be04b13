//! `peak_rss FILE PROGRAM [ARGS...]`: runs PROGRAM, writes its peak resident set size in
//! KiB (wait4's ru_maxrss) to FILE, and exits with its exit code (1 when killed).
//!
//! A test cannot measure this of a child it spawns itself: the child is spawned by vfork,
//! and its ru_maxrss then starts at the spawning process's resident size (the whole test
//! binary's). Spawned from this small program, the child's starts at this one's.

use std::{os::unix::process::CommandExt as _, process::Command};

fn main() {
    let mut args = std::env::args_os().skip(1);
    let (Some(file), Some(program)) = (args.next(), args.next()) else {
        eprintln!("usage: peak_rss FILE PROGRAM [ARGS...]");
        std::process::exit(2);
    };
    let mut cmd = Command::new(&program);
    cmd.args(args);
    // SAFETY: prctl is async-signal-safe. The child dies with this program (a test that
    // gives up on it kills this one).
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
    let child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("{}: {e}", program.to_string_lossy()));
    let mut status = 0;
    // SAFETY: a zeroed rusage is a valid out-parameter.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: waits for our own child; both pointers are to locals.
    let r = unsafe { libc::wait4(child.id() as i32, &mut status, 0, &mut usage) };
    assert!(r > 0, "wait4: {}", std::io::Error::last_os_error());
    std::fs::write(&file, usage.ru_maxrss.to_string()).expect("writing the peak");
    std::process::exit(if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else {
        1
    });
}
