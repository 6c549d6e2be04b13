//! Ambient statistics over time: successive raw samples become intervals of rates and
//! shares, a bounded time series, running summaries, and the thresholds they crossed.
//! Pure: fed samples, it needs no root and no /proc.

use serde::Serialize;

use std::collections::BTreeMap;

use super::{
    interval::{Interval, ProcRate, interval, usage},
    thresholds::{Thresholds, Trouble},
};
use crate::readers::ambient::{ProcRaw, RawSample};

/// Most samples kept; past it every other one is dropped (the series gets coarser, the
/// rates stay right because the counters are cumulative, and the summaries and trouble
/// flags were taken from every interval).
pub const MAX_SAMPLES: usize = 1_024;

/// Mean and maximum of one figure over every interval.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, serde::Deserialize)]
pub struct Stat {
    pub mean: f64,
    pub max: f64,
    #[serde(skip)]
    n: u64,
}

impl Stat {
    fn add(&mut self, v: f64) {
        self.n += 1;
        self.mean += (v - self.mean) / self.n as f64;
        if self.n == 1 || v > self.max {
            self.max = v;
        }
    }
}

/// Figures over the whole run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, serde::Deserialize)]
pub struct Summary {
    pub intervals: u64,
    pub cpu_busy_pct: Stat,
    pub cpu_iowait_pct: Stat,
    pub cpu_steal_pct: Stat,
    pub load1: Stat,
    pub procs_running: Stat,
    pub context_switches_per_s: Stat,
    pub interrupts_per_s: Stat,
    pub mem_available_pct: Stat,
    pub swap_in_per_s: Stat,
    pub swap_out_per_s: Stat,
    pub disk_busy_pct: Stat,
    pub net_bytes_per_s: Stat,
    pub psi_cpu_some_pct: Stat,
    pub psi_memory_some_pct: Stat,
    pub psi_io_some_pct: Stat,
}

/// A traced process over the whole run: first and last sample, peaks.
#[derive(Debug, Clone)]
struct ProcRun {
    first: ProcRaw,
    first_ns: u64,
    last: ProcRaw,
    last_ns: u64,
    max_rss: u64,
    max_threads: u64,
}

/// A traced process's resource usage over the run (getrusage, from the first sample
/// to the last one that saw it; `rss_bytes` and `threads` as last seen).
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct ProcSummary {
    #[serde(flatten)]
    pub usage: ProcRate,
    /// Seconds between the first and the last sample of it.
    pub seconds: f64,
    pub max_rss_bytes: u64,
    pub max_threads: u64,
}

/// The ambient model: samples in, intervals, summaries and trouble out.
#[derive(Debug, Clone)]
pub struct Ambient {
    procs: BTreeMap<u32, ProcRun>,
    /// The sampling period.
    period_ns: u64,
    t0_ns: u64,
    hz: u64,
    samples: Vec<RawSample>,
    /// Samples dropped to keep the series bounded.
    pub thinned: u64,
    summary: Summary,
    thresholds: Thresholds,
    troubles: Vec<Trouble>,
}

impl Ambient {
    /// A model for a trace that began at `t0_ns`, sampled every `period_ns`, with `hz`
    /// clock ticks per second.
    pub fn new(t0_ns: u64, period_ns: u64, hz: u64, thresholds: Thresholds) -> Self {
        Self {
            period_ns,
            t0_ns,
            hz,
            samples: Vec::new(),
            procs: BTreeMap::new(),
            thinned: 0,
            summary: Summary::default(),
            thresholds,
            troubles: Vec::new(),
        }
    }

    /// Takes a sample; returns the interval it closes (if any).
    pub fn push(&mut self, s: RawSample) -> Option<Interval> {
        let closed = self
            .samples
            .last()
            .map(|prev| interval(prev, &s, self.t0_ns, self.hz));
        // A sample taken at an exit or at the end closes a short interval: too short
        // for its rates to mean much, it is in the series but not in the summaries.
        if let Some(iv) = &closed
            && (self.summary.intervals == 0 || iv.dur_s * 4e9 >= self.period_ns as f64)
        {
            self.account(iv);
        }
        for p in &s.procs {
            let run = self.procs.entry(p.pid).or_insert_with(|| ProcRun {
                first: p.clone(),
                first_ns: s.t_ns,
                last: p.clone(),
                last_ns: s.t_ns,
                max_rss: 0,
                max_threads: 0,
            });
            // Counters only grow; an exiting process reads some as 0 (its I/O, RSS).
            let l = &run.last;
            run.last = ProcRaw {
                user_ticks: p.user_ticks.max(l.user_ticks),
                system_ticks: p.system_ticks.max(l.system_ticks),
                minor_faults: p.minor_faults.max(l.minor_faults),
                major_faults: p.major_faults.max(l.major_faults),
                voluntary_switches: p.voluntary_switches.max(l.voluntary_switches),
                involuntary_switches: p.involuntary_switches.max(l.involuntary_switches),
                read_bytes: p.read_bytes.max(l.read_bytes),
                write_bytes: p.write_bytes.max(l.write_bytes),
                ..p.clone()
            };
            run.last_ns = s.t_ns;
            run.max_rss = run.max_rss.max(p.rss_bytes);
            run.max_threads = run.max_threads.max(p.threads);
        }
        if self.samples.len() >= MAX_SAMPLES {
            let kept: Vec<RawSample> = std::mem::take(&mut self.samples)
                .into_iter()
                .enumerate()
                .filter(|(i, _)| i % 2 == 0)
                .map(|(_, s)| s)
                .collect();
            self.thinned += (MAX_SAMPLES - kept.len()) as u64;
            self.samples = kept;
        }
        self.samples.push(s);
        closed
    }

    fn account(&mut self, iv: &Interval) {
        let s = &mut self.summary;
        s.intervals += 1;
        s.cpu_busy_pct.add(iv.cpu.busy);
        s.cpu_iowait_pct.add(iv.cpu.iowait);
        s.cpu_steal_pct.add(iv.cpu.steal);
        s.load1.add(iv.load1);
        s.procs_running.add(iv.procs_running as f64);
        s.context_switches_per_s.add(iv.context_switches_per_s);
        s.interrupts_per_s.add(iv.interrupts_per_s);
        s.mem_available_pct.add(iv.mem_available_pct);
        s.swap_in_per_s.add(iv.swap_in_per_s);
        s.swap_out_per_s.add(iv.swap_out_per_s);
        s.disk_busy_pct
            .add(iv.disks.iter().map(|d| d.busy_pct).fold(0.0, f64::max));
        s.net_bytes_per_s.add(
            iv.nets
                .iter()
                .filter(|n| n.name != "lo")
                .map(|n| n.rx_bytes_per_s + n.tx_bytes_per_s)
                .sum(),
        );
        if let Some(p) = iv.psi {
            s.psi_cpu_some_pct.add(p.cpu_some);
            s.psi_memory_some_pct.add(p.memory_some);
            s.psi_io_some_pct.add(p.io_some);
        }
        let cpus = iv.per_cpu_busy.len().max(1);
        for (kind, what, value) in self.thresholds.check(iv, cpus) {
            match self
                .troubles
                .iter_mut()
                .find(|t| t.kind == kind && t.what == what)
            {
                Some(t) => t.add(iv, value),
                None => self.troubles.push(Trouble::new(kind, what, iv, value)),
            }
        }
    }

    /// Forgets the processes `pids` (exited ones, in a daemon).
    pub fn forget(&mut self, pids: &std::collections::HashSet<u32>) {
        self.procs.retain(|p, _| !pids.contains(p));
    }

    fn proc_summaries(&self) -> Vec<ProcSummary> {
        self.procs
            .values()
            .map(|r| {
                let seconds = r.last_ns.saturating_sub(r.first_ns) as f64 / 1e9;
                ProcSummary {
                    usage: usage(&r.first, &r.last, seconds, self.hz),
                    seconds,
                    max_rss_bytes: r.max_rss,
                    max_threads: r.max_threads,
                }
            })
            .collect()
    }

    /// The view outputs read.
    pub fn view(&self) -> AmbientView {
        AmbientView {
            period_s: self.period_ns as f64 / 1e9,
            processes: self.proc_summaries(),
            thresholds: self.thresholds.clone(),
            summary: self.summary.clone(),
            troubles: self.troubles.clone(),
            thinned_samples: self.thinned,
            intervals: self
                .samples
                .windows(2)
                .map(|w| interval(&w[0], &w[1], self.t0_ns, self.hz))
                .collect(),
        }
    }

    /// Whether trouble of `kind` was flagged.
    #[cfg(test)]
    fn flagged(&self, kind: super::thresholds::TroubleKind) -> bool {
        self.troubles.iter().any(|t| t.kind == kind)
    }
}

/// What outputs show of the ambient statistics.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct AmbientView {
    /// The sampling period, seconds.
    pub period_s: f64,
    /// Traced processes over the run.
    pub processes: Vec<ProcSummary>,
    pub thresholds: Thresholds,
    pub summary: Summary,
    pub troubles: Vec<Trouble>,
    pub thinned_samples: u64,
    pub intervals: Vec<Interval>,
}

#[cfg(test)]
mod tests {
    use super::{super::thresholds::TroubleKind, *};
    use crate::readers::ambient::{CpuTicks, DiskRaw, NetRaw};

    fn sample(t_s: u64, k: u64) -> RawSample {
        RawSample {
            t_ns: t_s * 1_000_000_000,
            total: CpuTicks {
                user: 150 * k,
                system: 50 * k,
                idle: 0,
                ..Default::default()
            },
            cpus: vec![
                CpuTicks {
                    user: 100 * k,
                    ..Default::default()
                },
                CpuTicks {
                    user: 50 * k,
                    system: 50 * k,
                    ..Default::default()
                },
            ],
            context_switches: 1000 * k,
            procs_running: 5,
            load: [4.0, 3.0, 2.0],
            mem_total: 1000,
            mem_available: 30,
            swap_out: 10 * k,
            disks: vec![DiskRaw {
                name: "vda".into(),
                reads: 10 * k,
                sectors_read: 8 * k,
                busy_ms: 1000 * k,
                ..Default::default()
            }],
            nets: vec![NetRaw {
                name: "eth0".into(),
                rx_bytes: 4096 * k,
                rx_drops: k,
                ..Default::default()
            }],
            procs: vec![ProcRaw {
                pid: 7,
                user_ticks: 100 * k,
                voluntary_switches: 3 * k,
                rss_bytes: 1 << 20,
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    #[test]
    fn intervals_turn_counters_into_rates_and_shares() {
        let iv = interval(&sample(10, 1), &sample(12, 3), 10_000_000_000, 100);
        assert_eq!((iv.t_s, iv.dur_s), (0.0, 2.0));
        assert_eq!(iv.cpu.user, 75.0);
        assert_eq!(iv.cpu.busy, 100.0);
        assert_eq!(iv.per_cpu_busy, [100.0, 100.0]);
        assert_eq!(iv.context_switches_per_s, 1000.0);
        assert_eq!(iv.swap_out_per_s, 10.0);
        let d = &iv.disks[0];
        assert_eq!(
            (d.reads_per_s, d.read_bytes_per_s, d.busy_pct),
            (10.0, 4096.0, 100.0)
        );
        assert_eq!((iv.nets[0].rx_bytes, iv.nets[0].drops), (8192, 2));
        let p = &iv.procs[0];
        assert_eq!((p.user_pct, p.voluntary_switches), (100.0, 6));
        let mut m = Ambient::new(10_000_000_000, 1_000_000_000, 100, Thresholds::default());
        m.push(sample(10, 1));
        m.push(sample(12, 3));
        let s = &m.view().processes[0];
        assert_eq!(
            (s.seconds, s.usage.user_pct, s.usage.voluntary_switches),
            (2.0, 100.0, 6)
        );
        assert_eq!(s.max_rss_bytes, 1 << 20);
    }

    #[test]
    fn troubles_are_flagged_and_the_series_stays_bounded() {
        let mut m = Ambient::new(0, 1_000_000_000, 100, Thresholds::default());
        for i in 0..(MAX_SAMPLES as u64 + 10) {
            m.push(sample(i, i));
        }
        let v = m.view();
        assert_eq!(v.summary.intervals, MAX_SAMPLES as u64 + 9);
        assert!(v.intervals.len() < MAX_SAMPLES);
        assert!(m.thinned > 0);
        // Rates stay right over the longer intervals of a thinned series.
        assert!(
            v.intervals
                .iter()
                .all(|iv| iv.context_switches_per_s == 1000.0)
        );
        for k in [
            TroubleKind::CpuSaturated,
            TroubleKind::Swapping,
            TroubleKind::RunQueue,
            TroubleKind::DiskBusy,
            TroubleKind::PacketDrops,
            TroubleKind::LowMemory,
        ] {
            assert!(m.flagged(k), "{k:?}");
        }
        let cpu = v
            .troubles
            .iter()
            .find(|t| t.kind == TroubleKind::CpuSaturated)
            .unwrap();
        assert_eq!(cpu.intervals, MAX_SAMPLES as u64 + 9);
    }
}
