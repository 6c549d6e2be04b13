//! Who is blocked now, on what, held by whom, and the cycles among them (deadlocks).
//! Pure: the futex word a thread waits on and the bytes around it in, holders and
//! cycles out.
//!
//! A glibc mutex (`struct __pthread_mutex_s`, x86-64) is `int __lock; unsigned
//! __count; int __owner; unsigned __nusers; int __kind; ...`: `__owner` is the holder's
//! TID for every type. A normal, recursive, error-checking or adaptive mutex's waiters
//! sleep on `__lock` with the value 2; a robust one's `__lock` holds the owner's TID
//! (with the waiters bit); a priority-inheritance one is waited on with FUTEX_LOCK_PI,
//! its word holding the owner's TID. Condition variables, barriers, semaphores and
//! other futexes have no owner: their waits say so. The offsets are checked against
//! the installed headers by a test (tests/workloads/layout_probe.c).

use serde::Serialize;

use super::wait_kind::WaitKind;

/// Offset of `__owner` in `pthread_mutex_t`.
pub const MUTEX_OWNER: usize = 8;
/// Offset of `__kind` in `pthread_mutex_t`.
pub const MUTEX_KIND: usize = 16;
/// Bytes of a mutex read to judge it.
pub const MUTEX_BYTES: usize = 20;

/// `__kind` bits: type (normal, recursive, error-checking, adaptive), robust.
const KIND_TYPE: i32 = 3;
const KIND_ROBUST: i32 = 16;
/// A robust mutex whose owner died, or that can no longer be recovered.
const OWNER_DEAD: [i32; 2] = [0x7fff_ffff, 0x7fff_fffe];

/// Futex commands that take a priority-inheritance lock.
const FUTEX_LOCK_PI: u32 = 6;
const FUTEX_LOCK_PI2: u32 = 13;

/// What a wait's word says of its holder.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Holder {
    /// A mutex held by this thread (a TID, possibly of another process for a
    /// process-shared mutex).
    Thread {
        /// The holder's TID.
        tid: u32,
        /// The mutex's type.
        mutex: std::borrow::Cow<'static, str>,
    },
    /// No holder can be known: why.
    Unknown {
        /// Why.
        why: std::borrow::Cow<'static, str>,
    },
}

/// The holder of the futex word a thread waits on with `op`, from `bytes` read at the
/// word (up to [`MUTEX_BYTES`]): [`rtm_common::mutex_holder`], the rule the eBPF side
/// applies at each wait's start, with the mutex's type and why when there is none.
pub fn holder(op: u64, bytes: &[u8]) -> Holder {
    let int = |at: usize| -> Option<u32> {
        Some(u32::from_le_bytes(bytes.get(at..at + 4)?.try_into().ok()?))
    };
    let Some(lock) = int(0) else {
        return Holder::Unknown {
            why: "its word could not be read".into(),
        };
    };
    let cmd = (op & 0x7f) as u32;
    let words = [
        lock,
        int(4).unwrap_or(0),
        int(MUTEX_OWNER).unwrap_or(0),
        int(12).unwrap_or(0),
        int(MUTEX_KIND).unwrap_or(u32::MAX),
    ];
    let tid = rtm_common::mutex_holder(cmd, words);
    let (owner, kind) = (words[2] as i32, words[4] as i32);
    if matches!(cmd, FUTEX_LOCK_PI | FUTEX_LOCK_PI2) {
        return if tid == 0 {
            Holder::Unknown {
                why: "the priority-inheritance lock has no owner now".into(),
            }
        } else {
            Holder::Thread {
                tid,
                mutex: "priority-inheritance".into(),
            }
        };
    }
    if tid == 0 {
        return if OWNER_DEAD.contains(&owner) && kind & KIND_ROBUST != 0 {
            Holder::Unknown {
                why: "a robust mutex whose owner died".into(),
            }
        } else {
            not_a_mutex()
        };
    }
    let mutex = match (kind & KIND_ROBUST != 0, kind & KIND_TYPE) {
        (true, _) => "robust",
        (false, 0) => "normal",
        (false, 1) => "recursive",
        (false, 2) => "error-checking",
        _ => "adaptive",
    };
    Holder::Thread {
        tid,
        mutex: mutex.into(),
    }
}

/// A private mutex's owner field naming a thread of another process: a private mutex
/// is owned in its own process only (a copy left by a fork, or no mutex at all).
pub fn foreign_owner() -> Holder {
    Holder::Unknown {
        why: "its owner field names a thread of another process, and a private mutex is \
              owned in its own process only (a copy inherited across fork, or not a mutex)"
            .into(),
    }
}

/// Why a word has no holder when its bytes name none.
const NO_OWNER: &str = "no owner: not a mutex (condition variable, barrier, semaphore, join, \
                        other futex) or one just released";

fn not_a_mutex() -> Holder {
    Holder::Unknown {
        why: NO_OWNER.into(),
    }
}

/// A thread blocked now.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct BlockedThread {
    /// Process.
    pub pid: u32,
    /// Thread.
    pub tid: u32,
    /// Its name.
    pub name: Option<String>,
    /// The futex word it waits on.
    pub word: u64,
    /// The word's name (a variable, or the code that uses it), when known.
    pub word_name: Option<String>,
    /// Who holds it.
    pub holder: Holder,
    /// The holder's process, when it is a thread that exists.
    pub holder_pid: Option<u32>,
    /// About how long since it last ran (blocked at least that long).
    pub off_cpu_ns: Option<u64>,
    /// How long its wait has lasted, when the tracer saw it begin.
    pub waited_ns: Option<u64>,
    /// Its user stack, innermost first, named.
    pub stack: Vec<String>,
    /// Its context switches so far, read before the rest: unchanged on a second read,
    /// it did not run in between (so it neither left its wait nor released a lock).
    #[serde(skip)]
    pub switches: Option<u64>,
}

impl BlockedThread {
    /// Whether `again`, a later read of the same thread, shows the same wait for the same
    /// holder with no run in between.
    pub fn unchanged_in(&self, again: &BlockedThread) -> bool {
        self.switches.is_some()
            && again.switches == self.switches
            && again.word == self.word
            && again.holder == self.holder
    }
}

/// Threads waiting on each other in a cycle: a deadlock.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct Cycle {
    /// Its threads as (pid, tid), each waiting for the next's mutex (the last for the
    /// first's).
    pub threads: Vec<(u32, u32)>,
}

/// The cycles of the waits-for graph of `threads` (each thread waits for at most one
/// holder), each once, starting at its smallest (pid, tid).
pub fn cycles(threads: &[BlockedThread]) -> Vec<Cycle> {
    use std::collections::HashMap;
    let by_tid: HashMap<u32, usize> = threads
        .iter()
        .enumerate()
        .map(|(i, t)| (t.tid, i))
        .collect();
    let next = |i: usize| -> Option<usize> {
        match threads[i].holder {
            Holder::Thread { tid, .. } => by_tid.get(&tid).copied(),
            Holder::Unknown { .. } => None,
        }
    };
    let mut out: Vec<Cycle> = Vec::new();
    // 0: not seen, 1: on the current path, 2: done.
    let mut state = vec![0u8; threads.len()];
    for start in 0..threads.len() {
        let mut path = Vec::new();
        let mut at = Some(start);
        while let Some(i) = at {
            match state[i] {
                0 => {
                    state[i] = 1;
                    path.push(i);
                    at = next(i);
                }
                1 => {
                    // Back on this path: the cycle is the path from i on.
                    let from = path.iter().position(|&p| p == i).expect("on the path");
                    let mut ring: Vec<(u32, u32)> = path[from..]
                        .iter()
                        .map(|&p| (threads[p].pid, threads[p].tid))
                        .collect();
                    let min = (0..ring.len()).min_by_key(|&k| ring[k]).expect("non-empty");
                    ring.rotate_left(min);
                    out.push(Cycle { threads: ring });
                    break;
                }
                _ => break,
            }
        }
        for p in path {
            state[p] = 2;
        }
    }
    out.sort_by(|a, b| a.threads.cmp(&b.threads));
    out
}

/// A deadlock found while tracing.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct DeadlockView {
    /// When it was found (CLOCK_MONOTONIC ns).
    pub detected_ns: u64,
    /// Its threads, each waiting for the next's mutex (the last for the first's), with
    /// their words, holders and stacks.
    pub threads: Vec<BlockedThread>,
}

/// The blocked threads and their deadlocks, for the outputs.
#[derive(Debug, Clone, Default, PartialEq, Serialize, serde::Deserialize)]
pub struct BlockedView {
    /// When the snapshot was taken (CLOCK_MONOTONIC ns).
    pub at_ns: u64,
    /// How long taking it took, ns.
    pub took_ns: u64,
    /// Threads of the traced processes looked at.
    pub threads_seen: usize,
    /// Those blocked in a futex wait, longest blocked first.
    pub blocked: Vec<BlockedThread>,
    /// The deadlocks among them.
    pub cycles: Vec<Cycle>,
    /// Threads waiting to acquire something whose holder cannot be known: a cycle
    /// through them would not be seen, so "no deadlock" cannot be said.
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub cannot_tell: Vec<Undecided>,
}

/// A blocked thread through which a deadlock could run unseen.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct Undecided {
    /// Process.
    pub pid: u32,
    /// Thread.
    pub tid: u32,
    /// The futex word it waits on.
    pub word: u64,
    /// The word's name, when known.
    pub word_name: Option<String>,
    /// What its stack says it waits for (`unknown` with no stack that tells).
    pub wait_kind: WaitKind,
    /// Why its holder is not known.
    pub why: String,
}

/// The blocked threads whose waits could be part of a deadlock no owner field shows:
/// waits to acquire (a mutex, reader-writer lock, spinlock, semaphore, or a wait whose
/// stack does not say what it is for) with no holder known. Waits for work (condition
/// variables, barriers, joins, a runtime parking an idle thread) are not: whoever ends
/// them holds nothing they wait for.
pub fn undecided(threads: &[BlockedThread]) -> Vec<Undecided> {
    threads
        .iter()
        .filter_map(|t| {
            let Holder::Unknown { why } = &t.holder else {
                return None;
            };
            let kind = WaitKind::of_frames(t.stack.iter().map(String::as_str))
                .unwrap_or(WaitKind::Unknown);
            if kind.is_idle() && kind != WaitKind::Semaphore {
                return None;
            }
            // A glibc mutex (its lock call on the stack) with no owner written is being
            // handed over: its next owner writes it as it returns from the lock, before
            // it could block anywhere, so it is running or about to, not in a cycle.
            if why == NO_OWNER && t.stack.iter().any(|f| f.contains("pthread_mutex_")) {
                return None;
            }
            let why = match kind {
                WaitKind::Semaphore => "a semaphore has no owner: which thread will post it \
                                        cannot be read"
                    .to_owned(),
                WaitKind::Unknown => format!(
                    "what it waits for is not known (its stack \
                                              names no waiting function), and {why}"
                ),
                _ => format!("a lock whose owner cannot be read: {why}"),
            };
            Some(Undecided {
                pid: t.pid,
                tid: t.tid,
                word: t.word,
                word_name: t.word_name.clone(),
                wait_kind: kind,
                why,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mutex(lock: i32, owner: i32, kind: i32) -> Vec<u8> {
        let mut b = vec![0u8; MUTEX_BYTES];
        b[0..4].copy_from_slice(&lock.to_le_bytes());
        b[MUTEX_OWNER..MUTEX_OWNER + 4].copy_from_slice(&owner.to_le_bytes());
        b[MUTEX_KIND..MUTEX_KIND + 4].copy_from_slice(&kind.to_le_bytes());
        // A held mutex counts its user.
        b[12..16].copy_from_slice(&u32::from(owner != 0).to_le_bytes());
        b
    }

    fn blocked_on(tid: u32, holder: Holder, stack: &[&str]) -> BlockedThread {
        BlockedThread {
            pid: 1,
            tid,
            name: None,
            word: 0x1000,
            word_name: None,
            holder,
            holder_pid: None,
            off_cpu_ns: None,
            waited_ns: None,
            stack: stack.iter().map(|s| (*s).to_owned()).collect(),
            switches: None,
        }
    }

    #[test]
    fn waits_to_acquire_with_no_known_holder_leave_deadlocks_undecided() {
        let none = || not_a_mutex();
        let threads = [
            // Two binary semaphores taken in opposite orders.
            blocked_on(
                10,
                none(),
                &[
                    "do_futex_wait+0x1",
                    "__new_sem_wait_slow64+0x80",
                    "sem_wait+0x9",
                ],
            ),
            // A lock that is no glibc mutex (Rust's std).
            blocked_on(
                11,
                none(),
                &[
                    "syscall+0x1d",
                    "<std::sys::sync::mutex::futex::Mutex>::lock_contended+0x10",
                ],
            ),
            // A wait whose stack tells nothing.
            blocked_on(12, none(), &[]),
            // Idle waits: a condition variable, a join, a Go runtime park.
            blocked_on(
                13,
                none(),
                &[
                    "__futex_abstimed_wait_common+0xc6",
                    "___pthread_cond_wait+0x2a1",
                ],
            ),
            blocked_on(
                14,
                none(),
                &[
                    "__futex_abstimed_wait_common+0xc6",
                    "__pthread_clockjoin_ex+0x132",
                ],
            ),
            blocked_on(
                15,
                none(),
                &["runtime.futex+0x23", "runtime.notesleep+0x86"],
            ),
            // A glibc mutex with its holder known.
            blocked_on(
                16,
                Holder::Thread {
                    tid: 99,
                    mutex: "normal".into(),
                },
                &["__GI___lll_lock_wait+0x2b"],
            ),
            // A glibc mutex handed over (its next owner has not written itself yet).
            blocked_on(
                17,
                none(),
                &["__GI___lll_lock_wait+0x2b", "___pthread_mutex_lock+0x111"],
            ),
        ];
        let u = undecided(&threads);
        let got: Vec<(u32, WaitKind)> = u.iter().map(|u| (u.tid, u.wait_kind)).collect();
        assert_eq!(
            got,
            vec![
                (10, WaitKind::Semaphore),
                (11, WaitKind::Mutex),
                (12, WaitKind::Unknown)
            ]
        );
        assert!(u[0].why.contains("semaphore has no owner"), "{}", u[0].why);
        assert!(undecided(&threads[3..]).is_empty());
    }

    #[test]
    fn each_mutex_type_names_its_holder_and_others_say_unknown() {
        let t = |h: Holder| match h {
            Holder::Thread { tid, mutex } => Some((tid, mutex.into_owned())),
            Holder::Unknown { .. } => None,
        };
        assert_eq!(
            t(holder(0x80, &mutex(2, 77, 0))),
            Some((77, "normal".to_owned()))
        );
        assert_eq!(
            t(holder(0, &mutex(2, 77, 1))),
            Some((77, "recursive".to_owned()))
        );
        assert_eq!(
            t(holder(0, &mutex(2, 77, 2))),
            Some((77, "error-checking".to_owned()))
        );
        assert_eq!(
            t(holder(0, &mutex(2, 77, 128))),
            Some((77, "normal".to_owned()))
        );
        // Robust: the word holds the owner's TID and the waiters bit.
        let robust = (77u32 | 0x8000_0000) as i32;
        assert_eq!(
            t(holder(0, &mutex(robust, 77, 16))),
            Some((77, "robust".to_owned()))
        );
        // Priority inheritance: FUTEX_LOCK_PI on a word holding the owner.
        assert_eq!(
            t(holder(6 | 0x80, &mutex(robust, 0, 32))),
            Some((77, "priority-inheritance".to_owned()))
        );
        // Not mutexes: a condition variable's sequence word, a semaphore, a word with
        // garbage around it.
        assert_eq!(t(holder(9, &mutex(5, 0, 0))), None);
        assert_eq!(t(holder(0, &mutex(1, 77, 0))), None);
        assert_eq!(t(holder(0, &mutex(2, 77, 0x4000))), None);
        assert_eq!(t(holder(0, &mutex(2, -3, 0))), None);
        // glibc's stdio lock (`_IO_lock_t`: lock, count, owner pointer) sleeps on a word
        // of 2 too: the pointer's low half is no TID (seen as a waiter's "holder" of
        // stdout's lock in CI).
        assert_eq!(t(holder(0, &mutex(2, 335_894_208, 0))), None);
        assert_eq!(
            t(holder(0, &mutex(2, 4 * 1024 * 1024, 0))),
            Some((4194304, "normal".to_owned()))
        );
        assert_eq!(t(holder(0, &[1, 2])), None);
        // A Rust `std::sync::Mutex<u64>`: its word (2: locked, waiters), the poison
        // flag, then the protected counter where `__owner` would be, its high half as
        // `__nusers`: no glibc mutex, no holder (seen as "held by 3703333").
        let mut rust = mutex(2, 3_703_333, 0);
        rust[12..16].fill(0);
        assert_eq!(t(holder(0x89, &rust)), None);
        // A count on a mutex that is not recursive: no glibc mutex either.
        let mut counted = mutex(2, 77, 0);
        counted[4] = 1;
        assert_eq!(t(holder(0x80, &counted)), None);
        counted[MUTEX_KIND] = 1;
        assert_eq!(
            t(holder(0x80, &counted)),
            Some((77, "recursive".to_owned()))
        );
        assert!(matches!(
            holder(0, &mutex(robust, 0x7fff_ffff, 16)),
            Holder::Unknown { why } if why.contains("died")
        ));
    }

    fn blocked(tid: u32, waits_for: Option<u32>) -> BlockedThread {
        BlockedThread {
            pid: 1,
            tid,
            name: None,
            word: 0,
            word_name: None,
            holder: match waits_for {
                Some(tid) => Holder::Thread {
                    tid,
                    mutex: "normal".into(),
                },
                None => Holder::Unknown { why: "x".into() },
            },
            holder_pid: Some(1),
            off_cpu_ns: None,
            waited_ns: None,
            stack: Vec::new(),
            switches: Some(5),
        }
    }

    /// A second read confirms a wait only when the thread did not run in between and
    /// waits on the same word for the same holder.
    #[test]
    fn a_wait_is_unchanged_only_without_a_run_in_between() {
        let first = blocked(7, Some(8));
        assert!(first.unchanged_in(&first.clone()));
        let ran = BlockedThread {
            switches: Some(6),
            ..first.clone()
        };
        assert!(!first.unchanged_in(&ran));
        let other_holder = blocked(7, Some(9));
        assert!(!first.unchanged_in(&other_holder));
        let unknown = BlockedThread {
            switches: None,
            ..first.clone()
        };
        assert!(!unknown.unchanged_in(&unknown.clone()));
    }

    #[test]
    fn cycles_are_found_once_and_chains_are_not_cycles() {
        let threads = [
            blocked(12, Some(11)),
            blocked(11, Some(12)),
            blocked(20, Some(21)),
            blocked(21, Some(22)),
            blocked(22, Some(20)),
            // A chain into a cycle, and one ending at a running thread.
            blocked(30, Some(11)),
            blocked(40, Some(41)),
            blocked(41, None),
        ];
        let c = cycles(&threads);
        assert_eq!(
            c.iter().map(|c| c.threads.clone()).collect::<Vec<_>>(),
            vec![vec![(1, 11), (1, 12)], vec![(1, 20), (1, 21), (1, 22)]]
        );
        assert!(cycles(&threads[5..]).is_empty());
    }
}
