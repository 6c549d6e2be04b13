//! The report's view of what surrounded the program: the system over the run, the
//! trouble it was in, each traced process's resource usage, and the counters.

use std::fmt::Write;

use serde::Deserialize as _;

use super::{
    ambient::{AmbientView, Stat},
    counters::{CountersView, ScopeCounters},
};
use crate::format::{count, table::table, text::Shown};

/// The system section of the report, from the `ambient` section as the document holds
/// it.
pub(super) fn system_section(
    v: &serde_json::Value,
    out: &mut String,
    _top: usize,
) -> Result<(), serde_json::Error> {
    system(out, &AmbientView::deserialize(v)?);
    Ok(())
}

/// The counters section of the report, from the `counters` section as the document
/// holds it.
pub(super) fn counters_section(
    v: &serde_json::Value,
    out: &mut String,
    _top: usize,
) -> Result<(), serde_json::Error> {
    counters(out, &CountersView::deserialize(v)?);
    Ok(())
}

fn bytes(v: f64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = v;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{v:.0} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

fn mean_max(s: &Stat, unit: &str) -> String {
    if s.max >= 100.0 && unit.is_empty() {
        format!("mean {:.0}, max {:.0}", s.mean, s.max)
    } else {
        format!("mean {:.1}{unit}, max {:.1}{unit}", s.mean, s.max)
    }
}

/// The system section.
fn system(out: &mut String, a: &AmbientView) {
    let s = &a.summary;
    let Some(last) = a.intervals.last() else {
        let _ = writeln!(
            out,
            "\nSystem: the trace was shorter than one sampling interval"
        );
        return;
    };
    let cpus = last.per_cpu_busy.len();
    let _ = writeln!(
        out,
        "\nSystem ({} interval{} of {:.1} s; {cpus} CPUs)",
        s.intervals,
        if s.intervals == 1 { "" } else { "s" },
        a.period_s
    );
    let _ = writeln!(
        out,
        "  CPU busy        {} (iowait mean {:.1}%, steal mean {:.1}%)",
        mean_max(&s.cpu_busy_pct, "%"),
        s.cpu_iowait_pct.mean,
        s.cpu_steal_pct.mean
    );
    let _ = writeln!(
        out,
        "  run queue       {} runnable; load (1 min) {}",
        mean_max(&s.procs_running, ""),
        mean_max(&s.load1, "")
    );
    let busiest: Vec<String> = last
        .top_interrupts
        .iter()
        .take(3)
        .map(|(n, r)| format!("{n} {r:.0}/s"))
        .collect();
    let _ = writeln!(
        out,
        "  switches        {} /s; interrupts {} /s (last interval: {})",
        mean_max(&s.context_switches_per_s, ""),
        mean_max(&s.interrupts_per_s, ""),
        if busiest.is_empty() {
            "none".to_owned()
        } else {
            busiest.join(", ")
        }
    );
    let _ = writeln!(
        out,
        "  memory          available {} of all (lowest {:.1}%), cached {}, swap used {}; \
         swapping in {:.1}, out {:.1} pages/s (mean)",
        format_args!("{:.1}%", s.mem_available_pct.mean),
        a.intervals
            .iter()
            .map(|i| i.mem_available_pct)
            .fold(f64::INFINITY, f64::min),
        bytes(last.mem_cached as f64),
        bytes(last.swap_used as f64),
        s.swap_in_per_s.mean,
        s.swap_out_per_s.mean
    );
    for d in &last.disks {
        let peak = a
            .intervals
            .iter()
            .flat_map(|i| i.disks.iter().filter(|x| x.name == d.name))
            .map(|x| x.busy_pct)
            .fold(0.0, f64::max);
        let _ = writeln!(
            out,
            "  disk {:<10} busy max {peak:.1}%; last interval {:.0} r/s {:.0} w/s, {}/s read, {}/s written",
            Shown(&d.name).to_string(),
            d.reads_per_s,
            d.writes_per_s,
            bytes(d.read_bytes_per_s),
            bytes(d.write_bytes_per_s)
        );
    }
    for n in &last.nets {
        let (rx, tx, errs, drops) = a
            .intervals
            .iter()
            .flat_map(|i| i.nets.iter().filter(|x| x.name == n.name))
            .fold((0u64, 0u64, 0u64, 0u64), |t, x| {
                (
                    t.0 + x.rx_bytes,
                    t.1 + x.tx_bytes,
                    t.2 + x.errors,
                    t.3 + x.drops,
                )
            });
        if rx + tx + errs + drops == 0 {
            continue;
        }
        let _ = writeln!(
            out,
            "  net {:<11} {} received, {} sent; {errs} errors, {drops} drops",
            Shown(&n.name).to_string(),
            bytes(rx as f64),
            bytes(tx as f64)
        );
    }
    if s.psi_cpu_some_pct.max > 0.0 || s.psi_io_some_pct.max > 0.0 || last.psi.is_some() {
        let _ = writeln!(
            out,
            "  stalls (PSI)    cpu {}; memory {}; io {}",
            mean_max(&s.psi_cpu_some_pct, "%"),
            mean_max(&s.psi_memory_some_pct, "%"),
            mean_max(&s.psi_io_some_pct, "%")
        );
    }
    if a.troubles.is_empty() {
        let _ = writeln!(
            out,
            "  no trouble flagged (thresholds: --config, docs/config.md)"
        );
    }
    for t in &a.troubles {
        let on = if t.what.is_empty() {
            String::new()
        } else {
            format!(" on {}", t.what)
        };
        let _ = writeln!(
            out,
            "  ! {}{on}: {} of {} intervals, first at +{:.1} s, worst {:.1}",
            t.kind.describe(),
            t.intervals,
            s.intervals,
            t.first_t_s,
            t.worst
        );
    }
    if !a.processes.is_empty() {
        let _ = writeln!(
            out,
            "\nTraced processes' resource use (over the samples that saw them)"
        );
        let rows: Vec<Vec<String>> = a
            .processes
            .iter()
            .map(|p| {
                let u = &p.usage;
                vec![
                    u.pid.to_string(),
                    format!("{:.1}%", u.user_pct),
                    format!("{:.1}%", u.system_pct),
                    bytes(p.max_rss_bytes as f64),
                    count(u.minor_faults),
                    count(u.major_faults),
                    count(u.voluntary_switches),
                    count(u.involuntary_switches),
                    bytes(u.read_bytes as f64),
                    bytes(u.write_bytes as f64),
                    p.max_threads.to_string(),
                ]
            })
            .collect();
        table(
            out,
            &[
                "pid", "user", "system", "max RSS", "minflt", "majflt", "vol cs", "invol cs",
                "read", "written", "threads",
            ],
            &rows,
        );
    }
}

fn value(c: &ScopeCounters, event: &str) -> String {
    match c.values.get(event) {
        Some(v) => {
            let mut s = if event == "task-clock" {
                format!("{:.1} ms", v / 1e6)
            } else {
                count(*v as u64)
            };
            if let Some(p) = c.multiplexed.get(event) {
                let _ = write!(s, " ({p:.0}% counted)");
            }
            s
        }
        None => "-".to_owned(),
    }
}

/// The counters section.
fn counters(out: &mut String, c: &CountersView) {
    if c.events.is_empty() {
        return;
    }
    let mut scopes: Vec<(String, &ScopeCounters)> = Vec::new();
    for p in &c.processes {
        if let crate::readers::counters::Scope::Process { pid } = p.scope {
            scopes.push((format!("PID {pid}"), p));
        }
    }
    if let Some(s) = &c.system {
        scopes.push(("all CPUs".to_owned(), s));
    }
    let counted: Vec<&String> = c
        .events
        .iter()
        .filter(|e| !c.unavailable.iter().any(|u| &u.event == *e))
        .collect();
    let _ = writeln!(
        out,
        "\nCounters (a process's include the threads and processes it created)"
    );
    if !counted.is_empty() && !scopes.is_empty() {
        let mut header = vec!["event"];
        header.extend(scopes.iter().map(|(n, _)| n.as_str()));
        let mut rows: Vec<Vec<String>> = counted
            .iter()
            .map(|e| {
                let mut r = vec![(*e).clone()];
                r.extend(scopes.iter().map(|(_, s)| value(s, e)));
                r
            })
            .collect();
        for d in ["ipc", "cache_miss_pct", "branch_miss_pct"] {
            if scopes.iter().any(|(_, s)| s.derived.contains_key(d)) {
                let mut r = vec![d.to_owned()];
                r.extend(
                    scopes
                        .iter()
                        .map(|(_, s)| s.derived.get(d).map_or("-".into(), |v| format!("{v:.2}"))),
                );
                rows.push(r);
            }
        }
        table(out, &header, &rows);
    }
    if !c.unavailable.is_empty() {
        let names: Vec<&str> = c.unavailable.iter().map(|u| u.event.as_str()).collect();
        let _ = writeln!(
            out,
            "  not available here: {} ({})",
            names.join(", "),
            c.unavailable[0].reason
        );
    }
    // Nothing to say of the targets' own counters where no counter counts at all (a VM).
    if !c.targets_counted && !counted.is_empty() {
        let _ = writeln!(
            out,
            "  the traced processes' own counters were not opened (per-task perf events cost \
             each of their context switches; --target-counters opens them); their CPU time \
             and context switches are under resource use"
        );
    }
    if c.threads_not_counted > 0 {
        let _ = writeln!(
            out,
            "  {} threads past the first {} have no counters of their own (their process counts them)",
            c.threads_not_counted,
            crate::readers::counters::MAX_THREADS_COUNTED
        );
    }
}
