//! Field offsets in the running kernel's structures, read from its BTF
//! (/sys/kernel/btf/vmlinux). The eBPF object has no CO-RE relocations, so the offsets a
//! program needs are handed to it as load-time constants, which the verifier then
//! checks against the same BTF. Only the type section's layout is walked: a few
//! milliseconds, where a general BTF library took ~170 ms to parse the whole file.

use std::path::Path;

/// Where the running kernel's BTF is.
pub const VMLINUX_BTF: &str = "/sys/kernel/btf/vmlinux";

/// Offsets in `struct task_struct` the sched_waking and sched_switch programs read (0:
/// unknown).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TaskOffsets {
    /// `pid` (the thread id).
    pub pid: u32,
    /// `tgid` (the process id).
    pub tgid: u32,
    /// `__state` (`state` before Linux 5.14): 0 while the task is runnable.
    pub state: u32,
    /// `signal` (0: unknown).
    pub signal: u32,
    /// `live` in `struct signal_struct` (0: unknown): the exit program tells a
    /// process's last thread by it (PID reuse, see rtm-ebpf's lifecycle.rs).
    pub signal_live: u32,
}

/// Why an offset could not be read.
#[derive(Debug, thiserror::Error)]
pub enum BtfError {
    /// The file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// Not BTF, or cut short.
    #[error("malformed BTF: {0}")]
    Malformed(&'static str),
    /// The struct or one of the fields on the path is not there.
    #[error("no {0} in the kernel's BTF")]
    Missing(String),
}

/// The offsets of [`TaskOffsets`] in the running kernel.
pub fn task_offsets() -> Result<TaskOffsets, BtfError> {
    let data = read(Path::new(VMLINUX_BTF))?;
    let btf = Btf::parse(&data)?;
    task_offsets_in(&btf)
}

fn task_offsets_in(btf: &Btf<'_>) -> Result<TaskOffsets, BtfError> {
    let task = btf.struct_named("task_struct")?;
    Ok(TaskOffsets {
        pid: btf.offset_of(task, &["pid"])?,
        tgid: btf.offset_of(task, &["tgid"])?,
        state: btf
            .offset_of(task, &["__state"])
            .or_else(|_| btf.offset_of(task, &["state"]))?,
        // Both or neither.
        ..btf
            .offset_of(task, &["signal"])
            .and_then(|signal| {
                let s = btf.struct_named("signal_struct")?;
                Ok((signal, btf.offset_of(s, &["live"])?))
            })
            .map(|(signal, signal_live)| TaskOffsets {
                signal,
                signal_live,
                ..TaskOffsets::default()
            })
            .unwrap_or_default()
    })
}

/// Largest BTF read (the kernel's is a few MiB).
const MAX_BTF_BYTES: usize = 256 << 20;

fn read(path: &Path) -> Result<Vec<u8>, BtfError> {
    crate::proc::files::read_proc(path, MAX_BTF_BYTES).map_err(|source| BtfError::Read {
        path: path.display().to_string(),
        source,
    })
}

const KIND_INT: u32 = 1;
const KIND_ARRAY: u32 = 3;
const KIND_STRUCT: u32 = 4;
const KIND_UNION: u32 = 5;
const KIND_ENUM: u32 = 6;
const KIND_TYPEDEF: u32 = 8;
const KIND_VOLATILE: u32 = 9;
const KIND_CONST: u32 = 10;
const KIND_RESTRICT: u32 = 11;
const KIND_FUNC_PROTO: u32 = 13;
const KIND_VAR: u32 = 14;
const KIND_DATASEC: u32 = 15;
const KIND_DECL_TAG: u32 = 17;
const KIND_TYPE_TAG: u32 = 18;
const KIND_ENUM64: u32 = 19;

/// A type's common header.
#[derive(Clone, Copy)]
struct TypeHead {
    name_off: u32,
    info: u32,
    /// Size, or the type it refers to.
    size_type: u32,
    /// Where its kind-specific data starts in `types`.
    data: usize,
}

impl TypeHead {
    fn kind(&self) -> u32 {
        (self.info >> 24) & 0x1f
    }
    fn vlen(&self) -> usize {
        (self.info & 0xffff) as usize
    }
    fn kind_flag(&self) -> bool {
        self.info >> 31 != 0
    }
}

/// The type and string sections of a little-endian BTF blob, with each type's place.
struct Btf<'a> {
    types: &'a [u8],
    strings: &'a [u8],
    /// Type id - 1 -> its header.
    heads: Vec<TypeHead>,
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

impl<'a> Btf<'a> {
    fn parse(data: &'a [u8]) -> Result<Self, BtfError> {
        let bad = BtfError::Malformed;
        if data.get(0..2) != Some(&[0x9f, 0xeb]) {
            return Err(bad("not little-endian BTF"));
        }
        let field = |at| {
            u32_at(data, at)
                .map(|v| v as usize)
                .ok_or(bad("short header"))
        };
        let (hdr, type_off, type_len, str_off, str_len) =
            (field(4)?, field(8)?, field(12)?, field(16)?, field(20)?);
        let types = data
            .get(hdr + type_off..hdr + type_off + type_len)
            .ok_or(bad("type section out of bounds"))?;
        let strings = data
            .get(hdr + str_off..hdr + str_off + str_len)
            .ok_or(bad("string section out of bounds"))?;
        let mut heads = Vec::new();
        let mut at = 0;
        while at < types.len() {
            let word = |i: usize| u32_at(types, at + 4 * i).ok_or(bad("truncated type"));
            let h = TypeHead {
                name_off: word(0)?,
                info: word(1)?,
                size_type: word(2)?,
                data: at + 12,
            };
            let extra = match h.kind() {
                KIND_INT | KIND_VAR | KIND_DECL_TAG => 4,
                KIND_ARRAY => 12,
                KIND_STRUCT | KIND_UNION | KIND_DATASEC | KIND_ENUM64 => 12 * h.vlen(),
                KIND_ENUM | KIND_FUNC_PROTO => 8 * h.vlen(),
                k if k <= 19 => 0,
                _ => return Err(bad("unknown type kind")),
            };
            heads.push(h);
            at = h.data + extra;
        }
        Ok(Self {
            types,
            strings,
            heads,
        })
    }

    fn name(&self, off: u32) -> &[u8] {
        let s = self.strings.get(off as usize..).unwrap_or_default();
        &s[..s.iter().position(|&b| b == 0).unwrap_or(s.len())]
    }

    fn head(&self, id: u32) -> Option<TypeHead> {
        self.heads.get((id as usize).checked_sub(1)?).copied()
    }

    /// The struct with this name (the first complete one).
    fn struct_named(&self, name: &str) -> Result<TypeHead, BtfError> {
        self.heads
            .iter()
            .find(|h| h.kind() == KIND_STRUCT && self.name(h.name_off) == name.as_bytes())
            .copied()
            .ok_or_else(|| BtfError::Missing(format!("struct {name}")))
    }

    /// Follows typedefs and qualifiers to the type they name.
    fn resolve(&self, mut id: u32) -> Option<TypeHead> {
        for _ in 0..32 {
            let h = self.head(id)?;
            match h.kind() {
                KIND_TYPEDEF | KIND_VOLATILE | KIND_CONST | KIND_RESTRICT | KIND_TYPE_TAG => {
                    id = h.size_type
                }
                _ => return Some(h),
            }
        }
        None
    }

    /// The byte offset and type of member `name` of the struct or union `h`, looking
    /// inside its anonymous struct and union members.
    fn member(&self, h: TypeHead, name: &[u8], depth: u32) -> Option<(u32, TypeHead)> {
        if !matches!(h.kind(), KIND_STRUCT | KIND_UNION) || depth > 8 {
            return None;
        }
        for i in 0..h.vlen() {
            let at = h.data + 12 * i;
            let (name_off, ty, off) = (
                u32_at(self.types, at)?,
                u32_at(self.types, at + 4)?,
                u32_at(self.types, at + 8)?,
            );
            let bits = if h.kind_flag() { off & 0xff_ffff } else { off };
            let t = self.resolve(ty)?;
            let own = self.name(name_off);
            if own == name {
                return Some((bits / 8, t));
            }
            if own.is_empty()
                && let Some((inner, t)) = self.member(t, name, depth + 1)
            {
                return Some(((bits / 8).checked_add(inner)?, t));
            }
        }
        None
    }

    /// The byte offset of the member at `path` (names, outermost first) in `h`.
    fn offset_of(&self, h: TypeHead, path: &[&str]) -> Result<u32, BtfError> {
        let mut t = h;
        let mut total = 0;
        for field in path {
            let (off, inner) = self
                .member(t, field.as_bytes(), 0)
                .ok_or_else(|| BtfError::Missing(format!("field {}", path.join("."))))?;
            total =
                u32::checked_add(total, off).ok_or(BtfError::Malformed("offset out of range"))?;
            t = inner;
        }
        Ok(total)
    }
}

#[cfg(test)]
mod tests {
    use rtm_common::arch::pt_regs;

    use super::*;

    /// A BTF blob: `struct outer { int a; union { int b; struct inner c; }; }` with
    /// `struct inner { long x; int y; }`, typedef'd through `inner_t`.
    pub(super) fn blob() -> Vec<u8> {
        let strings = b"\0int\0long\0inner\0x\0y\0inner_t\0outer\0a\0b\0c\0";
        let name = |s: &str| {
            let s = format!("\0{s}\0");
            strings
                .windows(s.len())
                .position(|w| w == s.as_bytes())
                .unwrap() as u32
                + 1
        };
        let mut t: Vec<u32> = Vec::new();
        let head = |t: &mut Vec<u32>, n: u32, kind: u32, vlen: u32, flag: u32, st: u32| {
            t.extend([n, (flag << 31) | (kind << 24) | vlen, st])
        };
        head(&mut t, name("int"), KIND_INT, 0, 0, 4); // 1
        t.push(32);
        head(&mut t, name("long"), KIND_INT, 0, 0, 8); // 2
        t.push(64);
        head(&mut t, name("inner"), KIND_STRUCT, 2, 0, 16); // 3
        t.extend([name("x"), 2, 0, name("y"), 1, 64]);
        head(&mut t, name("inner_t"), KIND_TYPEDEF, 0, 0, 3); // 4
        head(&mut t, 0, KIND_UNION, 2, 0, 16); // 5: anonymous
        t.extend([name("b"), 1, 0, name("c"), 4, 0]);
        head(&mut t, name("outer"), KIND_STRUCT, 2, 1, 24); // 6: bitfield-style offsets
        t.extend([name("a"), 1, 0, 0, 5, 64]);
        let types: Vec<u8> = t.iter().flat_map(|w| w.to_le_bytes()).collect();
        let mut b = vec![0x9f, 0xeb, 1, 0];
        for w in [
            24,
            0,
            types.len() as u32,
            types.len() as u32,
            strings.len() as u32,
        ] {
            b.extend(w.to_le_bytes());
        }
        b.extend(&types);
        b.extend(strings);
        b
    }

    #[test]
    fn offsets_go_through_typedefs_and_anonymous_members() {
        let data = blob();
        let btf = Btf::parse(&data).unwrap();
        let outer = btf.struct_named("outer").unwrap();
        assert_eq!(btf.offset_of(outer, &["a"]).unwrap(), 0);
        assert_eq!(btf.offset_of(outer, &["b"]).unwrap(), 8);
        assert_eq!(btf.offset_of(outer, &["c", "y"]).unwrap(), 16);
        assert!(matches!(
            btf.offset_of(outer, &["c", "z"]),
            Err(BtfError::Missing(_))
        ));
        assert!(btf.struct_named("nothing").is_err());
        assert!(Btf::parse(&data[..30]).is_err());
        assert!(Btf::parse(b"not btf at all, not at all.....").is_err());
    }

    /// The running kernel's: pt_regs is where `rtm_common::arch` has it (the
    /// architecture's ABI, the same on every kernel); task_struct's fields are where a
    /// second reading finds them.
    #[test]
    fn the_running_kernels_offsets() {
        let Ok(data) = read(Path::new(VMLINUX_BTF)) else {
            assert!(
                std::env::var_os("CI").is_none(),
                "{VMLINUX_BTF} is needed in CI"
            );
            eprintln!("NOT RUN: no {VMLINUX_BTF}");
            return;
        };
        let btf = Btf::parse(&data).unwrap();
        let regs = btf.struct_named("pt_regs").unwrap();
        for (member, offset) in pt_regs::BTF_MEMBERS {
            let found = btf.offset_of(regs, &[member]).unwrap();
            assert_eq!(found as usize, offset, "pt_regs.{member}");
        }
        let t = task_offsets().unwrap();
        assert_eq!(t.tgid, t.pid + 4, "{t:?}");
        // task_struct.signal is a pointer well past pid; signal_struct.live follows its
        // refcount (`sigcnt`, 4 bytes) and nr_threads.
        assert!(t.signal > t.tgid && t.signal.is_multiple_of(8), "{t:?}");
        assert!((4..=16).contains(&t.signal_live), "{t:?}");
    }
}

/// Property tests: BTF of any content, random or a valid blob damaged at random, parses or
/// fails cleanly.
#[cfg(test)]
mod fuzz {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        #[test]
        fn damaged_btf_parses_or_fails(
            edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..32),
            cut in any::<prop::sample::Index>(),
            random in prop::collection::vec(any::<u8>(), 0..256),
        ) {
            let mut b = tests::blob();
            for (i, v) in &edits {
                let at = i.index(b.len());
                b[at] = *v;
            }
            if let Ok(btf) = Btf::parse(&b) {
                let _ = task_offsets_in(&btf);
            }
            b.truncate(cut.index(b.len()));
            let _ = Btf::parse(&b);
            let mut r = vec![0x9f, 0xeb];
            r.extend_from_slice(&random);
            let _ = Btf::parse(&r);
        }
    }
}
