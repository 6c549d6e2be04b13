//! The engine without root: a synthetic source of records, the real report and JSON
//! sinks, a test sink built the way registered outputs are, and the watch summary.

use std::{cell::RefCell, rc::Rc, time::Duration};

use rtm_common::{
    EventHeader, EventKind, LossCounter, Primitive, SYNC_FLAG_CONTENDED, SyncEvent, SyncOp,
    decode::encode,
};

use super::*;
use crate::{
    config::{CounterList, Mode},
    output::{self, MakeSink, SINKS, sink::Moment},
};

const M1: u64 = 0x1000;

/// A mutex operation of thread `tid` of `pid`, as the full-mode probes send it.
fn record(pid: u32, tid: u32, ts: u64, op: SyncOp, wait: u64, contended: bool) -> Vec<u8> {
    let raw = SyncEvent {
        header: EventHeader {
            kind: EventKind::Sync as u32,
            cpu: 0,
            ts_ns: ts,
            pid,
            tid,
        },
        object: M1,
        aux: 0,
        caller: 0,
        wait_ns: wait,
        primitive: Primitive::Mutex as u32,
        op: op as u32,
        ret: 0,
        flags: if contended { SYNC_FLAG_CONTENDED } else { 0 },
        extra: 0,
        repeats: 0,
    };
    encode(&raw).to_vec()
}

/// `n` lock/unlock pairs by two threads taking turns; every other one waited `wait`.
fn workload(pid: u32, n: u64, wait: u64) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for i in 0..n {
        let (tid, ts) = (pid + 1 + (i % 2) as u32, 1_000 + i * 10_000);
        let contended = i % 2 == 1;
        out.push(record(pid, tid, ts, SyncOp::Lock, wait, contended));
        out.push(record(pid, tid, ts + 1_000, SyncOp::Unlock, 0, false));
    }
    out
}

/// What the test sink saw.
#[derive(Debug, Default)]
struct Seen {
    events: u64,
    intervals: u64,
    last_interval_acquisitions: u64,
    finished: u64,
    final_acquisitions: u64,
    final_ring_full: u64,
}

thread_local! {
    static SEEN: RefCell<Rc<RefCell<Seen>>> = RefCell::default();
}

/// An output as a new file under output/ would add one: it counts what it is shown.
struct CountingSink(Rc<RefCell<Seen>>);

/// How the test sink is registered: the same kind of constructor as [`SINKS`]' own.
fn counting_sink(_: &TraceConfig) -> Result<Option<Box<dyn Sink>>, DestError> {
    Ok(Some(Box::new(CountingSink(
        SEEN.with(|s| s.borrow().clone()),
    ))))
}

fn acquisitions(snap: &crate::model::Snapshot) -> u64 {
    snap.objects.iter().map(|o| o.counts.acquisitions).sum()
}

impl Sink for CountingSink {
    fn name(&self) -> String {
        "the test sink".into()
    }

    fn wants_events(&self) -> bool {
        true
    }

    fn event(&mut self, _event: &Event, _names: &mut crate::symbolize::objects::ObjectNamer) {
        self.0.borrow_mut().events += 1;
    }

    fn wants_intervals(&self) -> bool {
        true
    }

    fn interval(&mut self, at: &Moment) -> Result<(), DestError> {
        let mut s = self.0.borrow_mut();
        s.intervals += 1;
        s.last_interval_acquisitions = acquisitions(at.snapshot);
        Ok(())
    }

    fn finish(&mut self, at: &Moment) -> Result<(), DestError> {
        let mut s = self.0.borrow_mut();
        s.finished += 1;
        s.final_acquisitions = acquisitions(at.snapshot);
        s.final_ring_full = at.run.losses.ring_full;
        Ok(())
    }
}

fn config(dir: &std::path::Path) -> TraceConfig {
    TraceConfig {
        mode: Mode::Full,
        interval: Some(Duration::from_millis(30)),
        counters: CounterList(Vec::new()),
        output: crate::config::OutputConfig {
            report: Some(dir.join("report.txt")),
            json: Some(dir.join("trace.json")),
            top: 5,
            ..Default::default()
        },
        ..TraceConfig::default()
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn a_synthetic_source_reaches_every_sink_and_the_summary() {
    let dir = std::env::temp_dir().join(format!("rtm-engine-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let seen = Rc::new(RefCell::new(Seen::default()));
    SEEN.with(|s| *s.borrow_mut() = seen.clone());
    // The tracer's own process stands in for the target: it is alive, so the engine
    // watches it like any other.
    let pid = std::process::id();
    let (n, wait) = (200, 7_000);
    let mut records = workload(pid, n, wait);
    records.push(vec![1, 2, 3]); // too short to be a record: counted, not decoded
    let mut source = EventList::new(records);
    source.lose(LossCounter::RingFull, 3);
    let config = config(&dir);
    // The registered outputs and the test's, built the same way.
    let makers: Vec<MakeSink> = SINKS
        .iter()
        .copied()
        .chain([counting_sink as MakeSink])
        .collect();
    let mut sinks = Vec::new();
    for make in makers {
        sinks.extend(make(&config).unwrap());
    }
    assert_eq!(sinks.len(), 3, "report, JSON and the test sink");
    assert_eq!(output::sinks(&config).unwrap().len(), 2);

    let rt = runtime();
    let (summary, outcome) = rt.block_on(async {
        let mut engine = Engine::new(config, Box::new(source), sinks);
        let handle = engine.handle();
        let mut watch = handle.summary();
        let infos = engine
            .add_targets(vec![Target::running(pid, false)])
            .unwrap();
        assert_eq!(infos.len(), 1);
        // A reader outside the loop: waits for a summary that has every record, then
        // stops the engine through its handle.
        let report = dir.join("report.txt");
        let reader = async {
            loop {
                watch.changed().await.expect("the engine publishes");
                let s = watch.borrow_and_update().clone();
                if s.objects.first().is_some_and(|o| o.acquisitions == n) {
                    // The report's interval went out before the summary: a file holds
                    // the latest one.
                    let text = std::fs::read_to_string(&report).unwrap();
                    assert!(text.contains("summary at +"), "{text}");
                    handle.stop(EndReason::Signal).unwrap();
                    return s;
                }
            }
        };
        let stop_never = std::future::pending::<EndReason>();
        let (summary, reason) = tokio::join!(reader, engine.run(stop_never));
        assert_eq!(reason.unwrap(), EndReason::Signal);
        (summary, engine.finish(EndReason::Signal).unwrap())
    });
    assert_eq!(outcome.reason, EndReason::Signal);
    assert!(outcome.exits.is_empty());

    // The summary: owned, bounded, with the totals and losses.
    assert!(summary.seq >= 1);
    assert_eq!(summary.mode, Mode::Full);
    assert_eq!(summary.objects.len(), 1);
    let o = &summary.objects[0];
    assert_eq!((o.acquisitions, o.contended), (n, n / 2));
    assert_eq!(o.wait_ns, n / 2 * wait, "contended acquisitions' waits");
    assert_eq!(o.hold_ns, n * 1_000, "each held 1 us");
    assert_eq!(summary.losses.ring_full, 3);
    assert_eq!(summary.reader.short_records, 1);
    assert!(summary.top_threads.len() <= 5);
    assert_eq!(summary.targets[0].pid, pid);

    // The test sink saw every decoded event, intervals and the end.
    let s = seen.borrow();
    assert_eq!(s.events, 2 * n);
    assert!(s.intervals >= 1);
    assert_eq!(s.last_interval_acquisitions, n);
    assert_eq!(
        (s.finished, s.final_acquisitions, s.final_ring_full),
        (1, n, 3)
    );

    // The JSON says the same as the model.
    let doc: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("trace.json")).unwrap()).unwrap();
    let obj = &doc["sync_graph"]["objects"][0];
    assert_eq!(obj["acquisitions"], n);
    assert_eq!(obj["contended"], n / 2);
    assert_eq!(doc["run"]["losses"]["ring_full"], 3);
    assert_eq!(doc["run"]["reader"]["short_records"], 1);
    assert_eq!(doc["run"]["end_reason"], "signal");
    // And the report, replaced by the final one.
    let report = std::fs::read_to_string(dir.join("report.txt")).unwrap();
    assert!(
        report.starts_with("== rtm-trace: final report ==") && !report.contains("summary at"),
        "{report}"
    );
    assert!(
        report.contains("LOST EVENTS: 4 (ring buffer full: 3"),
        "{report}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A source that says when it loads and releases, around a list of records.
struct Counted {
    inner: EventList,
    live: bool,
    loads: Rc<RefCell<(u32, u32)>>,
}

impl crate::analyses::Kernel for Counted {}

impl Source for Counted {
    fn attach(&mut self, targets: &[Target]) -> Result<Vec<TargetInfo>, EngineError> {
        if !self.live {
            self.live = true;
            self.loads.borrow_mut().0 += 1;
        }
        self.inner.attach(targets)
    }
    fn stop(&mut self, pids: &[u32]) {
        self.inner.stop(pids)
    }
    fn release(&mut self) -> Option<u32> {
        if self.live {
            self.live = false;
            self.loads.borrow_mut().1 += 1;
        }
        None
    }
    fn ready(&mut self) -> std::pin::Pin<Box<dyn Future<Output = io::Result<()>> + '_>> {
        self.inner.ready()
    }
    fn is_live(&self) -> bool {
        self.live
    }
    fn drain(&mut self, max: usize, sink: &mut dyn FnMut(&Event)) -> usize {
        self.inner.drain(max, sink)
    }
    fn behind(&self) -> bool {
        self.inner.behind()
    }
    fn take_left(
        &mut self,
        threads: &mut dyn Iterator<Item = (u32, u32)>,
        before: Option<u64>,
        sink: &mut dyn FnMut(&Event),
    ) {
        self.inner.take_left(threads, before, sink)
    }
    fn changes(&mut self, c: ProcessChanges, m: &dyn Fn(u32) -> Vec<crate::proc::Module>) {
        self.inner.changes(c, m)
    }
    fn unprobed(&self) -> Vec<crate::output::Unprobed> {
        self.inner.unprobed()
    }
    fn losses(&self) -> crate::readers::Losses {
        self.inner.losses()
    }
    fn reader_stats(&self) -> crate::readers::ReaderStats {
        self.inner.reader_stats()
    }
    fn mapping_losses(&self) -> u64 {
        0
    }
    fn bpf_stats(&self) -> Option<crate::readers::bpf_stats::BpfStats> {
        None
    }
}

#[test]
fn programs_load_with_the_first_target_and_go_with_the_last() {
    let loads = Rc::new(RefCell::new((0, 0)));
    let source = Counted {
        inner: EventList::new(workload(std::process::id(), 10, 100)),
        live: false,
        loads: loads.clone(),
    };
    let config = TraceConfig {
        counters: CounterList(Vec::new()),
        ..TraceConfig::default()
    };
    let rt = runtime();
    rt.block_on(async {
        let mut engine = Engine::new(config, Box::new(source), Vec::new());
        let handle = engine.handle();
        assert_eq!(*loads.borrow(), (0, 0), "nothing loaded without a target");
        let me = std::process::id();
        let driver = async {
            // A daemon's moves, through the handle while the engine runs.
            let infos = handle.add(vec![Target::running(me, true)]).await.unwrap();
            assert_eq!(infos[0].pid, me);
            assert_eq!(*loads.borrow(), (1, 0));
            handle.remove(me).unwrap();
            tokio::time::sleep(Duration::from_millis(50)).await;
            assert_eq!(*loads.borrow(), (1, 1), "released with the last target");
            handle.add(vec![Target::running(me, false)]).await.unwrap();
            assert_eq!(*loads.borrow(), (2, 1), "loaded again for the next");
            handle.stop(EndReason::Signal).unwrap();
        };
        let (_, reason) = tokio::join!(driver, engine.run(std::future::pending()));
        assert_eq!(reason.unwrap(), EndReason::Signal);
        let outcome = engine.finish(EndReason::Signal).unwrap();
        assert_eq!(outcome.reason, EndReason::Signal);
    });
    assert_eq!(*loads.borrow(), (2, 2), "finish releases");
}

/// With `release_after`, a target that comes soon after the last one went finds the
/// programs still loaded; they go once nothing has come for that long.
#[test]
fn programs_linger_for_release_after() {
    let loads = Rc::new(RefCell::new((0, 0)));
    let source = Counted {
        inner: EventList::new(workload(std::process::id(), 10, 100)),
        live: false,
        loads: loads.clone(),
    };
    let config = TraceConfig {
        counters: CounterList(Vec::new()),
        interval: Some(Duration::from_millis(50)),
        ..TraceConfig::default()
    };
    let rt = runtime();
    rt.block_on(async {
        let mut engine = Engine::new(config, Box::new(source), Vec::new());
        // Long enough that a loaded machine (the unit tests run two to a core in CI)
        // cannot run the short waits below past it.
        let linger = Duration::from_secs(3);
        engine.release_after(linger);
        let handle = engine.handle();
        let me = std::process::id();
        let driver = async {
            handle.add(vec![Target::running(me, false)]).await.unwrap();
            handle.remove(me).unwrap();
            let removed = std::time::Instant::now();
            tokio::time::sleep(Duration::from_millis(100)).await;
            if removed.elapsed() < linger {
                assert_eq!(*loads.borrow(), (1, 0), "kept while it lingers");
                handle.add(vec![Target::running(me, false)]).await.unwrap();
                assert_eq!(*loads.borrow(), (1, 0), "the next target finds it loaded");
            } else {
                handle.add(vec![Target::running(me, false)]).await.unwrap();
            }
            let loaded = loads.borrow().0;
            handle.remove(me).unwrap();
            // Released once idle for the linger: waited for (a loaded machine runs the
            // engine's timer late), not slept for a fixed while.
            let removed = std::time::Instant::now();
            while loads.borrow().1 < loaded && removed.elapsed() < Duration::from_secs(30) {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            assert_eq!(*loads.borrow(), (loaded, loaded), "released once idle");
            assert!(removed.elapsed() >= linger, "released early");
            handle.stop(EndReason::Signal).unwrap();
        };
        let (_, reason) = tokio::join!(driver, engine.run(std::future::pending()));
        assert_eq!(reason.unwrap(), EndReason::Signal);
        engine.finish(EndReason::Signal).unwrap();
    });
}

/// A front end that shows no system statistics has nothing sampled or kept for them.
#[test]
fn no_system_sampling_when_turned_off() {
    let config = TraceConfig {
        counters: CounterList(Vec::new()),
        ..TraceConfig::default()
    };
    let rt = runtime();
    rt.block_on(async {
        for on in [true, false] {
            let source = EventList::new(workload(std::process::id(), 10, 100));
            let mut engine = Engine::new(config.clone(), Box::new(source), Vec::new());
            engine.sample_system(on);
            engine
                .add_targets(vec![Target::running(std::process::id(), false)])
                .unwrap();
            assert_eq!(engine.sampler.is_some(), on);
            engine.finish(EndReason::Signal).unwrap();
        }
    });
}

/// A pid traced again names another process: what the engine held of the one that had
/// it (exited) is dropped whole before the new one is attached, never merged into it,
/// and a forget of the old one leaves the new one be.
#[test]
fn a_pid_traced_again_is_another_process() {
    let me = std::process::id();
    let start = crate::proc::process::start_ticks(me, me).unwrap();
    let config = TraceConfig {
        counters: CounterList(Vec::new()),
        ..TraceConfig::default()
    };
    let rt = runtime();
    rt.block_on(async {
        let source = EventList::new(workload(me, 10, 100));
        let mut engine = Engine::new(config, Box::new(source), Vec::new());
        engine.sample_system(false);
        engine
            .add_targets(vec![Target::running(me, false)])
            .unwrap();
        assert_eq!(engine.targets[0].start, start);
        engine.drain(usize::MAX);
        let objects = |e: &Engine| e.state.model.objects().filter(|(k, _)| k.pid == me).count();
        assert!(objects(&engine) > 0);
        // Make it an older process that had the pid and has exited.
        let old = start.wrapping_sub(1);
        engine.targets[0].start = old;
        engine.targets[0].live = false;
        engine.state.ended.insert(me);
        // A forget about another process with the pid leaves it alone.
        engine.forget(&[(me, start)]);
        assert_eq!(engine.targets.len(), 1);
        assert!(objects(&engine) > 0);
        // Traced again: the old one's objects are gone before the new one attaches.
        engine
            .add_targets(vec![Target::running(me, false)])
            .unwrap();
        assert_eq!(objects(&engine), 0, "the old process's state was kept");
        assert_eq!(engine.targets.len(), 1);
        assert!(engine.targets[0].live && engine.targets[0].start == start);
        assert!(!engine.state.ended.contains(&me));
        // A late forget of the old one does nothing to the new one.
        engine.forget(&[(me, old)]);
        assert_eq!(engine.targets.len(), 1);
        let summary_pids = engine.process_inputs().pids;
        assert_eq!(summary_pids, vec![(me, start, true)]);
        engine.finish(EndReason::Signal).unwrap();
    });
}

/// The per-process summary (the agent's) in full mode: a mutex's futex word, waited on
/// outside a probed call (as when the probes came in mid-call), is the mutex: one group,
/// kind "mutex", its acquisitions and sleeps together; a join is "thread exit", kind
/// "join", as contention mode names it.
#[test]
fn a_mutex_word_and_a_join_are_one_group_each_in_the_process_summary() {
    let dir = std::env::temp_dir().join(format!("rtm-engine-groups-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let pid = std::process::id();
    let mut records = workload(pid, 10, 5_000);
    let futex_wait = SyncEvent {
        header: EventHeader {
            kind: EventKind::Sync as u32,
            cpu: 0,
            ts_ns: 500_000,
            pid,
            tid: pid + 1,
        },
        object: M1,
        aux: u64::from(rtm_common::FUTEX_OP_OUTSIDE_CALL),
        caller: 0,
        wait_ns: 3_000,
        primitive: Primitive::Futex as u32,
        op: SyncOp::Wait as u32,
        ret: 0,
        flags: 0,
        extra: 0,
        repeats: 0,
    };
    records.push(encode(&futex_wait).to_vec());
    let join = SyncEvent {
        object: 0x9000,
        primitive: Primitive::Thread as u32,
        op: SyncOp::Join as u32,
        aux: 0,
        wait_ns: 2_000,
        header: EventHeader {
            ts_ns: 600_000,
            tid: pid,
            ..futex_wait.header
        },
        ..futex_wait
    };
    records.push(encode(&join).to_vec());
    let rt = runtime();
    let summary = rt.block_on(async {
        let mut engine = Engine::new(config(&dir), Box::new(EventList::new(records)), vec![]);
        engine.publish_processes(true);
        let handle = engine.handle();
        let mut watch = handle.summary();
        engine
            .add_targets(vec![Target::running(pid, false)])
            .unwrap();
        let reader = async {
            loop {
                watch.changed().await.expect("the engine publishes");
                let s = watch.borrow_and_update().clone();
                let groups = s.processes.first().map_or(0, |p| p.locks.len());
                if groups >= 2 {
                    handle.stop(EndReason::Signal).unwrap();
                    return s;
                }
            }
        };
        let (summary, _) = tokio::join!(reader, engine.run(std::future::pending()));
        summary
    });
    let p = &summary.processes[0];
    assert_eq!(p.mode, Mode::Full);
    let groups: Vec<(&str, &str, u64, u64)> = p
        .locks
        .iter()
        .map(|g| {
            (
                g.name.as_str(),
                g.kind,
                g.values.acquisitions,
                g.values.sleeps,
            )
        })
        .collect();
    assert_eq!(
        groups,
        [("heap", "mutex", 10, 1), ("thread exit", "join", 0, 0)],
        "{:?}",
        p.locks
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
