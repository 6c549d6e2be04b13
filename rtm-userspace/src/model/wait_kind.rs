//! What a wait is for: acquiring a lock (contention: the thread could run but another
//! holds what it needs) or waiting for work or for another thread (a condition
//! variable's signal, a semaphore's post, a barrier's last arrival, a thread's exit, a
//! language runtime parking an idle thread). Full mode knows it from the pthread call;
//! contention mode sees only a futex word, and tells it from what is known of the word
//! (its name, a glibc mutex holder read at it) and from the call stacks sampled at its
//! waits; with none of those it says the kind is unknown rather than guess.

use serde::{Deserialize, Serialize};

use rtm_common::Primitive;

/// A wait's kind.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum WaitKind {
    /// A mutex's acquisition (pthread, a C library's internal lock, Rust's std).
    Mutex,
    /// A reader-writer lock's acquisition.
    Rwlock,
    /// A spinlock's acquisition.
    Spinlock,
    /// A condition variable: waiting for a signal (typically for work).
    Condvar,
    /// A semaphore: waiting for a post.
    Semaphore,
    /// A barrier: waiting for the others to arrive.
    Barrier,
    /// Waiting for a thread to exit (pthread_join).
    Join,
    /// A language runtime parking an idle thread (Go's scheduler, a thread park).
    Park,
    /// Nothing tells (contention mode without a stack, a holder or a name).
    #[default]
    Unknown,
}

/// The bytes a pthread object spans in glibc on x86-64, for the futex words inside it
/// (a condition variable's sequence word lies 8 bytes into its pthread_cond_t): full
/// mode keys the object by its address, the kernel's waits by the word's.
pub fn pthread_extent(p: Primitive) -> Option<u64> {
    Some(match p {
        Primitive::Mutex => 40,
        Primitive::Cond => 48,
        Primitive::RwLock => 56,
        Primitive::Barrier | Primitive::Sem => 32,
        _ => return None,
    })
}

impl WaitKind {
    /// Acquiring a lock another thread holds: the waits that are contention.
    pub fn is_contention(self) -> bool {
        matches!(self, Self::Mutex | Self::Rwlock | Self::Spinlock)
    }

    /// Waiting for work or for another thread to do something: not contention.
    pub fn is_idle(self) -> bool {
        !self.is_contention() && self != Self::Unknown
    }

    /// Its name in the outputs.
    pub fn name(self) -> &'static str {
        match self {
            Self::Mutex => "mutex",
            Self::Rwlock => "rwlock",
            Self::Spinlock => "spinlock",
            Self::Condvar => "condvar",
            Self::Semaphore => "semaphore",
            Self::Barrier => "barrier",
            Self::Join => "join",
            Self::Park => "park",
            Self::Unknown => "unknown",
        }
    }

    /// The kind of a pthread object (full mode); `None` for a futex word.
    pub fn of_primitive(p: Primitive) -> Option<Self> {
        Some(match p {
            Primitive::Mutex => Self::Mutex,
            Primitive::RwLock => Self::Rwlock,
            Primitive::Spin => Self::Spinlock,
            Primitive::Sem => Self::Semaphore,
            Primitive::Cond => Self::Condvar,
            Primitive::Barrier => Self::Barrier,
            Primitive::Thread => Self::Join,
            Primitive::Futex => return None,
        })
    }

    /// The kind a futex word's name tells: a thread's exit (a join's word), a condition
    /// variable's variable.
    pub fn of_name(name: &str) -> Option<Self> {
        if name.starts_with("exit of thread ") {
            Some(Self::Join)
        } else if name.contains("(condvar, group ") {
            Some(Self::Condvar)
        } else {
            None
        }
    }

    /// The kind a waiter's call stack tells, innermost frame first (named as the
    /// outputs name them, `function+0xOFF (file:line) ...`): the innermost frame of a
    /// known waiting function decides (a condition variable's wait that re-takes its
    /// mutex is in the mutex's lock wait).
    pub fn of_frames<'a>(frames: impl IntoIterator<Item = &'a str>) -> Option<Self> {
        frames.into_iter().find_map(|f| of_function(function(f)))
    }
}

/// The function of a named frame: up to its offset or source.
fn function(frame: &str) -> &str {
    let end = frame.find(['+', ' ']).unwrap_or(frame.len());
    &frame[..end]
}

/// Functions whose frames tell a wait's kind, by a part of their names, tried in order.
/// glibc's (any of its aliases: `___pthread_mutex_lock`, `__GI___lll_lock_wait`), Rust
/// std's futex locks, parking_lot's, Go's runtime.
const FUNCTIONS: [(&str, WaitKind); 25] = [
    // Go's runtime: its locks (lock2, over runtime.futexsleep) are mutexes; a thread
    // parked idle sleeps on its M's note.
    ("runtime.lock2", WaitKind::Mutex),
    ("lll_lock_wait", WaitKind::Mutex),
    ("lll_clocklock_wait", WaitKind::Mutex),
    ("pthread_mutex_", WaitKind::Mutex),
    ("Mutex>::lock_contended", WaitKind::Mutex),
    ("RawMutex>::lock_slow", WaitKind::Mutex),
    ("pthread_rwlock_", WaitKind::Rwlock),
    ("RwLock>::read_contended", WaitKind::Rwlock),
    ("RwLock>::write_contended", WaitKind::Rwlock),
    ("RawRwLock>::lock_", WaitKind::Rwlock),
    ("pthread_spin_", WaitKind::Spinlock),
    ("pthread_cond_", WaitKind::Condvar),
    ("Condvar>::wait", WaitKind::Condvar),
    ("sem_wait", WaitKind::Semaphore),
    ("sem_timedwait", WaitKind::Semaphore),
    ("sem_clockwait", WaitKind::Semaphore),
    ("pthread_barrier_wait", WaitKind::Barrier),
    ("pthread_join", WaitKind::Join),
    ("pthread_clockjoin", WaitKind::Join),
    ("pthread_timedjoin", WaitKind::Join),
    ("thread::park", WaitKind::Park),
    ("Parker>::park", WaitKind::Park),
    ("runtime.notesleep", WaitKind::Park),
    ("runtime.notetsleep", WaitKind::Park),
    ("runtime.mPark", WaitKind::Park),
];

fn of_function(name: &str) -> Option<WaitKind> {
    if name.is_empty() || name.starts_with("0x") {
        return None;
    }
    FUNCTIONS
        .iter()
        .find(|(part, _)| name.contains(part))
        .map(|&(_, kind)| kind)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stacks_tell_each_kind_and_the_innermost_waiting_function_decides() {
        let k = |frames: &[&str]| WaitKind::of_frames(frames.iter().copied());
        assert_eq!(
            k(&[
                "__GI___lll_lock_wait+0x2b (lowlevellock.c:49) [inlined: futex_wait]",
                "___pthread_mutex_lock+0x111 (pthread_mutex_lock.c:93)",
                "worker+0x146 (demo.c:53)",
            ]),
            Some(WaitKind::Mutex)
        );
        // A condition variable's wait, and its re-taking of the mutex after the signal.
        let cond = [
            "__futex_abstimed_wait_common+0xc6 (futex-internal.c:87)",
            "___pthread_cond_wait+0x2a1 (pthread_cond_wait.c:503)",
            "pool_worker+0x40 (pool.c:30)",
        ];
        assert_eq!(k(&cond), Some(WaitKind::Condvar));
        assert_eq!(
            k(&[
                "__GI___lll_lock_wait+0x2b",
                "__pthread_mutex_cond_lock+0x30",
                "___pthread_cond_wait+0x2a1",
            ]),
            Some(WaitKind::Mutex)
        );
        assert_eq!(
            k(&[
                "__futex_abstimed_wait_common+0xc6",
                "__pthread_clockjoin_ex+0x132 (pthread_join_common.c:102)",
                "main+0x71 (demo.c:66)",
            ]),
            Some(WaitKind::Join)
        );
        assert_eq!(
            k(&[
                "do_futex_wait+0x1",
                "__new_sem_wait_slow64+0x80",
                "sem_clockwait+0x1"
            ]),
            Some(WaitKind::Semaphore)
        );
        assert_eq!(
            k(&[
                "syscall+0x1d",
                "<std::sys::sync::mutex::futex::Mutex>::lock_contended+0x10 (futex.rs:61)",
            ]),
            Some(WaitKind::Mutex)
        );
        assert_eq!(
            k(&[
                "runtime.futex+0x23",
                "runtime.futexsleep+0x40",
                "runtime.notesleep+0x87"
            ]),
            Some(WaitKind::Park)
        );
        // Go's runtime lock sleeps in the same futexsleep: its lock2 decides.
        assert_eq!(
            k(&[
                "runtime.futex+0x23",
                "runtime.futexsleep+0x40",
                "runtime.lock2+0x1a5 (lock_futex.go:107)",
                "runtime.semacquire1+0x9c (sema.go:140)",
            ]),
            Some(WaitKind::Mutex)
        );
        // No waiting function known, no frames, an unnamed address: nothing told.
        assert_eq!(k(&["syscall+0x1d", "main+0x10 (x.c:3)"]), None);
        assert_eq!(k(&[]), None);
        assert_eq!(k(&["0x7fffffffe000"]), None);
    }

    #[test]
    fn names_and_primitives_tell_kinds_and_only_locks_are_contention() {
        assert_eq!(WaitKind::of_name("exit of thread 42"), Some(WaitKind::Join));
        assert_eq!(
            WaitKind::of_name("ready_cond (condvar, group 1)"),
            Some(WaitKind::Condvar)
        );
        assert_eq!(WaitKind::of_name("audit_lock"), None);
        assert_eq!(
            WaitKind::of_primitive(Primitive::Cond),
            Some(WaitKind::Condvar)
        );
        assert_eq!(WaitKind::of_primitive(Primitive::Futex), None);
        assert!(WaitKind::Mutex.is_contention() && !WaitKind::Mutex.is_idle());
        assert!(WaitKind::Condvar.is_idle() && !WaitKind::Condvar.is_contention());
        assert!(!WaitKind::Unknown.is_idle() && !WaitKind::Unknown.is_contention());
    }
}
