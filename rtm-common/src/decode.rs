//! Safe decoding of raw ring-buffer records into typed events.
//!
//! A record is checked for length, its kind is converted with a checked conversion and
//! its payload is copied out with `read_unaligned`: a short record or an unknown kind is
//! a typed error the reader counts, never a panic.

use core::mem::size_of;

use crate::event::{EventHeader, EventKind, Primitive, SyncEvent, SyncOp};

/// A decoded record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// An operation on a synchronization object, with its enums already validated.
    Sync(SyncRecord),
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
}

impl Event {
    /// The record's header.
    pub fn header(&self) -> &EventHeader {
        match self {
            Event::Sync(s) => &s.raw.header,
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
pub fn decode(bytes: &[u8]) -> Result<Event, DecodeError> {
    let header: EventHeader = read(bytes)?;
    match EventKind::from_u32(header.kind) {
        Some(EventKind::Sync) => {
            let raw: SyncEvent = read(bytes)?;
            let primitive = Primitive::from_u32(raw.primitive)
                .ok_or(DecodeError::UnknownPrimitive(raw.primitive))?;
            let op = SyncOp::from_u32(raw.op).ok_or(DecodeError::UnknownOp(raw.op))?;
            Ok(Event::Sync(SyncRecord { raw, primitive, op }))
        }
        None => Err(DecodeError::UnknownKind(header.kind)),
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
    use crate::event::SYNC_FLAG_CONTENDED;

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
            caller: 0x4000,
            wait_ns: 77,
            primitive: Primitive::Mutex as u32,
            op: SyncOp::Lock as u32,
            ret: 0,
            flags: SYNC_FLAG_CONTENDED,
        }
    }

    #[test]
    fn round_trip() {
        let ev = sample();
        let Event::Sync(s) = decode(encode(&ev)).unwrap();
        assert_eq!(s.raw, ev);
        assert_eq!(s.primitive, Primitive::Mutex);
        assert_eq!(s.op, SyncOp::Lock);
    }

    #[test]
    fn unaligned_input_decodes() {
        let ev = sample();
        let mut buf = std::vec![0u8; 1];
        buf.extend_from_slice(encode(&ev));
        let Event::Sync(s) = decode(&buf[1..]).unwrap();
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
            Err(DecodeError::Short { len: 40, need: 64 })
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
            assert_eq!(EventKind::from_u32(k as u32), Some(k));
        }
    }
}
