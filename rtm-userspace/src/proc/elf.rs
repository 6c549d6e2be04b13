//! The few facts rtm-trace needs from a target's ELF files: where functions are (as
//! file offsets, which is what uprobes take) and which data symbol covers an address.

use std::{
    collections::HashMap,
    io,
    path::{Path, PathBuf},
};

use super::{
    files::{self, MAX_OBJECT_BYTES},
    mapped::{MappedFile, MappedFileError},
};

use object::{Object, ObjectSegment, ObjectSymbol, SymbolKind, read::elf::VersionTable};

/// Errors reading an ELF file.
#[derive(Debug, thiserror::Error)]
pub enum ElfError {
    /// The file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The file a process maps could not be opened as the process runs it.
    #[error(transparent)]
    Mapped(#[from] MappedFileError),
    /// The file is not an ELF object this build can parse.
    #[error("{path} is not a readable ELF file: {source}")]
    Parse {
        /// The file.
        path: String,
        /// Why.
        #[source]
        source: object::Error,
    },
}

/// Reads a file that should be an ELF object: only a regular file (opened without
/// blocking, so a FIFO planted at the path never holds the tracer), and at most
/// [`MAX_OBJECT_BYTES`]. A mapping's path can name a device: a shared anonymous mapping
/// shows as `/dev/zero (deleted)`, and reading /dev/zero never ends.
pub fn read_object_file(path: &Path) -> io::Result<Vec<u8>> {
    files::read_regular(path, MAX_OBJECT_BYTES)
}

#[derive(Debug, Clone, Copy)]
struct Segment {
    vaddr: u64,
    file_off: u64,
    file_size: u64,
    mem_size: u64,
}

/// Symbols and segments of one ELF file.
#[derive(Debug, Default)]
pub struct ElfSymbols {
    /// Name -> (address, size); the default version wins over compatibility versions.
    functions: HashMap<String, (u64, u64)>,
    /// Data symbols sorted by address: (address, size, name).
    data: Vec<(u64, u64, String)>,
    segments: Vec<Segment>,
    /// The virtual address that file offset 0 maps to.
    image_base: u64,
    /// Functions the file imports from shared libraries (undefined dynamic symbols).
    imports: std::collections::HashSet<String>,
    /// Its DT_NEEDED libraries.
    needed: Vec<String>,
    /// Its DT_RUNPATH, else DT_RPATH directories, as written (`$ORIGIN` unexpanded).
    runpath: Vec<String>,
    /// Functions that are GNU indirect functions (their symbol is the resolver, which
    /// runs once at load, not the implementation calls reach).
    ifuncs: std::collections::HashSet<String>,
    /// Whether it has a static symbol table (.symtab): not stripped.
    has_symtab: bool,
    /// Its GNU build id.
    build_id: Option<Vec<u8>>,
    /// Its .gnu_debuglink: the debug file's name and CRC32.
    debuglink: Option<(String, u32)>,
    /// Whether it is a Go program (its build info section, or the runtime's main).
    go: bool,
    /// A stripped Go program's own function table (`.gopclntab`).
    go_functions: Option<super::gopclntab::GoFunctions>,
}

impl ElfSymbols {
    /// Reads the file's dynamic and static symbol tables.
    pub fn open(path: &Path) -> Result<Self, ElfError> {
        let bytes = read_object_file(path).map_err(|source| ElfError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Self::parse(&bytes).map_err(|source| ElfError::Parse {
            path: path.display().to_string(),
            source,
        })
    }

    /// Reads the file a process maps, as the process runs it (see [`MappedFile`]); also
    /// returns its bytes and a path naming the same inode while the process maps it.
    pub fn open_mapped(file: &MappedFile) -> Result<(Self, Vec<u8>, PathBuf), ElfError> {
        let (bytes, path) = file.read()?;
        let symbols = Self::parse(&bytes).map_err(|source| ElfError::Parse {
            path: file.path.display().to_string(),
            source,
        })?;
        Ok((symbols, bytes, path))
    }

    /// Parses ELF bytes.
    pub fn parse(bytes: &[u8]) -> Result<Self, object::Error> {
        Self::parse_from(bytes)
    }

    /// Parses an ELF file read on demand (a debug file: only its symbol tables and
    /// notes are read, not its DWARF).
    pub fn parse_file(file: &std::fs::File) -> Result<Self, object::Error> {
        let cache = object::ReadCache::new(file);
        Self::parse_from(&cache)
    }

    fn parse_from<'d, R: object::ReadRef<'d>>(data: R) -> Result<Self, object::Error> {
        let file = object::File::parse(data)?;
        let mut out = ElfSymbols {
            has_symtab: file.symbol_table().is_some(),
            go: file.section_by_name(".go.buildinfo").is_some(),
            // Stripped, a Go program still names its functions for its own tracebacks.
            go_functions: file
                .symbol_table()
                .is_none()
                .then(|| file.section_by_name(".gopclntab"))
                .flatten()
                .and_then(|s| object::ObjectSection::data(&s).ok())
                .and_then(super::gopclntab::GoFunctions::parse),
            build_id: file.build_id().ok().flatten().map(<[u8]>::to_vec),
            debuglink: file
                .gnu_debuglink()
                .ok()
                .flatten()
                .map(|(n, crc)| (String::from_utf8_lossy(n).into_owned(), crc)),
            ..ElfSymbols::default()
        };
        // Which dynamic symbols are compatibility versions (`name@VER`, not `name@@VER`):
        // glibc keeps old pthread_cond_wait & co. beside the current ones.
        let hidden: Vec<bool> = match &file {
            object::File::Elf64(elf) => {
                let endian = elf.endian();
                let versions: Option<
                    VersionTable<'_, object::elf::FileHeader64<object::Endianness>>,
                > = elf
                    .elf_section_table()
                    .versions(endian, elf.data())
                    .ok()
                    .flatten();
                let n = elf.elf_dynamic_symbol_table().len();
                (0..n)
                    .map(|i| {
                        versions.as_ref().is_some_and(|v| {
                            v.version_index(endian, object::SymbolIndex(i)).is_hidden()
                        })
                    })
                    .collect()
            }
            _ => Vec::new(),
        };
        let dynamic = file.dynamic_symbols().map(|s| (true, s));
        for (is_dynamic, sym) in dynamic.chain(file.symbols().map(|s| (false, s))) {
            // Indirect functions are not definitions to `object`: noted by name.
            if let object::SymbolFlags::Elf { st_info, .. } = sym.flags()
                && st_info & 0xf == object::elf::STT_GNU_IFUNC
                && !sym.is_undefined()
                && let Ok(name) = sym.name()
            {
                out.ifuncs.insert(name.to_owned());
            }
            if !sym.is_definition() {
                continue;
            }
            let Ok(name) = sym.name() else { continue };
            if name.is_empty() {
                continue;
            }
            match sym.kind() {
                SymbolKind::Text => {
                    let value = (sym.address(), sym.size());
                    let is_default =
                        is_dynamic && !hidden.get(sym.index().0).copied().unwrap_or(false);
                    if is_default {
                        out.functions.insert(name.to_owned(), value);
                    } else {
                        out.functions.entry(name.to_owned()).or_insert(value);
                    }
                }
                SymbolKind::Data => out.data.push((sym.address(), sym.size(), name.to_owned())),
                _ => {}
            }
        }
        for sym in file.dynamic_symbols() {
            if sym.is_undefined()
                && let Ok(name) = sym.name()
                && !name.is_empty()
            {
                out.imports.insert(name.to_owned());
            }
        }
        out.needed = dynamic_strings(&file, DT_NEEDED);
        out.runpath = dynamic_strings(&file, DT_RUNPATH)
            .into_iter()
            .chain(dynamic_strings(&file, DT_RPATH))
            .take(1)
            .flat_map(|s| s.split(':').map(str::to_owned).collect::<Vec<_>>())
            .filter(|d| !d.is_empty())
            .collect();
        out.data.sort();
        out.data.dedup_by(|a, b| a.0 == b.0);
        out.segments = file
            .segments()
            .map(|s| {
                let (file_off, file_size) = s.file_range();
                Segment {
                    vaddr: s.address(),
                    file_off,
                    file_size,
                    mem_size: s.size(),
                }
            })
            .collect();
        out.image_base = out
            .segments
            .iter()
            .map(|s| s.vaddr.saturating_sub(s.file_off))
            .min()
            .unwrap_or(0);
        Ok(out)
    }

    /// Whether the file is a statically linked executable (no program interpreter): its
    /// pthread functions are inside it.
    pub fn is_static_executable(path: &Path) -> Result<bool, ElfError> {
        let bytes = read_object_file(path).map_err(|source| ElfError::Read {
            path: path.display().to_string(),
            source,
        })?;
        let file = object::File::parse(&*bytes).map_err(|source| ElfError::Parse {
            path: path.display().to_string(),
            source,
        })?;
        let has_interp = file
            .sections()
            .any(|s| object::ObjectSection::name(&s) == Ok(".interp"));
        Ok(!has_interp
            && (file.kind() == object::ObjectKind::Executable
                || file.dynamic_symbols().next().is_none()))
    }

    /// Whether the file is a Go program: goroutines block in its runtime, which parks
    /// idle threads on futexes.
    pub fn is_go(&self) -> bool {
        self.go || self.functions.contains_key("runtime.main")
    }

    /// The function of a stripped Go program at `vaddr`, from its own function table,
    /// and the offset into it.
    pub fn go_function(&self, vaddr: u64) -> Option<(&str, u64)> {
        self.go_functions.as_ref()?.function(vaddr)
    }

    /// Whether the file has its static symbol table (is not stripped).
    pub fn has_symtab(&self) -> bool {
        self.has_symtab
    }

    /// Its GNU build id.
    pub fn build_id(&self) -> Option<&[u8]> {
        self.build_id.as_deref()
    }

    /// Its .gnu_debuglink: the debug file's name and CRC32.
    pub fn debuglink(&self) -> Option<(&str, u32)> {
        self.debuglink.as_ref().map(|(n, c)| (n.as_str(), *c))
    }

    /// Takes the static symbols of `debug`, the separate debug file of this (stripped)
    /// file: same addresses, the symbol table the strip removed.
    pub fn add_debug_symbols(&mut self, debug: ElfSymbols) {
        for (name, f) in debug.functions {
            self.functions.entry(name).or_insert(f);
        }
        self.data.extend(debug.data);
        self.data.sort();
        self.data.dedup_by(|a, b| a.0 == b.0);
        self.has_symtab |= debug.has_symtab;
    }

    /// Whether the file imports `name` from a shared library.
    pub fn imports(&self, name: &str) -> bool {
        self.imports.contains(name)
    }

    /// The file's DT_NEEDED entries.
    pub fn needed(&self) -> &[String] {
        &self.needed
    }

    /// The file's DT_RUNPATH (else DT_RPATH) directories, `$ORIGIN` unexpanded.
    pub fn runpath(&self) -> &[String] {
        &self.runpath
    }

    /// Every defined function: (name, address, size), in no particular order.
    pub fn functions(&self) -> impl Iterator<Item = (&str, u64, u64)> {
        self.functions.iter().map(|(n, &(a, s))| (n.as_str(), a, s))
    }

    /// Whether `name` is a GNU indirect function (its symbol is the resolver).
    pub fn is_ifunc(&self, name: &str) -> bool {
        self.ifuncs.contains(name)
    }

    /// Virtual address of a defined function.
    pub fn function(&self, name: &str) -> Option<u64> {
        self.functions.get(name).map(|f| f.0)
    }

    /// Size in bytes of a defined function (0 when the symbol does not say).
    pub fn function_size(&self, name: &str) -> Option<u64> {
        self.functions.get(name).map(|f| f.1)
    }

    /// File offset of a virtual address inside a loaded segment's file bytes.
    pub fn file_offset(&self, vaddr: u64) -> Option<u64> {
        self.segments
            .iter()
            .find(|s| vaddr >= s.vaddr && vaddr < s.vaddr + s.file_size)
            .map(|s| s.file_off + (vaddr - s.vaddr))
    }

    /// File offset of a defined function: what a uprobe attaches to.
    pub fn function_offset(&self, name: &str) -> Option<u64> {
        self.function(name).and_then(|v| self.file_offset(v))
    }

    /// The virtual address an address of the running process corresponds to, given where
    /// the process mapped this file's offset 0.
    pub fn vaddr_of(&self, addr: u64, mapped_base: u64) -> u64 {
        addr.wrapping_sub(mapped_base).wrapping_add(self.image_base)
    }

    /// Whether a virtual address lies in a loaded segment (file bytes or .bss).
    pub fn contains(&self, vaddr: u64) -> bool {
        self.segments
            .iter()
            .any(|s| vaddr >= s.vaddr && vaddr < s.vaddr + s.mem_size.max(s.file_size))
    }

    /// The data symbol covering `vaddr`: its name, the offset in it, and its size.
    pub fn data_symbol_parts(&self, vaddr: u64) -> Option<(&str, u64, u64)> {
        let i = self.data.partition_point(|(a, _, _)| *a <= vaddr);
        let (start, size, name) = self.data.get(i.checked_sub(1)?)?;
        let off = vaddr - start;
        (off == 0 || off < *size).then_some((name.as_str(), off, *size))
    }

    /// The data symbol covering `vaddr`, as `name` or `name+0xOFF`.
    #[cfg(test)]
    pub fn data_symbol(&self, vaddr: u64) -> Option<String> {
        let (name, off, _) = self.data_symbol_parts(vaddr)?;
        Some(if off == 0 {
            name.to_owned()
        } else {
            format!("{name}+{off:#x}")
        })
    }
}

/// DT_NEEDED names from the `.dynamic` section (64-bit little-endian files).
const DT_NEEDED: u64 = 1;
const DT_RPATH: u64 = 15;
const DT_RUNPATH: u64 = 29;

/// The strings of the dynamic section's `tag` entries, in order.
fn dynamic_strings<'d, R: object::ReadRef<'d>>(
    file: &object::File<'d, R>,
    tag: u64,
) -> Vec<String> {
    let want = tag;
    use object::ObjectSection;
    let (Some(dynamic), Some(dynstr)) = (
        file.section_by_name(".dynamic"),
        file.section_by_name(".dynstr"),
    ) else {
        return Vec::new();
    };
    let (Ok(d), Ok(strs)) = (dynamic.data(), dynstr.data()) else {
        return Vec::new();
    };
    d.chunks_exact(16)
        .filter_map(|e| {
            let tag = u64::from_le_bytes(e[..8].try_into().ok()?);
            let val = u64::from_le_bytes(e[8..].try_into().ok()?) as usize;
            if tag != want {
                return None;
            }
            let rest = strs.get(val..)?;
            let end = rest.iter().position(|&b| b == 0)?;
            Some(String::from_utf8_lossy(&rest[..end]).into_owned())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A shared anonymous mapping names /dev/zero: not read (it never ends), and not
    /// an error that stops anything.
    #[test]
    fn devices_are_not_read_as_object_files() {
        let e = read_object_file(Path::new("/dev/zero")).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        assert!(ElfSymbols::open(Path::new("/dev/zero")).is_err());
        assert!(
            read_object_file(Path::new("/proc/self/exe")).is_ok_and(|b| b.starts_with(b"\x7fELF"))
        );
    }

    fn libc_path() -> std::path::PathBuf {
        let m = crate::proc::process::modules(std::process::id()).expect("own maps");
        m.iter()
            .find(|m| {
                m.path
                    .file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with("libc.so"))
            })
            .expect("glibc mapped")
            .path
            .clone()
    }

    fn libc() -> Option<ElfSymbols> {
        ElfSymbols::open(&libc_path()).ok()
    }

    #[test]
    fn finds_pthread_functions_in_the_running_libc() {
        let elf = libc().expect("this test binary maps glibc");
        let lock = elf.function_offset("pthread_mutex_lock").expect("defined");
        let unlock = elf
            .function_offset("pthread_mutex_unlock")
            .expect("defined");
        assert!(lock > 0 && unlock > 0 && lock != unlock);
        assert_eq!(elf.function("no_such_function_anywhere"), None);
    }

    #[test]
    fn default_symbol_versions_win_over_compatibility_ones() {
        let elf = libc().expect("this test binary maps glibc");
        // glibc 2.3.2 replaced pthread_cond_wait; the old one stays as @GLIBC_2.2.5.
        let out = std::process::Command::new("nm")
            .args(["-D", "--defined-only"])
            .arg(libc_path())
            .output()
            .expect("nm (binutils) runs");
        let text = String::from_utf8_lossy(&out.stdout);
        let default = text
            .lines()
            .find(|l| l.ends_with(" pthread_cond_wait@@GLIBC_2.3.2"))
            .and_then(|l| u64::from_str_radix(l.split(' ').next()?, 16).ok())
            .expect("nm lists the default pthread_cond_wait");
        assert_eq!(elf.function("pthread_cond_wait"), Some(default));
        assert!(elf.function_size("pthread_cond_wait").unwrap() > 0);
    }

    #[test]
    fn data_symbols_name_addresses_inside_them() {
        let elf = ElfSymbols {
            data: vec![(0x100, 0x40, "locks".into()), (0x200, 0, "flag".into())],
            ..Default::default()
        };
        assert_eq!(elf.data_symbol(0x100).as_deref(), Some("locks"));
        assert_eq!(elf.data_symbol(0x128).as_deref(), Some("locks+0x28"));
        assert_eq!(elf.data_symbol(0x140), None);
        assert_eq!(elf.data_symbol(0x200).as_deref(), Some("flag"));
        assert_eq!(elf.data_symbol(0x50), None);
    }

    #[test]
    fn garbage_is_a_parse_error() {
        assert!(ElfSymbols::parse(b"not an elf").is_err());
    }
}

/// Property tests: ELF files of any content, random or a real one damaged at random,
/// parse or fail cleanly, and every lookup on what parsed stays in bounds.
#[cfg(test)]
mod fuzz {
    use proptest::prelude::*;

    use super::*;

    fn seed() -> &'static [u8] {
        static SEED: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
        SEED.get_or_init(|| read_object_file(Path::new("/bin/true")).expect("/bin/true"))
    }

    fn exercise(bytes: &[u8]) {
        if let Ok(elf) = ElfSymbols::parse(bytes) {
            for name in ["main", "pthread_mutex_lock", "_start", ""] {
                let _ = elf.function_offset(name);
                let _ = elf.function_size(name);
                let _ = elf.imports(name);
            }
            for a in [0, 1, 0x1000, u64::MAX, u64::MAX / 2] {
                let _ = elf.data_symbol(a);
                let _ = elf.contains(a);
                let _ = elf.file_offset(a);
                let _ = elf.vaddr_of(a, 0x5555_0000_0000);
            }
            let _ = elf.needed();
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]

        #[test]
        fn random_bytes_parse_or_fail(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
            let mut b = b"\x7fELF\x02\x01\x01".to_vec();
            b.extend_from_slice(&bytes);
            exercise(&b);
            exercise(&bytes);
        }

        #[test]
        fn a_damaged_real_file_parses_or_fails(
            edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..64),
            cut in any::<prop::sample::Index>(),
        ) {
            let mut b = seed().to_vec();
            for (i, v) in &edits {
                let at = i.index(b.len());
                b[at] = *v;
            }
            exercise(&b);
            // Truncated somewhere.
            b.truncate(cut.index(b.len()));
            exercise(&b);
        }
    }
}
