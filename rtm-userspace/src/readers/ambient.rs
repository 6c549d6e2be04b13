//! Ambient statistics: the system and the traced processes as /proc shows them, read as
//! raw cumulative counters. The model turns two samples into rates; a file this kernel
//! does not have is reported once and the rest keeps working.

use std::collections::{BTreeMap, BTreeSet};

use procfs::{Current, FromBufReadSI};
use serde::{Deserialize, Serialize};

/// CPU time in clock ticks, per state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CpuTicks {
    pub user: u64,
    pub nice: u64,
    pub system: u64,
    pub idle: u64,
    pub iowait: u64,
    pub irq: u64,
    pub softirq: u64,
    pub steal: u64,
}

impl CpuTicks {
    /// Every state together.
    pub fn total(&self) -> u64 {
        self.user
            + self.nice
            + self.system
            + self.idle
            + self.iowait
            + self.irq
            + self.softirq
            + self.steal
    }
}

/// One block device's cumulative counters (/proc/diskstats).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DiskRaw {
    pub name: String,
    pub reads: u64,
    pub writes: u64,
    pub sectors_read: u64,
    pub sectors_written: u64,
    /// Milliseconds with I/O in flight.
    pub busy_ms: u64,
}

/// One network interface's cumulative counters (/proc/net/dev).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetRaw {
    pub name: String,
    pub rx_bytes: u64,
    pub rx_packets: u64,
    pub rx_errors: u64,
    pub rx_drops: u64,
    pub tx_bytes: u64,
    pub tx_packets: u64,
    pub tx_errors: u64,
    pub tx_drops: u64,
}

/// Pressure stall totals in microseconds (/proc/pressure).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PsiRaw {
    pub cpu_some_us: u64,
    pub memory_some_us: u64,
    pub memory_full_us: u64,
    pub io_some_us: u64,
    pub io_full_us: u64,
}

/// A traced process's resource usage, cumulative (what getrusage would give, live).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcRaw {
    pub pid: u32,
    pub user_ticks: u64,
    pub system_ticks: u64,
    pub rss_bytes: u64,
    pub minor_faults: u64,
    pub major_faults: u64,
    pub voluntary_switches: u64,
    pub involuntary_switches: u64,
    pub read_bytes: u64,
    pub write_bytes: u64,
    pub threads: u64,
}

/// Interrupt counts by source, the names shared with the samples before while they do
/// not change: a long trace keeps hundreds of samples, and the names are most of one.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct IrqCounts {
    /// The sources, sorted.
    names: std::sync::Arc<[Box<str>]>,
    /// Their counts, in the same order.
    counts: Vec<u64>,
}

impl IrqCounts {
    /// Counts from `m`, sharing the names of `prev` when they are the same.
    pub fn new(m: BTreeMap<String, u64>, prev: Option<&IrqCounts>) -> Self {
        let same = prev.is_some_and(|p| {
            p.names.len() == m.len() && p.names.iter().zip(m.keys()).all(|(a, b)| **a == **b)
        });
        let names = match prev {
            Some(p) if same => p.names.clone(),
            _ => m.keys().map(|k| k.as_str().into()).collect(),
        };
        Self {
            names,
            counts: m.into_values().collect(),
        }
    }

    /// (source, count) pairs.
    pub fn iter(&self) -> impl Iterator<Item = (&str, u64)> {
        self.names
            .iter()
            .map(|n| &**n)
            .zip(self.counts.iter().copied())
    }

    /// The count of one source.
    pub fn get(&self, name: &str) -> Option<u64> {
        let i = self.names.binary_search_by(|n| (**n).cmp(name)).ok()?;
        self.counts.get(i).copied()
    }
}

/// Everything read at one instant.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RawSample {
    /// CLOCK_MONOTONIC, ns.
    pub t_ns: u64,
    /// Whole machine.
    pub total: CpuTicks,
    /// Per CPU, in /proc/stat order.
    pub cpus: Vec<CpuTicks>,
    pub context_switches: u64,
    pub interrupts: u64,
    pub procs_running: u64,
    pub procs_blocked: u64,
    pub load: [f64; 3],
    pub mem_total: u64,
    pub mem_available: u64,
    pub mem_cached: u64,
    pub swap_used: u64,
    /// Pages paged in/out and swapped in/out, and faults (/proc/vmstat).
    pub pages_in: u64,
    pub pages_out: u64,
    pub swap_in: u64,
    pub swap_out: u64,
    pub major_faults: u64,
    pub disks: Vec<DiskRaw>,
    pub nets: Vec<NetRaw>,
    pub psi: Option<PsiRaw>,
    /// Interrupt sources summed over CPUs (/proc/interrupts).
    pub irq_sources: IrqCounts,
    pub procs: Vec<ProcRaw>,
}

/// Reads samples, remembering which sources failed so each is reported once.
#[derive(Default)]
pub struct AmbientReader {
    failed: BTreeSet<String>,
    /// The last interrupt counts, whose names the next sample shares.
    irq_names: Option<IrqCounts>,
    /// Messages not yet shown to the user.
    pub new_problems: Vec<String>,
}

impl AmbientReader {
    fn problem(&mut self, source: &str, e: impl std::fmt::Display) {
        if self.failed.insert(source.to_owned()) {
            self.new_problems.push(format!(
                "{source} is not readable ({e}); carrying on without it"
            ));
        }
    }

    /// Reads the system and `pids` now.
    pub fn sample(&mut self, t_ns: u64, pids: &[u32]) -> RawSample {
        let mut s = RawSample {
            t_ns,
            ..Default::default()
        };
        // /proc/stat once: procfs parses the CPU times and counts, the interrupt total
        // (which it skips) is taken from the same text.
        let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
        match procfs::KernelStats::from_buf_read(stat.as_bytes(), procfs::current_system_info()) {
            Ok(k) => {
                s.total = ticks(&k.total);
                s.cpus = k.cpu_time.iter().map(ticks).collect();
                s.context_switches = k.ctxt;
                s.procs_running = k.procs_running.unwrap_or(0) as u64;
                s.procs_blocked = k.procs_blocked.unwrap_or(0) as u64;
            }
            Err(e) => self.problem("/proc/stat", e),
        }
        s.interrupts = stat
            .lines()
            .find_map(|l| l.strip_prefix("intr "))
            .and_then(|r| r.split_whitespace().next()?.parse().ok())
            .unwrap_or(0);
        match procfs::LoadAverage::current() {
            Ok(l) => s.load = [l.one as f64, l.five as f64, l.fifteen as f64],
            Err(e) => self.problem("/proc/loadavg", e),
        }
        match procfs::Meminfo::current() {
            Ok(m) => {
                s.mem_total = m.mem_total;
                s.mem_available = m.mem_available.unwrap_or(m.mem_free);
                s.mem_cached = m.cached;
                s.swap_used = m.swap_total.saturating_sub(m.swap_free);
            }
            Err(e) => self.problem("/proc/meminfo", e),
        }
        match procfs::vmstat() {
            Ok(v) => {
                let g = |k: &str| v.get(k).copied().unwrap_or(0).max(0) as u64;
                (s.pages_in, s.pages_out) = (g("pgpgin"), g("pgpgout"));
                (s.swap_in, s.swap_out) = (g("pswpin"), g("pswpout"));
                s.major_faults = g("pgmajfault");
            }
            Err(e) => self.problem("/proc/vmstat", e),
        }
        match procfs::diskstats() {
            Ok(d) => s.disks = d.into_iter().filter(is_whole_disk).map(disk).collect(),
            Err(e) => self.problem("/proc/diskstats", e),
        }
        match procfs::net::dev_status() {
            Ok(n) => {
                s.nets = n.into_values().map(net).collect();
                s.nets.sort_by(|a, b| a.name.cmp(&b.name));
            }
            Err(e) => self.problem("/proc/net/dev", e),
        }
        s.psi = self.psi();
        match std::fs::read_to_string("/proc/interrupts") {
            Ok(t) => {
                s.irq_sources = IrqCounts::new(parse_interrupts(&t), self.irq_names.as_ref());
                self.irq_names = Some(s.irq_sources.clone());
            }
            Err(e) => self.problem("/proc/interrupts", e),
        }
        s.procs = pids.iter().filter_map(|&p| process(p)).collect();
        s
    }

    fn psi(&mut self) -> Option<PsiRaw> {
        let read = |name: &str| -> Option<(u64, u64)> {
            let text = std::fs::read_to_string(format!("/proc/pressure/{name}")).ok()?;
            let total = |kind: &str| -> Option<u64> {
                text.lines()
                    .find(|l| l.starts_with(kind))?
                    .split_whitespace()
                    .find_map(|f| f.strip_prefix("total="))?
                    .parse()
                    .ok()
            };
            Some((total("some")?, total("full").unwrap_or(0)))
        };
        match (read("cpu"), read("memory"), read("io")) {
            (Some(c), Some(m), Some(i)) => Some(PsiRaw {
                cpu_some_us: c.0,
                memory_some_us: m.0,
                memory_full_us: m.1,
                io_some_us: i.0,
                io_full_us: i.1,
            }),
            _ => {
                self.problem("/proc/pressure (PSI; boot with psi=1 to get it)", "absent");
                None
            }
        }
    }
}

fn ticks(c: &procfs::CpuTime) -> CpuTicks {
    CpuTicks {
        user: c.user,
        nice: c.nice,
        system: c.system,
        idle: c.idle,
        iowait: c.iowait.unwrap_or(0),
        irq: c.irq.unwrap_or(0),
        softirq: c.softirq.unwrap_or(0),
        steal: c.steal.unwrap_or(0),
    }
}

/// Whole disks only (partitions would count the same I/O twice): those with a
/// /sys/block entry. Loop and ram devices without I/O are skipped.
fn is_whole_disk(d: &procfs::DiskStat) -> bool {
    std::path::Path::new("/sys/block").join(&d.name).exists()
        && !(d.reads == 0
            && d.writes == 0
            && (d.name.starts_with("loop") || d.name.starts_with("ram")))
}

fn disk(d: procfs::DiskStat) -> DiskRaw {
    DiskRaw {
        name: d.name,
        reads: d.reads,
        writes: d.writes,
        sectors_read: d.sectors_read,
        sectors_written: d.sectors_written,
        busy_ms: d.time_in_progress,
    }
}

fn net(n: procfs::net::DeviceStatus) -> NetRaw {
    NetRaw {
        name: n.name,
        rx_bytes: n.recv_bytes,
        rx_packets: n.recv_packets,
        rx_errors: n.recv_errs,
        rx_drops: n.recv_drop,
        tx_bytes: n.sent_bytes,
        tx_packets: n.sent_packets,
        tx_errors: n.sent_errs,
        tx_drops: n.sent_drop,
    }
}

/// Interrupt counts per source, summed over CPUs; named by their description
/// ("virtio0-input.0") or, for the architecture's own, by their label ("LOC").
pub fn parse_interrupts(text: &str) -> BTreeMap<String, u64> {
    let mut lines = text.lines();
    let cpus = lines.next().map_or(0, |h| h.split_whitespace().count());
    let mut out = BTreeMap::new();
    for line in lines {
        let Some((label, rest)) = line.split_once(':') else {
            continue;
        };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let counts: Vec<u64> = fields
            .iter()
            .take(cpus)
            .map_while(|f| f.parse().ok())
            .collect();
        if counts.is_empty() {
            continue;
        }
        let label = label.trim();
        let desc = fields.get(counts.len()..).unwrap_or_default();
        let name = if label.chars().all(|c| c.is_ascii_digit()) {
            desc.last().map_or(label, |d| *d).to_owned()
        } else {
            label.to_owned()
        };
        *out.entry(name).or_default() += counts.iter().sum::<u64>();
    }
    out
}

/// A process's usage, or None once it is gone.
fn process(pid: u32) -> Option<ProcRaw> {
    let p = procfs::process::Process::new(pid as i32).ok()?;
    let stat = p.stat().ok()?;
    // Context switches are counted per thread: add up the live ones.
    let (mut vcs, mut ivcs) = (0, 0);
    if let Ok(tasks) = p.tasks() {
        for t in tasks.flatten() {
            if let Ok(st) = t.status() {
                vcs += st.voluntary_ctxt_switches.unwrap_or(0);
                ivcs += st.nonvoluntary_ctxt_switches.unwrap_or(0);
            }
        }
    }
    let io = p.io().ok();
    let page = procfs::page_size();
    Some(ProcRaw {
        pid,
        user_ticks: stat.utime,
        system_ticks: stat.stime,
        rss_bytes: stat.rss * page,
        minor_faults: stat.minflt,
        major_faults: stat.majflt,
        voluntary_switches: vcs,
        involuntary_switches: ivcs,
        read_bytes: io.as_ref().map_or(0, |i| i.read_bytes),
        write_bytes: io.as_ref().map_or(0, |i| i.write_bytes),
        threads: stat.num_threads.max(0) as u64,
    })
}

/// Kernel clock ticks per second, for CPU times.
pub fn ticks_per_second() -> u64 {
    procfs::ticks_per_second()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interrupts_sum_cpus_and_take_the_device_name() {
        let text = "           CPU0       CPU1       \n\
            \x20 1:          9          0   IO-APIC   1-edge      i8042\n\
            \x20 24:       100         50   PCI-MSI 49152-edge      virtio0-input.0\n\
            LOC:      5000       6000   Local timer interrupts\n\
            ERR:          0\n";
        let m = parse_interrupts(text);
        assert_eq!(m["virtio0-input.0"], 150);
        assert_eq!(m["LOC"], 11000);
        assert_eq!(m["i8042"], 9);
        assert_eq!(m["ERR"], 0);
    }

    #[test]
    fn this_system_and_process_are_read() {
        let mut r = AmbientReader::default();
        let me = std::process::id();
        let s = r.sample(1, &[me]);
        assert!(!s.cpus.is_empty());
        assert!(s.total.total() > 0);
        assert!(s.mem_total > 0 && s.mem_available <= s.mem_total);
        assert!(s.nets.iter().any(|n| n.name == "lo"));
        assert_eq!(s.procs.len(), 1);
        assert!(s.procs[0].rss_bytes > 0 && s.procs[0].threads >= 1);
        assert!(r.sample(2, &[u32::MAX - 1]).procs.is_empty());
    }
}

/// Property tests: /proc/interrupts text of any shape parses without panicking.
#[cfg(test)]
mod fuzz {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        #[test]
        fn any_interrupts_text_parses(text in "[ -~\n]{0,400}") {
            let _ = parse_interrupts(&text);
        }
    }
}
