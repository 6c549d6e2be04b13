//! The System tab of the HTML page: the system and the traced processes on one time
//! axis.

use serde::Deserialize as _;
use serde_json::Value;

use super::{
    ambient::AmbientView,
    interval::{Interval, ProcRate, PsiShare},
};
use crate::{analyses::Names, format::svg};

/// Whether the section has a time series to draw.
pub(super) fn shown(v: &Value) -> bool {
    v["intervals"].as_array().is_some_and(|i| !i.is_empty())
}

/// The tab, from the `ambient` section as the document holds it.
pub(super) fn render(
    v: &Value,
    names: &dyn Names,
    p: &mut String,
) -> Result<(), serde_json::Error> {
    let a = &AmbientView::deserialize(v)?;
    let span = a.intervals.last().map_or(0.0, |i| i.t_s + i.dur_s);
    let one = |name: &str, f: &dyn Fn(&Interval) -> f64| {
        (
            name.to_owned(),
            a.intervals
                .iter()
                .map(|i| (i.t_s, i.t_s + i.dur_s, f(i)))
                .collect::<Vec<_>>(),
        )
    };
    p.push_str(
        "<section id=\"system\"><h2>The system and the traced processes, on one time axis</h2>",
    );
    p.push_str(&svg::lines(
        "CPU",
        "%",
        &[
            one("busy", &|i| i.cpu.busy),
            one("iowait", &|i| i.cpu.iowait),
            one("steal", &|i| i.cpu.steal),
        ],
        span,
    ));
    p.push_str(&svg::lines(
        "Run queue",
        "tasks",
        &[
            one("running", &|i| i.procs_running as f64),
            one("blocked", &|i| i.procs_blocked as f64),
        ],
        span,
    ));
    p.push_str(&svg::lines(
        "Memory available",
        "%",
        &[one("available", &|i| i.mem_available_pct)],
        span,
    ));
    if a.intervals.iter().any(|i| i.psi.is_some()) {
        let psi = |f: fn(&PsiShare) -> f64| move |i: &Interval| i.psi.as_ref().map_or(0.0, f);
        p.push_str(&svg::lines(
            "Pressure (PSI, some)",
            "%",
            &[
                one("cpu", &psi(|p| p.cpu_some)),
                one("memory", &psi(|p| p.memory_some)),
                one("io", &psi(|p| p.io_some)),
            ],
            span,
        ));
    }
    let mut pids: Vec<u32> = a
        .intervals
        .iter()
        .flat_map(|i| i.procs.iter().map(|p| p.pid))
        .collect();
    pids.sort_unstable();
    pids.dedup();
    pids.truncate(6);
    let per = |f: fn(&ProcRate) -> f64| -> Vec<svg::Series> {
        pids.iter()
            .map(|pid| {
                let name = names.process(*pid).unwrap_or_default();
                (
                    format!("{pid} {name}"),
                    a.intervals
                        .iter()
                        .filter_map(|i| {
                            let u = i.procs.iter().find(|p| p.pid == *pid)?;
                            Some((i.t_s, i.t_s + i.dur_s, f(u)))
                        })
                        .collect(),
                )
            })
            .collect()
    };
    p.push_str(&svg::lines(
        "Traced processes: CPU",
        "%",
        &per(|u| u.user_pct + u.system_pct),
        span,
    ));
    p.push_str(&svg::lines(
        "Traced processes: RSS",
        "bytes",
        &per(|u| u.rss_bytes as f64),
        span,
    ));
    p.push_str("</section>");
    Ok(())
}
