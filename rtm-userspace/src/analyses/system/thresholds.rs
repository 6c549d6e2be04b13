//! When the system around the program is in trouble: the trouble the thresholds
//! (`config::thresholds`, which a config file can override) flag in an interval.

use serde::Serialize;

use super::interval::Interval;
pub(crate) use crate::config::thresholds::Thresholds;

/// What went wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TroubleKind {
    CpuSaturated,
    RunQueue,
    Swapping,
    LowMemory,
    DiskBusy,
    PacketDrops,
    Steal,
    Stalls,
}

impl TroubleKind {
    /// How the report says it.
    pub fn describe(self) -> &'static str {
        match self {
            Self::CpuSaturated => "CPU saturated",
            Self::RunQueue => "run queue longer than the CPUs",
            Self::Swapping => "swapping",
            Self::LowMemory => "little memory available",
            Self::DiskBusy => "disk busy",
            Self::PacketDrops => "packets dropped",
            Self::Steal => "CPU stolen by the hypervisor",
            Self::Stalls => "tasks stalled on memory or I/O (PSI)",
        }
    }
}

/// One kind of trouble on one thing (a disk, an interface, or the machine), over the run.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct Trouble {
    pub kind: TroubleKind,
    /// The disk or interface; empty for the machine.
    pub what: String,
    /// Intervals that crossed the threshold.
    pub intervals: u64,
    /// When it first happened, seconds into the trace.
    pub first_t_s: f64,
    /// The worst value seen.
    pub worst: f64,
}

impl Trouble {
    pub(super) fn new(kind: TroubleKind, what: String, iv: &Interval, value: f64) -> Self {
        Self {
            kind,
            what,
            intervals: 1,
            first_t_s: iv.t_s,
            worst: value,
        }
    }

    pub(super) fn add(&mut self, _iv: &Interval, value: f64) {
        self.intervals += 1;
        let lower_is_worse = self.kind == TroubleKind::LowMemory;
        if (lower_is_worse && value < self.worst) || (!lower_is_worse && value > self.worst) {
            self.worst = value;
        }
    }
}

impl Thresholds {
    /// The limits `iv` crosses on a machine with `cpus` CPUs: (kind, what, value).
    pub fn check(&self, iv: &Interval, cpus: usize) -> Vec<(TroubleKind, String, f64)> {
        let mut out = Vec::new();
        let mut flag = |cond: bool, kind, what: &str, v: f64| {
            if cond {
                out.push((kind, what.to_owned(), v));
            }
        };
        flag(
            iv.cpu.busy >= self.cpu_busy_pct,
            TroubleKind::CpuSaturated,
            "",
            iv.cpu.busy,
        );
        let running = iv.procs_running as f64;
        flag(
            running > cpus as f64 * self.run_queue_per_cpu,
            TroubleKind::RunQueue,
            "",
            running,
        );
        let swap = iv.swap_in_per_s + iv.swap_out_per_s;
        flag(
            swap >= self.swap_pages_per_s,
            TroubleKind::Swapping,
            "",
            swap,
        );
        flag(
            iv.mem_available_pct < self.mem_available_pct,
            TroubleKind::LowMemory,
            "",
            iv.mem_available_pct,
        );
        flag(
            iv.cpu.steal >= self.steal_pct,
            TroubleKind::Steal,
            "",
            iv.cpu.steal,
        );
        if let Some(p) = iv.psi {
            let stall = p.memory_some.max(p.io_some);
            flag(stall >= self.stall_pct, TroubleKind::Stalls, "", stall);
        }
        for d in &iv.disks {
            flag(
                d.busy_pct >= self.disk_busy_pct,
                TroubleKind::DiskBusy,
                &d.name,
                d.busy_pct,
            );
        }
        for n in &iv.nets {
            flag(
                self.packet_drops > 0 && n.drops >= self.packet_drops,
                TroubleKind::PacketDrops,
                &n.name,
                n.drops as f64,
            );
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_config_overrides_some_fields_and_keeps_the_rest() {
        let t: Thresholds = toml::from_str("cpu_busy_pct = 75\npacket_drops = 0\n").unwrap();
        assert_eq!(t.cpu_busy_pct, 75.0);
        assert_eq!(t.packet_drops, 0);
        assert_eq!(t.disk_busy_pct, Thresholds::default().disk_busy_pct);
        let bad = toml::from_str::<Thresholds>("cpu_busy = 75\n").unwrap_err();
        assert!(bad.to_string().contains("unknown field"), "{bad}");
    }
}
