//! Checking a config: the ranges of its values ([`ConfigError`] names the field that is
//! out of range), and reading one from TOML.

use std::time::Duration;

use super::{MAX_FUNCTIONS, MAX_TIMELINE_MB, TraceConfig, check_stack_bytes};

/// A value of the config that is out of range: which field (as in the file,
/// `limits.ring_bytes`) and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(pub String);

/// Longest duration: a year (a tracer meant to run longer is the agent's job).
pub const MAX_DURATION_SECS: f64 = 366.0 * 86_400.0;
/// Shortest and longest interval, seconds.
pub const INTERVAL_SECS: (f64, f64) = (0.01, 86_400.0);
/// Largest ring: 1 GiB.
pub const MAX_RING_BYTES: u32 = 1 << 30;
/// Most rows per table.
pub const MAX_TOP: usize = 100_000;

/// Seconds in `[min, max]`, refused otherwise (never a panic on 1e30, NaN or -0).
pub fn secs_in(v: f64, min: f64, max: f64) -> Result<Duration, String> {
    if !v.is_finite() || v <= 0.0 {
        return Err("must be a positive number of seconds".into());
    }
    if v < min || v > max {
        return Err(format!("must be between {min} and {max} seconds"));
    }
    Duration::try_from_secs_f64(v).map_err(|e| e.to_string())
}

/// A ring size that the kernel takes: a power of two from a page to 1 GiB.
pub fn check_ring_bytes(v: u32) -> Result<u32, String> {
    if !(4096..=MAX_RING_BYTES).contains(&v) || !v.is_power_of_two() {
        return Err(format!(
            "must be a power of two from 4096 to {MAX_RING_BYTES} (e.g. 16777216)"
        ));
    }
    Ok(v)
}

impl TraceConfig {
    /// Reads a config file's text (TOML). Unknown keys are refused by name.
    pub fn from_toml(text: &str) -> Result<Self, String> {
        let c: Self = toml::from_str(text).map_err(|e| e.to_string())?;
        c.validate().map_err(|e| e.to_string())?;
        Ok(c)
    }

    /// Checks every value; the command line checks the same as it parses.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let err = |field: &str, problem: String| ConfigError(format!("{field}: {problem}"));
        if let Some(d) = self.duration {
            secs_in(d.as_secs_f64(), 0.000_001, MAX_DURATION_SECS)
                .map_err(|p| err("duration", p))?;
        }
        if let Some(i) = self.interval {
            secs_in(i.as_secs_f64(), INTERVAL_SECS.0, INTERVAL_SECS.1)
                .map_err(|p| err("interval", p))?;
        }
        check_ring_bytes(self.limits.ring_bytes).map_err(|p| err("limits.ring_bytes", p))?;
        check_stack_bytes(self.stacks.bytes).map_err(|p| err("stacks.bytes", p))?;
        if !(1..=1 << 20).contains(&self.limits.futex_sums) {
            return Err(err(
                "limits.futex_sums",
                "must be between 1 and 1048576".into(),
            ));
        }
        if self.limits.max_objects == 0 {
            return Err(err("limits.max_objects", "must be at least 1".into()));
        }
        if !(1..=MAX_TIMELINE_MB).contains(&self.output.timeline_max_mb) {
            return Err(err(
                "output.timeline_max_mb",
                format!("must be between 1 and {MAX_TIMELINE_MB}"),
            ));
        }
        if !(1..=MAX_TOP).contains(&self.output.top) {
            return Err(err(
                "output.top",
                format!("must be between 1 and {MAX_TOP}"),
            ));
        }
        for (i, &p) in self.targets.pids.iter().enumerate() {
            if p == 0 || self.targets.pids[..i].contains(&p) {
                return Err(err(
                    "targets.pids",
                    format!("{p} is not a process id, or is given twice"),
                ));
            }
        }
        for s in &self.functions.time {
            crate::probes::funcs::FuncSpec::parse(s).map_err(|p| err("functions.time", p))?;
        }
        if !(1..=MAX_FUNCTIONS).contains(&self.functions.max_functions) {
            return Err(err(
                "functions.max_functions",
                format!("must be between 1 and {MAX_FUNCTIONS}"),
            ));
        }
        if self.functions.max_rows == 0 {
            return Err(err("functions.max_rows", "must be at least 1".into()));
        }
        if self.targets.tids.len() > rtm_common::names::MAX_FILTER_TIDS as usize
            || self.targets.tids.contains(&0)
        {
            return Err(err(
                "targets.tids",
                format!(
                    "at most {} thread ids, none of them 0",
                    rtm_common::names::MAX_FILTER_TIDS
                ),
            ));
        }
        let cpus = crate::probes::layout::possible_cpus();
        if let Some(c) = self.targets.cpus.iter().find(|&&c| c >= cpus) {
            return Err(err(
                "targets.cpus",
                format!(
                    "CPU {c} does not exist here (CPUs 0-{})",
                    cpus.saturating_sub(1)
                ),
            ));
        }
        // Its messages name the field (`thresholds.steal_pct = -1 ...`).
        self.thresholds.validate().map_err(ConfigError)?;
        Ok(())
    }
}
