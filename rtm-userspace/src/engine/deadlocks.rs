//! Live deadlock detection: every quarter second, the traced threads asleep in a futex
//! wait for a while (from the kernel's wait slots; in full mode, /proc), the holder of
//! each one's mutex (from the mutex itself), and the cycles among them. A cycle is
//! confirmed by reading its threads again: each still in the same wait, its word still
//! held by the next, so every edge held at the same instant. Each deadlock is reported
//! once, at once on stderr, and kept for the results.

use std::{
    collections::{HashMap, HashSet},
    time::Duration,
};

use super::{
    Engine,
    blocked::{Namers, read_thread},
};
use crate::{
    model::{
        SyncGraph,
        blocked::{self, BlockedThread, DeadlockView, Holder, Undecided},
    },
    output::{blocked_report::describe, text::Shown},
    proc::process::monotonic_ns,
};

/// How often to look.
pub(super) const CHECK_EVERY: Duration = Duration::from_millis(250);
/// How long a wait must have lasted to be looked at (a deadlock lasts for ever; most
/// waits end sooner).
const MIN_WAIT_NS: u64 = 200_000_000;
/// Threads read through /proc per check when the source cannot say which are asleep.
const MAX_SCANNED: usize = 512;
/// Deadlocks kept for the results (and as many undecided threads).
const MAX_KEPT: usize = 64;
/// Waits with no holder known remembered as judged (then forgotten, to judge again).
const MAX_JUDGED: usize = 4096;
/// Waits with no holder known read with their stacks per check.
const MAX_JUDGED_PER_CHECK: usize = 16;

/// The deadlocks found so far.
#[derive(Debug, Default)]
pub(super) struct Deadlocks {
    /// Found, in order.
    pub found: Vec<DeadlockView>,
    /// Each one's threads and words, so it is reported once.
    seen: HashSet<Vec<(u32, u64)>>,
    /// Checks made.
    checks: u64,
    /// Threads blocked where a deadlock cannot be ruled out (no holder can be known),
    /// each said once.
    pub undecided: Vec<Undecided>,
    /// The waits (pid, tid, word) with no holder known already judged, undecided or
    /// not (a wait for work), so each is read with its stack once.
    judged: HashSet<(u32, u32, u64)>,
}

impl Engine {
    /// Looks for deadlocks; returns whether one was found now.
    pub(super) fn check_deadlocks(&mut self) -> bool {
        let now = monotonic_ns();
        let quiet_since = now.saturating_sub(MIN_WAIT_NS);
        let live: HashSet<u32> = self.all_pids().into_iter().collect();
        // Threads that did nothing traced for a while: (pid, tid, nothing since).
        let threads: Vec<(u32, u32, bool)> = self
            .state
            .model
            .threads()
            .filter(|(k, n)| live.contains(&k.pid) && n.exited_ns.is_none())
            .map(|(k, n)| (k.pid, k.tid, n.last_event_ns <= quiet_since))
            .collect();
        // (pid, tid) -> when its wait began, where the source knows: waits seen to begin.
        let knows = self.source.knows_asleep();
        let mut asleep: Vec<(u32, u32, Option<u64>)> = if knows {
            self.source
                .asleep(
                    &mut threads.iter().map(|&(p, t, _)| (p, t)),
                    Some(quiet_since),
                )
                .into_iter()
                .map(|a| (a.pid, a.tid, Some(a.start_ns)))
                .collect()
        } else {
            Vec::new()
        };
        // Threads quiet for a while whose wait was not seen to begin (blocked since
        // before the attach; any thread in full mode): through /proc, at most
        // MAX_SCANNED, every fourth check where the source knows the others.
        self.deadlocks.checks += 1;
        if !knows || self.deadlocks.checks % 4 == 1 {
            let known: HashSet<(u32, u32)> = asleep.iter().map(|&(p, t, _)| (p, t)).collect();
            asleep.extend(
                threads
                    .iter()
                    .filter(|&&(p, t, quiet)| quiet && !known.contains(&(p, t)))
                    .take(MAX_SCANNED)
                    .map(|&(p, t, _)| (p, t, None)),
            );
        }
        if asleep.len() < 2 {
            return false;
        }
        let read = |(pid, tid, start): (u32, u32, Option<u64>)| {
            let mut t = read_thread(pid, tid, None)?;
            t.waited_ns = start.map(|s| now.saturating_sub(s));
            Some(t)
        };
        let model = &self.state.model;
        let first: Vec<BlockedThread> = asleep
            .iter()
            .copied()
            .filter_map(read)
            .map(|t| with_semaphore_holder(model, t))
            .collect();
        let cycles = blocked::cycles(&first);
        // When each wait began, where the source knows.
        let starts: HashMap<(u32, u32), Option<u64>> =
            asleep.iter().map(|&(p, t, s)| ((p, t), s)).collect();
        let mut new = false;
        for c in cycles {
            let members: Vec<&BlockedThread> = c
                .threads
                .iter()
                .filter_map(|&(p, t)| first.iter().find(|b| b.pid == p && b.tid == t))
                .collect();
            let key: Vec<(u32, u64)> = members.iter().map(|m| (m.tid, m.word)).collect();
            if self.deadlocks.seen.contains(&key) {
                continue;
            }
            // Again: the same waits...
            if knows {
                let still = self.source.asleep(&mut c.threads.iter().copied(), None);
                let same = c.threads.iter().all(|&(p, t)| match starts.get(&(p, t)) {
                    Some(&Some(start)) => still
                        .iter()
                        .any(|a| a.pid == p && a.tid == t && a.start_ns == start),
                    _ => true,
                });
                if !same {
                    continue;
                }
            }
            // ...and the same words and holders with no run in between (so no lock was
            // let go: every edge held at once), read this time named, with stacks.
            let mut threads: Vec<BlockedThread> = members
                .iter()
                .filter_map(|m| {
                    let mut b = self.read_named(m.pid, m.tid)?;
                    b.waited_ns = m.waited_ns;
                    m.unchanged_in(&b).then_some(b)
                })
                .collect();
            if threads.len() != members.len() {
                continue;
            }
            super::blocked::tell_apart(&mut threads);
            self.deadlocks.seen.insert(key);
            new = true;
            let view = DeadlockView {
                detected_ns: now,
                threads,
            };
            crate::say!("rtm-trace: {}", describe(&view));
            if self.deadlocks.found.len() < MAX_KEPT {
                self.deadlocks.found.push(view);
            } else {
                crate::say!(
                    "rtm-trace: (more than {MAX_KEPT} deadlocks: this one is not in the results)"
                );
            }
        }
        self.judge_unknown_holders(&first);
        new
    }

    /// Thread `tid` of `pid` read again, named and with its stack, a semaphore used as
    /// a lock given its holder.
    fn read_named(&mut self, pid: u32, tid: u32) -> Option<BlockedThread> {
        let state = &mut self.state;
        let mut namers = Namers {
            objects: &mut state.namer,
            code: &mut state.code,
            unwinder: state.join.unwinder(),
            clocks: Default::default(),
        };
        let b = read_thread(pid, tid, Some(&mut namers))?;
        Some(with_semaphore_holder(&state.model, b))
    }

    /// Waits in `first` (quiet for a while, read without stacks) with no holder known,
    /// not judged yet: read again with their stacks; those waiting to acquire (see
    /// [`blocked::undecided`]) and unchanged are said once: a deadlock through them
    /// could not be seen.
    fn judge_unknown_holders(&mut self, first: &[BlockedThread]) {
        if self.deadlocks.judged.len() > MAX_JUDGED {
            self.deadlocks.judged.clear();
        }
        let fresh: Vec<&BlockedThread> = first
            .iter()
            .filter(|t| matches!(t.holder, Holder::Unknown { .. }))
            .filter(|t| !self.deadlocks.judged.contains(&(t.pid, t.tid, t.word)))
            .take(MAX_JUDGED_PER_CHECK)
            .collect();
        for t in fresh {
            self.deadlocks.judged.insert((t.pid, t.tid, t.word));
            let Some(b) = self.read_named(t.pid, t.tid) else {
                continue;
            };
            if !t.unchanged_in(&b) {
                continue;
            }
            for u in blocked::undecided(std::slice::from_ref(&b)) {
                let word = u
                    .word_name
                    .clone()
                    .unwrap_or_else(|| format!("{:#x}", u.word));
                crate::say!(
                    "rtm-trace: cannot tell whether thread {} ({}) is deadlocked: it waits \
                     on {} ({}), and {}",
                    u.tid,
                    Shown(b.name.as_deref().unwrap_or("?")),
                    Shown(&word),
                    u.wait_kind.name(),
                    Shown(&u.why)
                );
                if self.deadlocks.undecided.len() < MAX_KEPT {
                    self.deadlocks.undecided.push(u);
                }
            }
        }
    }
}

/// Full mode: a thread blocked on a semaphore used as a lock waits for the thread that
/// took it last (its word names no owner; the model saw every take and post).
fn with_semaphore_holder(model: &SyncGraph, mut t: BlockedThread) -> BlockedThread {
    if matches!(t.holder, Holder::Unknown { .. })
        && let Some(tid) = model.semaphore_holder(t.pid, t.word)
    {
        t.holder = Holder::Thread {
            tid,
            mutex: "binary semaphore".into(),
        };
        t.holder_pid = Some(t.pid);
    }
    t
}
