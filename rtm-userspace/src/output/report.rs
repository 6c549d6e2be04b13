//! The readable report: what a performance engineer wants first. Which locks cost the
//! most waiting, which threads spent their time waiting and for whom, how long locks are
//! held, barrier imbalance, and whether anything was lost.

use std::fmt::Write as _;

use super::{
    EndReason, RunInfo, blocked_report,
    dest::{Dest, DestError},
    format::{count, mean_ns, ns, opt_ns, pct},
    saved::Doc,
    sections,
    sink::{Moment, Sink},
    stacks_report,
    table::table,
    text::Shown,
};
use rtm_common::Primitive;

use crate::config::{Mode, TraceConfig};

/// Renders a table whose columns depend on the mode. Contention mode sees no
/// acquisitions or holds: the columns listed in `full_only` are left out, and the
/// "contended" column (index 3) counts sleeps.
fn table_of(
    out: &mut String,
    mode: Mode,
    header: &[&'static str],
    rows: Vec<Vec<String>>,
    full_only: &[usize],
) {
    let keep = |i: usize| mode == Mode::Full || !full_only.contains(&i);
    let rename = |i: usize, h: &'static str| {
        if i == 3 && mode == Mode::Contention {
            "sleeps"
        } else {
            h
        }
    };
    let rows: Vec<Vec<String>> = rows
        .into_iter()
        .map(|r| {
            r.into_iter()
                .enumerate()
                .filter(|(i, _)| keep(*i))
                .map(|(_, c)| c)
                .collect()
        })
        .collect();
    let header: Vec<&str> = header
        .iter()
        .enumerate()
        .filter(|(i, _)| keep(*i))
        .map(|(i, h)| rename(i, h))
        .collect();
    table(out, &header, &rows);
}

/// Renders the report of a document: the final report of a run, `rtm-trace report` of
/// its JSON (the same bytes), or an interval's summary (`title` then says which).
/// `top` bounds the rows of each table.
pub fn render(doc: &Doc, top: usize, title: Option<&str>) -> String {
    if !doc.merged_from.is_empty() {
        let view = crate::analyses::mpi::of(&doc.sections).unwrap_or_default();
        return crate::analyses::mpi::merged::render(&doc.merged_from, &view, top);
    }
    let mut out = String::new();
    let run = &doc.run;
    let s = &doc.sync_graph;
    let _ = writeln!(
        out,
        "== rtm-trace: {} ==",
        Shown(title.unwrap_or("final report"))
    );
    if doc.tool_version != env!("CARGO_PKG_VERSION") {
        let _ = writeln!(
            out,
            "(written by rtm-trace {}; this is {})",
            Shown(&doc.tool_version),
            env!("CARGO_PKG_VERSION")
        );
    }
    let targets: Vec<String> = run
        .targets
        .iter()
        .map(|t| {
            let mut d = format!("PID {}", t.pid);
            if let Some(c) = &t.comm {
                let _ = write!(d, " ({})", Shown(c));
            }
            if let Some(e) = &t.ended {
                let _ = write!(d, " [{}]", Shown(e));
            }
            d
        })
        .collect();
    let _ = writeln!(
        out,
        "traced {} on {} for {} in {} mode; {} threads, {} objects, {} events",
        targets.join(", "),
        Shown(&run.host),
        ns(s.duration_ns()),
        run.mode.name(),
        s.totals().threads,
        s.totals().objects,
        count(s.model.events)
    );
    if let Some(reason) = run.end_reason {
        let why = match reason {
            EndReason::TargetsExited => "the traced processes exited",
            EndReason::Duration => "--duration elapsed",
            EndReason::Signal => "interrupted (Ctrl-C or SIGTERM)",
            EndReason::Deadlock => "a deadlock was found (--on-deadlock exit)",
        };
        let _ = writeln!(out, "stopped: {why}");
    }
    losses(&mut out, run);
    if run.end_reason.is_some() {
        super::findings::text(&mut out, &doc.findings);
    }

    let locks = s.objects.iter().filter(|o| super::saved::is_lock(o));
    let total = s.totals().locks;
    let objects: Vec<_> = locks.take(top).collect();
    let what = match run.mode {
        Mode::Contention => "lock words (futex) by time threads slept on them",
        Mode::Full => "locks by time waiting in contended acquisitions",
    };
    let _ = writeln!(
        out,
        "\nMost contended {what} (top {} of {}; wait avg, p99 and max are over the {} that \
         waited)",
        objects.len(),
        total,
        match run.mode {
            Mode::Contention => "sleeps",
            Mode::Full => "acquisitions",
        }
    );
    if objects.is_empty() {
        let _ = writeln!(out, "  (no contended waits seen)");
    } else {
        let rows: Vec<Vec<String>> = objects
            .iter()
            .map(|o| {
                let share = if o.counts.acquisitions > 0 {
                    o.counts.contended as f64 / o.counts.acquisitions as f64
                } else {
                    1.0
                };
                vec![
                    o.titled(),
                    o.pid.to_string(),
                    // A futex word has no acquisitions seen, in either mode.
                    if o.kind == Primitive::Futex {
                        "-".into()
                    } else {
                        count(o.counts.acquisitions)
                    },
                    if o.kind == Primitive::Futex {
                        count(o.counts.contended)
                    } else {
                        format!("{} ({})", count(o.counts.contended), pct(share))
                    },
                    ns(o.counts.contended_wait_ns),
                    mean_ns(o.wait.mean_ns),
                    opt_ns(o.wait.p99_ns),
                    opt_ns(o.wait.max_ns),
                    mean_ns(o.hold.mean_ns),
                    opt_ns(o.hold.p99_ns),
                    opt_ns(o.hold.max_ns),
                    o.threads.to_string(),
                    count(o.counts.failed_trylocks + o.counts.timeouts),
                ]
            })
            .collect();
        table_of(
            &mut out,
            run.mode,
            &[
                "object",
                "pid",
                "acquired",
                "contended",
                "waited",
                "wait avg",
                "wait p99",
                "wait max",
                "hold avg",
                "hold p99",
                "hold max",
                "threads",
                "try/timeout fails",
            ],
            rows,
            &[2, 8, 9, 10, 12],
        );
    }

    sections::waiting_for_work(&mut out, doc, top);

    let threads: Vec<_> = s.threads.iter().take(top).collect();
    let _ = writeln!(
        out,
        "\nThreads by time spent waiting for locks (contention, or waits of unknown kind; \
         \"for work\": waiting for work or for other threads; top {} of {})",
        threads.len(),
        s.totals().threads
    );
    if threads.is_empty() {
        let _ = writeln!(out, "  (no threads seen)");
    } else {
        let rows: Vec<Vec<String>> = threads
            .iter()
            .map(|t| {
                vec![
                    format!(
                        "{} {}{}",
                        t.tid,
                        t.name.as_deref().unwrap_or("?"),
                        if t.exited { " (exited)" } else { "" }
                    ),
                    t.pid.to_string(),
                    count(t.acquisitions),
                    count(t.contended),
                    ns(t.lock_wait_ns()),
                    pct(if t.observed_ns > 0 {
                        (t.lock_wait_ns() as f64 / t.observed_ns as f64).min(1.0)
                    } else {
                        0.0
                    }),
                    ns(t.idle_wait_ns),
                    ns(t.hold.total_ns),
                    ns(t.observed_ns),
                ]
            })
            .collect();
        table_of(
            &mut out,
            run.mode,
            &[
                "thread",
                "pid",
                "acquired",
                "contended",
                "waited",
                "of its time",
                "for work",
                "held",
                "observed",
            ],
            rows,
            &[2, 7],
        );
    }
    sections::waits_for(&mut out, doc, top);
    sections::held_by(&mut out, doc, top);
    sections::call_sites(&mut out, doc, top);
    stacks_report::render(&mut out, doc);
    blocked_report::found(&mut out, &s.deadlocks);
    blocked_report::undecided(&mut out, &s.cannot_tell);
    blocked_report::inversions(&mut out, s.lock_order.as_ref(), top);
    sections::rwlocks(&mut out, doc, top);
    sections::condvars(&mut out, doc, top);
    sections::barriers(&mut out, doc, top);
    sections::semaphores(&mut out, doc, top);
    sections::thread_tree(&mut out, doc, top);
    crate::analyses::text(&doc.sections, &mut out, top);
    if let Some(b) = &run.bpf {
        bpf_stats(&mut out, b);
    }
    notes(&mut out, doc);
    out
}

fn bpf_stats(out: &mut String, b: &crate::readers::bpf_stats::BpfStats) {
    let _ = writeln!(
        out,
        "\neBPF programs (kernel run-time statistics; maps: {} KiB locked)",
        b.map_bytes / 1024
    );
    let rows: Vec<Vec<String>> = b
        .programs
        .iter()
        .filter(|p| p.runs > 0)
        .map(|p| {
            vec![
                p.name.clone(),
                count(p.runs),
                format!("{:.0} ns", p.ns_per_run),
                ns(p.run_ns),
                format!("{} B", p.jited_bytes),
            ]
        })
        .collect();
    if rows.is_empty() {
        let _ = writeln!(out, "  (no program ran)");
    } else {
        table(out, &["program", "runs", "per run", "total", "code"], &rows);
    }
}

fn losses(out: &mut String, run: &RunInfo) {
    let l = &run.losses;
    let undecodable = run.reader.undecodable();
    unprobed(out, run);
    if l.lost() == 0 && undecodable == 0 {
        let _ = writeln!(
            out,
            "lost events: none{}",
            if run.unprobed.is_empty() {
                ""
            } else {
                " (but see the unprobed stretches above)"
            }
        );
        return;
    }
    let _ = writeln!(
        out,
        "LOST EVENTS: {} (ring buffer full: {}, pending-call map full: {}, undecodable: {}); \
         figures below undercount. Rerun with a larger --ring-size, or fewer targets.",
        count(l.lost() + undecodable),
        count(l.ring_full),
        count(l.pending_full),
        count(undecodable)
    );
}

/// Followed processes whose pthread calls went unprobed: said per process, never hidden.
fn unprobed(out: &mut String, run: &RunInfo) {
    if run.unprobed.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "PTHREAD CALLS UNPROBED in {} followed process(es); their figures undercount:",
        run.unprobed.len()
    );
    for u in run.unprobed.iter().take(10) {
        let span = match u.until_ns {
            Some(until) => format!("for {}", ns(until.saturating_sub(u.since_ns))),
            None => "to the end".into(),
        };
        let _ = writeln!(out, "  PID {} {span}: {}", u.pid, Shown(&u.why));
    }
    if run.unprobed.len() > 10 {
        let _ = writeln!(
            out,
            "  ... and {} more (all in the JSON)",
            run.unprobed.len() - 10
        );
    }
}

fn notes(out: &mut String, doc: &Doc) {
    let (run, s) = (&doc.run, &doc.sync_graph);
    let m = &s.model;
    let mut notes = Vec::new();
    notes.extend(run.missing_symbols.iter().cloned());
    if run.losses.agg_full > 0 {
        notes.push(format!(
            "the kernel's map of summed futex waits was full: {} waits were sent one by \
             one instead (none lost; raise --futex-sums for fewer)",
            count(run.losses.agg_full)
        ));
    }
    if run.losses.mapping_records > 0 {
        notes.push(format!(
            "{} mapping records were dropped: objects and code in processes that exited \
             may be shown by address instead of by name",
            count(run.losses.mapping_records)
        ));
    }
    for pid in &s.go_processes {
        notes.push(format!(
            "PID {pid} runs a Go program: goroutines that block on a sync.Mutex, a channel \
             or a WaitGroup park in the Go runtime, not on a futex, so those waits are not \
             seen here; its futex waits are the runtime's own: idle threads parking (park, \
             not contention) and the runtime's internal locks (mutex). Go's mutex and \
             block profiles (runtime.SetMutexProfileFraction, net/http/pprof) measure \
             goroutine contention"
        ));
    }
    if run.mode == Mode::Full {
        let totals = s.totals();
        let (words, sleeps) = (totals.futex_words, totals.futex_sleeps);
        if words > 0 {
            notes.push(format!(
                "{} sleeps on {} futex word{} came from no probed pthread call (a language \
                 runtime's or a library's own locks: Rust's std, Go, parking_lot, glibc's \
                 internal ones): they are shown as futex words, without acquisitions or \
                 hold times, which only pthread calls give; contention mode sees them the \
                 same way at a fraction of the cost",
                count(sleeps),
                count(words),
                if words == 1 { "" } else { "s" }
            ));
        }
    }
    if run.mode == Mode::Contention {
        notes.push(
            "contention mode sees only waits that slept in the kernel: uncontended \
             acquisitions, hold times, spinning, and which pthread call waited are not \
             visible (run with --mode full for those, at about 1 us per call)"
                .to_owned(),
        );
    }
    if let Some(c) = &run.collection {
        if c.futex_functions {
            notes.push(
                "waits were seen in the kernel's futex functions, with no program on context \
                 switches or other system calls: waits that returned at once (the word had \
                 changed) are not counted (--unslept counts them, at ~50 ns on every system \
                 call of the machine)"
                    .to_owned(),
            );
        } else if !c.syscall_entry {
            notes.push(
                "waits were seen from their sleep, with no program on any system call: waits \
                 that returned without sleeping (the word had changed) are not counted \
                 (--unslept counts them, at ~50 ns on every system call of the machine)"
                    .to_owned(),
            );
        }
        match c.stack_rate {
            Some(0) | None => {}
            Some(n) => notes.push(format!(
                "call stacks were sampled, at most {n} waits a second per CPU, each standing \
                 for the waits it was chosen among: per-stack figures are estimates, \
                 per-lock ones exact (--stack-rate all takes every wait's)"
            )),
        }
    }
    if m.waits_woken_from_outside > 0 {
        notes.push(format!(
            "{} futex waits were woken by a process that is not traced (a process-shared \
             word): they are in the waits-for table as \"not traced\"",
            count(m.waits_woken_from_outside)
        ));
    }
    if m.waits_without_waker > 0 {
        let other = m
            .waits_without_waker
            .saturating_sub(m.waits_timed_out + m.waits_interrupted);
        notes.push(format!(
            "{} waits that slept ended without a wake from a thread: {} timed out, {} \
             interrupted (a signal or the kernel){}",
            count(m.waits_without_waker),
            count(m.waits_timed_out),
            count(m.waits_interrupted),
            if other > 0 {
                format!(
                    ", {} with no waker known (a waker in another process is not seen \
                     where waits end at their return without the kernel's BTF)",
                    count(other)
                )
            } else {
                String::new()
            }
        ));
    }
    if m.waits_in_progress > 0 {
        notes.push(format!(
            "{} futex waits were still asleep when the trace ended: counted with their wait \
             so far, without a waker",
            count(m.waits_in_progress)
        ));
    }
    if m.waits_unslept > 0 {
        notes.push(format!(
            "{} futex waits returned without sleeping (the lock word changed before the \
             kernel put the thread to sleep): counted in waits, not in sleeps or wait times",
            count(m.waits_unslept)
        ));
    }
    if m.dropped_over_limits > 0 {
        notes.push(format!(
            "{} events were not recorded because the thread/mutex caps were reached (--max-objects)",
            count(m.dropped_over_limits)
        ));
    }
    if m.histograms_refused > 0 {
        notes.push(format!(
            "{} distributions have no percentiles: the histogram budget was spent (--max-histograms)",
            count(m.histograms_refused)
        ));
    }
    if m.unmatched_releases > 0 {
        notes.push(format!(
            "{} unlocks of mutexes locked before tracing began (no hold time for them)",
            count(m.unmatched_releases)
        ));
    }
    if m.interrupted_holds > 0 {
        notes.push(format!(
            "{} holds ended without a visible unlock (an event was lost or a lock was released \
             in a way not probed); their hold times are left out",
            count(m.interrupted_holds)
        ));
    }
    if !notes.is_empty() {
        let _ = writeln!(out, "\nNotes");
        for n in notes {
            let _ = writeln!(out, "  - {}", Shown(&n));
        }
    }
}

/// The report as a sink: a summary at each interval (when asked for), the final report
/// at the end, to standard output or a file.
pub struct ReportSink {
    dest: Dest,
    top: usize,
    summaries: bool,
}

/// The report, from the config: standard output unless `output.report` names a file
/// (checked now, before anything is traced).
pub fn sink(c: &TraceConfig) -> Result<Option<Box<dyn Sink>>, DestError> {
    let dest = match &c.output.report {
        Some(path) => Dest::check(path)?,
        None => Dest::stdout(),
    };
    // The live view owns the terminal while it runs: summaries printed there would land
    // inside its screen (its own header shows the same figures each interval).
    let summaries = c.interval.is_some() && !(c.output.live && dest.is_stdout());
    if c.interval.is_some() && !summaries {
        crate::say!(
            "rtm-trace: no summary each interval on the terminal while the live view shows \
             it (send the report to a file with -o to have them)"
        );
    }
    Ok(Some(Box::new(ReportSink {
        dest,
        top: c.output.top,
        summaries,
    })))
}

impl Sink for ReportSink {
    fn name(&self) -> String {
        "the report".into()
    }

    fn wants_intervals(&self) -> bool {
        self.summaries
    }

    fn interval(&mut self, at: &Moment) -> Result<(), DestError> {
        let secs = at.elapsed_ns as f64 / 1e9;
        let doc = Doc::for_report(at.run, at.snapshot, self.top.min(5))?;
        let text = render(
            &doc,
            self.top.min(5),
            Some(&format!("summary at +{secs:.1} s (cumulative)")),
        );
        self.dest.write(&mut |w| w.write_all(text.as_bytes()))
    }

    fn finish(&mut self, at: &Moment) -> Result<(), DestError> {
        let text = render(
            &Doc::for_report(at.run, at.snapshot, self.top)?,
            self.top,
            None,
        );
        self.dest.write(&mut |w| w.write_all(text.as_bytes()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_merged_job_reads_with_its_empty_fields_and_shows_its_traffic() {
        let d = Doc::parse(
            br#"{"format":"rtm-trace","version":1,"tool_version":"t","merged_from":[{"file":"a.json"},{"file":"b.json"}],
                "task_graph":{"ranks":[{"rank":0,"pid":1,"host":"n1"},{"rank":1,"pid":2,"host":"n2"}],
                "edges":[{"src":0,"dst":1,"sent":{"messages":3,"bytes":24,"time_ns":5},"received":null}]}}"#,
            "merged.json",
        )
        .unwrap();
        let text = render(&d, 10, None);
        assert!(text.contains("merged task graph"), "{text}");
        assert!(text.contains("2 parts"), "{text}");
        assert!(text.contains("0 -> 1     3   24 B"), "{text}");
        assert!(
            !text.contains("Most contended"),
            "no empty sync graph tables: {text}"
        );
        let page = crate::output::html::render(&d);
        assert!(page.contains("a merged MPI job (2 parts)"));
    }

    #[test]
    fn the_report_lists_objects_threads_and_edges_escaped() {
        let d = Doc::parse(
            br#"{"format":"rtm-trace","version":1,"tool_version":"t","run":{"mode":"full","host":"h","targets":[{"pid":5,"comm":"app"}],"end_reason":"duration"},
                "sync_graph":{"window":{"start_ns":0,"end_ns":2000000000},
                "objects":[{"pid":5,"kind":"mutex","addr":"0x10","name":"big_lock","acquisitions":30,"contended":4,"contended_wait_ns":900,"wait":{"count":4,"total_ns":900}}],
                "threads":[{"pid":5,"tid":6,"name":"evil\u001b[2J","wait":{"total_ns":900}},{"pid":5,"tid":7,"name":"w2"}],
                "waits_for":[{"pid":5,"waiter":6,"waker_pid":5,"waker":7,"object":"0x10","object_name":"big_lock","count":4,"wait":{"total_ns":900}}]}}"#,
            "t.json",
        )
        .unwrap();
        let text = render(&d, 10, None);
        assert!(text.contains("mutex big_lock"), "{text}");
        assert!(text.contains("6 evil\\x1b[2J"), "escaped: {text}");
        assert!(!text.contains('\x1b'));
        assert!(text.contains("7 w2"), "{text}");
        assert!(text.contains("for 2.000 s in full mode"), "{text}");
        assert!(text.contains("(written by rtm-trace t;"), "{text}");
        assert!(text.contains("stopped: --duration elapsed"), "{text}");
    }
}
