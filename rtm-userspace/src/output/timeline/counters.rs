//! Counter tracks: the system's statistics, the traced processes' usage and the
//! tracer's event rate, on the same time axis as the events.

use super::{
    proto::Writer,
    tracks::Tracks,
    write::{COUNTER, Ev, track_event},
};
use crate::analyses::system::interval::Interval;

/// A value of counter track `name` at `ts`.
pub fn counter(
    w: &mut Writer,
    tracks: &mut Tracks,
    ts: u64,
    name: &str,
    unit: &str,
    pid: Option<u32>,
    value: f64,
) {
    let track = tracks.counter(w, name, unit, pid);
    track_event(
        w,
        ts,
        track,
        &Ev {
            ty: COUNTER,
            value: Some(value),
            ..Ev::default()
        },
    );
}

/// A system interval's statistics as counters at its end (`start_ns`: the trace's
/// start, CLOCK_MONOTONIC).
pub fn interval(w: &mut Writer, tracks: &mut Tracks, start_ns: u64, iv: &Interval) {
    let ts = start_ns + ((iv.t_s + iv.dur_s) * 1e9) as u64;
    let mut c = |name: &str, unit: &str, v: f64| counter(w, tracks, ts, name, unit, None, v);
    c("CPU busy %", "%", iv.cpu.busy);
    c("CPU iowait %", "%", iv.cpu.iowait);
    c("CPU steal %", "%", iv.cpu.steal);
    c("run queue (tasks running)", "", iv.procs_running as f64);
    c("tasks blocked", "", iv.procs_blocked as f64);
    c("load average (1 min)", "", iv.load1);
    c("context switches/s", "/s", iv.context_switches_per_s);
    c("memory available %", "%", iv.mem_available_pct);
    c("swap used", "bytes", iv.swap_used as f64);
    c("major faults/s", "/s", iv.major_faults_per_s);
    if let Some(p) = &iv.psi {
        c("PSI cpu some %", "%", p.cpu_some);
        c("PSI memory some %", "%", p.memory_some);
        c("PSI io some %", "%", p.io_some);
    }
    for p in &iv.procs {
        let cpu = format!("CPU % (pid {})", p.pid);
        let rss = format!("RSS (pid {})", p.pid);
        counter(
            w,
            tracks,
            ts,
            &cpu,
            "%",
            Some(p.pid),
            p.user_pct + p.system_pct,
        );
        counter(
            w,
            tracks,
            ts,
            &rss,
            "bytes",
            Some(p.pid),
            p.rss_bytes as f64,
        );
    }
}
