//! The attach cookie of the shared uprobe programs: primitive, operation and contention
//! check.

use crate::{Primitive, SyncOp};

abi_enum! {
    /// How an entry probe judges contention from the object's first word, read when the
    /// probe fires. Which check applies depends on where the probe sits in the function.
    pub enum Check {
        /// No contention check.
        None = 0,
        /// Contended when the word is nonzero (a glibc mutex or rwlock being written,
        /// a spinlock after its `lock decl`).
        NonZero = 1,
        /// Contended when the word is not 1 (a spinlock before its `lock decl`).
        NotOne = 2,
        /// Contended when the word has the writer-locked bit (a rwlock taken for reading).
        WriterBit = 3,
        /// Contended when the low 32 bits are 0 (a semaphore with no value left).
        Empty = 4,
        /// Contended when anything but the phase bit is set (a rwlock taken for writing:
        /// readers, a writer or waiters present).
        Busy = 5,
    }
}

/// The attach cookie of a uprobe: which primitive, operation and contention check the
/// shared programs are running for, packed into 64 bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cookie {
    /// The primitive.
    pub primitive: u32,
    /// The operation.
    pub op: u32,
    /// The [`Check`].
    pub check: u32,
}

impl Cookie {
    /// Packs the cookie.
    pub const fn pack(primitive: Primitive, op: SyncOp, check: Check) -> u64 {
        (primitive as u64) | ((op as u64) << 16) | ((check as u64) << 32)
    }

    /// Unpacks a cookie (no validation: the fields are checked where they are decoded).
    pub const fn unpack(v: u64) -> Self {
        Self {
            primitive: (v & 0xffff) as u32,
            op: ((v >> 16) & 0xffff) as u32,
            check: ((v >> 32) & 0xffff) as u32,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cookie_round_trip() {
        let c = Cookie::unpack(Cookie::pack(
            Primitive::RwLock,
            SyncOp::TimedWrLock,
            Check::NonZero,
        ));
        assert_eq!(
            c,
            Cookie {
                primitive: Primitive::RwLock as u32,
                op: SyncOp::TimedWrLock as u32,
                check: Check::NonZero as u32
            }
        );
    }
}
