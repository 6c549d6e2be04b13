//! Launch mode: fork a child that waits on a pipe until the probes are live, then execs
//! the command. Everything the child does between fork and exec is async-signal-safe; all
//! allocation happens before the fork.

use std::{
    ffi::{CString, OsString},
    os::{
        fd::{AsRawFd, FromRawFd, OwnedFd},
        unix::ffi::OsStrExt,
    },
    path::{Path, PathBuf},
};

/// Errors launching a command.
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    /// The command was not found on PATH.
    #[error("command not found: {0} (give a path, or check PATH)")]
    NotFound(String),
    /// An argument contains a NUL byte.
    #[error("argument contains a NUL byte: {0:?}")]
    Nul(OsString),
    /// A system call failed while setting up the child.
    #[error("{what} failed: {source}")]
    Sys {
        /// Which call.
        what: &'static str,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// execve failed in the child.
    #[error("cannot execute {path}: {source}")]
    Exec {
        /// The program.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// A forked child waiting for [`GatedChild::release`] before it execs.
#[derive(Debug)]
pub struct GatedChild {
    /// The child's pid (the traced process once it execs).
    pub pid: u32,
    /// The program that will be executed.
    pub program: PathBuf,
    gate: Option<OwnedFd>,
    exec_error: OwnedFd,
}

fn sys(what: &'static str) -> LaunchError {
    LaunchError::Sys {
        what,
        source: std::io::Error::last_os_error(),
    }
}

fn pipe() -> Result<(OwnedFd, OwnedFd), LaunchError> {
    let mut fds = [0; 2];
    // SAFETY: fds is a valid two-element array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(sys("pipe2"));
    }
    // SAFETY: pipe2 returned two fresh descriptors that we now own.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Finds a program the way execvp would.
pub fn resolve_program(name: &OsString) -> Result<PathBuf, LaunchError> {
    let p = Path::new(name);
    if name.as_bytes().contains(&b'/') {
        return Ok(p.to_path_buf());
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into());
    std::env::split_paths(&path)
        .map(|d| d.join(p))
        .find(|c| {
            c.metadata()
                .map(|m| {
                    m.is_file()
                        && std::os::unix::fs::PermissionsExt::mode(&m.permissions()) & 0o111 != 0
                })
                .unwrap_or(false)
        })
        .ok_or_else(|| LaunchError::NotFound(name.to_string_lossy().into_owned()))
}

/// Forks the child; it blocks until [`GatedChild::release`] (or exits 127 if the tracer
/// goes away first). Call before any other thread exists.
pub fn spawn_gated(argv: &[OsString]) -> Result<GatedChild, LaunchError> {
    let program = resolve_program(&argv[0])?;
    let c_program = CString::new(program.as_os_str().as_bytes())
        .map_err(|_| LaunchError::Nul(program.clone().into_os_string()))?;
    let c_args = argv
        .iter()
        .map(|a| CString::new(a.as_bytes()).map_err(|_| LaunchError::Nul(a.clone())))
        .collect::<Result<Vec<_>, _>>()?;
    let mut c_argv: Vec<*const libc::c_char> = c_args.iter().map(|a| a.as_ptr()).collect();
    c_argv.push(std::ptr::null());

    let (gate_r, gate_w) = pipe()?;
    let (err_r, err_w) = pipe()?;
    // SAFETY: the child only calls async-signal-safe functions before execv or _exit.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(sys("fork"));
    }
    if pid == 0 {
        // Child.
        // SAFETY: raw syscalls on descriptors and data prepared before the fork.
        unsafe {
            // Undo what the Rust runtime changed so the command starts as a shell would
            // start it: default SIGPIPE and an empty signal mask.
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
            let mut empty: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut empty);
            libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
            // The parent's ends: while the child holds the gate's write end itself, the
            // read below would never see the tracer go away.
            libc::close(gate_w.as_raw_fd());
            libc::close(err_r.as_raw_fd());
            let mut b = 0u8;
            loop {
                let n = libc::read(gate_r.as_raw_fd(), (&raw mut b).cast(), 1);
                if n == 1 {
                    break;
                }
                if n < 0 && *libc::__errno_location() == libc::EINTR {
                    continue;
                }
                libc::_exit(127);
            }
            libc::execv(c_program.as_ptr(), c_argv.as_ptr());
            let errno = *libc::__errno_location();
            libc::write(err_w.as_raw_fd(), (&raw const errno).cast(), 4);
            libc::_exit(127);
        }
    }
    drop(gate_r);
    drop(err_w);
    Ok(GatedChild {
        pid: pid as u32,
        program,
        gate: Some(gate_w),
        exec_error: err_r,
    })
}

impl GatedChild {
    /// Lets the child exec and reports whether execve succeeded.
    pub fn release(&mut self) -> Result<(), LaunchError> {
        let Some(gate) = self.gate.take() else {
            return Ok(());
        };
        let b = 1u8;
        // SAFETY: writing one byte from a valid buffer to a descriptor we own.
        if unsafe { libc::write(gate.as_raw_fd(), (&raw const b).cast(), 1) } != 1 {
            return Err(sys("write to the launch gate"));
        }
        drop(gate);
        let mut errno = 0i32;
        loop {
            // SAFETY: reading into a valid 4-byte buffer from a descriptor we own.
            let n = unsafe { libc::read(self.exec_error.as_raw_fd(), (&raw mut errno).cast(), 4) };
            if n < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return if n == 4 {
                Err(LaunchError::Exec {
                    path: self.program.display().to_string(),
                    source: std::io::Error::from_raw_os_error(errno),
                })
            } else {
                Ok(())
            };
        }
    }
}

/// How a child ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChildExit {
    /// exit(code).
    Code(i32),
    /// Killed by a signal.
    Signal(i32),
}

impl ChildExit {
    /// The exit code a shell would report: the code, or 128 + signal.
    pub fn shell_code(self) -> i32 {
        match self {
            ChildExit::Code(c) => c,
            ChildExit::Signal(s) => 128 + s,
        }
    }
}

/// Reaps a child, blocking until it ends.
pub fn wait_child(pid: u32) -> Result<ChildExit, LaunchError> {
    let mut status = 0;
    loop {
        // SAFETY: status is a valid out-pointer.
        let r = unsafe { libc::waitpid(pid as i32, &mut status, 0) };
        if r == pid as i32 {
            break;
        }
        if r < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
            continue;
        }
        return Err(sys("waitpid"));
    }
    Ok(if libc::WIFEXITED(status) {
        ChildExit::Code(libc::WEXITSTATUS(status))
    } else {
        ChildExit::Signal(libc::WTERMSIG(status))
    })
}
