//! Noticing when a traced process exits: a pidfd becomes readable at exit (a zombie
//! counts); where pidfd_open is unavailable, /proc is polled.

use std::{
    os::fd::{FromRawFd, OwnedFd},
    time::Duration,
};

use tokio::{
    io::{Interest, unix::AsyncFd},
    sync::mpsc,
};

use crate::proc::process;

fn pidfd_open(pid: u32) -> Option<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::c_int, 0) };
    // SAFETY: a non-negative return is a fresh descriptor we own.
    (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// Sends `said` on `tx` once process `pid` has exited. Must run inside the tokio
/// runtime.
pub fn watch<T: Send + 'static>(pid: u32, said: T, tx: mpsc::UnboundedSender<T>) {
    let fd = pidfd_open(pid).and_then(|fd| {
        // SAFETY: the OwnedFd stays open for the AsyncFd's lifetime.
        unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE) }.ok()
    });
    tokio::spawn(async move {
        match fd {
            Some(fd) => {
                let _ = fd.readable().await;
            }
            None => {
                while process::alive(pid) {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
        let _ = tx.send(said);
    });
}
