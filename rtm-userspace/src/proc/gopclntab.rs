//! A Go program's own table of its functions (`.gopclntab`), which it keeps when
//! stripped (the runtime needs it for its tracebacks): names for the code of Go programs
//! shipped without a symbol table, as distributions ship them.
//!
//! Layout (Go 1.18 and later, 64-bit): a header (`runtime.pcHeader`: magic, two pad
//! bytes, the minimum instruction size, the pointer size, then eight words: the
//! function count, the file count, the text start, and the offsets from the header of
//! the function name table, the compilation-unit table, the file table, the pc table
//! and the function table). The function table holds, for each function and one past
//! the last, two 32-bit offsets: its entry from the text start, and its `_func` record
//! from the function table; a `_func` record begins with its entry offset and its
//! name's offset in the name table (NUL-terminated names).

/// Magic numbers of the layouts read: Go 1.18-1.19, Go 1.20 and later.
const MAGICS: [u32; 2] = [0xffff_fff0, 0xffff_fff1];

/// Most functions read (a large program has about 100,000).
const MAX_FUNCS: usize = 4 << 20;

/// A Go program's functions: entries (virtual addresses, ascending) and names.
#[derive(Debug, Default)]
pub struct GoFunctions {
    /// (entry address, offset of its name in `names`), ascending by address.
    entries: Vec<(u64, u32)>,
    /// The address one past the last function.
    end: u64,
    /// NUL-terminated names.
    names: Vec<u8>,
}

impl GoFunctions {
    /// Reads the table from the section's bytes; None when it is not one this reads (an
    /// older layout, a 32-bit program, or damaged offsets).
    pub fn parse(tab: &[u8]) -> Option<Self> {
        let u32_at = |at: usize| -> Option<u32> {
            Some(u32::from_le_bytes(
                tab.get(at..at.checked_add(4)?)?.try_into().ok()?,
            ))
        };
        let u64_at = |at: usize| -> Option<u64> {
            Some(u64::from_le_bytes(
                tab.get(at..at.checked_add(8)?)?.try_into().ok()?,
            ))
        };
        if !MAGICS.contains(&u32_at(0)?) || *tab.get(7)? != 8 {
            return None;
        }
        let nfunc = usize::try_from(u64_at(8)?).ok()?;
        let text = u64_at(24)?;
        let names_at = usize::try_from(u64_at(32)?).ok()?;
        let ftab_at = usize::try_from(u64_at(64)?).ok()?;
        if nfunc > MAX_FUNCS || names_at >= tab.len() || ftab_at >= tab.len() {
            return None;
        }
        let name_table = tab.get(names_at..)?;
        let mut entries = Vec::with_capacity(nfunc);
        let mut names = Vec::new();
        for i in 0..nfunc {
            let row = ftab_at.checked_add(i.checked_mul(8)?)?;
            let entry = u32_at(row)?;
            let func = ftab_at.checked_add(usize::try_from(u32_at(row + 4)?).ok()?)?;
            let name_off = usize::try_from(u32_at(func.checked_add(4)?)?).ok()?;
            let name = name_table.get(name_off..).map(|n| {
                let len = n.iter().position(|&b| b == 0).unwrap_or(n.len());
                &n[..len.min(512)]
            });
            let at = u32::try_from(names.len()).ok()?;
            names.extend_from_slice(name.unwrap_or_default());
            names.push(0);
            entries.push((text.checked_add(u64::from(entry))?, at));
        }
        let end = text.checked_add(u64::from(u32_at(
            ftab_at.checked_add(nfunc.checked_mul(8)?)?,
        )?))?;
        if entries.windows(2).any(|w| w[0].0 > w[1].0) {
            return None;
        }
        Some(Self {
            entries,
            end,
            names,
        })
    }

    /// The function `vaddr` is in and the offset from its entry.
    pub fn function(&self, vaddr: u64) -> Option<(&str, u64)> {
        if vaddr >= self.end {
            return None;
        }
        let i = self
            .entries
            .partition_point(|&(e, _)| e <= vaddr)
            .checked_sub(1)?;
        let (entry, at) = self.entries[i];
        let name = self.names.get(at as usize..)?;
        let len = name.iter().position(|&b| b == 0)?;
        Some((std::str::from_utf8(&name[..len]).ok()?, vaddr - entry))
    }

    /// Functions read.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.entries.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A table of `funcs` (entry offset from `text`, name) as the Go linker lays it out.
    fn table(magic: u32, text: u64, funcs: &[(u32, &str)], end: u32) -> Vec<u8> {
        let header = 72;
        let mut names = Vec::new();
        let mut name_offs = Vec::new();
        for (_, n) in funcs {
            name_offs.push(names.len() as u32);
            names.extend_from_slice(n.as_bytes());
            names.push(0);
        }
        let names_at = header;
        let ftab_at = names_at + names.len();
        let ftab_len = (funcs.len() + 1) * 8;
        let mut t = vec![0u8; header];
        t[0..4].copy_from_slice(&magic.to_le_bytes());
        t[6] = 1;
        t[7] = 8;
        t[8..16].copy_from_slice(&(funcs.len() as u64).to_le_bytes());
        t[24..32].copy_from_slice(&text.to_le_bytes());
        t[32..40].copy_from_slice(&(names_at as u64).to_le_bytes());
        t[64..72].copy_from_slice(&(ftab_at as u64).to_le_bytes());
        t.extend_from_slice(&names);
        let mut ftab = Vec::new();
        let mut records = Vec::new();
        for (i, (entry, _)) in funcs.iter().enumerate() {
            ftab.extend_from_slice(&entry.to_le_bytes());
            ftab.extend_from_slice(&((ftab_len + records.len()) as u32).to_le_bytes());
            records.extend_from_slice(&entry.to_le_bytes());
            records.extend_from_slice(&name_offs[i].to_le_bytes());
        }
        ftab.extend_from_slice(&end.to_le_bytes());
        ftab.extend_from_slice(&0u32.to_le_bytes());
        t.extend_from_slice(&ftab);
        t.extend_from_slice(&records);
        t
    }

    #[test]
    fn names_addresses_by_the_programs_own_function_table() {
        let funcs = [
            (0, "runtime.text"),
            (0x40, "runtime.futex"),
            (0x90, "runtime.notesleep"),
            (0x200, "main.main"),
        ];
        for magic in MAGICS {
            let g = GoFunctions::parse(&table(magic, 0x40_1000, &funcs, 0x300)).unwrap();
            assert_eq!(g.len(), 4);
            assert_eq!(g.function(0x40_1040), Some(("runtime.futex", 0)));
            assert_eq!(g.function(0x40_10a3), Some(("runtime.notesleep", 0x13)));
            assert_eq!(g.function(0x40_12ff), Some(("main.main", 0xff)));
            assert_eq!(g.function(0x40_1300), None);
            assert_eq!(g.function(0x40_0fff), None);
        }
    }

    #[test]
    fn other_layouts_and_damaged_tables_are_refused() {
        let good = table(MAGICS[0], 0x1000, &[(0, "a"), (8, "b")], 16);
        // Go 1.16's magic, a 32-bit program, a cut table, offsets past the end.
        let mut old = good.clone();
        old[0..4].copy_from_slice(&0xffff_fffau32.to_le_bytes());
        assert!(GoFunctions::parse(&old).is_none());
        let mut narrow = good.clone();
        narrow[7] = 4;
        assert!(GoFunctions::parse(&narrow).is_none());
        assert!(GoFunctions::parse(&good[..good.len() - 9]).is_none());
        let mut far = good.clone();
        far[64..72].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(GoFunctions::parse(&far).is_none());
        let mut many = good;
        many[8..16].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(GoFunctions::parse(&many).is_none());
        assert!(GoFunctions::parse(&[]).is_none());
    }
}
