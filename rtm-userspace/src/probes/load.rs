//! Opening the eBPF object: map sizes and globals set at load, the `--tid`/`--cpu`
//! context, the in-kernel process filter, and the maps taken out for the readers.

use std::{
    collections::{HashMap, HashSet},
    os::fd::OwnedFd,
};

use aya::{
    Ebpf, EbpfLoader,
    maps::{HashMap as BpfHashMap, MapData, MapError},
    programs::uprobe::UProbeLinkId,
};
use rtm_common::names;

use super::{
    error::{ProbeError, map_err},
    kernel_btf,
    layout::{self, Layout},
    multi_uprobe::MultiPrograms,
    traced::{Traced, TracedBytes},
    tracepoints,
};

/// The maps that hold the threads' ended futex waits not yet sent (contention mode),
/// taken out of the object for the reader to map.
pub struct LeftWaitMaps {
    /// FUTEX_DONE: each slot's last ended wait.
    pub done: MapData,
    /// FUTEX_SLOTS: each slot's wait in progress.
    pub entries: MapData,
    /// PENDING_FUTEX: waits of threads without a slot.
    pub pending: MapData,
    /// Slots in each array (a power of two).
    pub slots: u32,
}

/// How to load the programs.
#[derive(Debug, Clone, Default)]
pub struct LoadOptions {
    /// Bytes of each ring buffer.
    pub ring_bytes: u32,
    /// Full mode: futex waits are counted with their wakes.
    pub count_wakes: bool,
    /// Bytes of each user stack copied for a contended wait (0: none).
    pub stack_bytes: u32,
    /// Whether `--func` times functions (their per-thread map is sized for it).
    pub timed_functions: bool,
    /// Whether each futex wait's entry reads its mutex's holder.
    pub read_holders: bool,
    /// `--tid`: only these threads (empty: all).
    pub tids: Vec<u32>,
    /// `--cpu`: only on these CPUs (empty: all).
    pub cpus: Vec<u32>,
    /// Contention mode: ended waits are summed in the kernel (not sent one by one).
    pub aggregate: bool,
    /// Contention mode: waits also seen at their system call's entry (`--unslept`: the
    /// ones that return without sleeping are counted; every system call on the machine
    /// pays for it). Otherwise a wait begins where its thread goes to sleep.
    pub syscall_entry: bool,
    /// Waiters' stacks taken per CPU per second at most (u32::MAX: all).
    pub stack_rate: u32,
    /// Entries of the map that sums waits (0: the default).
    pub agg_entries: u32,
}

/// Fills the `--tid` and `--cpu` maps.
fn fill_context(ebpf: &mut Ebpf, tids: &[u32], cpus: &[u32]) -> Result<(), ProbeError> {
    let map_err = |name| move |source| ProbeError::Map { name, source };
    if !tids.is_empty() {
        let map = ebpf
            .map_mut(names::MAP_TID_FILTER)
            .ok_or(ProbeError::Missing(names::MAP_TID_FILTER))?;
        let mut m: aya::maps::HashMap<_, u32, u8> =
            aya::maps::HashMap::try_from(map).map_err(map_err(names::MAP_TID_FILTER))?;
        for &t in tids {
            m.insert(t, 1, 0).map_err(map_err(names::MAP_TID_FILTER))?;
        }
    }
    if !cpus.is_empty() {
        let map = ebpf
            .map_mut(names::MAP_CPU_FILTER)
            .ok_or(ProbeError::Missing(names::MAP_CPU_FILTER))?;
        let mut m: aya::maps::Array<_, u64> =
            aya::maps::Array::try_from(map).map_err(map_err(names::MAP_CPU_FILTER))?;
        let mut words = vec![0u64; (names::MAX_FILTER_CPUS / 64) as usize];
        for &c in cpus {
            if let Some(w) = words.get_mut((c / 64) as usize) {
                *w |= 1 << (c % 64);
            }
        }
        for (i, w) in words.iter().enumerate().filter(|(_, w)| **w != 0) {
            m.set(i as u32, w, 0)
                .map_err(map_err(names::MAP_CPU_FILTER))?;
        }
    }
    Ok(())
}

/// The loaded eBPF object.
pub struct Probes {
    pub(super) ebpf: Ebpf,
    pub(super) links: HashMap<u32, Vec<(&'static str, UProbeLinkId)>>,
    /// Uprobe programs loaded so far.
    pub(super) loaded: std::collections::HashSet<&'static str>,
    /// The fast process filter, which mirrors TRACED_TGIDS.
    pub(super) traced: TracedBytes,
    /// How futex calls are seen.
    pub(super) futex_entry: String,
    /// Rings in use (MAP_EVENTS, then MAP_SYNC_RINGS).
    pub(super) rings: u32,
    /// The uprobe programs loaded for uprobe_multi links (None: the kernel has none).
    pub(super) multi: Option<MultiPrograms>,
    /// uprobe_multi links per process (0: every process), each many uprobes.
    pub(super) multi_links: HashMap<u32, Vec<(OwnedFd, usize)>>,
    /// Libraries (device, inode) probed for every process that maps them.
    pub(super) library_wide: HashMap<(u64, u64), HashSet<&'static str>>,
    /// Slots of MAP_FUTEX_SLOTS and MAP_FUTEX_DONE.
    pub(super) slots: u32,
    /// Whether ended futex waits are summed in MAP_FUTEX_AGG.
    pub(super) aggregate: bool,
    /// Whether futex waits begin at their sleep (no program on system calls).
    pub(super) sleep_entry: bool,
    /// Whether contention mode runs on the kernel's futex functions (not the scheduler's
    /// tracepoints).
    pub(super) futex_fn: bool,
}

/// The uprobe programs of the object.
pub(super) const UPROBES: [&str; 7] = [
    names::PROG_CALL_ENTER,
    names::PROG_CALL_RETURN,
    names::PROG_CALL_MARK,
    names::PROG_MPI_ENTER,
    names::PROG_MPI_RETURN,
    names::PROG_FUNC_ENTER,
    names::PROG_FUNC_RETURN,
];

impl Probes {
    /// Loads the object with a ring buffer of `ring_bytes` and loads every program.
    /// `count_wakes` follows futex wakes to their return (full mode: threads woken per
    /// condition-variable signal). `stack_bytes`: bytes of each user stack copied at a
    /// contended wake (contention mode; 0 for none).
    pub fn load(object: &[u8], options: &LoadOptions) -> Result<Self, ProbeError> {
        let LoadOptions {
            ring_bytes,
            count_wakes,
            stack_bytes,
            timed_functions,
            read_holders,
            ref tids,
            ref cpus,
            aggregate,
            syscall_entry,
            stack_rate,
            agg_entries,
        } = *options;
        let read_holders = u32::from(read_holders);
        if object.is_empty() {
            return Err(ProbeError::NoObject);
        }
        let wakes: u32 = count_wakes.into();
        let layout = Layout::new(ring_bytes, !count_wakes);
        let ring_mask = layout.rings - 1;
        let slot_mask = layout.slots - 1;
        // Wake the reader when an eighth of a ring is used; it drains on a timer too.
        let wakeup = u64::from(layout.per_ring / 8);
        // The BTF tracepoints need the kernel's BTF (~16 ms and ~19 MiB at its peak to
        // parse). The loader parses its own copy when made and cannot share it; the
        // object has no CO-RE relocations for it, so that copy is dropped at once and
        // ours parsed straight after, on this thread, into the memory the first one
        // freed. Two copies at once, or one parsed later or on another thread (another
        // malloc arena), raised the tracer's peak memory by 10-17 MiB.
        let mut loader = EbpfLoader::new();
        loader.btf(None);
        // Contention mode ends waits at their wake when the kernel's BTF gives the
        // task_struct offsets that needs (read first, its copy of the file dropped).
        // Full mode uses them to name the waker of each wait, in any process.
        let task = if layout.fallbacks {
            None
        } else {
            kernel_btf::task_offsets()
                .inspect_err(|e| log::info!("futex waits end at their return: {e}"))
                .ok()
        };
        let waking = u32::from(task.is_some() && !count_wakes);
        let note_waker = u32::from(task.is_some() && count_wakes);
        // Waits begin at their sleep (sched_switch) where the scheduler's programs see
        // them, and then no program runs on any system call of the machine.
        let sleep_entry = u32::from(waking != 0 && !syscall_entry);
        // Summed in the kernel where each wait's record is not wanted, in contention mode
        // (full mode's records stay in order with its uprobe records).
        let aggregate = u32::from(aggregate && !count_wakes);
        // Absolute realtime deadlines of futex waits are turned into the monotonic
        // clock with the offset now (an NTP step during the trace moves it a little;
        // DEADLINE_SLACK_NS covers that).
        let realtime_offset = crate::proc::process::clock_ns(libc::CLOCK_REALTIME)
            .saturating_sub(crate::proc::process::monotonic_ns());
        let task = task.unwrap_or_default();
        let btf = (!layout.fallbacks).then(aya::Btf::from_sys_fs);
        loader.map_max_entries(names::MAP_EVENTS, layout.per_ring);
        loader.map_max_entries(
            names::MAP_FUTEX_AGG,
            if aggregate != 0 {
                if agg_entries == 0 {
                    names::DEFAULT_AGG_ENTRIES
                } else {
                    agg_entries
                }
            } else {
                1
            },
        );
        // Per-thread stacks of timed calls, 984 bytes each: none without --func.
        let (func_threads, func_slots) = if timed_functions {
            (names::MAX_FUNC_THREADS, names::MAX_FUNC_SLOTS)
        } else {
            (1, 1)
        };
        loader.map_max_entries(names::MAP_FUNC_PENDING, func_threads);
        loader.map_max_entries(names::MAP_FUNC_SLOTS, func_slots);
        let func_slot_mask = func_slots - 1;
        let context = if tids.is_empty() {
            0
        } else {
            rtm_common::CONTEXT_TIDS
        } | if cpus.is_empty() {
            0
        } else {
            rtm_common::CONTEXT_CPUS
        };
        for (name, bytes) in layout.sync_ring_bytes() {
            loader.map_max_entries(name, bytes);
        }
        let mut ebpf = loader
            .map_max_entries(names::MAP_TRACED, layout.words)
            .map_max_entries(names::MAP_FUTEX_SLOTS, layout.slots)
            .map_max_entries(names::MAP_FUTEX_DONE, layout.slots)
            .override_global(names::GLOBAL_FUTEX_SLOT_MASK, &slot_mask, true)
            .override_global(names::GLOBAL_SYNC_RING_MASK, &ring_mask, true)
            .override_global(names::GLOBAL_WAKEUP_BYTES, &wakeup, true)
            .override_global(names::GLOBAL_COUNT_WAKES, &wakes, true)
            .override_global(names::GLOBAL_WAKING, &waking, true)
            .override_global(names::GLOBAL_NOTE_WAKER, &note_waker, true)
            .override_global(names::GLOBAL_REALTIME_OFFSET, &realtime_offset, true)
            .override_global(names::GLOBAL_TASK_PID, &task.pid, true)
            .override_global(names::GLOBAL_TASK_TGID, &task.tgid, true)
            .override_global(names::GLOBAL_STACK_BYTES, &stack_bytes, true)
            .override_global(names::GLOBAL_CONTEXT_FILTER, &context, true)
            .override_global(names::GLOBAL_READ_HOLDERS, &read_holders, true)
            .override_global(names::GLOBAL_FUNC_SLOT_MASK, &func_slot_mask, true)
            .override_global(names::GLOBAL_AGGREGATE, &aggregate, true)
            .override_global(names::GLOBAL_SLEEP_ENTRY, &sleep_entry, true)
            .override_global(names::GLOBAL_STACK_RATE, &stack_rate, true)
            .override_global(names::GLOBAL_TASK_STATE, &task.state, true)
            .override_global(names::GLOBAL_TASK_SIGNAL, &task.signal, true)
            .override_global(names::GLOBAL_SIGNAL_LIVE, &task.signal_live, true)
            .load(object)
            .map_err(|source| ProbeError::Load { source })?;
        fill_context(&mut ebpf, tids, cpus)?;
        // Uprobe programs are verified when first attached (`uprobe`): a run that probes
        // no MPI library, or no pthread function, does not wait for their verification
        // (the MPI return program alone takes the verifier about 0.4 s).
        let tracepoints::FutexHooks {
            entry: futex_entry,
            sleep_entry,
            futex_fn,
        } = tracepoints::attach(&mut ebpf, btf, waking, note_waker, stack_bytes, sleep_entry)?;
        // Before any map is taken out: the programs for uprobe_multi links are relocated
        // against all of them.
        let multi = if std::env::var_os(layout::FALLBACKS_ENV).is_some() {
            None
        } else {
            MultiPrograms::load(object, &ebpf, &UPROBES)
                .inspect_err(|e| log::info!("uprobes one by one (no uprobe_multi): {e}"))
                .ok()
        };
        // (Relocated now, loaded into the kernel when first attached.)
        let traced = match ebpf.take_map(names::MAP_TRACED) {
            Some(aya::maps::Map::Array(data)) => {
                TracedBytes::new(data, layout.words).map_err(|source| ProbeError::Mmap {
                    name: names::MAP_TRACED,
                    source,
                })?
            }
            _ => return Err(ProbeError::Missing(names::MAP_TRACED)),
        };
        Ok(Self {
            ebpf,
            links: HashMap::new(),
            loaded: Default::default(),
            traced,
            futex_entry,
            multi,
            multi_links: HashMap::new(),
            library_wide: HashMap::new(),
            rings: layout.rings,
            slots: layout.slots,
            aggregate: aggregate != 0,
            sleep_entry,
            futex_fn,
        })
    }

    /// Whether futex waits begin at their sleep, with no program on system calls (so
    /// waits that return without sleeping are not seen).
    pub fn sleep_entry(&self) -> bool {
        self.sleep_entry
    }

    /// Whether contention mode runs on the kernel's futex functions (fentry/fexit), with
    /// no program on context switches.
    pub fn futex_fn(&self) -> bool {
        self.futex_fn
    }

    /// Where futex calls are seen (for --verbose).
    pub fn futex_entry(&self) -> &str {
        &self.futex_entry
    }

    /// Takes the maps of the ended futex waits not yet sent (once).
    pub fn take_left_wait_maps(&mut self) -> Result<LeftWaitMaps, ProbeError> {
        let mut take = |name: &'static str| {
            self.ebpf
                .take_map(name)
                .ok_or(ProbeError::Missing(name))
                .map(|m| match m {
                    aya::maps::Map::Array(data) | aya::maps::Map::HashMap(data) => Ok(data),
                    _ => Err(ProbeError::Missing(name)),
                })?
        };
        let done = take(names::MAP_FUTEX_DONE)?;
        let entries = take(names::MAP_FUTEX_SLOTS)?;
        let pending = take(names::MAP_PENDING_FUTEX)?;
        Ok(LeftWaitMaps {
            done,
            entries,
            pending,
            slots: self.slots,
        })
    }

    /// Takes the map of summed futex waits (once), when waits are summed.
    pub fn take_futex_sums(&mut self) -> Option<MapData> {
        if !self.aggregate {
            return None;
        }
        match self.ebpf.take_map(names::MAP_FUTEX_AGG) {
            Some(aya::maps::Map::HashMap(data)) => Some(data),
            _ => None,
        }
    }

    /// Takes the event rings in use (once): MAP_EVENTS first.
    pub fn take_rings(&mut self) -> Result<Vec<MapData>, ProbeError> {
        let used = std::iter::once(names::MAP_EVENTS)
            .chain(names::MAP_SYNC_RINGS)
            .take(self.rings as usize);
        used.map(|name| match self.ebpf.take_map(name) {
            Some(aya::maps::Map::RingBuf(data)) => Ok(data),
            _ => Err(ProbeError::Missing(name)),
        })
        .collect()
    }

    /// Adds or removes a process from the in-kernel filter.
    pub fn set_traced(&mut self, pid: u32, traced: Traced) -> Result<(), ProbeError> {
        let map = self
            .ebpf
            .map_mut(names::MAP_TRACED_TGIDS)
            .ok_or(ProbeError::Missing(names::MAP_TRACED_TGIDS))?;
        let mut tgids: BpfHashMap<_, u32, u32> =
            BpfHashMap::try_from(map).map_err(map_err(names::MAP_TRACED_TGIDS))?;
        // The byte goes in after the set entry and out before it: the array never says
        // traced where the set does not.
        let value = traced.value();
        if value != 0 {
            tgids
                .insert(pid, u32::from(value), 0)
                .map_err(map_err(names::MAP_TRACED_TGIDS))?;
            self.traced.set(pid, value);
            Ok(())
        } else {
            self.traced.set(pid, 0);
            match tgids.remove(&pid) {
                Err(MapError::KeyNotFound) => Ok(()),
                r => r,
            }
            .map_err(map_err(names::MAP_TRACED_TGIDS))
        }
    }

    /// The loaded object.
    pub(crate) fn ebpf(&self) -> &Ebpf {
        &self.ebpf
    }

    /// The loaded object, to change its maps.
    pub(crate) fn ebpf_mut(&mut self) -> &mut Ebpf {
        &mut self.ebpf
    }

    /// The filter's maps by kernel id, for a writer in another thread.
    pub fn filter_ids(&self) -> Option<super::traced::FilterIds> {
        let set = match self.ebpf.map(names::MAP_TRACED_TGIDS)? {
            aya::maps::Map::HashMap(d) | aya::maps::Map::LruHashMap(d) => d.info().ok()?.id(),
            _ => return None,
        };
        let (bytes, words) = self.traced.id()?;
        Some(super::traced::FilterIds { set, bytes, words })
    }

    /// Whether the in-kernel filter traces `pid` (it adds followed children itself).
    pub fn is_traced(&self, pid: u32) -> bool {
        self.ebpf
            .map(names::MAP_TRACED_TGIDS)
            .and_then(|m| BpfHashMap::<_, u32, u32>::try_from(m).ok())
            .is_some_and(|m| m.get(&pid, 0).is_ok())
    }

    /// Entries in the process filter (TRACED_TGIDS) and its capacity.
    pub fn filter_fill(&self) -> Option<(usize, u32)> {
        let map = self.ebpf.map(names::MAP_TRACED_TGIDS)?;
        let capacity = match map {
            aya::maps::Map::HashMap(data) => data.info().ok()?.max_entries(),
            _ => return None,
        };
        let tgids: BpfHashMap<_, u32, u32> = BpfHashMap::try_from(map).ok()?;
        Some((tgids.keys().count(), capacity))
    }
}
