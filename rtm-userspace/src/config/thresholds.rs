//! The thresholds that flag trouble in the system statistics, with defaults that a
//! config file (TOML, `[thresholds]`, docs/config.md) can override. What they flag is
//! the system analysis's (`analyses/system/thresholds.rs`).

use serde::{Deserialize, Serialize};

/// Limits that flag an interval. Every field may be left out of the config file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Thresholds {
    /// The whole machine's CPUs busy (not idle, not waiting for I/O), percent.
    pub cpu_busy_pct: f64,
    /// Runnable tasks per CPU: above it threads queue for a CPU.
    pub run_queue_per_cpu: f64,
    /// Pages swapped in plus out per second.
    pub swap_pages_per_s: f64,
    /// Memory available, percent of all memory: below it the page cache is squeezed.
    pub mem_available_pct: f64,
    /// A disk's share of time with I/O in flight, percent.
    pub disk_busy_pct: f64,
    /// Packets dropped on an interface in one interval.
    pub packet_drops: u64,
    /// CPU time stolen by the hypervisor, percent (a noisy neighbour).
    pub steal_pct: f64,
    /// Share of time some tasks stalled on memory or I/O (PSI), percent.
    pub stall_pct: f64,
}

impl Default for Thresholds {
    fn default() -> Self {
        Self {
            cpu_busy_pct: 90.0,
            run_queue_per_cpu: 1.0,
            swap_pages_per_s: 1.0,
            mem_available_pct: 5.0,
            disk_busy_pct: 95.0,
            packet_drops: 1,
            steal_pct: 10.0,
            stall_pct: 20.0,
        }
    }
}

impl Thresholds {
    /// Checks every value: a negative, infinite or NaN limit never flags anything (or
    /// always does), so it is refused by name. Percentages must be at most 100.
    pub fn validate(&self) -> Result<(), String> {
        let values = [
            ("cpu_busy_pct", self.cpu_busy_pct, true),
            ("run_queue_per_cpu", self.run_queue_per_cpu, false),
            ("swap_pages_per_s", self.swap_pages_per_s, false),
            ("mem_available_pct", self.mem_available_pct, true),
            ("disk_busy_pct", self.disk_busy_pct, true),
            ("steal_pct", self.steal_pct, true),
            ("stall_pct", self.stall_pct, true),
        ];
        for (name, v, percent) in values {
            if !v.is_finite() || v < 0.0 {
                return Err(format!(
                    "thresholds.{name} = {v}: must be a number of at least 0"
                ));
            }
            if percent && v > 100.0 {
                return Err(format!(
                    "thresholds.{name} = {v}: a percentage is at most 100"
                ));
            }
        }
        Ok(())
    }
}
