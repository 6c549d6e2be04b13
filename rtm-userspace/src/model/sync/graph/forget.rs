//! Forgetting processes: a daemon drops what it knew of processes that exited, so the
//! graph's tables do not grow with churn. Positions in `objects` shift, so the tables
//! that refer to objects by position are rebuilt.

use std::collections::HashSet;

use super::{EdgeId, SyncGraph};

impl SyncGraph {
    /// Forgets everything about the processes `pids` (exited ones, in a daemon): their
    /// threads, objects, edges, waits and totals. The tables are rebuilt, so this is for
    /// occasional batches, not for every event.
    pub fn forget_processes(&mut self, pids: &HashSet<u32>) {
        if pids.is_empty() {
            return;
        }
        self.settle_pending();
        let gone = |pid: &u32| pids.contains(pid);
        // Objects keep their order; the others' positions shift down.
        let mut moved = Vec::with_capacity(self.objects.len());
        let mut next = 0u32;
        for (k, _) in &self.objects {
            if gone(&k.pid) {
                moved.push(None);
            } else {
                moved.push(Some(next));
                next += 1;
            }
        }
        self.objects.retain(|k, _| !gone(&k.pid));
        let edges = std::mem::take(&mut self.edges);
        self.edges = edges
            .into_iter()
            .filter_map(|(id, e)| {
                let to = moved[id.object()]?;
                Some((EdgeId::new(to as usize, id.tid(), id.role()), e))
            })
            .collect();
        let sites = std::mem::take(&mut self.call_sites);
        self.call_sites = sites
            .into_iter()
            .filter_map(|((object, at), c)| Some(((moved[object as usize]?, at), c)))
            .collect();
        self.waits_for.retain(|k, _| !gone(&k.pid));
        self.held_by.retain(|k, _| !gone(&k.pid));
        self.threads.retain(|k, _| !gone(&k.pid));
        self.pids.retain(|p| !gone(p));
        self.traced.retain(|p| !gone(p));
        self.unwoken.retain(|w| !gone(&w.pid));
        self.holds.forget(pids);
        self.order.forget(pids);
        self.pending_locks.retain(|k, _| !gone(&k.pid));
        self.totals.retain(|p, _| !gone(p));
        self.objects.shrink_to_fit();
        self.edges.shrink_to_fit();
        self.waits_for.shrink_to_fit();
        self.threads.shrink_to_fit();
    }
}
