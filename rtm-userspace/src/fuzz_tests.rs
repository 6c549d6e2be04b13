//! Property tests ("fuzzing") of everything that turns input rtm-trace does not control
//! into its results: ring-buffer records (their fields carry what probes read from the
//! target's memory: MPI counts, ranks, handles) through the decoder, both models, the
//! snapshot, the text report and the JSON; and stack copies (the target's own memory)
//! through the unwinder, the stack table and the folded file. Whatever the bytes,
//! nothing panics and the text stays inert. Run with the unit tests (a few hundred cases each); set
//! PROPTEST_CASES for a longer run.

use proptest::{prelude::*, strategy::ValueTree as _};
use rtm_common::{
    EventHeader, EventKind, FuncEvent, FutexWaitEvent, LifecycleEvent, MpiEvent, StacksHead,
    SyncEvent, decode,
};

use crate::{
    analyses::{
        Analyses, At, Kernel,
        functions::{RunningCall, TimedFunction},
    },
    config::TraceConfig,
    model::{
        Limits, Snapshot, SyncGraph, Window,
        stacks::{Side, StackTable, StacksView},
    },
    output::{RunInfo, folded, json, report, text},
    readers::{Losses, ReaderStats},
    symbolize::{ObjectNamer, StackUnwinder, unwind::Capture},
};

/// The kernel side as the analyses see it: three timed functions with hostile names,
/// one call of one running.
struct FuzzKernel;

impl Kernel for FuzzKernel {
    fn timed_functions(&self) -> Vec<TimedFunction> {
        ["f\x1b[2J", "g\n|x|", "h"]
            .iter()
            .map(|n| TimedFunction {
                name: (*n).into(),
                module: "/lib/\x1b]0;x\x07.so".into(),
                address: 0x10,
                probe_offset: 4,
            })
            .collect()
    }

    fn running_calls(&self) -> Vec<RunningCall> {
        vec![RunningCall {
            pid: 100,
            tid: 100,
            function: 1,
            start_ns: 5,
        }]
    }
}

/// Copies `header` and the random `tail` into a record of `T`'s size.
fn record<T>(header: EventHeader, tail: &[u8]) -> Vec<u8> {
    let mut out = vec![0u8; size_of::<T>()];
    let h = decode::encode(&header);
    out[..h.len()].copy_from_slice(h);
    for (o, b) in out[h.len()..].iter_mut().zip(tail) {
        *o = *b;
    }
    out
}

/// Sets a little-endian u32 at `off`.
fn set_u32(rec: &mut [u8], off: usize, v: u32) {
    rec[off..off + 4].copy_from_slice(&v.to_le_bytes());
}

/// A record as the kernel could send it: a valid kind mostly, a few pids and tids, small
/// enum values (so most decode), and anything else anywhere.
fn any_record() -> impl Strategy<Value = Vec<u8>> {
    (
        prop_oneof![8 => 1u32..=6, 1 => any::<u32>()],
        0u32..3,
        0u32..6,
        any::<u64>(),
        prop::collection::vec(any::<u8>(), 0..160),
        0u32..24,
        0u32..24,
        prop::bool::weighted(0.1),
    )
        .prop_map(|(kind, pid, tid, ts, tail, a, b, truncate)| {
            let header = EventHeader {
                kind,
                cpu: 0,
                ts_ns: ts % 10_000_000_000,
                pid: 100 + pid,
                tid: 100 + pid * 10 + tid,
            };
            let mut rec = match kind {
                1 => {
                    let mut r = record::<SyncEvent>(header, &tail);
                    set_u32(&mut r, std::mem::offset_of!(SyncEvent, primitive), a % 10);
                    set_u32(&mut r, std::mem::offset_of!(SyncEvent, op), b);
                    r
                }
                2 => {
                    let mut r = record::<LifecycleEvent>(header, &tail);
                    set_u32(&mut r, std::mem::offset_of!(LifecycleEvent, op), 1 + a % 3);
                    r
                }
                3 => {
                    let mut r = record::<MpiEvent>(header, &tail);
                    set_u32(&mut r, std::mem::offset_of!(MpiEvent, op), a + b);
                    set_u32(
                        &mut r,
                        std::mem::offset_of!(MpiEvent, implementation),
                        a % 3,
                    );
                    r
                }
                4 => record::<FutexWaitEvent>(header, &tail),
                5 => {
                    // The head, then two stack copies of whatever length the tail has.
                    let mut r = record::<StacksHead>(header, &tail);
                    r.extend_from_slice(&tail);
                    r
                }
                6 => {
                    // Any count (the record says how many calls it holds), each call's
                    // function mostly one of the table's.
                    let mut r = record::<FuncEvent>(header, &tail);
                    set_u32(&mut r, std::mem::offset_of!(FuncEvent, count), a % 12);
                    for i in 0..rtm_common::FUNC_BATCH {
                        let at = std::mem::offset_of!(FuncEvent, calls)
                            + i * size_of::<rtm_common::FuncCall>()
                            + std::mem::offset_of!(rtm_common::FuncCall, function);
                        set_u32(&mut r, at, (a + i as u32) % 4);
                    }
                    r
                }
                _ => tail.clone(),
            };
            if truncate {
                rec.truncate(tail.len() % (rec.len() + 1));
            }
            rec
        })
}

fn run_info() -> RunInfo {
    RunInfo {
        mode: crate::config::Mode::Full,
        command: Some(vec!["app\x1b[2J".into()]),
        targets: Vec::new(),
        host: "host".into(),
        started_unix_ms: 0,
        end_reason: None,
        losses: Losses::default(),
        unprobed: Vec::new(),
        missing_symbols: vec!["x\x1b".into()],
        reader: ReaderStats::default(),
        tracer_max_rss_kib: None,
        bpf: None,
        collection: None,
    }
}

/// Applies decodable records to both models, then renders everything.
fn apply_and_render(records: &[Vec<u8>], contention: bool) {
    let limits = Limits {
        max_objects: 16,
        max_histograms: 8,
        ..Limits::default()
    };
    let mut sync = SyncGraph::new(limits, contention);
    let mut stacks = StackTable::default();
    let mut config = TraceConfig::default();
    config.functions.max_rows = 8;
    let mut analyses = Analyses::new(&config);
    analyses.attached(&FuzzKernel);
    for r in records {
        let Ok(ev) = decode::decode(r) else { continue };
        analyses.event(&ev, &mut crate::analyses::Asks::default());
        if let decode::Event::Stacks(s) = &ev {
            // The copies' words stand in for unwound frames.
            let frames = |b: &[u8]| {
                Side::Frames(
                    b.chunks_exact(8)
                        .map(|w| u64::from_le_bytes(w.try_into().unwrap()))
                        .collect(),
                )
            };
            let h = &s.head;
            stacks.add(
                h.header.pid,
                h.uaddr,
                h.wait_ns,
                frames(s.waiter),
                h.waker_pid,
                frames(s.waker),
                h.weight_milli,
            );
        }
        sync.apply(&ev);
    }
    sync.settle_pending();
    let window = Window {
        start_ns: 0,
        end_ns: 10_000_000_000,
    };
    // Names as hostile as a target can make them.
    let mut snap = Snapshot::build(
        &sync,
        window,
        &mut |o| (o.addr % 3 == 0).then(|| "lock\x1b]0;x\x07\n".to_owned()),
        &mut |_, a| (a % 2 == 0).then(|| "f\r\n".to_owned()),
    );
    if !stacks.is_empty() {
        let view = StacksView::build(
            &stacks,
            50,
            &mut |_, a| (a % 5 == 0).then(|| "w\x1b[31m;x y".to_owned()),
            &mut |_, a| (a % 2 == 0).then(|| format!("f\r\n;{a}+0x1 (a b;c:1)")),
            &mut |_, a| (a % 3 == 0).then(|| "/lib/libc.so.6".into()),
        );
        for line in
            folded::render(&view, &|_, _| crate::model::wait_kind::WaitKind::Unknown).lines()
        {
            // One row a line: frames; a space; the wait.
            let (stack, ns) = line.rsplit_once(' ').expect("a value");
            assert!(
                ns.parse::<u64>().is_ok() && !stack.contains(' '),
                "{line:?}"
            );
            assert!(text::is_inert(line), "{line:?}");
        }
        snap.stacks = Some(view);
    }
    let environment = (100..110)
        .map(|pid| {
            let env = crate::proc::process::RankEnv {
                job: Some("job\x1b]0;x\x07<b>".into()),
                rank: None,
                size: Some(2),
            };
            (pid, env)
        })
        .collect();
    snap.sections = analyses.sections(&mut At {
        end_ns: window.end_ns,
        host: "node\x1b<i>",
        environment: &environment,
        kernel: &FuzzKernel,
        thread_name: &mut |_, _| Some("t\x1b[1m".into()),
    });
    let run = run_info();
    let doc = crate::output::saved::Doc::of(&run, &snap).expect("the JSON reads back");
    let text = report::render(&doc, 10, Some("fuzz"));
    assert!(text::is_inert(&text), "control characters in:\n{text}");
    // The run's own report reads a document cut to what it shows: the same bytes as the
    // whole document's, at any number of rows.
    for top in [1, 3, 10] {
        let cut = crate::output::saved::Doc::for_report(&run, &snap, top).expect("cut");
        assert_eq!(
            report::render(&cut, top, None),
            report::render(&doc, top, None),
            "top {top}"
        );
    }
    let doc = json::to_string(&run, &snap);
    serde_json::from_str::<serde_json::Value>(&doc).expect("the JSON parses back");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn the_unwinder_takes_any_stack_copy(
        at in 0u64..4096, sp in any::<u64>(), bp in any::<u64>(),
        stack in prop::collection::vec(any::<u8>(), 0..2048),
    ) {
        // A real code address of this process, with a stack of any bytes.
        let ip = (the_unwinder_takes_any_stack_copy as *const () as u64).wrapping_add(at);
        // One unwinder for every case, as in a trace (it keeps what it read).
        thread_local! {
            static UNWINDER: std::cell::RefCell<(ObjectNamer, StackUnwinder)> =
                std::cell::RefCell::new({
                    let mut namer = ObjectNamer::default();
                    namer.remember(std::process::id());
                    (namer, StackUnwinder::default())
                });
        }
        let frames = UNWINDER.with_borrow_mut(|(namer, unwinder)| {
            unwinder.unwind(namer, std::process::id(), &Capture { ip, sp, bp, stack: &stack, fixes: &[] })
        });
        prop_assert!(frames.len() <= crate::symbolize::unwind::MAX_FRAMES);
    }

    #[test]
    fn the_decoder_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        let _ = decode::decode(&bytes);
    }

    #[test]
    fn any_records_go_through_the_models_and_outputs(
        records in prop::collection::vec(any_record(), 0..200),
        contention in any::<bool>(),
    ) {
        apply_and_render(&records, contention);
    }
}

#[test]
fn a_record_of_each_kind_decodes() {
    // The generator's records reach the models: not all are rejected by the decoder.
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let mut decoded = [0usize; 7];
    for _ in 0..2000 {
        let r = any_record().new_tree(&mut runner).unwrap().current();
        if let Ok(ev) = decode::decode(&r) {
            let k = match ev {
                decode::Event::Sync(_) if r[..4] == (EventKind::FutexWait as u32).to_le_bytes() => {
                    4
                }
                decode::Event::Sync(_) => 1,
                decode::Event::Lifecycle(_) => 2,
                decode::Event::Mpi(_) => 3,
                decode::Event::Stacks(_) => 5,
                decode::Event::Func(_) => 6,
                // Never in a ring: made by the sums' reader.
                decode::Event::FutexAgg(_) => unreachable!("decoded a FutexAgg record"),
            };
            decoded[k] += 1;
        }
    }
    assert!(decoded[1..].iter().all(|&n| n > 20), "{decoded:?}");
}
