//! Reading the sync graph: the threads, objects, edges, waits and counters it holds,
//! for the report, the outputs and the agent.

use rtm_common::Primitive;

use crate::model::sync::{
    CallSite, EdgeKey, EdgeStats, HeldBy, HeldByKey, ModelCounters, ObjectKey, ObjectMeta,
    ProcessTotals, SyncGraph, ThreadKey, ThreadNode, UnwokenWait, WaitsFor, WaitsForKey,
    order::LockOrder,
};

impl SyncGraph {
    /// Whether a process is traced: marked so, or seen in an event.
    pub fn is_traced(&self, pid: u32) -> bool {
        self.traced.contains(&pid) || self.pids.contains(&pid)
    }

    /// The threads seen so far.
    pub fn threads(&self) -> impl Iterator<Item = (&ThreadKey, &ThreadNode)> {
        self.threads.iter()
    }

    /// The objects seen so far.
    pub fn objects(&self) -> impl Iterator<Item = (&ObjectKey, &ObjectMeta)> {
        self.objects.iter()
    }

    /// The thread holding semaphore `addr` of process `pid`, where it has been used as
    /// a lock (full mode sees every take and post): see `ObjectMeta::sem_holder`.
    pub fn semaphore_holder(&self, pid: u32, addr: u64) -> Option<u32> {
        self.objects
            .get(&ObjectKey {
                pid,
                primitive: Primitive::Sem,
                addr,
            })?
            .sem_holder()
    }

    /// The thread -> object edges.
    #[cfg(test)]
    pub fn edges(&self) -> impl Iterator<Item = (EdgeKey, &EdgeStats)> {
        self.edges.iter().map(|(id, e)| (self.key_of(id), e))
    }

    /// Number of thread -> object edges.
    pub fn edge_count(&self) -> usize {
        self.edges.len()
    }

    /// The edge at `i` (0 <= i < [`edge_count`](Self::edge_count)), in insertion order.
    pub fn edge_at(&self, i: u32) -> (EdgeKey, &EdgeStats) {
        let (id, e) = self
            .edges
            .get_index(i as usize)
            .expect("edge index within edge_count");
        (self.key_of(id), e)
    }

    /// The waiter -> waker edges.
    pub fn waits_for(&self) -> impl Iterator<Item = (&WaitsForKey, &WaitsFor)> {
        self.waits_for.iter()
    }

    /// Waiter -> the mutex's holder when each wait began (contention mode).
    pub fn held_by(&self) -> impl Iterator<Item = (&HeldByKey, &HeldBy)> {
        self.held_by.iter()
    }

    /// Futex waits woken by no thread of their process (at most 4096 kept).
    pub fn unwoken(&self) -> &[UnwokenWait] {
        &self.unwoken
    }

    /// Call sites per object: (object, return address) -> totals.
    pub fn call_sites(&self) -> impl Iterator<Item = ((ObjectKey, u64), &CallSite)> {
        self.call_sites.iter().map(|((object, site), c)| {
            let (key, _) = self
                .objects
                .get_index(*object as usize)
                .expect("call sites refer to objects, which are never removed");
            ((*key, *site), c)
        })
    }

    /// Whether futex words are objects (contention mode).
    #[cfg(test)]
    pub fn futex_objects(&self) -> bool {
        self.futex_objects
    }

    /// The futex wait totals of process `pid`.
    pub fn process_totals(&self, pid: u32) -> Option<&ProcessTotals> {
        self.totals.get(&pid)
    }

    /// Which lock was taken while holding which (full mode).
    pub fn lock_order(&self) -> &LockOrder {
        &self.order
    }

    /// Counters of incomplete attribution, histogram budget included.
    pub fn counters(&self) -> ModelCounters {
        ModelCounters {
            histograms_refused: self.budget.refused,
            ..self.counters
        }
    }
}
