//! Where the engine's events come from: the kernel (probes, ring buffers and the
//! address-space records: the kernel source in `engine::kernel`) or a list of records
//! ([`EventList`], for tests). The engine drives either the same way.

#[cfg(test)]
use std::collections::VecDeque;
use std::{future::Future, io, pin::Pin};

use rtm_common::decode::Event;
#[cfg(test)]
use rtm_common::{LossCounter, decode::decode};

use super::{EngineError, Target, processes::Asleep};
use crate::{
    analyses::Kernel,
    output::{TargetInfo, Unprobed},
    proc::Module,
    readers::{Losses, ReaderStats, bpf_stats::BpfStats},
    symbolize::ObjectNamer,
};

/// The kernel side's state now, for a daemon's self-metrics.
#[derive(Debug, Clone, Default, serde::Serialize, PartialEq, Eq)]
pub struct KernelState {
    /// Whether the programs are loaded.
    pub loaded: bool,
    /// Uprobes attached (full mode, MPI).
    pub uprobes: usize,
    /// Maps that fill up as targets do: (name, entries, capacity).
    pub maps: Vec<(&'static str, usize, u32)>,
}

/// What happened to processes since the last call, for a source that must act on it
/// (full mode probes followed processes).
#[derive(Debug, Default)]
pub struct ProcessChanges {
    /// Traced processes that exec'd, with when (CLOCK_MONOTONIC ns).
    pub execd: Vec<(u32, u64)>,
    /// Traced processes that exited.
    pub gone: Vec<u32>,
}

/// A source of decoded events and the means to choose what they are about; as the
/// analyses' [`Kernel`], it answers what they ask of the kernel side.
pub trait Source: Kernel {
    /// Starts tracing `targets` (all at once, so processes sharing a library share its
    /// probes); returns what the run reports about each. A source with nothing traced
    /// loads its programs first.
    fn attach(&mut self, targets: &[Target]) -> Result<Vec<TargetInfo>, EngineError>;

    /// Stops collecting for `pids` at once; what is in flight can still be drained.
    fn stop(&mut self, pids: &[u32]);

    /// Puts `pid` into the source's filter before its attach (`admit`), or takes it
    /// out; nothing when nothing is loaded.
    fn admit(&mut self, _pid: u32, _admit: bool) {}

    /// The in-kernel filter's maps, for a writer in another thread (None: nothing
    /// loaded, or no such filter).
    fn filter_ids(&self) -> Option<crate::probes::FilterIds> {
        None
    }

    /// Detaches everything (nothing is traced any more); a later [`Source::attach`]
    /// loads again. Returns the helper process that removes breakpoints, if any.
    fn release(&mut self) -> Option<u32>;

    /// Resolves when the source signals a backlog (never, when it has nothing live).
    fn ready(&mut self) -> Pin<Box<dyn Future<Output = io::Result<()>> + '_>>;

    /// Whether anything is loaded and traced.
    fn is_live(&self) -> bool;

    /// Whether the source reports new mappings itself (else a new process's maps are
    /// read from /proc at once).
    fn records_mappings(&self) -> bool {
        true
    }

    /// Brings in the address-space records, before the events that may refer to them.
    fn mappings(&mut self, _namer: &mut ObjectNamer) {}

    /// Decodes up to `max` records into `sink`; returns how many.
    fn drain(&mut self, max: usize, sink: &mut dyn FnMut(&Event)) -> usize;

    /// Whether the last drain left records behind.
    fn behind(&self) -> bool;

    /// Ended waits the threads have not sent yet: those of `threads` older than
    /// `before`, or all (`None`, once the programs no longer run for them; then also
    /// the finished timed calls the threads kept unsent).
    fn take_left(
        &mut self,
        threads: &mut dyn Iterator<Item = (u32, u32)>,
        before: Option<u64>,
        sink: &mut dyn FnMut(&Event),
    );

    /// Acts on what happened to processes (full mode probes followed processes).
    fn changes(&mut self, changes: ProcessChanges, modules: &dyn Fn(u32) -> Vec<Module>);

    /// The threads of `threads` (pid, tid) asleep in a futex wait now (one that began
    /// before `before_ns`, when given), with when each wait began (sources that cannot
    /// tell: none).
    fn asleep(
        &self,
        _threads: &mut dyn Iterator<Item = (u32, u32)>,
        _before_ns: Option<u64>,
    ) -> Vec<Asleep> {
        Vec::new()
    }

    /// Whether [`Source::asleep`] can tell.
    fn knows_asleep(&self) -> bool {
        false
    }

    /// Whether futex waits begin at their sleep, with no program on system calls.
    fn sleep_entry(&self) -> bool {
        false
    }

    /// Whether futex waits are seen on the kernel's futex functions (fentry/fexit), with
    /// no program on context switches.
    fn futex_functions(&self) -> bool {
        false
    }

    /// Drops what the source holds for processes `pids`, which have exited and are
    /// forgotten (their probes, in a daemon that keeps the source loaded).
    fn forget(&mut self, _pids: &[u32]) {}

    /// The kernel side's state now (sources without one: nothing loaded).
    fn kernel_state(&self) -> KernelState {
        KernelState::default()
    }

    /// Followed processes that ran unprobed for a while.
    fn unprobed(&self) -> Vec<Unprobed>;

    /// Records lost by the kernel side, over every load.
    fn losses(&self) -> Losses;

    /// What the reader saw, over every load.
    fn reader_stats(&self) -> ReaderStats;

    /// Address-space records lost by the kernel.
    fn mapping_losses(&self) -> u64;

    /// The eBPF programs' and maps' statistics, when measured.
    fn bpf_stats(&self) -> Option<BpfStats>;
}

/// Records given up front, read as if from a ring: they are decoded (or counted as
/// undecodable) exactly as the kernel's are. Attaching a target traces nothing; the
/// records say what happened.
#[cfg(test)]
#[derive(Debug, Default)]
pub struct EventList {
    records: VecDeque<Vec<u8>>,
    stats: ReaderStats,
    losses: [u64; LossCounter::COUNT as usize],
    more: bool,
}

#[cfg(test)]
impl EventList {
    /// The records, in order.
    pub fn new(records: impl IntoIterator<Item = Vec<u8>>) -> Self {
        Self {
            records: records.into_iter().collect(),
            ..Self::default()
        }
    }

    /// Says that the kernel lost `n` records of a kind (as a full ring would).
    pub fn lose(&mut self, counter: LossCounter, n: u64) {
        self.losses[counter as usize] += n;
    }
}

#[cfg(test)]
impl Kernel for EventList {}

#[cfg(test)]
impl Source for EventList {
    fn attach(&mut self, targets: &[Target]) -> Result<Vec<TargetInfo>, EngineError> {
        Ok(targets
            .iter()
            .map(|t| TargetInfo {
                pid: t.pid,
                comm: None,
                library: None,
                ended: None,
            })
            .collect())
    }

    fn stop(&mut self, _pids: &[u32]) {}

    fn release(&mut self) -> Option<u32> {
        None
    }

    fn ready(&mut self) -> Pin<Box<dyn Future<Output = io::Result<()>> + '_>> {
        // Records are there to take on the engine's drain timer; nothing signals.
        Box::pin(std::future::pending())
    }

    fn is_live(&self) -> bool {
        true
    }

    fn drain(&mut self, max: usize, sink: &mut dyn FnMut(&Event)) -> usize {
        let mut n = 0;
        while n < max {
            let Some(r) = self.records.pop_front() else {
                break;
            };
            n += 1;
            self.stats.records += 1;
            self.stats.bytes += r.len() as u64;
            match decode(&r) {
                Ok(ev) => sink(&ev),
                Err(e) => self.stats.count(e),
            }
        }
        self.more = !self.records.is_empty();
        n
    }

    fn behind(&self) -> bool {
        self.more
    }

    fn take_left(
        &mut self,
        _threads: &mut dyn Iterator<Item = (u32, u32)>,
        _before: Option<u64>,
        _sink: &mut dyn FnMut(&Event),
    ) {
    }

    fn changes(&mut self, _changes: ProcessChanges, _modules: &dyn Fn(u32) -> Vec<Module>) {}

    fn unprobed(&self) -> Vec<Unprobed> {
        Vec::new()
    }

    fn losses(&self) -> Losses {
        Losses::from_counters(self.losses)
    }

    fn reader_stats(&self) -> ReaderStats {
        self.stats
    }

    fn mapping_losses(&self) -> u64 {
        0
    }

    fn bpf_stats(&self) -> Option<BpfStats> {
        None
    }
}
