//! A process admitted at its exec (the agent's exec watcher), before its attach: into
//! the in-kernel filter, and a target of the engine at once, so the probes already
//! placed for every process that maps its libraries count its calls from its first and
//! the summary lists it even when it ends before its own attach comes.

use super::{Engine, Traced, exits};
use crate::{output::TargetInfo, proc::process};

impl Engine {
    /// The in-kernel filter's maps, for a writer in another thread (the agent's exec
    /// watcher puts processes in at once; this engine then makes them targets).
    pub fn filter_ids(&self) -> Option<crate::probes::FilterIds> {
        self.source.filter_ids()
    }

    /// Admits `pid`, which started at `start` when the caller read it (see the module's
    /// description; it may have ended since: it is then a target that has exited), or
    /// (`admit` false) takes an admitted process out again (it is not traced after all).
    pub(super) fn admit(&mut self, pid: u32, admit: bool, start: Option<u64>) {
        let live = self.targets.iter().any(|t| t.live && t.info.pid == pid);
        if !admit {
            if live {
                self.remove_target(pid);
            } else {
                self.source.admit(pid, false);
            }
            return;
        }
        // Already traced (a followed process that exec'd), or nothing is loaded.
        if live || self.followed.iter().any(|f| f.0 == pid) || !self.source.is_live() {
            return;
        }
        let Some(start) = start.or_else(|| process::start_ticks(pid, pid)) else {
            return;
        };
        match self.start_of(pid) {
            // Admitted already (it may have exited since: its record stays).
            Some(s) if s == start => return,
            // Another process had the pid: everything of it goes first.
            Some(_) => self.retire_pid(pid),
            None => {}
        }
        self.source.admit(pid, true);
        if process::start_ticks(pid, pid) != Some(start) {
            // It has ended (its exit ran before it went in, so nothing takes it out):
            // out of the filter, as its pid may name another process later. Its record
            // stays, with what was counted of it.
            self.source.admit(pid, false);
        }
        self.idle_since = None;
        self.state.ended.remove(&pid);
        self.state.model.trace_process(pid);
        self.following.insert(pid);
        exits::watch(pid, (pid, start), self.exits.0.clone());
        self.targets.retain(|old| old.info.pid != pid);
        self.targets.push(Traced {
            start,
            info: TargetInfo {
                pid,
                comm: process::comm(pid),
                library: None,
                ended: None,
            },
            launched: None,
            live: true,
            exit: None,
        });
    }
}
