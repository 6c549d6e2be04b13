//! The families of one update: the agent's own figures, the kernel side's, the
//! process_* figures, and each target's, in the order the series cap keeps them.

use super::{
    mpi::{PairRows, add_rows, job_label, rank_label},
    *,
};

pub(super) fn count(f: &[Family]) -> usize {
    f.iter()
        .flat_map(|f| f.samples.iter().map(|(_, v)| v.series()))
        .sum()
}

fn counter(name: &'static str, help: &'static str) -> Family {
    Family {
        name,
        help,
        kind: Kind::Counter,
        samples: Vec::new(),
    }
}

fn gauge(name: &'static str, help: &'static str) -> Family {
    Family {
        name,
        help,
        kind: Kind::Gauge,
        samples: Vec::new(),
    }
}

pub(super) fn target_families(m: &Metrics) -> Vec<Family> {
    let mut waits = counter(
        "rtm_futex_waits",
        "Futex waits (FUTEX_WAIT calls) by the target's threads; every mode.",
    );
    let mut sleeps = counter("rtm_futex_sleeps", "Futex waits that slept.");
    let mut waited = counter(
        "rtm_futex_wait_seconds",
        "Time the target's threads slept in futex waits.",
    );
    let mut hist = Family {
        name: "rtm_futex_sleep_seconds",
        help: "Futex sleeps by length.",
        kind: Kind::Histogram,
        samples: Vec::new(),
    };
    let mut unslept = counter(
        "rtm_futex_waits_unslept",
        "Futex waits that returned at once (the word had changed).",
    );
    let mut timeouts = counter(
        "rtm_futex_timeouts",
        "Futex sleeps that ended at their timeout.",
    );
    let mut asleep = gauge(
        "rtm_waits_in_progress",
        "Threads asleep in a futex wait now.",
    );
    let mut oldest = gauge(
        "rtm_oldest_wait_in_progress_seconds",
        "The longest futex wait in progress now that may be contention (waits for work or for another thread, joins included, are left out): a hang or deadlock shows here.",
    );
    let mut deadlocked = gauge(
        "rtm_deadlocked_threads",
        "The target's threads in a deadlock (waiting on each other's mutexes) found while tracing.",
    );
    let mut threads = gauge("rtm_target_threads", "The target's threads now.");
    let mut procs = gauge(
        "rtm_target_processes",
        "The target's processes now running.",
    );
    let mut info = Family {
        name: "rtm_target",
        help: "A traced process: its pid, executable, container and pod.",
        kind: Kind::Info,
        samples: Vec::new(),
    };
    let mut lock_sleeps = counter(
        "rtm_lock_sleeps",
        "Waits for the target's locks and other sync objects that slept in the kernel, by folded name and wait kind (top N, the rest in lock=\"(other)\"); every mode.",
    );
    let mut lock_seconds = counter(
        "rtm_lock_wait_seconds",
        "Time waited for the target's sync objects, by folded name and wait kind; every mode.",
    );
    let mut lock_acquisitions = counter(
        "rtm_lock_acquisitions",
        "Acquisitions of the target's locks and semaphores, by folded name (mode=\"full\" only).",
    );
    let mut lock_contended = counter(
        "rtm_lock_contended_acquisitions",
        "Of those, the ones that found the object held (mode=\"full\" only).",
    );
    let mut edge_waits = counter(
        "rtm_waits_for",
        "Futex sleeps ended by a waker thread, by folded waiter and waker names (top N, the rest in waiter=\"(other)\"); every mode.",
    );
    let mut edge_seconds = counter(
        "rtm_waits_for_seconds",
        "Time waited, by folded waiter and waker names.",
    );
    let mut mpi_calls = counter(
        "rtm_mpi_calls",
        "MPI calls per rank (targets whose MPI library is probed).",
    );
    let mut mpi_seconds = counter("rtm_mpi_seconds", "Time inside MPI calls per rank.");
    let mut mpi_sent = counter(
        "rtm_mpi_messages_sent",
        "Point-to-point messages sent per rank.",
    );
    let mut mpi_sent_bytes = counter(
        "rtm_mpi_sent_bytes",
        "Bytes of the point-to-point messages sent per rank.",
    );
    let mut mpi_received = counter(
        "rtm_mpi_messages_received",
        "Point-to-point messages received per rank.",
    );
    let mut mpi_received_bytes = counter(
        "rtm_mpi_received_bytes",
        "Bytes of the point-to-point messages received per rank.",
    );
    let mut pair_sent = counter(
        "rtm_mpi_pair_messages_sent",
        "Point-to-point messages sent, by MPI job and source and destination world rank, as the sender counted them (top N destinations per rank, the rest in dst=\"(other)\"): summed by (src, dst) over every node's agent, the job's communication matrix.",
    );
    let mut pair_sent_bytes = counter(
        "rtm_mpi_pair_sent_bytes",
        "Bytes of those, by MPI job and source and destination world rank.",
    );
    for (key, t) in &m.targets {
        let base = key.labels();
        let mut total = t.retired;
        let (mut n_threads, mut n_asleep, mut oldest_ns, mut live) = (0, 0, 0, 0);
        let mut n_deadlocked = 0;
        for p in t.procs.values() {
            total.add(&p.totals);
            if p.live {
                live += 1;
                n_threads += p.threads;
                n_asleep += p.asleep;
                n_deadlocked += p.deadlocked_threads;
                oldest_ns = oldest_ns.max(p.oldest_asleep_ns);
            }
        }
        waits.samples.push((base.clone(), Value::Int(total.waits)));
        sleeps
            .samples
            .push((base.clone(), Value::Int(total.sleeps)));
        waited
            .samples
            .push((base.clone(), Value::Float(secs(total.wait_ns))));
        let mut buckets: Vec<(f64, u64)> = WAIT_BUCKETS_NS
            .iter()
            .zip(total.buckets)
            .map(|(b, n)| (secs(*b), n))
            .collect();
        buckets.push((f64::MAX, total.buckets[WAIT_BUCKETS_NS.len()]));
        hist.samples.push((
            base.clone(),
            Value::Histogram {
                sum: secs(total.wait_ns),
                count: total.sleeps,
                buckets,
            },
        ));
        unslept
            .samples
            .push((base.clone(), Value::Int(total.unslept)));
        timeouts
            .samples
            .push((base.clone(), Value::Int(total.timeouts)));
        asleep.samples.push((base.clone(), Value::Int(n_asleep)));
        deadlocked
            .samples
            .push((base.clone(), Value::Int(n_deadlocked)));
        oldest
            .samples
            .push((base.clone(), Value::Float(secs(oldest_ns))));
        threads
            .samples
            .push((base.clone(), Value::Int(n_threads as u64)));
        procs.samples.push((base.clone(), Value::Int(live)));
        let mut keys: Vec<&ProcKey> = t.procs.keys().collect();
        keys.sort();
        let mut pairs = PairRows::new();
        for key in keys {
            let pid = key.0;
            // A rank's figures stay through the grace period, like the totals.
            if let Some(r) = &t.procs[key].mpi {
                add_rows(&mut pairs, &t.pairs, key, r);
                let mut l = base.clone();
                l.push(("mpi_job", job_label(r)));
                l.push(("rank", rank_label(r, pid)));
                mpi_calls.samples.push((l.clone(), Value::Int(r.calls)));
                mpi_seconds
                    .samples
                    .push((l.clone(), Value::Float(secs(r.time_ns))));
                mpi_sent
                    .samples
                    .push((l.clone(), Value::Int(r.messages_sent)));
                mpi_sent_bytes
                    .samples
                    .push((l.clone(), Value::Int(r.bytes_sent)));
                mpi_received
                    .samples
                    .push((l.clone(), Value::Int(r.messages_received)));
                mpi_received_bytes
                    .samples
                    .push((l, Value::Int(r.bytes_received)));
            }
            if !t.procs[key].live {
                continue;
            }
            let i = m.infos.get(key);
            let mut l = base.clone();
            l.push(("pid", pid.to_string()));
            l.push(("exe", i.map(|i| i.exe.clone()).unwrap_or_default()));
            l.push((
                "pod_uid",
                i.and_then(|i| i.identity.pod_uid.clone())
                    .unwrap_or_default(),
            ));
            l.push((
                "namespace",
                i.and_then(|i| i.namespace.clone()).unwrap_or_default(),
            ));
            info.samples.push((l, Value::Info));
        }
        for ((job, src, dst), (messages, bytes)) in pairs {
            let mut l = base.clone();
            l.push(("mpi_job", job));
            l.push(("src", src));
            l.push(("dst", dst));
            pair_sent.samples.push((l.clone(), Value::Int(messages)));
            pair_sent_bytes.samples.push((l, Value::Int(bytes)));
        }
        let (members, other) = &t.shown_locks;
        let rows = members
            .iter()
            .map(|((name, kind), v)| (name.as_str(), *kind, *v))
            .chain(std::iter::once((OTHER, OTHER, *other)));
        for (name, kind, v) in rows {
            let mut l = base.clone();
            l.push(("lock", name.to_owned()));
            l.push(("kind", kind.to_owned()));
            if key.mode == "full" {
                lock_acquisitions
                    .samples
                    .push((l.clone(), Value::Int(v[0])));
                lock_contended.samples.push((l.clone(), Value::Int(v[1])));
            }
            lock_sleeps.samples.push((l.clone(), Value::Int(v[2])));
            lock_seconds.samples.push((l, Value::Float(secs(v[3]))));
        }
        let (members, other) = &t.shown_edges;
        let rows = members
            .iter()
            .map(|((w, k), v)| (w.as_str(), k.as_str(), *v))
            .chain(std::iter::once((OTHER, OTHER, *other)));
        for (waiter, waker, v) in rows {
            let mut l = base.clone();
            l.push(("waiter", waiter.to_owned()));
            l.push(("waker", waker.to_owned()));
            edge_waits.samples.push((l.clone(), Value::Int(v[2])));
            edge_seconds.samples.push((l, Value::Float(secs(v[3]))));
        }
    }
    // Most telling first: under the series cap, what comes last is dropped first.
    vec![
        procs,
        threads,
        waits,
        sleeps,
        waited,
        unslept,
        timeouts,
        asleep,
        oldest,
        deadlocked,
        lock_seconds,
        edge_seconds,
        info,
        mpi_seconds,
        mpi_calls,
        mpi_sent_bytes,
        mpi_sent,
        mpi_received_bytes,
        mpi_received,
        pair_sent_bytes,
        pair_sent,
        hist,
        lock_sleeps,
        lock_acquisitions,
        lock_contended,
        edge_waits,
    ]
}

/// A family of one series without labels.
pub(super) fn single(kind: Kind, name: &'static str, help: &'static str, value: Value) -> Family {
    Family {
        name,
        help,
        kind,
        samples: vec![(vec![], value)],
    }
}

pub(super) fn own_families(summary: &Summary, own: &SelfCounts, targets: usize) -> Vec<Family> {
    let mut f = Vec::new();
    f.push(Family {
        name: "rtm_build",
        help: "rtm-trace's version.",
        kind: Kind::Info,
        samples: vec![(
            vec![("version", env!("CARGO_PKG_VERSION").to_owned())],
            Value::Info,
        )],
    });
    let live = summary.processes.iter().filter(|p| p.live).count() as u64;
    let exited = summary.processes.len() as u64 - live;
    let mut t = gauge(
        "rtm_targets",
        "Traced processes by state (exited ones stay for the grace period).",
    );
    t.samples
        .push((vec![("state", "running".into())], Value::Int(live)));
    t.samples
        .push((vec![("state", "exited".into())], Value::Int(exited)));
    f.push(t);
    f.push(single(
        Kind::Gauge,
        "rtm_ready",
        "Whether the first discovery pass is done (what /readyz says).",
        Value::Int(u64::from(own.discovered)),
    ));
    f.push(single(
        Kind::Gauge,
        "rtm_target_groups",
        "Targets (programs per container) with series.",
        Value::Int(targets as u64),
    ));
    let mut a = counter(
        "rtm_attach_errors",
        "Processes that matched but could not be traced, by reason.",
    );
    for (reason, n) in &own.attach_errors {
        a.samples
            .push((vec![("reason", reason.clone())], Value::Int(*n)));
    }
    f.push(a);
    let mut away = counter(
        "rtm_targets_turned_away",
        "Processes a select rule matched that were not traced because every target slot (max_targets) was taken, by rule.",
    );
    for (rule, n) in &own.turned_away {
        away.samples
            .push((vec![("rule", rule.clone())], Value::Int(*n)));
    }
    f.push(away);
    let mut missed = counter(
        "rtm_targets_missed",
        "Processes a select rule matched that ended before they could be traced (exited_before_probes: their libraries' probes were not placed yet; exited_during_attach), by reason.",
    );
    for reason in ["exited_before_probes", "exited_during_attach"] {
        let n = own.missed.get(reason).copied().unwrap_or(0);
        missed
            .samples
            .push((vec![("reason", reason.to_owned())], Value::Int(n)));
    }
    f.push(missed);
    let l = summary.losses;
    let mut lost = counter(
        "rtm_events_lost",
        "Events the kernel side lost, by reason (ring buffer full, pending-call map full).",
    );
    for (reason, n) in [("ring_full", l.ring_full), ("pending_full", l.pending_full)] {
        lost.samples
            .push((vec![("reason", reason.into())], Value::Int(n)));
    }
    f.push(lost);
    f.push(single(
        Kind::Counter,
        "rtm_calls_in_flight_at_attach",
        "Calls already under way when the probes attached (full mode): seen from their next call, not lost.",
        Value::Int(l.missed_entry),
    ));
    f.push(single(
        Kind::Counter,
        "rtm_mapping_records_lost",
        "Address-space records dropped: some object names may be missing (no event is lost).",
        Value::Int(l.mapping_records),
    ));
    for (name, help, n) in [
        (
            "rtm_attached",
            "Processes attached since the agent started.",
            own.attached,
        ),
        (
            "rtm_events",
            "Events applied to the model.",
            summary.model.events,
        ),
        (
            "rtm_events_over_limits",
            "Events the model dropped at its caps.",
            summary.model.dropped_over_limits,
        ),
        ("rtm_discovery_scans", "Full scans of /proc.", own.scans),
        (
            "rtm_process_events",
            "Exec and fork events read from the kernel's process connector.",
            own.proc_events,
        ),
        (
            "rtm_process_event_errors",
            "Process connector errors (each answered by a rescan).",
            own.proc_event_errors,
        ),
    ] {
        f.push(single(Kind::Counter, name, help, Value::Int(n)));
    }
    f.extend(kernel_families(summary));
    f.extend(process_families());
    f
}

/// The kernel side: programs loaded, uprobes, map fill, and with `bpf_stats` the
/// programs' runs and time and the maps' memory.
fn kernel_families(summary: &Summary) -> Vec<Family> {
    let k = &summary.kernel;
    let mut f = vec![
        single(
            Kind::Gauge,
            "rtm_programs_loaded",
            "Whether the eBPF programs are loaded (0 while nothing is traced).",
            Value::Int(u64::from(k.loaded)),
        ),
        single(
            Kind::Gauge,
            "rtm_uprobes_attached",
            "Uprobes attached (full mode and MPI).",
            Value::Int(k.uprobes as u64),
        ),
    ];
    let mut entries = gauge(
        "rtm_bpf_map_entries",
        "Entries in the eBPF maps that fill as targets do.",
    );
    let mut capacity = gauge("rtm_bpf_map_capacity", "Capacity of those maps.");
    for (name, n, cap) in &k.maps {
        entries
            .samples
            .push((vec![("map", (*name).to_owned())], Value::Int(*n as u64)));
        capacity.samples.push((
            vec![("map", (*name).to_owned())],
            Value::Int(u64::from(*cap)),
        ));
    }
    f.push(entries);
    f.push(capacity);
    if let Some(b) = &summary.bpf {
        let mut runs = counter(
            "rtm_bpf_program_runs",
            "Runs of each eBPF program (bpf_stats on; from its load).",
        );
        let mut time = counter(
            "rtm_bpf_program_run_seconds",
            "Time in each eBPF program (bpf_stats on; from its load).",
        );
        for p in &b.programs {
            runs.samples
                .push((vec![("program", p.name.clone())], Value::Int(p.runs)));
            time.samples.push((
                vec![("program", p.name.clone())],
                Value::Float(secs(p.run_ns)),
            ));
        }
        let mut mem = gauge(
            "rtm_bpf_map_memory_bytes",
            "Memory charged for each eBPF map.",
        );
        for m in &b.maps {
            mem.samples
                .push((vec![("map", m.name.clone())], Value::Int(m.memlock_bytes)));
        }
        f.extend([runs, time, mem]);
    }
    f
}

/// The usual process_* figures of the agent itself.
fn process_families() -> Vec<Family> {
    let mut out = Vec::new();
    let Ok(stat) = crate::proc::files::read_proc_text("/proc/self/stat") else {
        return out;
    };
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, r)| r.split_whitespace().collect())
        .unwrap_or_default();
    let field = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    // SAFETY: sysconf only reads a constant.
    let (hz, page) = unsafe {
        (
            libc::sysconf(libc::_SC_CLK_TCK).max(1) as f64,
            libc::sysconf(libc::_SC_PAGESIZE).max(1) as u64,
        )
    };
    // After the ')': state is 0, utime 11, stime 12, starttime 19, vsize 20, rss 21.
    let cpu = (field(11) + field(12)) as f64 / hz;
    let boot = crate::proc::files::read_proc_text("/proc/stat")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("btime ")?.trim().parse::<u64>().ok())
        })
        .unwrap_or(0);
    let fds = std::fs::read_dir("/proc/self/fd")
        .map(|d| d.count())
        .unwrap_or(0);
    let mut c = counter(
        "process_cpu_seconds",
        "User and system CPU time spent in seconds.",
    );
    c.samples.push((vec![], Value::Float(cpu)));
    out.push(c);
    for (name, help, v) in [
        (
            "process_resident_memory_bytes",
            "Resident memory size in bytes.",
            (field(21) * page) as f64,
        ),
        (
            "process_virtual_memory_bytes",
            "Virtual memory size in bytes.",
            field(20) as f64,
        ),
        (
            "process_start_time_seconds",
            "Start time of the process since unix epoch in seconds.",
            boot as f64 + field(19) as f64 / hz,
        ),
        (
            "process_open_fds",
            "Number of open file descriptors.",
            fds as f64,
        ),
    ] {
        out.push(single(Kind::Gauge, name, help, Value::Float(v)));
    }
    out
}
