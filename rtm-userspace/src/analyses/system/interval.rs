//! One interval between two samples of the system: rates and shares of CPU time,
//! memory, disks, networks, pressure and the traced processes' usage.

use serde::Serialize;

use crate::readers::ambient::{CpuTicks, ProcRaw, RawSample};

/// CPU time shares over an interval, percent of the CPU's (or all CPUs') time.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, serde::Deserialize)]
pub struct CpuShare {
    pub user: f64,
    pub system: f64,
    pub iowait: f64,
    pub irq: f64,
    pub softirq: f64,
    pub steal: f64,
    pub idle: f64,
    /// Everything but idle and iowait.
    pub busy: f64,
}

fn share(a: &CpuTicks, b: &CpuTicks) -> CpuShare {
    let total = b.total().saturating_sub(a.total()).max(1) as f64;
    let pct = |x: u64, y: u64| y.saturating_sub(x) as f64 * 100.0 / total;
    let idle = pct(a.idle, b.idle);
    let iowait = pct(a.iowait, b.iowait);
    CpuShare {
        user: pct(a.user + a.nice, b.user + b.nice),
        system: pct(a.system, b.system),
        iowait,
        irq: pct(a.irq, b.irq),
        softirq: pct(a.softirq, b.softirq),
        steal: pct(a.steal, b.steal),
        idle,
        busy: (100.0 - idle - iowait).max(0.0),
    }
}

/// One block device over an interval.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct DiskRate {
    pub name: String,
    pub reads_per_s: f64,
    pub writes_per_s: f64,
    pub read_bytes_per_s: f64,
    pub write_bytes_per_s: f64,
    /// Share of the interval with I/O in flight, percent.
    pub busy_pct: f64,
}

/// One network interface over an interval.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct NetRate {
    pub name: String,
    pub rx_bytes: u64,
    pub tx_bytes: u64,
    pub rx_bytes_per_s: f64,
    pub tx_bytes_per_s: f64,
    pub rx_packets_per_s: f64,
    pub tx_packets_per_s: f64,
    pub errors: u64,
    pub drops: u64,
}

/// One traced process over an interval.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct ProcRate {
    pub pid: u32,
    /// CPU time as a percentage of one CPU (200 = two CPUs busy).
    pub user_pct: f64,
    pub system_pct: f64,
    pub rss_bytes: u64,
    pub minor_faults: u64,
    pub major_faults: u64,
    pub voluntary_switches: u64,
    pub involuntary_switches: u64,
    pub read_bytes: u64,
    pub write_bytes: u64,
    pub threads: u64,
}

/// Stall shares over an interval, percent of wall time (PSI).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, serde::Deserialize)]
pub struct PsiShare {
    pub cpu_some: f64,
    pub memory_some: f64,
    pub memory_full: f64,
    pub io_some: f64,
    pub io_full: f64,
}

/// The system between two samples.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct Interval {
    /// Start, seconds since the trace began.
    pub t_s: f64,
    /// Length, seconds.
    pub dur_s: f64,
    pub cpu: CpuShare,
    pub per_cpu_busy: Vec<f64>,
    pub load1: f64,
    pub procs_running: u64,
    pub procs_blocked: u64,
    pub context_switches_per_s: f64,
    pub interrupts_per_s: f64,
    /// The busiest interrupt sources, per second (at most five).
    pub top_interrupts: Vec<(String, f64)>,
    pub mem_available: u64,
    pub mem_available_pct: f64,
    pub mem_cached: u64,
    pub swap_used: u64,
    pub page_in_per_s: f64,
    pub page_out_per_s: f64,
    pub swap_in_per_s: f64,
    pub swap_out_per_s: f64,
    pub major_faults_per_s: f64,
    pub disks: Vec<DiskRate>,
    pub nets: Vec<NetRate>,
    pub psi: Option<PsiShare>,
    pub procs: Vec<ProcRate>,
}

/// A process's usage between its samples `a` and `b`, `secs` apart.
pub(super) fn usage(a: &ProcRaw, b: &ProcRaw, secs: f64, hz: u64) -> ProcRate {
    let pct = |x: u64, y: u64| {
        if secs > 0.0 {
            y.saturating_sub(x) as f64 / hz.max(1) as f64 / secs * 100.0
        } else {
            0.0
        }
    };
    let d = |x: u64, y: u64| y.saturating_sub(x);
    ProcRate {
        pid: b.pid,
        user_pct: pct(a.user_ticks, b.user_ticks),
        system_pct: pct(a.system_ticks, b.system_ticks),
        rss_bytes: b.rss_bytes,
        minor_faults: d(a.minor_faults, b.minor_faults),
        major_faults: d(a.major_faults, b.major_faults),
        voluntary_switches: d(a.voluntary_switches, b.voluntary_switches),
        involuntary_switches: d(a.involuntary_switches, b.involuntary_switches),
        read_bytes: d(a.read_bytes, b.read_bytes),
        write_bytes: d(a.write_bytes, b.write_bytes),
        threads: b.threads,
    }
}

/// The interval from `a` to `b`; `t0_ns` is the trace's start, `hz` clock ticks per
/// second, `cpus` the CPU count (for the run-queue threshold).
pub fn interval(a: &RawSample, b: &RawSample, t0_ns: u64, hz: u64) -> Interval {
    let dur_s = (b.t_ns.saturating_sub(a.t_ns) as f64 / 1e9).max(1e-9);
    let rate = |x: u64, y: u64| y.saturating_sub(x) as f64 / dur_s;
    // Microseconds stalled as a share of the interval.
    let pct_of_wall =
        |x: u64, y: u64| (y.saturating_sub(x) as f64 / 1e6 / dur_s * 100.0).min(100.0);
    let mut top_interrupts: Vec<(String, f64)> = b
        .irq_sources
        .iter()
        .map(|(k, v)| (k.to_owned(), rate(a.irq_sources.get(k).unwrap_or(v), v)))
        .filter(|(_, r)| *r > 0.0)
        .collect();
    top_interrupts.sort_by(|x, y| y.1.total_cmp(&x.1));
    top_interrupts.truncate(5);
    let disks = b
        .disks
        .iter()
        .filter_map(|d| {
            let p = a.disks.iter().find(|p| p.name == d.name)?;
            Some(DiskRate {
                name: d.name.clone(),
                reads_per_s: rate(p.reads, d.reads),
                writes_per_s: rate(p.writes, d.writes),
                read_bytes_per_s: rate(p.sectors_read, d.sectors_read) * 512.0,
                write_bytes_per_s: rate(p.sectors_written, d.sectors_written) * 512.0,
                busy_pct: (rate(p.busy_ms, d.busy_ms) / 10.0).min(100.0),
            })
        })
        .collect();
    let nets = b
        .nets
        .iter()
        .filter_map(|n| {
            let p = a.nets.iter().find(|p| p.name == n.name)?;
            let d = |x: u64, y: u64| y.saturating_sub(x);
            Some(NetRate {
                name: n.name.clone(),
                rx_bytes: d(p.rx_bytes, n.rx_bytes),
                tx_bytes: d(p.tx_bytes, n.tx_bytes),
                rx_bytes_per_s: rate(p.rx_bytes, n.rx_bytes),
                tx_bytes_per_s: rate(p.tx_bytes, n.tx_bytes),
                rx_packets_per_s: rate(p.rx_packets, n.rx_packets),
                tx_packets_per_s: rate(p.tx_packets, n.tx_packets),
                errors: d(p.rx_errors + p.tx_errors, n.rx_errors + n.tx_errors),
                drops: d(p.rx_drops + p.tx_drops, n.rx_drops + n.tx_drops),
            })
        })
        .collect();
    let psi = match (&a.psi, &b.psi) {
        (Some(x), Some(y)) => Some(PsiShare {
            cpu_some: pct_of_wall(x.cpu_some_us, y.cpu_some_us),
            memory_some: pct_of_wall(x.memory_some_us, y.memory_some_us),
            memory_full: pct_of_wall(x.memory_full_us, y.memory_full_us),
            io_some: pct_of_wall(x.io_some_us, y.io_some_us),
            io_full: pct_of_wall(x.io_full_us, y.io_full_us),
        }),
        _ => None,
    };
    let procs = b
        .procs
        .iter()
        .filter_map(|q| {
            let p = a.procs.iter().find(|p| p.pid == q.pid)?;
            Some(usage(p, q, dur_s, hz))
        })
        .collect();
    Interval {
        t_s: a.t_ns.saturating_sub(t0_ns) as f64 / 1e9,
        dur_s,
        cpu: share(&a.total, &b.total),
        per_cpu_busy: a
            .cpus
            .iter()
            .zip(&b.cpus)
            .map(|(x, y)| share(x, y).busy)
            .collect(),
        load1: b.load[0],
        procs_running: b.procs_running,
        procs_blocked: b.procs_blocked,
        context_switches_per_s: rate(a.context_switches, b.context_switches),
        interrupts_per_s: rate(a.interrupts, b.interrupts),
        top_interrupts,
        mem_available: b.mem_available,
        mem_available_pct: b.mem_available as f64 * 100.0 / b.mem_total.max(1) as f64,
        mem_cached: b.mem_cached,
        swap_used: b.swap_used,
        page_in_per_s: rate(a.pages_in, b.pages_in),
        page_out_per_s: rate(a.pages_out, b.pages_out),
        swap_in_per_s: rate(a.swap_in, b.swap_in),
        swap_out_per_s: rate(a.swap_out, b.swap_out),
        major_faults_per_s: rate(a.major_faults, b.major_faults),
        disks,
        nets,
        psi,
        procs,
    }
}
