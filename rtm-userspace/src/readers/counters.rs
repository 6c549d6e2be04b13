//! Performance counters (perf events): per CPU, per traced process (its threads created
//! later included) and per traced thread. Events this machine cannot count are reported
//! once, with the kernel's reason, never faked; multiplexed counts are scaled by the
//! time they ran and the scaling is kept.

use std::{collections::BTreeMap, io};

use perf_event::{
    Builder, Counter,
    events::{Cache, CacheOp, CacheResult, Event, Hardware, Software, WhichCache},
};
use serde::Serialize;

/// The events rtm-trace knows, by the names `perf list` uses.
pub const EVENT_NAMES: &[&str] = &[
    "cycles",
    "instructions",
    "cache-references",
    "cache-misses",
    "branches",
    "branch-misses",
    "stalled-cycles-frontend",
    "stalled-cycles-backend",
    "dTLB-load-misses",
    "iTLB-load-misses",
    "task-clock",
    "context-switches",
    "cpu-migrations",
    "page-faults",
    "minor-faults",
    "major-faults",
];

/// Most threads given counters of their own (each costs one descriptor per event);
/// the process totals still cover every thread.
pub const MAX_THREADS_COUNTED: usize = 32;

/// A name `--counters` does not know.
#[derive(Debug, thiserror::Error)]
#[error("unknown counter {name:?}; known counters: {}", EVENT_NAMES.join(", "))]
pub struct UnknownCounter {
    /// The name given.
    pub name: String,
}

/// Parses `--counters` ("cycles,task-clock"; "default": the hardware events; "all";
/// "none"). The software events (task-clock, context switches, migrations, faults)
/// are not in the default: the system's figures come from /proc, and a CPU-wide
/// software counter adds to every context switch or fault on the machine.
pub fn parse_list(list: &str) -> Result<Vec<&'static str>, UnknownCounter> {
    let mut out = Vec::new();
    for name in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        match name {
            "none" => {}
            "all" => out.extend(EVENT_NAMES),
            "default" => out.extend(EVENT_NAMES.iter().filter(|n| is_hardware(n))),
            _ => out.push(
                *EVENT_NAMES
                    .iter()
                    .find(|n| n.eq_ignore_ascii_case(name))
                    .ok_or_else(|| UnknownCounter {
                        name: name.to_owned(),
                    })?,
            ),
        }
    }
    out.dedup();
    Ok(out)
}

/// Whether an event needs a hardware PMU.
pub fn is_hardware(name: &str) -> bool {
    !matches!(
        name,
        "task-clock"
            | "context-switches"
            | "cpu-migrations"
            | "page-faults"
            | "minor-faults"
            | "major-faults"
    )
}

/// The perf event for `name`; per CPU the task clock is the CPU clock.
fn event(name: &str, per_cpu: bool) -> Event {
    let cache = |which, result| {
        Event::from(Cache {
            which,
            operation: CacheOp::READ,
            result,
        })
    };
    match name {
        "cycles" => Hardware::CPU_CYCLES.into(),
        "instructions" => Hardware::INSTRUCTIONS.into(),
        "cache-references" => Hardware::CACHE_REFERENCES.into(),
        "cache-misses" => Hardware::CACHE_MISSES.into(),
        "branches" => Hardware::BRANCH_INSTRUCTIONS.into(),
        "branch-misses" => Hardware::BRANCH_MISSES.into(),
        "stalled-cycles-frontend" => Hardware::STALLED_CYCLES_FRONTEND.into(),
        "stalled-cycles-backend" => Hardware::STALLED_CYCLES_BACKEND.into(),
        "dTLB-load-misses" => cache(WhichCache::DTLB, CacheResult::MISS),
        "iTLB-load-misses" => cache(WhichCache::ITLB, CacheResult::MISS),
        "task-clock" if per_cpu => Software::CPU_CLOCK.into(),
        "task-clock" => Software::TASK_CLOCK.into(),
        "context-switches" => Software::CONTEXT_SWITCHES.into(),
        "cpu-migrations" => Software::CPU_MIGRATIONS.into(),
        "page-faults" => Software::PAGE_FAULTS.into(),
        "minor-faults" => Software::PAGE_FAULTS_MIN.into(),
        _ => Software::PAGE_FAULTS_MAJ.into(),
    }
}

/// What a set of counters covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case", tag = "scope")]
pub enum Scope {
    /// Everything that ran on one CPU.
    Cpu { cpu: u32 },
    /// A traced process, every thread (those created later included).
    Process { pid: u32 },
    /// One traced thread, from when it was seen.
    Thread { pid: u32, tid: u32 },
}

/// One counter's value, scaled when the kernel multiplexed it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, serde::Deserialize)]
pub struct Reading {
    /// The count, scaled by enabled/running time.
    pub value: f64,
    /// The raw count.
    pub raw: u64,
    /// Share of the enabled time the counter was on the PMU, percent (100 = exact).
    pub running_pct: f64,
}

/// An event that could not be opened, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Unavailable {
    pub event: String,
    pub reason: String,
}

struct Opened {
    scope: Scope,
    name: &'static str,
    /// Several counters for one process scope opened on each of its threads at attach.
    counters: Vec<Counter>,
}

/// The open counters.
pub struct Counters {
    events: Vec<&'static str>,
    opened: Vec<Opened>,
    unavailable: BTreeMap<String, String>,
    threads_counted: usize,
    /// Threads seen after the cap was reached (counted in their process only).
    pub threads_not_counted: u64,
}

fn explain(name: &str, e: &io::Error) -> String {
    let hw = is_hardware(name);
    match e.raw_os_error() {
        Some(libc::ENOENT) | Some(libc::EOPNOTSUPP) | Some(libc::ENODEV) if hw => {
            format!("no PMU here counts it (a VM without a virtual PMU?): {e}")
        }
        Some(libc::EMFILE) => format!("too many open files (raise `ulimit -n`): {e}"),
        Some(libc::EACCES) | Some(libc::EPERM) => {
            format!("not permitted (run as root or lower kernel.perf_event_paranoid): {e}")
        }
        _ => e.to_string(),
    }
}

impl Counters {
    /// Counts `events` on every CPU in `cpus`.
    pub fn new(events: Vec<&'static str>, cpus: &[u32]) -> Self {
        raise_fd_limit();
        let mut c = Self {
            events,
            opened: Vec::new(),
            unavailable: BTreeMap::new(),
            threads_counted: 0,
            threads_not_counted: 0,
        };
        for &cpu in cpus {
            c.open(Scope::Cpu { cpu }, &[None], cpu as usize);
        }
        c
    }

    /// The events asked for.
    pub fn events(&self) -> &[&'static str] {
        &self.events
    }

    fn open(&mut self, scope: Scope, tids: &[Option<u32>], cpu: usize) {
        let events = self.events.clone();
        for name in events {
            if self.unavailable.contains_key(name) {
                continue;
            }
            let mut counters = Vec::new();
            for tid in tids {
                let mut b = Builder::new().kind(event(name, tid.is_none()));
                b = match tid {
                    Some(t) => b.observe_pid(*t as i32).any_cpu(),
                    None => b.any_pid().one_cpu(cpu),
                };
                b.include_kernel();
                b.inherit(matches!(scope, Scope::Process { .. }));
                match b.build().and_then(|mut c| c.enable().map(|_| c)) {
                    Ok(c) => counters.push(c),
                    // A thread that is gone has nothing left to count.
                    Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {}
                    Err(e) => {
                        self.unavailable.insert(name.to_owned(), explain(name, &e));
                        break;
                    }
                }
            }
            if !counters.is_empty() {
                self.opened.push(Opened {
                    scope,
                    name,
                    counters,
                });
            }
        }
    }

    /// Counts a traced process: its threads `tids` now and, through inheritance, every
    /// thread they create. Call before a launched program runs to count all of it.
    pub fn add_process(&mut self, pid: u32, tids: &[u32]) {
        let tids: Vec<Option<u32>> = tids.iter().map(|t| Some(*t)).collect();
        self.open(Scope::Process { pid }, &tids, 0);
    }

    /// Gives a newly seen thread counters of its own (up to [`MAX_THREADS_COUNTED`]).
    pub fn add_thread(&mut self, pid: u32, tid: u32) {
        if self.threads_counted >= MAX_THREADS_COUNTED {
            self.threads_not_counted += 1;
            return;
        }
        self.threads_counted += 1;
        self.open(Scope::Thread { pid, tid }, &[Some(tid)], 0);
    }

    /// Events that could not be opened, with the kernel's reason.
    pub fn unavailable(&self) -> Vec<Unavailable> {
        self.unavailable
            .iter()
            .map(|(e, r)| Unavailable {
                event: e.clone(),
                reason: r.clone(),
            })
            .collect()
    }

    /// Reads every counter now.
    pub fn read(&mut self) -> Vec<(Scope, &'static str, Reading)> {
        let mut out = Vec::new();
        for o in &mut self.opened {
            let mut total = Reading::default();
            let (mut enabled, mut running) = (0u64, 0u64);
            for c in &mut o.counters {
                let Ok(ct) = c.read_count_and_time() else {
                    continue;
                };
                total.raw += ct.count;
                total.value += if ct.time_running > 0 && ct.time_running < ct.time_enabled {
                    ct.count as f64 * ct.time_enabled as f64 / ct.time_running as f64
                } else {
                    ct.count as f64
                };
                enabled += ct.time_enabled;
                running += ct.time_running;
            }
            total.running_pct = if enabled == 0 {
                100.0
            } else {
                running as f64 * 100.0 / enabled as f64
            };
            out.push((o.scope, o.name, total));
        }
        out
    }
}

/// Counters take a descriptor each: lift the soft limit to the hard one.
fn raise_fd_limit() {
    let mut l = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: l is a valid out-pointer; setrlimit only raises the soft limit to the hard.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut l) == 0 && l.rlim_cur < l.rlim_max {
            l.rlim_cur = l.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &l);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_parse_and_unknown_names_list_the_known_ones() {
        assert_eq!(
            parse_list("task-clock, cycles").unwrap(),
            ["task-clock", "cycles"]
        );
        assert_eq!(parse_list("all").unwrap().len(), EVENT_NAMES.len());
        // The default leaves out the software events (the system's come from /proc).
        let d = parse_list("default").unwrap();
        assert!(
            d.contains(&"cycles") && !d.contains(&"context-switches"),
            "{d:?}"
        );
        assert!(parse_list("none").unwrap().is_empty());
        let e = parse_list("cycles,cycels").unwrap_err().to_string();
        assert!(
            e.contains("\"cycels\"") && e.contains("context-switches"),
            "{e}"
        );
    }

    /// Root only: this thread's own software counters count what it does.
    #[test]
    fn software_counters_count_this_threads_work() {
        // SAFETY: geteuid and gettid have no preconditions.
        let (root, tid) = unsafe { (libc::geteuid() == 0, libc::gettid() as u32) };
        if !root {
            eprintln!("software_counters_count_this_threads_work: NOT RUN: needs root");
            assert!(
                std::env::var("CI").map_or(true, |v| v != "true"),
                "needs root in CI"
            );
            return;
        }
        let mut c = Counters::new(vec!["context-switches", "minor-faults", "cycles"], &[]);
        c.add_thread(std::process::id(), tid);
        for _ in 0..20 {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        // Fresh anonymous memory (not the heap, which may be touched already), one
        // fault per page written.
        let pages = 256;
        // SAFETY: a private anonymous mapping, written within bounds, unmapped below.
        unsafe {
            let p = libc::mmap(
                std::ptr::null_mut(),
                pages * 4096,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            assert_ne!(p, libc::MAP_FAILED);
            libc::madvise(p, pages * 4096, libc::MADV_NOHUGEPAGE);
            for i in 0..pages {
                p.cast::<u8>().add(i * 4096).write_volatile(1);
            }
            libc::munmap(p, pages * 4096);
        }
        let r = c.read();
        let get = |n: &str| r.iter().find(|(_, name, _)| *name == n).map(|x| x.2.value);
        let switches = get("context-switches").expect("opened");
        assert!((20.0..60.0).contains(&switches), "{switches}");
        assert!(get("minor-faults").expect("opened") >= pages as f64);
        // Counted or reported, never both, never neither.
        assert_ne!(
            get("cycles").is_some(),
            c.unavailable().iter().any(|u| u.event == "cycles")
        );
    }
}
