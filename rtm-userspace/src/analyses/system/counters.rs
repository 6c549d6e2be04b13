//! Counter readings as outputs show them: per scope, with derived ratios where their
//! inputs were counted, and what could not be counted.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::readers::counters::{Reading, Scope, Unavailable};

/// One scope's counters.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct ScopeCounters {
    #[serde(flatten)]
    pub scope: Scope,
    /// Scaled values by event name.
    pub values: BTreeMap<String, f64>,
    /// Events the kernel multiplexed, with the share of time each was counted, percent.
    #[serde(skip_serializing_if = "BTreeMap::is_empty", default)]
    pub multiplexed: BTreeMap<String, f64>,
    /// Instructions per cycle, cache and branch miss rates (percent), when counted.
    #[serde(skip_serializing_if = "BTreeMap::is_empty", default)]
    pub derived: BTreeMap<String, f64>,
}

/// Every counter of the run.
#[derive(Debug, Clone, Default, Serialize, serde::Deserialize)]
pub struct CountersView {
    /// Events asked for.
    pub events: Vec<String>,
    /// Events that could not be counted here, and why.
    pub unavailable: Vec<Unavailable>,
    /// All CPUs together (the system), then each traced process, then threads.
    pub system: Option<ScopeCounters>,
    pub per_cpu: Vec<ScopeCounters>,
    pub processes: Vec<ScopeCounters>,
    pub threads: Vec<ScopeCounters>,
    /// Threads without counters of their own (over the cap; their process counts them).
    pub threads_not_counted: u64,
    /// Whether the traced processes have counters of their own (`--target-counters`):
    /// per-task perf events, which cost each of their context switches.
    pub targets_counted: bool,
}

/// Ratios of counted events.
pub fn derived(values: &BTreeMap<String, f64>) -> BTreeMap<String, f64> {
    let mut d = BTreeMap::new();
    let mut ratio = |name: &str, num: &str, den: &str, scale: f64| {
        if let (Some(n), Some(&m)) = (values.get(num), values.get(den))
            && m > 0.0
        {
            d.insert(name.to_owned(), n * scale / m);
        }
    };
    ratio("ipc", "instructions", "cycles", 1.0);
    ratio("cache_miss_pct", "cache-misses", "cache-references", 100.0);
    ratio("branch_miss_pct", "branch-misses", "branches", 100.0);
    d
}

impl CountersView {
    /// Builds the view from one reading of every counter.
    pub fn build(
        events: &[&str],
        unavailable: Vec<Unavailable>,
        readings: &[(Scope, &'static str, Reading)],
        threads_not_counted: u64,
        targets_counted: bool,
    ) -> Self {
        let mut scopes: BTreeMap<Scope, ScopeCounters> = BTreeMap::new();
        for (scope, name, r) in readings {
            let s = scopes.entry(*scope).or_insert_with(|| ScopeCounters {
                scope: *scope,
                values: BTreeMap::new(),
                multiplexed: BTreeMap::new(),
                derived: BTreeMap::new(),
            });
            s.values.insert((*name).to_owned(), r.value);
            if r.running_pct < 99.5 {
                s.multiplexed.insert((*name).to_owned(), r.running_pct);
            }
        }
        let mut view = Self {
            events: events.iter().map(|e| (*e).to_owned()).collect(),
            unavailable,
            threads_not_counted,
            targets_counted,
            ..Default::default()
        };
        let mut system: BTreeMap<String, f64> = BTreeMap::new();
        for (scope, mut s) in scopes {
            s.derived = derived(&s.values);
            match scope {
                Scope::Cpu { .. } => {
                    for (k, v) in &s.values {
                        *system.entry(k.clone()).or_default() += v;
                    }
                    view.per_cpu.push(s);
                }
                Scope::Process { .. } => view.processes.push(s),
                Scope::Thread { .. } => view.threads.push(s),
            }
        }
        if !view.per_cpu.is_empty() {
            view.system = Some(ScopeCounters {
                scope: Scope::Cpu { cpu: u32::MAX },
                derived: derived(&system),
                values: system,
                multiplexed: BTreeMap::new(),
            });
        }
        view
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(value: f64, running_pct: f64) -> Reading {
        Reading {
            value,
            raw: value as u64,
            running_pct,
        }
    }

    #[test]
    fn scopes_sum_into_the_system_and_ratios_need_both_inputs() {
        let cpu = |c| Scope::Cpu { cpu: c };
        let p = Scope::Process { pid: 9 };
        let readings = [
            (cpu(0), "cycles", r(1000.0, 100.0)),
            (cpu(0), "instructions", r(1500.0, 100.0)),
            (cpu(1), "cycles", r(1000.0, 50.0)),
            (cpu(1), "instructions", r(500.0, 50.0)),
            (p, "task-clock", r(5e8, 100.0)),
            (p, "cache-misses", r(10.0, 100.0)),
        ];
        let v = CountersView::build(&["cycles"], Vec::new(), &readings, 0, true);
        let sys = v.system.as_ref().unwrap();
        assert_eq!(sys.values["cycles"], 2000.0);
        assert_eq!(sys.derived["ipc"], 1.0);
        assert_eq!(v.per_cpu[1].multiplexed["cycles"], 50.0);
        assert_eq!(v.processes[0].values["task-clock"], 5e8);
        // No cache references were counted: no miss rate is made up.
        assert!(v.processes[0].derived.is_empty());
    }
}
