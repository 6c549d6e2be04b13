//! Safe decoding of raw ring-buffer records into typed events.
//!
//! A record is checked for length, its kind is converted with a checked conversion and
//! its payload is copied out with `read_unaligned`: a short record or an unknown kind is
//! a typed error the reader counts, never a panic.

use core::mem::size_of;

use crate::{
    agg::{AggOutcome, FutexAggKey},
    func::FuncEvent,
    mpi::{MpiEvent, MpiImpl, MpiOp},
    records::{
        EventHeader, EventKind, FutexWaitEvent, LifecycleEvent, LifecycleOp, Primitive, SyncEvent,
        SyncOp,
    },
    stack::{STACK_SIDE_WAITER, STACK_SIDE_WAKER, StacksHead},
};

/// A decoded record; `'a` is the record's bytes (a stacks record borrows its copies).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event<'a> {
    /// An operation on a synchronization object, with its enums already validated.
    Sync(SyncRecord),
    /// A thread or process lifecycle event, with its operation validated.
    Lifecycle(LifecycleRecord),
    /// An MPI call or completed request, with its operation validated.
    Mpi(MpiRecord),
    /// The user stacks of a contended futex wait's waiter and waker.
    Stacks(StacksRecord<'a>),
    /// Finished calls of a thread's timed functions.
    Func(FuncEvent),
    /// Futex waits summed in the kernel since they were last read ([`crate::agg`]).
    FutexAgg(FutexAggRecord<'a>),
}

/// Futex waits summed in the kernel ([`crate::agg`]) since the last read: what one
/// entry's sums grew by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FutexAggRecord<'a> {
    /// The waiter (pid, tid); `ts_ns` is when the sums were read; kind
    /// [`EventKind::FutexAgg`].
    pub header: EventHeader,
    /// Whose waits on what, ended how.
    pub key: FutexAggKey,
    /// How they ended.
    pub outcome: AggOutcome,
    /// Waits.
    pub count: u64,
    /// Their total duration, ns.
    pub wait_ns: u64,
    /// Of that, runnable after the wake, ns.
    pub runnable_ns: u64,
    /// The longest of them (of all the entry's waits so far), ns.
    pub max_ns: u64,
    /// The shortest (of all the entry's waits so far), ns.
    pub min_ns: u64,
    /// (bucket, waits) for the buckets that grew ([`crate::agg_bucket`]).
    pub buckets: &'a [(u8, u32)],
}

/// A stacks record: its fixed part and the two copies, each as long as its registers
/// say (never longer than the record).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StacksRecord<'a> {
    /// The fixed part.
    pub head: StacksHead,
    /// The top of the waiter's stack from its `sp` up.
    pub waiter: &'a [u8],
    /// The top of the waker's stack from its `sp` up.
    pub waker: &'a [u8],
}

/// An [`MpiEvent`] whose discriminants have been validated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MpiRecord {
    /// The raw record.
    pub raw: MpiEvent,
    /// The validated operation.
    pub op: MpiOp,
    /// The validated implementation.
    pub implementation: MpiImpl,
}

/// A [`LifecycleEvent`] whose operation has been validated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LifecycleRecord {
    /// The raw record.
    pub raw: LifecycleEvent,
    /// The validated operation.
    pub op: LifecycleOp,
}

impl LifecycleRecord {
    /// The task name carried by the record, up to its first NUL.
    pub fn comm(&self) -> &str {
        let end = self.raw.comm.iter().position(|&b| b == 0).unwrap_or(16);
        core::str::from_utf8(&self.raw.comm[..end]).unwrap_or("")
    }
}

/// A [`SyncEvent`] whose discriminants have been validated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SyncRecord {
    /// The raw record.
    pub raw: SyncEvent,
    /// The validated primitive.
    pub primitive: Primitive,
    /// The validated operation.
    pub op: SyncOp,
    /// A futex wait's time runnable after its wake ([`FutexWaitEvent::runnable_ns`]);
    /// 0 for every other record.
    pub runnable_ns: u32,
    /// A futex wait's holder when it began ([`FutexWaitEvent::holder`]); 0 for every
    /// other record.
    pub holder: u32,
}

impl Event<'_> {
    /// The record without the bytes it borrows (a stacks record's copies are left
    /// out): for keeping a decoded record past its buffer.
    pub fn to_static(&self) -> Event<'static> {
        match *self {
            Event::Sync(s) => Event::Sync(s),
            Event::Lifecycle(l) => Event::Lifecycle(l),
            Event::Mpi(m) => Event::Mpi(m),
            Event::Func(f) => Event::Func(f),
            Event::FutexAgg(a) => Event::FutexAgg(FutexAggRecord { buckets: &[], ..a }),
            Event::Stacks(s) => Event::Stacks(StacksRecord {
                head: s.head,
                waiter: &[],
                waker: &[],
            }),
        }
    }

    /// The record's header.
    pub fn header(&self) -> &EventHeader {
        match self {
            Event::Sync(s) => &s.raw.header,
            Event::Lifecycle(t) => &t.raw.header,
            Event::Mpi(m) => &m.raw.header,
            Event::Stacks(s) => &s.head.header,
            Event::Func(f) => &f.header,
            Event::FutexAgg(a) => &a.header,
        }
    }
}

/// Why a record could not be decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// The record is shorter than the layout its kind requires.
    #[error("record of {len} bytes is shorter than the {need} bytes its kind needs")]
    Short {
        /// Bytes received.
        len: usize,
        /// Bytes required.
        need: usize,
    },
    /// The header names a kind this build does not know (eBPF object and binary mismatch?).
    #[error("unknown event kind {0}")]
    UnknownKind(u32),
    /// A sync record names a primitive this build does not know.
    #[error("unknown primitive {0}")]
    UnknownPrimitive(u32),
    /// A sync record names an operation this build does not know.
    #[error("unknown sync operation {0}")]
    UnknownOp(u32),
    /// A task record names an operation this build does not know.
    #[error("unknown task operation {0}")]
    UnknownLifecycleOp(u32),
    /// An MPI record names an operation or implementation this build does not know.
    #[error("unknown MPI operation {0} or implementation {1}")]
    UnknownMpi(u32, u32),
}

fn read<T: Copy>(bytes: &[u8]) -> Result<T, DecodeError> {
    let need = size_of::<T>();
    if bytes.len() < need {
        return Err(DecodeError::Short {
            len: bytes.len(),
            need,
        });
    }
    // SAFETY: the length is checked above; T is a plain-old-data ABI type valid for any
    // bit pattern, and read_unaligned has no alignment requirement.
    Ok(unsafe { core::ptr::read_unaligned(bytes.as_ptr().cast::<T>()) })
}

/// Decodes one ring-buffer record.
pub fn decode(bytes: &[u8]) -> Result<Event<'_>, DecodeError> {
    let header: EventHeader = read(bytes)?;
    match EventKind::from_u32(header.kind) {
        Some(EventKind::Sync) => {
            let raw: SyncEvent = read(bytes)?;
            let primitive = Primitive::from_u32(raw.primitive)
                .ok_or(DecodeError::UnknownPrimitive(raw.primitive))?;
            let op = SyncOp::from_u32(raw.op).ok_or(DecodeError::UnknownOp(raw.op))?;
            Ok(Event::Sync(SyncRecord {
                raw,
                primitive,
                op,
                runnable_ns: 0,
                holder: 0,
            }))
        }
        Some(EventKind::FutexWait) => {
            let wait = read::<FutexWaitEvent>(bytes)?;
            Ok(Event::Sync(SyncRecord {
                raw: wait.to_sync(),
                primitive: Primitive::Futex,
                op: SyncOp::Wait,
                runnable_ns: wait.runnable_ns,
                holder: wait.holder,
            }))
        }
        Some(EventKind::Lifecycle) => {
            let raw: LifecycleEvent = read(bytes)?;
            let op =
                LifecycleOp::from_u32(raw.op).ok_or(DecodeError::UnknownLifecycleOp(raw.op))?;
            Ok(Event::Lifecycle(LifecycleRecord { raw, op }))
        }
        Some(EventKind::Mpi) => {
            let raw: MpiEvent = read(bytes)?;
            match (
                MpiOp::from_u32(raw.op),
                MpiImpl::from_u32(raw.implementation),
            ) {
                (Some(op), Some(implementation)) => Ok(Event::Mpi(MpiRecord {
                    raw,
                    op,
                    implementation,
                })),
                _ => Err(DecodeError::UnknownMpi(raw.op, raw.implementation)),
            }
        }
        Some(EventKind::Func) => Ok(Event::Func(read(bytes)?)),
        Some(EventKind::Stacks) => {
            let head: StacksHead = read(bytes)?;
            let body = &bytes[size_of::<StacksHead>()..];
            let (has_waiter, has_waker) = (
                head.sides & STACK_SIDE_WAITER != 0,
                head.sides & STACK_SIDE_WAKER != 0,
            );
            let n = body.len() / (usize::from(has_waiter) + usize::from(has_waker)).max(1);
            let copy = |on: bool, at: usize, len: u32| {
                if on {
                    &body[at..at + (len as usize).min(n)]
                } else {
                    &[][..]
                }
            };
            Ok(Event::Stacks(StacksRecord {
                head,
                waiter: copy(has_waiter, 0, head.waiter_regs.len),
                waker: copy(
                    has_waker,
                    if has_waiter { n } else { 0 },
                    head.waker_regs.len,
                ),
            }))
        }
        // Made by userspace from the sums, never in a ring.
        Some(EventKind::FutexAgg) | None => Err(DecodeError::UnknownKind(header.kind)),
    }
}

/// Encodes an event as the kernel would write it; for tests and the ingest benchmark.
pub fn encode<T: Copy>(event: &T) -> &[u8] {
    // SAFETY: ABI types are #[repr(C)] with no padding, so every byte is initialized.
    unsafe { core::slice::from_raw_parts((event as *const T).cast::<u8>(), size_of::<T>()) }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use crate::records::SYNC_FLAG_CONTENDED;

    fn sample() -> SyncEvent {
        SyncEvent {
            header: EventHeader {
                kind: EventKind::Sync as u32,
                cpu: 1,
                ts_ns: 1_000,
                pid: 42,
                tid: 43,
            },
            object: 0xdead_beef,
            aux: 0,
            caller: 0x4000,
            wait_ns: 77,
            primitive: Primitive::Mutex as u32,
            op: SyncOp::Lock as u32,
            ret: 0,
            flags: SYNC_FLAG_CONTENDED,
            extra: 0,
            repeats: 0,
        }
    }

    #[test]
    fn round_trip() {
        let ev = sample();
        let Event::Sync(s) = decode(encode(&ev)).unwrap() else {
            panic!("not a sync event")
        };
        assert_eq!(s.raw, ev);
        assert_eq!(s.primitive, Primitive::Mutex);
        assert_eq!(s.op, SyncOp::Lock);
    }

    #[test]
    fn a_compact_futex_wait_decodes_as_the_sync_event_it_stands_for() {
        let wait = FutexWaitEvent {
            header: EventHeader {
                kind: EventKind::FutexWait as u32,
                cpu: 1,
                ts_ns: 5_000,
                pid: 42,
                tid: 43,
            },
            uaddr: 0x7f00_1000,
            aux: 0x80 | (2 << 32),
            wait_ns: 1_234,
            ret: -11,
            waker: 44,
            unslept: 3,
            waker_pid: 41,
            runnable_ns: 7,
            holder: 45,
        };
        let Event::Sync(s) = decode(encode(&wait)).unwrap() else {
            panic!("not a sync event")
        };
        assert_eq!(s.primitive, Primitive::Futex);
        assert_eq!(s.op, SyncOp::Wait);
        assert_eq!(s.raw.header.kind, EventKind::Sync as u32);
        assert_eq!(s.raw.repeats, 3);
        assert_eq!((s.runnable_ns, s.holder), (7, 45));
        assert_eq!(
            (s.raw.header.ts_ns, s.raw.header.pid, s.raw.header.tid),
            (5_000, 42, 43)
        );
        assert_eq!(
            (s.raw.object, s.raw.aux, s.raw.wait_ns),
            (0x7f00_1000, 0x80 | (2 << 32), 1_234)
        );
        assert_eq!(
            (s.raw.ret, s.raw.extra, s.raw.caller, s.raw.flags),
            (-11, 44, 41, 0)
        );
        assert_eq!(
            decode(&encode(&wait)[..50]),
            Err(DecodeError::Short { len: 50, need: 72 })
        );
    }

    #[test]
    fn a_stacks_record_borrows_each_copy_no_longer_than_the_record() {
        let mut ev = crate::stack::StacksEvent::<16> {
            head: StacksHead::default(),
            waiter: [1; 16],
            waker: [2; 16],
        };
        ev.head.header.kind = EventKind::Stacks as u32;
        ev.head.sides = STACK_SIDE_WAITER | STACK_SIDE_WAKER;
        ev.head.waiter_regs.len = 8;
        ev.head.waker_regs.len = 4096;
        let Event::Stacks(s) = decode(encode(&ev)).unwrap() else {
            panic!("not a stacks record")
        };
        assert_eq!((s.waiter, s.waker), (&[1u8; 8][..], &[2u8; 16][..]));
        // A record with one side has one copy.
        ev.head.sides = STACK_SIDE_WAKER;
        let Event::Stacks(s) = decode(&encode(&ev)[..size_of::<StacksHead>() + 16]).unwrap() else {
            panic!("not a stacks record")
        };
        assert_eq!((s.waiter, s.waker), (&[][..], &[1u8; 16][..]));
        assert!(matches!(
            decode(&encode(&ev)[..100]),
            Err(DecodeError::Short { need, .. }) if need == size_of::<StacksHead>()
        ));
    }

    #[test]
    fn unaligned_input_decodes() {
        let ev = sample();
        let mut buf = std::vec![0u8; 1];
        buf.extend_from_slice(encode(&ev));
        let Event::Sync(s) = decode(&buf[1..]).unwrap() else {
            panic!("not a sync event")
        };
        assert_eq!(s.raw.object, 0xdead_beef);
    }

    #[test]
    fn short_records_are_errors() {
        let ev = sample();
        let bytes = encode(&ev);
        assert_eq!(
            decode(&bytes[..10]),
            Err(DecodeError::Short { len: 10, need: 24 })
        );
        assert_eq!(
            decode(&bytes[..40]),
            Err(DecodeError::Short { len: 40, need: 80 })
        );
    }

    #[test]
    fn unknown_discriminants_are_errors() {
        let mut ev = sample();
        ev.header.kind = 99;
        assert_eq!(decode(encode(&ev)), Err(DecodeError::UnknownKind(99)));
        let mut ev = sample();
        ev.primitive = 0;
        assert_eq!(decode(encode(&ev)), Err(DecodeError::UnknownPrimitive(0)));
        let mut ev = sample();
        ev.op = 1234;
        assert_eq!(decode(encode(&ev)), Err(DecodeError::UnknownOp(1234)));
    }

    #[test]
    fn every_kind_round_trips_its_discriminant() {
        for k in EventKind::ALL {
            assert_eq!(EventKind::from_u32(*k as u32), Some(*k));
        }
    }

    #[test]
    fn lifecycle_records_decode_with_their_name() {
        let mut comm = [0u8; 16];
        comm[..8].copy_from_slice(b"worker-1");
        let ev = LifecycleEvent {
            header: EventHeader {
                kind: EventKind::Lifecycle as u32,
                cpu: 0,
                ts_ns: 5,
                pid: 10,
                tid: 10,
            },
            op: LifecycleOp::Spawn as u32,
            child: 11,
            clone_flags: crate::records::CLONE_THREAD,
            comm,
        };
        let Event::Lifecycle(t) = decode(encode(&ev)).unwrap() else {
            panic!("not a task event")
        };
        assert_eq!(
            (t.op, t.raw.child, t.comm()),
            (LifecycleOp::Spawn, 11, "worker-1")
        );
        let mut bad = ev;
        bad.op = 9;
        assert_eq!(
            decode(encode(&bad)),
            Err(DecodeError::UnknownLifecycleOp(9))
        );
    }
}

/// Property tests: any bytes decode or fail with a typed error; any valid record of the
/// known kinds round-trips.
#[cfg(test)]
mod fuzz {
    extern crate std;
    use proptest::prelude::*;

    use super::*;

    proptest! {
        #[test]
        fn any_bytes_decode_or_fail(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = decode(&bytes);
        }

        #[test]
        fn sync_records_round_trip(
            ts in any::<u64>(), object in any::<u64>(), wait in any::<u64>(),
            primitive in 0u32..16, op in 0u32..32, ret in any::<i32>(), flags in any::<u32>(),
        ) {
            let raw = SyncEvent {
                header: EventHeader { kind: EventKind::Sync as u32, cpu: 0, ts_ns: ts, pid: 1, tid: 2 },
                object, aux: 0, caller: 0, wait_ns: wait, primitive, op, ret, flags, extra: 0,
                repeats: 0,
            };
            match decode(encode(&raw)) {
                Ok(Event::Sync(s)) => prop_assert_eq!(s.raw, raw),
                Ok(other) => prop_assert!(false, "{:?}", other),
                Err(e) => prop_assert!(matches!(
                    e,
                    DecodeError::UnknownPrimitive(_) | DecodeError::UnknownOp(_)
                )),
            }
            // Every strict prefix is short.
            for cut in [0, 8, 24, 79] {
                prop_assert!(
                    matches!(decode(&encode(&raw)[..cut]), Err(DecodeError::Short { .. })),
                    "prefix {}", cut
                );
            }
        }
    }
}
