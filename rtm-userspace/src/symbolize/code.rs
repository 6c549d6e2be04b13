//! Code addresses (call sites) to `function+0xOFF (file:line)` with blazesym, from the
//! file each address lies in; `file+0xOFF` when the file has no symbols.

use std::{collections::HashMap, path::Path};

use blazesym::symbolize::{Input, Symbolized, Symbolizer, source::Elf, source::Source};

use super::ObjectNamer;

/// Names code addresses of traced processes, caching by (pid, address).
pub struct CodeNamer {
    symbolizer: Symbolizer,
    cache: HashMap<(u32, u64), Option<String>>,
}

impl Default for CodeNamer {
    fn default() -> Self {
        Self {
            symbolizer: Symbolizer::new(),
            cache: HashMap::new(),
        }
    }
}

fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.display().to_string())
}

impl CodeNamer {
    /// `function+0xOFF (file:line)` for `addr` in `pid`, or `file+0xOFF` without symbols;
    /// `None` when no mapped file covers it.
    pub fn name(&mut self, objects: &mut ObjectNamer, pid: u32, addr: u64) -> Option<String> {
        if let Some(hit) = self.cache.get(&(pid, addr)) {
            return hit.clone();
        }
        let named = objects
            .locate(pid, addr)
            .map(|(path, vaddr)| self.symbolize(&path, vaddr));
        self.cache.insert((pid, addr), named.clone());
        named
    }

    fn symbolize(&self, path: &Path, vaddr: u64) -> String {
        let src = Source::Elf(Elf::new(path));
        let fallback = || format!("{}+{vaddr:#x}", file_name(path));
        let Ok(mut syms) = self.symbolizer.symbolize(&src, Input::VirtOffset(&[vaddr])) else {
            return fallback();
        };
        match syms.pop() {
            Some(Symbolized::Sym(sym)) => {
                let mut s = format!("{}+{:#x}", sym.name, sym.offset);
                if let Some(ci) = &sym.code_info {
                    s.push_str(&format!(" ({}", ci.file.to_string_lossy()));
                    if let Some(line) = ci.line {
                        s.push_str(&format!(":{line}"));
                    }
                    s.push(')');
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
}
