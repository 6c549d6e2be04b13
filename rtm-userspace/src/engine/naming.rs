//! Names and identities read from /proc, off the event path: applying an event only
//! asks, a worker thread reads (a process's maps and root, its command name, a thread's
//! name and start, a rank's environment), and the engine takes the answers in between
//! batches and before every snapshot. A process must be read while it lives, so asks go
//! out at once; the queue is bounded, and a full one makes the asker wait (as reading
//! in line did) rather than grow or forget.

use std::{
    sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender},
    thread::JoinHandle,
    time::{Duration, Instant},
};

use crate::{
    proc::process::{self, RankEnv},
    symbolize::objects::SpaceRead,
};

/// What to read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Ask {
    /// A process's maps and root directory, for naming its objects; `generation`
    /// counts its execs when asked (an answer about an older program is dropped).
    Space { pid: u32, generation: u32 },
    /// A process's command name.
    Comm(u32),
    /// A thread's name and start time.
    Thread { pid: u32, tid: u32 },
    /// A rank's environment: at its first MPI call, or (`at_exec`) when it exec'd.
    Env { pid: u32, at_exec: bool },
}

/// What was read.
#[derive(Debug)]
pub(super) enum Answer {
    /// See [`Ask::Space`].
    Space { read: SpaceRead, generation: u32 },
    /// See [`Ask::Comm`].
    Comm { pid: u32, comm: Option<String> },
    /// See [`Ask::Thread`].
    Thread {
        pid: u32,
        tid: u32,
        name: Option<String>,
        start_ns: Option<u64>,
    },
    /// See [`Ask::Env`].
    Env {
        pid: u32,
        env: RankEnv,
        at_exec: bool,
    },
}

/// Asks not yet taken by the worker before an asker waits.
const QUEUE: usize = 4096;

/// Longest wait for the answers before a snapshot (the reads are non-blocking and
/// bounded; this only guards against a stalled /proc).
const FLUSH_WAIT: Duration = Duration::from_secs(2);

/// The worker and its two channels.
pub(super) struct Naming {
    asks: Option<SyncSender<Ask>>,
    answers: Receiver<Answer>,
    /// Asks sent and answers taken, to know when all are in.
    sent: u64,
    taken: u64,
    worker: Option<JoinHandle<()>>,
}

fn read(ask: Ask) -> Answer {
    match ask {
        Ask::Space { pid, generation } => Answer::Space {
            read: SpaceRead::read(pid),
            generation,
        },
        Ask::Comm(pid) => Answer::Comm {
            pid,
            comm: process::comm(pid),
        },
        Ask::Thread { pid, tid } => Answer::Thread {
            pid,
            tid,
            name: process::thread_name(pid, tid),
            start_ns: process::thread_start_ns(pid, tid),
        },
        Ask::Env { pid, at_exec } => Answer::Env {
            pid,
            env: process::mpi_env(pid),
            at_exec,
        },
    }
}

impl Naming {
    /// Starts the worker.
    pub fn start() -> Self {
        let (ask_tx, ask_rx) = mpsc::sync_channel::<Ask>(QUEUE);
        let (answer_tx, answers) = mpsc::channel();
        let worker = std::thread::Builder::new()
            .name("rtm-naming".into())
            .spawn(move || {
                // Ends when the engine drops its sender (or stops taking answers).
                while let Ok(ask) = ask_rx.recv() {
                    if answer_tx.send(read(ask)).is_err() {
                        break;
                    }
                }
            })
            .ok();
        Self {
            asks: worker.is_some().then_some(ask_tx),
            answers,
            sent: 0,
            taken: 0,
            worker,
        }
    }

    /// Asks for a read; returns the answer at once when there is no worker (a thread
    /// could not be started), so nothing is lost either way.
    pub fn ask(&mut self, ask: Ask) -> Option<Answer> {
        match &self.asks {
            Some(tx) if tx.send(ask).is_ok() => {
                self.sent += 1;
                None
            }
            _ => Some(read(ask)),
        }
    }

    /// The answers in so far, without waiting.
    pub fn take(&mut self, f: &mut dyn FnMut(Answer)) {
        while let Ok(a) = self.answers.try_recv() {
            self.taken += 1;
            f(a);
        }
    }

    /// Every answer still due (before a snapshot), waiting for them up to
    /// [`FLUSH_WAIT`].
    pub fn flush(&mut self, f: &mut dyn FnMut(Answer)) {
        let deadline = Instant::now() + FLUSH_WAIT;
        while self.taken < self.sent {
            match self
                .answers
                .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            {
                Ok(a) => {
                    self.taken += 1;
                    f(a);
                }
                Err(RecvTimeoutError::Timeout) => {
                    log::warn!(
                        "names: {} reads of /proc still pending; going on without them",
                        self.sent - self.taken
                    );
                    return;
                }
                Err(RecvTimeoutError::Disconnected) => return,
            }
        }
    }
}

impl Drop for Naming {
    fn drop(&mut self) {
        // The worker ends once its queue's sender is gone; its current read is bounded.
        self.asks = None;
        if let Some(w) = self.worker.take() {
            let _ = w.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_ask_is_answered_and_flush_waits_for_them() {
        let mut n = Naming::start();
        let me = std::process::id();
        assert!(n.ask(Ask::Comm(me)).is_none(), "the worker reads it");
        assert!(n.ask(Ask::Thread { pid: me, tid: me }).is_none());
        assert!(
            n.ask(Ask::Space {
                pid: me,
                generation: 3
            })
            .is_none()
        );
        let mut got = Vec::new();
        n.flush(&mut |a| got.push(a));
        assert_eq!(got.len(), 3);
        let comm = process::comm(me);
        assert!(comm.is_some());
        assert!(
            got.iter()
                .any(|a| matches!(a, Answer::Comm { pid, comm: c } if *pid == me && *c == comm))
        );
        assert!(got.iter().any(|a| matches!(
            a,
            Answer::Thread { tid, start_ns: Some(_), .. } if *tid == me
        )));
        assert!(got.iter().any(|a| matches!(
            a,
            Answer::Space { read, generation: 3 } if read.pid() == me
        )));
        // Nothing more is due: take returns at once.
        n.take(&mut |_| panic!("no answer is due"));
    }
}
