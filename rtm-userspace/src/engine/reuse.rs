//! Processes by identity, not by pid alone: a pid the kernel gives again names another
//! process, which must never be merged into the state of the one that had it.
//!
//! In the kernel, the exiting process's last thread takes it out of the filter before
//! its pid can be freed (rtm-ebpf's lifecycle.rs), so no event of a later process with
//! the pid comes in unasked. Here, a process is (pid, start ticks): the engine drops
//! everything of an exited target when its pid is traced again (what was still in
//! flight of it is read first), an exit or a forget names the process it is about,
//! and the names of an ended process's threads are not read again from /proc.

use std::collections::{HashMap, HashSet};

use super::{Engine, Target};
use crate::proc::process;

/// A process: its pid and when it started (clock ticks since boot, /proc's `starttime`;
/// 0 when it could not be read).
pub type ProcKey = (u32, u64);

impl Engine {
    /// The start of the process the engine traces (or traced) as `pid`.
    pub(super) fn start_of(&self, pid: u32) -> Option<u64> {
        self.targets
            .iter()
            .find(|t| t.info.pid == pid)
            .map(|t| t.start)
            .or_else(|| self.followed_starts.get(&pid).copied())
    }

    /// Before `targets` are attached: any other process the engine holds under one of
    /// their pids is gone (its pid was freed), and everything of it is dropped now,
    /// before the new one's events can come in. Returns the new ones' starts.
    pub(super) fn retire_reused(&mut self, targets: &[Target]) -> HashMap<u32, u64> {
        let starts: HashMap<u32, u64> = targets
            .iter()
            .map(|t| (t.pid, process::start_ticks(t.pid, t.pid).unwrap_or(0)))
            .collect();
        let reused: Vec<u32> = starts
            .iter()
            .filter(|(pid, start)| self.start_of(**pid).is_some_and(|s| s != **start))
            .map(|(pid, _)| *pid)
            .collect();
        if !reused.is_empty() {
            self.retire(&reused);
        }
        for pid in starts.keys() {
            self.state.ended.remove(pid);
        }
        starts
    }

    /// Drops everything of the process the engine held as `pid`: another one has the
    /// pid now.
    pub(super) fn retire_pid(&mut self, pid: u32) {
        self.retire(&[pid]);
    }

    fn retire(&mut self, reused: &[u32]) {
        // What is in flight of the old one is its own.
        self.drain(usize::MAX);
        for pid in reused {
            for t in self.targets.iter_mut().filter(|t| t.info.pid == *pid) {
                t.live = false;
            }
            self.followed.retain(|f| f.0 != *pid);
            self.following.remove(pid);
        }
        self.source.stop(reused);
        self.drop_processes(&reused.iter().copied().collect());
    }

    /// Forgets the processes `keys` that no longer run (a daemon's exited targets,
    /// after a grace period): their part of the model, their names and their entries in
    /// the summary. Live ones are left alone, and so is a later process that has the
    /// pid now.
    pub fn forget(&mut self, keys: &[ProcKey]) {
        let live: HashSet<u32> = self
            .targets
            .iter()
            .filter(|t| t.live)
            .map(|t| t.info.pid)
            .chain(self.followed.iter().map(|f| f.0))
            .collect();
        let gone: HashSet<u32> = keys
            .iter()
            .filter(|(pid, start)| {
                !live.contains(pid) && self.start_of(*pid).is_none_or(|s| s == *start)
            })
            .map(|k| k.0)
            .collect();
        if !gone.is_empty() {
            self.drop_processes(&gone);
        }
    }

    fn drop_processes(&mut self, gone: &HashSet<u32>) {
        self.state.forget(gone);
        let list: Vec<u32> = gone.iter().copied().collect();
        self.source.forget(&list);
        self.targets.retain(|t| !gone.contains(&t.info.pid));
        self.followed_starts.retain(|p, _| !gone.contains(p));
    }
}
