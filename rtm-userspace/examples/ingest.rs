//! Ingest throughput on one core: records as the ring buffer delivers them (bytes),
//! decoded and aggregated into the sync graph, with nothing else running. Used by
//! `cargo xtask bench ingest`; prints `events=N secs=S rate=R`.
//!
//! `ingest [EVENTS] [THREADS] [MUTEXES]`; with `INGEST_TIMELINE=FILE`, every event also
//! goes to the timeline (`--timeline`), written to FILE.

use std::time::Instant;

use rtm::{Dest, Limits, ObjectNamer, Sink, SyncGraph, Timeline};
use rtm_common::{
    EventHeader, EventKind, Primitive, SyncEvent, SyncOp,
    decode::{decode, encode},
};

fn record(tid: u32, ts: u64, op: SyncOp, object: u64) -> Vec<u8> {
    encode(&SyncEvent {
        header: EventHeader {
            kind: EventKind::Sync as u32,
            cpu: tid % 2,
            ts_ns: ts,
            pid: 1000,
            tid,
        },
        object,
        aux: 0,
        caller: 0x401000 + (object & 0xff0),
        wait_ns: if op == SyncOp::Lock { 40 } else { 0 },
        primitive: Primitive::Mutex as u32,
        op: op as u32,
        ret: 0,
        flags: 0,
        extra: 0,
        repeats: 0,
    })
    .to_vec()
}

fn main() {
    let args: Vec<u64> = std::env::args()
        .skip(1)
        .map(|a| a.parse().expect("a number"))
        .collect();
    let events = args.first().copied().unwrap_or(4_000_000);
    let threads = args.get(1).copied().unwrap_or(64);
    let mutexes = args.get(2).copied().unwrap_or(1_000);
    // Lock/unlock pairs, threads taking turns over the mutexes, as the ring would hold
    // them: one contiguous byte stream of fixed-size records.
    let one = record(1, 0, SyncOp::Lock, 0).len();
    let mut stream = Vec::with_capacity(events as usize * one);
    for i in 0..events / 2 {
        let tid = 2000 + (i % threads) as u32;
        let obj = 0x10_0000 + ((i * 7919) % mutexes) * 64;
        stream.extend(record(tid, i * 100, SyncOp::Lock, obj));
        stream.extend(record(tid, i * 100 + 50, SyncOp::Unlock, obj));
    }
    let mut graph = SyncGraph::new(Limits::default(), false);
    let mut timeline = std::env::var_os("INGEST_TIMELINE").map(|path| {
        let path = std::path::PathBuf::from(path);
        let stream = Dest::check(&path)
            .and_then(Dest::stream)
            .expect("the timeline's file");
        Timeline::new(path, stream, 1 << 40).expect("the timeline")
    });
    let mut names = ObjectNamer::default();
    let start = Instant::now();
    let mut n = 0u64;
    for rec in stream.chunks_exact(one) {
        let ev = decode(rec).expect("valid record");
        graph.apply(&ev);
        if let Some(t) = &mut timeline {
            t.event(&ev, &mut names);
        }
        n += 1;
    }
    let secs = start.elapsed().as_secs_f64();
    assert_eq!(graph.counters().events, n);
    println!("events={n} secs={secs:.3} rate={:.0}", n as f64 / secs);
    if std::env::var_os("INGEST_MEMORY").is_some() {
        drop(stream);
        let model = rss_kib();
        let snap = snapshot(&graph, events);
        let view = rss_kib();
        let text = serde_json::to_string_pretty(&snap).expect("serializes");
        println!(
            "model_kib={model} snapshot_kib={view} json_kib={} json_bytes={}",
            rss_kib(),
            text.len()
        );
    }
    if let Some(path) = std::env::var_os("INGEST_HTML") {
        // The HTML report of this graph, made as `--html` makes it: the document in
        // memory, read back, rendered.
        let snap = snapshot(&graph, events);
        let run = rtm::RunInfo {
            mode: rtm::Mode::Full,
            command: None,
            targets: vec![],
            host: "bench".into(),
            started_unix_ms: 0,
            end_reason: None,
            losses: Default::default(),
            unprobed: vec![],
            missing_symbols: vec![],
            reader: Default::default(),
            tracer_max_rss_kib: None,
            bpf: None,
            collection: None,
        };
        let start = Instant::now();
        let doc = rtm::document_json(&run, &snap);
        let written = start.elapsed().as_secs_f64();
        let parsed = rtm::Doc::parse(&doc, "bench").expect("reads back");
        let read = start.elapsed().as_secs_f64() - written;
        let page = rtm::render_html(&parsed);
        let secs = start.elapsed().as_secs_f64();
        std::fs::write(&path, &page).expect("writes the page");
        println!(
            "objects={} doc_bytes={} html_bytes={} html_secs={secs:.3} written_secs={written:.3} \
             read_secs={read:.3} rendered_secs={:.3}",
            parsed.sync_graph.objects.len(),
            doc.len(),
            page.len(),
            secs - written - read
        );
    }
}

/// The graph's views, as the outputs see them.
fn snapshot(graph: &SyncGraph, events: u64) -> rtm::Snapshot<'_> {
    rtm::Snapshot::build(
        graph,
        rtm::Window {
            start_ns: 0,
            end_ns: events * 100,
        },
        &mut |_| None,
        &mut |_, _| None,
    )
}

/// Resident memory of this process, KiB.
pub fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
        })
        .unwrap_or(0)
}
