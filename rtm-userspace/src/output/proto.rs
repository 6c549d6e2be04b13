//! Just enough protocol buffers to write Perfetto's trace format (the timeline) and pprof's
//! profile.proto (`--pprof`): varints, fixed 64-bit values, strings and nested messages.
//! Nested messages are written in place and their length is inserted when they end, so a
//! packet is built in one reused buffer.

/// Wire types.
const VARINT: u8 = 0;
const FIXED64: u8 = 1;
const LEN: u8 = 2;

/// A protobuf message being written into a buffer.
#[derive(Debug, Default)]
pub struct Writer {
    buf: Vec<u8>,
    /// Where each nested message still open began.
    open: Vec<usize>,
    /// Fixed strings given ids in the sequence this writer writes, by the table they are
    /// in (Perfetto's InternedData field): annotation names and values.
    strings: foldhash::HashMap<(u32, &'static str), u64>,
}

fn varint_into(buf: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        buf.push((v as u8) | 0x80);
        v >>= 7;
    }
    buf.push(v as u8);
}

impl Writer {
    /// The bytes written so far.
    pub fn bytes(&self) -> &[u8] {
        &self.buf
    }

    /// The id of `s` in interned table `table`, and whether it is new (its definition
    /// is then for the caller to write).
    pub fn string_id(&mut self, table: u32, s: &'static str) -> (u64, bool) {
        let next = self.strings.len() as u64 + 1;
        match self.strings.entry((table, s)) {
            std::collections::hash_map::Entry::Occupied(e) => (*e.get(), false),
            std::collections::hash_map::Entry::Vacant(e) => (*e.insert(next), true),
        }
    }

    /// Forgets what was written, keeping the allocation.
    pub fn clear(&mut self) {
        self.buf.clear();
        self.open.clear();
    }

    fn tag(&mut self, field: u32, wire: u8) {
        varint_into(&mut self.buf, (u64::from(field) << 3) | u64::from(wire));
    }

    /// An unsigned (uint32/uint64/enum/bool) field.
    pub fn uint(&mut self, field: u32, v: u64) -> &mut Self {
        self.tag(field, VARINT);
        varint_into(&mut self.buf, v);
        self
    }

    /// A signed int32/int64 field (two's complement, not zigzag).
    pub fn int(&mut self, field: u32, v: i64) -> &mut Self {
        self.uint(field, v as u64)
    }

    /// A fixed64 field.
    pub fn fixed64(&mut self, field: u32, v: u64) -> &mut Self {
        self.tag(field, FIXED64);
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }

    /// A double field.
    pub fn double(&mut self, field: u32, v: f64) -> &mut Self {
        self.fixed64(field, v.to_bits())
    }

    /// The number of bytes a varint of `v` takes.
    pub fn varint_len(v: u64) -> usize {
        (64 - (v | 1).leading_zeros() as usize).div_ceil(7)
    }

    /// A bytes field of `len` zero bytes (padding that readers skip, in a field number
    /// the message does not define).
    pub fn zeros(&mut self, field: u32, len: usize) -> &mut Self {
        self.tag(field, LEN);
        varint_into(&mut self.buf, len as u64);
        self.buf.resize(self.buf.len() + len, 0);
        self
    }

    /// A string (or bytes) field.
    pub fn str(&mut self, field: u32, s: &str) -> &mut Self {
        self.tag(field, LEN);
        varint_into(&mut self.buf, s.len() as u64);
        self.buf.extend_from_slice(s.as_bytes());
        self
    }

    /// Starts a nested message in `field`; [`Writer::end`] closes it. One byte is kept
    /// for its length: most messages are shorter than 128 bytes.
    pub fn begin(&mut self, field: u32) -> &mut Self {
        self.tag(field, LEN);
        self.buf.push(0);
        self.open.push(self.buf.len());
        self
    }

    /// Closes the innermost nested message: writes its length before it (moving it
    /// only when the length needs more than the byte kept).
    pub fn end(&mut self) -> &mut Self {
        let at = self.open.pop().expect("a nested message is open");
        let len = (self.buf.len() - at) as u64;
        if len < 0x80 {
            self.buf[at - 1] = len as u8;
            return self;
        }
        let (mut head, mut n, mut v) = ([0u8; 10], 0, len);
        while v >= 0x80 {
            head[n] = (v as u8) | 0x80;
            v >>= 7;
            n += 1;
        }
        head[n] = v as u8;
        self.buf[at - 1] = head[0];
        self.buf.splice(at..at, head[1..=n].iter().copied());
        self
    }
}

/// A decoded field, for tests and for reading traces back.
#[cfg(test)]
#[derive(Debug, Clone, PartialEq)]
pub enum Value<'a> {
    /// Wire type 0.
    Varint(u64),
    /// Wire type 1.
    Fixed64(u64),
    /// Wire type 2: a string, bytes or a nested message.
    Bytes(&'a [u8]),
}

/// Decodes one message's fields, in order (tests only: the trace is checked against
/// Perfetto's own schema by the integration tests).
#[cfg(test)]
pub fn fields(mut b: &[u8]) -> Vec<(u32, Value<'_>)> {
    fn varint(b: &mut &[u8]) -> u64 {
        let mut v = 0u64;
        let mut shift = 0;
        loop {
            let byte = b[0];
            *b = &b[1..];
            v |= u64::from(byte & 0x7f) << shift;
            if byte < 0x80 {
                return v;
            }
            shift += 7;
        }
    }
    let mut out = Vec::new();
    while !b.is_empty() {
        let key = varint(&mut b);
        let field = (key >> 3) as u32;
        let value = match (key & 7) as u8 {
            VARINT => Value::Varint(varint(&mut b)),
            FIXED64 => {
                let v = u64::from_le_bytes(b[..8].try_into().unwrap());
                b = &b[8..];
                Value::Fixed64(v)
            }
            LEN => {
                let n = varint(&mut b) as usize;
                let v = &b[..n];
                b = &b[n..];
                Value::Bytes(v)
            }
            w => panic!("wire type {w}"),
        };
        out.push((field, value));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nested_messages_get_their_lengths_and_values_round_trip() {
        let mut w = Writer::default();
        w.uint(8, 300);
        w.begin(11).str(23, "wait counter_lock");
        w.begin(4).int(4, -5).end();
        // A nested message longer than 127 bytes needs a two-byte length.
        w.str(2, &"x".repeat(200)).end();
        w.fixed64(47, u64::MAX).double(44, 1.5);
        let top = fields(w.bytes());
        assert_eq!(top[0], (8, Value::Varint(300)));
        let Value::Bytes(body) = top[1].1 else {
            panic!("not a message")
        };
        let inner = fields(body);
        assert_eq!(inner[0], (23, Value::Bytes(b"wait counter_lock")));
        let Value::Bytes(ann) = inner[1].1 else {
            panic!("not a message")
        };
        assert_eq!(fields(ann), vec![(4, Value::Varint((-5i64) as u64))]);
        assert_eq!(inner[2].1, Value::Bytes("x".repeat(200).as_bytes()));
        assert_eq!(top[2], (47, Value::Fixed64(u64::MAX)));
        assert_eq!(top[3], (44, Value::Fixed64(1.5f64.to_bits())));
    }
}
