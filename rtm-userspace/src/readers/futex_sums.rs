//! The futex waits the kernel summed (contention mode, `rtm_common::agg`): every entry
//! is read each interval, and what it grew by since the last read goes to the model as
//! one event. An entry only grows while its thread lives; an entry whose thread was gone
//! at two reads in a row is removed (its last waits were read the first time).

use std::collections::{HashMap, HashSet};

use aya::maps::{HashMap as BpfHashMap, MapData, MapError};
use rtm_common::{
    AGG_BUCKETS, AggOutcome, EventHeader, EventKind, FutexAgg, FutexAggKey,
    decode::{Event, FutexAggRecord},
};

/// What an entry held at the last read.
#[derive(Debug, Default, Clone)]
struct Seen {
    count: u64,
    wait_ns: u64,
    runnable_ns: u64,
    /// Nonzero buckets, (index, waits).
    hist: Vec<(u8, u32)>,
}

/// Reads the sums map.
pub struct FutexSums {
    map: BpfHashMap<MapData, FutexAggKey, FutexAgg>,
    last: HashMap<FutexAggKey, Seen>,
    /// Entries whose thread was gone at the last read.
    gone: HashSet<FutexAggKey>,
    /// Entries removed so far.
    removed: u64,
}

impl FutexSums {
    /// A reader of the map (MAP_FUTEX_AGG, taken out of the loaded object).
    pub fn new(map: MapData) -> Result<Self, MapError> {
        Ok(Self {
            map: aya::maps::Map::HashMap(map).try_into()?,
            last: HashMap::new(),
            gone: HashSet::new(),
            removed: 0,
        })
    }

    /// Reads every entry at `now_ns`; what grew goes to `sink`. `alive`: the threads
    /// (pid, tid) alive now, whose entries stay; None keeps every entry (the last read).
    pub fn read(
        &mut self,
        now_ns: u64,
        alive: Option<&HashSet<(u32, u32)>>,
        sink: &mut dyn FnMut(&Event),
    ) {
        let keys: Vec<FutexAggKey> = self.map.keys().filter_map(Result::ok).collect();
        let mut buckets = Vec::with_capacity(16);
        let mut drop = Vec::new();
        for key in keys {
            let Ok(v) = self.map.get(&key, 0) else {
                continue;
            };
            let seen = self.last.entry(key).or_default();
            buckets.clear();
            let mut hist = Vec::with_capacity(seen.hist.len().max(4));
            let mut old = seen.hist.iter().peekable();
            for (i, &n) in v.hist.iter().enumerate().take(AGG_BUCKETS) {
                let before = match old.peek() {
                    Some(&&(j, m)) if usize::from(j) == i => {
                        old.next();
                        m
                    }
                    _ => 0,
                };
                if n != 0 {
                    hist.push((i as u8, n));
                }
                let grew = n.wrapping_sub(before);
                if grew != 0 {
                    buckets.push((i as u8, grew));
                }
            }
            let count = v.count.wrapping_sub(seen.count);
            if count != 0 {
                let outcome = AggOutcome::from_u32(key.outcome).unwrap_or(AggOutcome::Interrupted);
                sink(&Event::FutexAgg(FutexAggRecord {
                    header: EventHeader {
                        kind: EventKind::FutexAgg as u32,
                        cpu: 0,
                        ts_ns: now_ns,
                        pid: key.pid,
                        tid: key.tid,
                    },
                    key,
                    outcome,
                    count,
                    wait_ns: v.wait_ns.wrapping_sub(seen.wait_ns),
                    runnable_ns: v.runnable_ns.wrapping_sub(seen.runnable_ns),
                    max_ns: v.max_ns,
                    min_ns: v.min_ns,
                    buckets: &buckets,
                }));
            }
            *seen = Seen {
                count: v.count,
                wait_ns: v.wait_ns,
                runnable_ns: v.runnable_ns,
                hist,
            };
            if let Some(alive) = alive {
                if alive.contains(&(key.pid, key.tid)) {
                    self.gone.remove(&key);
                } else if !self.gone.insert(key) {
                    drop.push(key);
                }
            }
        }
        for key in drop {
            let _ = self.map.remove(&key);
            self.last.remove(&key);
            self.gone.remove(&key);
            self.removed += 1;
        }
    }
}
