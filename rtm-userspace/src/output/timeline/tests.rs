//! The timeline's packets for known events, read back with the small decoder in
//! `proto` (the integration tests decode whole traces with Perfetto's own schema).

use rtm_common::{
    EventHeader, EventKind, FutexWaitEvent, Primitive, SYNC_FLAG_BEGIN, SyncEvent, SyncOp,
    decode::{Event, decode, encode},
};

use crate::symbolize::objects::ObjectNamer;

use super::{
    names::Names,
    proto::{Value, Writer, fields},
    state::{Ctx, State},
    tracks::Tracks,
};

/// A track event: (type, track, name, flow, terminating flow).
type TrackEvent = (u64, u64, String, Option<u64>, Option<u64>);
/// A track descriptor: (uuid, parent, name, thread tid).
type Descriptor = (u64, Option<u64>, Option<String>, Option<u64>);

/// One decoded packet: its timestamp and its track event or track descriptor fields.
#[derive(Debug, Default)]
struct Packet {
    ts: Option<u64>,
    event: Option<TrackEvent>,
    track: Option<Descriptor>,
}

fn packets(bytes: &[u8]) -> Vec<Packet> {
    let mut interned = std::collections::HashMap::new();
    let text = |v: &Value| match v {
        Value::Bytes(b) => String::from_utf8(b.to_vec()).unwrap(),
        _ => panic!("not a string"),
    };
    let num = |v: &Value| match v {
        Value::Varint(n) | Value::Fixed64(n) => *n,
        _ => panic!("not a number"),
    };
    fields(bytes)
        .into_iter()
        .map(|(f, v)| {
            assert_eq!(f, 1, "Trace.packet");
            let Value::Bytes(body) = v else { panic!() };
            let mut p = Packet::default();
            for (f, v) in fields(body) {
                match (f, &v) {
                    (8, _) => p.ts = Some(num(&v)),
                    (58, _) => assert_eq!(num(&v), 3, "CLOCK_MONOTONIC"),
                    (12, Value::Bytes(d)) => {
                        for (f, v) in fields(d) {
                            let (2, Value::Bytes(n)) = (f, v) else {
                                continue;
                            };
                            let mut e = (0, String::new());
                            for (f, v) in fields(n) {
                                match f {
                                    1 => e.0 = num(&v),
                                    2 => e.1 = text(&v),
                                    _ => {}
                                }
                            }
                            interned.insert(e.0, e.1);
                        }
                    }
                    (11, Value::Bytes(e)) => {
                        let mut ev = (0, 0, String::new(), None, None);
                        for (f, v) in fields(e) {
                            match f {
                                9 => ev.0 = num(&v),
                                11 => ev.1 = num(&v),
                                23 => ev.2 = text(&v),
                                10 => ev.2 = interned[&num(&v)].clone(),
                                47 => ev.3 = Some(num(&v)),
                                48 => ev.4 = Some(num(&v)),
                                _ => {}
                            }
                        }
                        p.event = Some(ev);
                    }
                    (60, Value::Bytes(d)) => {
                        let mut t = (0, None, None, None);
                        for (f, v) in fields(d) {
                            match (f, &v) {
                                (1, _) => t.0 = num(&v),
                                (5, _) => t.1 = Some(num(&v)),
                                (2, _) => t.2 = Some(text(&v)),
                                (4, Value::Bytes(th)) => {
                                    for (f, v) in fields(th) {
                                        if f == 2 {
                                            t.3 = Some(num(&v));
                                        }
                                    }
                                }
                                _ => {}
                            }
                        }
                        p.track = Some(t);
                    }
                    _ => {}
                }
            }
            p
        })
        .collect()
}

fn header(kind: EventKind, ts_ns: u64, tid: u32) -> EventHeader {
    EventHeader {
        kind: kind as u32,
        cpu: 0,
        ts_ns,
        pid: 100,
        tid,
    }
}

/// The packets the events make; objects are named by kind and address (no symbols).
fn write(events: &[Event]) -> Vec<Packet> {
    let (mut w, mut tracks, mut state) = (Writer::default(), Tracks::default(), State::default());
    let (mut names, mut namer) = (Names::default(), ObjectNamer::default());
    for e in events {
        let (object, mutex) = match e {
            Event::Sync(s) => (
                Some(super::object_of(&mut names, &mut namer, &tracks, s)),
                (s.primitive == Primitive::Cond)
                    .then(|| names.object(&mut namer, 100, s.raw.aux, Primitive::Mutex)),
            ),
            _ => (None, None),
        };
        let mut ctx = Ctx {
            w: &mut w,
            tracks: &mut tracks,
            state: &mut state,
            names: &mut names,
        };
        ctx.event(e, object, mutex);
    }
    Ctx {
        w: &mut w,
        tracks: &mut tracks,
        state: &mut state,
        names: &mut names,
    }
    .settle_all();
    packets(w.bytes())
}

fn slices(ps: &[Packet]) -> Vec<(u64, u64, u64, String)> {
    // (track, begin, end, name): BEGINs and ENDs paired per track, in order.
    let mut open: Vec<(u64, u64, String)> = Vec::new();
    let mut out = Vec::new();
    for p in ps {
        let Some((ty, track, name, ..)) = &p.event else {
            continue;
        };
        match ty {
            1 => open.push((*track, p.ts.unwrap(), name.clone())),
            2 => {
                let at = open.iter().rposition(|o| o.0 == *track).unwrap();
                let (t, b, n) = open.remove(at);
                out.push((t, b, p.ts.unwrap(), n));
            }
            _ => {}
        }
    }
    assert!(open.is_empty(), "unclosed: {open:?}");
    out
}

#[test]
fn a_woken_futex_wait_is_a_sleep_a_runnable_slice_and_an_arrow_from_the_waker() {
    let wait = FutexWaitEvent {
        header: header(EventKind::FutexWait, 10_000, 7),
        uaddr: 0x1000,
        wait_ns: 4_000,
        waker: 8,
        waker_pid: 100,
        runnable_ns: 500,
        ..FutexWaitEvent::default()
    };
    let ev = decode(encode(&wait)).unwrap();
    let ps = write(&[ev]);
    let tracks: Vec<_> = ps.iter().filter_map(|p| p.track.clone()).collect();
    let waiter = tracks
        .iter()
        .find(|t| t.3 == Some(7))
        .expect("the waiter's track")
        .0;
    let waker = tracks
        .iter()
        .find(|t| t.3 == Some(8))
        .expect("the waker's track")
        .0;
    assert!(
        tracks.iter().any(|t| t.3.is_none() && t.1.is_none()),
        "a process track"
    );
    assert_eq!(
        slices(&ps),
        vec![
            (waiter, 6_000, 9_500, "wait futex 0x1000".to_owned()),
            (waiter, 9_500, 10_000, "runnable".to_owned()),
        ]
    );
    let wake = ps
        .iter()
        .find_map(|p| {
            p.event
                .as_ref()
                .filter(|e| e.0 == 3)
                .map(|e| (p.ts, e.clone()))
        })
        .expect("the wake");
    assert_eq!(wake.0, Some(9_500));
    assert_eq!((wake.1).1, waker);
    assert_eq!((wake.1).2, "wake futex 0x1000");
    let flow = (wake.1).3.expect("a flow from the wake");
    let runnable = ps
        .iter()
        .filter_map(|p| p.event.as_ref())
        .find(|e| e.2 == "runnable")
        .unwrap();
    assert_eq!(
        runnable.4,
        Some(flow),
        "ends on the woken thread's runnable slice"
    );
}

fn sync(op: SyncOp, primitive: Primitive, ts: u64, flags: u32, aux: u64) -> Event<'static> {
    let raw = SyncEvent {
        header: header(EventKind::Sync, ts, 7),
        object: 0x2000,
        aux,
        primitive: primitive as u32,
        op: op as u32,
        flags,
        ..SyncEvent::default()
    };
    decode(encode(&raw)).unwrap().to_static()
}

#[test]
fn a_lock_seen_at_entry_is_settled_by_the_threads_next_event_and_held_until_unlock() {
    let futex = FutexWaitEvent {
        header: header(EventKind::FutexWait, 3_000, 7),
        uaddr: 0x2000,
        wait_ns: 1_500,
        ..FutexWaitEvent::default()
    };
    let events = [
        sync(SyncOp::Lock, Primitive::Mutex, 1_000, SYNC_FLAG_BEGIN, 0),
        decode(encode(&futex)).unwrap(),
        sync(SyncOp::Unlock, Primitive::Mutex, 8_000, 0, 0),
    ];
    let ps = write(&events);
    let s = slices(&ps);
    let names: Vec<_> = s.iter().map(|x| (x.1, x.2, x.3.as_str())).collect();
    // The wait inside the lock call, the call up to the wait's end, then the hold.
    assert!(
        names.contains(&(1_500, 3_000, "wait mutex 0x2000")),
        "{names:?}"
    );
    assert!(
        names.contains(&(1_000, 3_000, "lock mutex 0x2000")),
        "{names:?}"
    );
    assert!(
        names.contains(&(3_000, 8_000, "hold mutex 0x2000")),
        "{names:?}"
    );
    let holds = ps
        .iter()
        .filter_map(|p| p.track.as_ref())
        .find(|t| t.2.as_deref() == Some("holds"))
        .expect("a holds track under the thread");
    assert!(holds.1.is_some(), "a child of the thread's track");
    assert_eq!(
        s.iter().find(|x| x.3 == "hold mutex 0x2000").unwrap().0,
        holds.0
    );
}

#[test]
fn a_condition_wait_releases_its_mutex_and_takes_it_back() {
    let events = [
        sync(SyncOp::Lock, Primitive::Mutex, 1_000, 0, 0),
        sync(
            SyncOp::Wait,
            Primitive::Cond,
            2_000,
            SYNC_FLAG_BEGIN,
            0x2000,
        ),
        {
            let mut e = sync(SyncOp::Wait, Primitive::Cond, 9_000, 0, 0x2000);
            if let Event::Sync(s) = &mut e {
                s.raw.object = 0x3000;
                s.raw.wait_ns = 7_000;
            }
            e
        },
        sync(SyncOp::Unlock, Primitive::Mutex, 9_500, 0, 0),
    ];
    let ps = write(&events);
    let s = slices(&ps);
    let names: Vec<_> = s.iter().map(|x| (x.1, x.2, x.3.as_str())).collect();
    assert!(
        names.contains(&(1_000, 2_000, "hold mutex 0x2000")),
        "{names:?}"
    );
    assert!(
        names.contains(&(2_000, 9_000, "wait condvar 0x3000")),
        "{names:?}"
    );
    assert!(
        names.contains(&(9_000, 9_500, "hold mutex 0x2000")),
        "{names:?}"
    );
}

#[test]
fn a_hold_still_open_when_its_thread_exits_ends_there() {
    let exit = rtm_common::LifecycleEvent {
        header: header(EventKind::Lifecycle, 5_000, 7),
        op: rtm_common::LifecycleOp::Exit as u32,
        ..rtm_common::LifecycleEvent::default()
    };
    let events = [
        sync(SyncOp::Lock, Primitive::Mutex, 1_000, 0, 0),
        decode(encode(&exit)).unwrap(),
    ];
    let s = slices(&write(&events));
    let names: Vec<_> = s.iter().map(|x| (x.1, x.2, x.3.as_str())).collect();
    assert_eq!(names, vec![(1_000, 5_000, "hold mutex 0x2000")]);
}

/// A join is named as the report names it: in full mode the thread its creation named
/// ("thread TID", not the pthread_t's address), in contention mode the exit its futex
/// wait was for ("exit of thread TID", not the word's address).
#[test]
fn joins_are_named_by_the_thread_not_by_an_address() {
    let create = {
        let mut e = sync(SyncOp::Create, Primitive::Thread, 1_000, 0, 0);
        if let Event::Sync(s) = &mut e {
            s.raw.extra = 9;
        }
        e
    };
    let join = {
        let mut e = sync(SyncOp::Join, Primitive::Thread, 5_000, 0, 0);
        if let Event::Sync(s) = &mut e {
            s.raw.wait_ns = 3_000;
        }
        e
    };
    let names: Vec<String> = slices(&write(&[create, join]))
        .into_iter()
        .map(|s| s.3)
        .collect();
    assert!(
        names.iter().any(|n| n.ends_with("thread 9"))
            && !names.iter().any(|n| n.contains("0x2000")),
        "{names:?}"
    );
    // Contention mode: thread 9 runs, then thread 7 sleeps on a word holding 9 until
    // the kernel wakes it at 9's exit (no waker seen).
    let spawn = rtm_common::LifecycleEvent {
        header: header(EventKind::Lifecycle, 500, 7),
        op: rtm_common::LifecycleOp::Spawn as u32,
        clone_flags: rtm_common::CLONE_THREAD,
        child: 9,
        ..rtm_common::LifecycleEvent::default()
    };
    let joined = FutexWaitEvent {
        header: header(EventKind::FutexWait, 9_000, 7),
        uaddr: 0x7f00_0000_02d0,
        aux: (9u64 << 32) | 0x80,
        wait_ns: 4_000,
        ..FutexWaitEvent::default()
    };
    let other = FutexWaitEvent {
        header: header(EventKind::FutexWait, 9_500, 7),
        uaddr: 0x1000,
        aux: (2u64 << 32) | 0x80,
        wait_ns: 100,
        ..FutexWaitEvent::default()
    };
    let events = [
        decode(encode(&spawn)).unwrap(),
        decode(encode(&joined)).unwrap(),
        decode(encode(&other)).unwrap(),
    ];
    let names: Vec<String> = slices(&write(&events)).into_iter().map(|s| s.3).collect();
    assert!(
        names.contains(&"wait exit of thread 9".to_owned()),
        "{names:?}"
    );
    assert!(names.contains(&"wait futex 0x1000".to_owned()), "{names:?}");
}
