//! Ctrl-C and SIGTERM as a flag that every step which may wait polls, so that no step of
//! the tracer outlives the user's request to stop by more than a fraction of a second.
//!
//! The tracing loop itself listens through tokio's signal streams; this flag is for the
//! steps outside it (writing to a FIFO nobody reads yet, reading a config from a pipe,
//! attaching probes to many processes, waiting for a launched command at the end). Both
//! register through the same registry (signal-hook-registry), so they coexist.

use std::sync::atomic::{AtomicBool, Ordering};

static REQUESTED: AtomicBool = AtomicBool::new(false);

/// Routes SIGINT and SIGTERM to the flag from now on (instead of ending the process at
/// once). Idempotent. Returns an error when the handlers cannot be installed.
pub fn install() -> std::io::Result<()> {
    static INSTALLED: std::sync::Once = std::sync::Once::new();
    let mut result = Ok(());
    INSTALLED.call_once(|| {
        for sig in [libc::SIGINT, libc::SIGTERM] {
            // SAFETY: the action only stores to an atomic, which is async-signal-safe.
            let r = unsafe {
                signal_hook_registry::register(sig, || REQUESTED.store(true, Ordering::SeqCst))
            };
            if let Err(e) = r {
                result = Err(e);
                return;
            }
        }
    });
    result
}

/// Whether SIGINT or SIGTERM arrived since [`install`].
pub fn requested() -> bool {
    REQUESTED.load(Ordering::SeqCst)
}

/// Why a wait was given up.
#[derive(Debug, thiserror::Error)]
#[error("interrupted (Ctrl-C or SIGTERM)")]
pub struct Interrupted;

/// The error a wait given up at a stop request returns. Its kind is not
/// `ErrorKind::Interrupted`: `write_all`, `read_to_end` and `BufWriter` retry those, so
/// a writer stuck on a reader that never reads would spin past SIGTERM forever.
pub fn interrupted_error() -> std::io::Error {
    std::io::Error::other(Interrupted)
}

/// Whether `e` is a wait given up at a stop request.
#[cfg(test)]
fn is_interrupted(e: &std::io::Error) -> bool {
    e.get_ref().is_some_and(|inner| inner.is::<Interrupted>())
}

/// Polls `fd` for `events` in slices of 100 ms until it is ready or a stop is requested
/// (then fails with [`interrupted_error`]). Returns the revents.
pub fn poll_fd(fd: std::os::fd::BorrowedFd<'_>, events: i16) -> std::io::Result<i16> {
    use std::os::fd::AsRawFd as _;
    loop {
        if requested() {
            return Err(interrupted_error());
        }
        let mut p = libc::pollfd {
            fd: fd.as_raw_fd(),
            events,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        let n = unsafe { libc::poll(&mut p, 1, 100) };
        if n > 0 {
            return Ok(p.revents);
        }
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() != std::io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write as _;

    use super::*;

    /// A writer that is always interrupted, as one over a reader that never reads is
    /// once a stop was requested.
    struct Stuck(u32);

    impl std::io::Write for Stuck {
        fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
            self.0 += 1;
            if self.0 > 1000 {
                panic!("write_all retried the interruption");
            }
            Err(interrupted_error())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn an_interruption_ends_write_all_instead_of_being_retried() {
        let mut w = std::io::BufWriter::new(Stuck(0));
        let e = w
            .write_all(&[0; 1 << 16])
            .and_then(|_| w.flush())
            .unwrap_err();
        assert!(is_interrupted(&e), "{e}");
        assert_eq!(w.get_ref().0, 1);
    }
}
