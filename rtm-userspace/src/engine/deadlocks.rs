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
    model::blocked::{self, BlockedThread, DeadlockView},
    output::blocked_report::describe,
    target::process::monotonic_ns,
};

/// How often to look.
pub(super) const CHECK_EVERY: Duration = Duration::from_millis(250);
/// How long a wait must have lasted to be looked at (a deadlock lasts for ever; most
/// waits end sooner).
const MIN_WAIT_NS: u64 = 200_000_000;
/// Threads read through /proc per check when the source cannot say which are asleep.
const MAX_SCANNED: usize = 512;
/// Deadlocks kept for the results.
const MAX_KEPT: usize = 64;

/// The deadlocks found so far.
#[derive(Debug, Default)]
pub(super) struct Deadlocks {
    /// Found, in order.
    pub found: Vec<DeadlockView>,
    /// Each one's threads and words, so it is reported once.
    seen: HashSet<Vec<(u32, u64)>>,
    /// Checks made.
    checks: u64,
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
        let first: Vec<BlockedThread> = asleep.iter().copied().filter_map(read).collect();
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
            let state = &mut self.state;
            let mut namers = Namers {
                objects: &mut state.namer,
                code: &mut state.code,
                unwinder: state.join.unwinder(),
                clocks: Default::default(),
            };
            let mut threads: Vec<BlockedThread> = members
                .iter()
                .filter_map(|m| {
                    let mut b = read_thread(m.pid, m.tid, Some(&mut namers))?;
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
        new
    }
}
