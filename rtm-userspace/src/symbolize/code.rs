//! Code addresses (call sites) to `function+0xOFF (file:line)` with blazesym, from the
//! file each address lies in; `file+0xOFF` when the file has no symbols.

use std::{
    borrow::Cow,
    collections::HashMap,
    fs::File,
    os::fd::AsRawFd as _,
    path::{Path, PathBuf},
};

use blazesym::symbolize::{Input, Symbolized, Symbolizer, source::Elf, source::Source};

use super::ObjectNamer;
use crate::proc::files::MAX_OBJECT_BYTES;

/// Names code addresses of traced processes, caching by (pid, address).
///
/// The symbolizer opens files by path. It is handed the tracer's own descriptor of the
/// file (`/proc/self/fd/N`), opened and checked here, never a path the target controls:
/// that could name a FIFO (the symbolizer would block on it) or another file by then.
/// The symbolizer keeps what it parsed by the file's identity (device, inode, size,
/// times), so a descriptor number used again for another file is not confused.
pub struct CodeNamer {
    symbolizer: Symbolizer,
    cache: HashMap<(u32, u64), Option<String>>,
}

impl Default for CodeNamer {
    fn default() -> Self {
        Self {
            // Names are demangled here, only when mangled (see `demangle`).
            symbolizer: Symbolizer::builder().enable_demangling(false).build(),
            cache: HashMap::new(),
        }
    }
}

/// A function's name as its source spells it. Only names with a mangling scheme's prefix
/// (`_Z`: C++'s and Rust's legacy one; `_R`: Rust's v0) are demangled: blazesym hands a
/// name of no known language (a C file's, any ELF symbol's) to the C++ demangler as it is,
/// which reads a C function `w` as the type code of `wchar_t` (`d` as `double`, `i` as
/// `int`).
fn demangle(name: &str) -> Cow<'_, str> {
    if !(name.starts_with("_Z") || name.starts_with("_R")) {
        return Cow::Borrowed(name);
    }
    if let Ok(rust) = rustc_demangle::try_demangle(name) {
        // `{:#}`: without the hash suffix.
        return Cow::Owned(format!("{rust:#}"));
    }
    let cpp = name
        .starts_with("_Z")
        .then(|| cpp_demangle::Symbol::new(name).ok()?.demangle().ok())
        .flatten();
    cpp.map_or(Cow::Borrowed(name), Cow::Owned)
}

fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.display().to_string())
}

impl CodeNamer {
    /// Forgets what was named in the processes `pids`.
    pub fn forget(&mut self, pids: &std::collections::HashSet<u32>) {
        self.cache.retain(|(p, _), _| !pids.contains(p));
    }

    /// `function+0xOFF (file:line)` for `addr` in `pid`, or `file+0xOFF` without symbols;
    /// `None` when no mapped file covers it.
    pub fn name(&mut self, objects: &mut ObjectNamer, pid: u32, addr: u64) -> Option<String> {
        if let Some(hit) = self.cache.get(&(pid, addr)) {
            return hit.clone();
        }
        let named = objects.locate(pid, addr).map(|at| {
            // A stripped file is named from its debug file (same addresses).
            match &at.debug {
                Some(debug) => self.symbolize(&at.file.path, Some(debug), at.vaddr),
                None => {
                    if at.stripped {
                        // A stripped Go program still has its functions' names.
                        if let Some(go) = objects.go_function(pid, addr) {
                            return go;
                        }
                        objects.note_missing(&at.file.path);
                    }
                    let opened = at.file.open(MAX_OBJECT_BYTES).map_err(|e| {
                        log::debug!("{}: {e}", at.file.path.display());
                    });
                    self.symbolize(
                        &at.file.path,
                        opened.ok().map(|(f, _)| f).as_ref(),
                        at.vaddr,
                    )
                }
            }
        });
        self.cache.insert((pid, addr), named.clone());
        named
    }

    /// Names `vaddr` of the file `shown` (its name in the process), read from `file`.
    fn symbolize(&self, shown: &Path, file: Option<&File>, vaddr: u64) -> String {
        let fallback = || format!("{}+{vaddr:#x}", file_name(shown));
        let Some(file) = file else {
            return fallback();
        };
        let fd_path = PathBuf::from(format!("/proc/self/fd/{}", file.as_raw_fd()));
        let src = Source::Elf(Elf::new(fd_path));
        let Ok(mut syms) = self.symbolizer.symbolize(&src, Input::VirtOffset(&[vaddr])) else {
            return fallback();
        };
        match syms.pop() {
            Some(Symbolized::Sym(sym)) => {
                let mut s = format!("{}+{:#x}", demangle(&sym.name), sym.offset);
                let at = |s: &mut String, ci: &blazesym::symbolize::CodeInfo| {
                    s.push_str(&format!(" ({}", ci.file.to_string_lossy()));
                    if let Some(line) = ci.line {
                        s.push_str(&format!(":{line}"));
                    }
                    s.push(')');
                };
                if let Some(ci) = &sym.code_info {
                    at(&mut s, ci);
                }
                // Functions inlined at the address, outermost first: the code really
                // running there.
                for (i, f) in sym.inlined.iter().enumerate() {
                    s.push_str(if i == 0 { " [inlined: " } else { " > " });
                    s.push_str(&demangle(&f.name));
                    if let Some(ci) = &f.code_info {
                        at(&mut s, ci);
                    }
                }
                if !sym.inlined.is_empty() {
                    s.push(']');
                }
                s
            }
            _ => fallback(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[inline(never)]
    fn a_function_to_find() -> u64 {
        a_function_to_find as *const () as u64
    }

    #[test]
    fn names_a_function_of_this_process_with_its_source_line() {
        let mut objects = ObjectNamer::default();
        let mut code = CodeNamer::default();
        let addr = a_function_to_find() + 1;
        let name = code
            .name(&mut objects, std::process::id(), addr)
            .expect("mapped");
        assert!(name.contains("a_function_to_find+0x1"), "{name}");
        assert!(name.contains("code.rs:"), "{name}");
    }

    // A function `w` without debug information, like a C file's `static void *w(void *)`
    // (both are named from the symbol table, in no known language), and a function that
    // returns its address (a local symbol has no name in Rust).
    #[cfg(target_arch = "x86_64")]
    std::arch::global_asm!(
        ".pushsection .text.rtm_code_test_w, \"ax\", @progbits",
        ".type w, @function",
        "w:",
        "nop",
        "nop",
        "nop",
        "nop",
        "nop",
        "nop",
        "nop",
        "ret",
        ".size w, . - w",
        ".globl rtm_code_test_w_address",
        ".type rtm_code_test_w_address, @function",
        "rtm_code_test_w_address:",
        "lea rax, [rip + w]",
        "ret",
        ".size rtm_code_test_w_address, . - rtm_code_test_w_address",
        ".popsection",
    );

    #[cfg(target_arch = "x86_64")]
    unsafe extern "C" {
        fn rtm_code_test_w_address() -> u64;
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn a_function_named_like_a_mangled_type_keeps_its_name() {
        // SAFETY: it only computes an address.
        let w = unsafe { rtm_code_test_w_address() };
        let mut objects = ObjectNamer::default();
        let name = CodeNamer::default()
            .name(&mut objects, std::process::id(), w + 4)
            .expect("mapped");
        assert_eq!(name, "w+0x4");
    }

    #[test]
    fn only_mangled_names_are_demangled() {
        // What the C++ demangler makes of plain C names: types.
        for (plain, ty) in [("w", "wchar_t"), ("d", "double"), ("i", "int")] {
            let read = cpp_demangle::Symbol::new(plain)
                .unwrap()
                .demangle()
                .unwrap();
            assert_eq!(read, ty);
            assert_eq!(demangle(plain), plain);
        }
        for plain in ["main", "Ss", "v", "_start", "R", "ZN3foo3barEi"] {
            assert_eq!(demangle(plain), plain);
        }
        // The Itanium C++ ABI's own examples; Rust's are in the test above (its names
        // are mangled).
        assert_eq!(demangle("_ZN3foo3barEi"), "foo::bar(int)");
        assert_eq!(demangle("_Z1wv"), "w()");
    }
}
