//! Names for synchronization objects that are global or static variables, from the
//! symbol tables of the files mapped where they live.

use std::{collections::HashMap, path::PathBuf, rc::Rc};

use crate::target::{
    Module,
    elf::ElfSymbols,
    process::{self},
};

/// Names addresses by data symbol. Remembers each process's maps (taken while it was
/// alive) and each file's symbols, so names still resolve after a process exits.
#[derive(Default)]
pub struct ObjectNamer {
    maps: HashMap<u32, Vec<Module>>,
    files: HashMap<(String, u64), Option<Rc<ElfSymbols>>>,
}

impl ObjectNamer {
    /// Takes (or refreshes) a snapshot of `pid`'s mappings.
    pub fn remember(&mut self, pid: u32) {
        match process::modules(pid) {
            Ok(m) => {
                self.maps.insert(pid, m);
            }
            Err(e) => log::debug!("maps of {pid}: {e}"),
        }
    }

    /// The symbol naming `addr` in `pid`, if it is inside a global or static variable.
    pub fn name(&mut self, pid: u32, addr: u64) -> Option<String> {
        let (_, elf, vaddr) = self.resolve(pid, addr)?;
        if !elf.contains(vaddr) {
            return None;
        }
        elf.data_symbol(vaddr)
    }

    /// The module covering `addr` in `pid`, its symbols, and the address's virtual
    /// address inside the file.
    fn resolve(&mut self, pid: u32, addr: u64) -> Option<(Module, Rc<ElfSymbols>, u64)> {
        if !self.maps.contains_key(&pid) {
            self.remember(pid);
        }
        let module = self
            .maps
            .get(&pid)?
            .iter()
            .find(|m| addr >= m.start && addr < m.end)?
            .clone();
        let base = module.base?;
        let elf = self.symbols(pid, &module)?;
        let vaddr = elf.vaddr_of(addr, base);
        Some((module, elf, vaddr))
    }

    /// The file mapped at `addr` in `pid` (a path the tracer can open) and the address's
    /// virtual address inside that file, from the remembered maps.
    pub fn locate(&mut self, pid: u32, addr: u64) -> Option<(PathBuf, u64)> {
        let (module, _, vaddr) = self.resolve(pid, addr)?;
        let host = process::host_path(pid, &module.path);
        let path = if host.exists() { host } else { module.path };
        Some((path, vaddr))
    }

    fn symbols(&mut self, pid: u32, m: &Module) -> Option<Rc<ElfSymbols>> {
        self.files
            .entry((m.dev.clone(), m.inode))
            .or_insert_with(|| {
                // Through the process's root first (containers), else the same path here.
                let candidates: [PathBuf; 2] = [process::host_path(pid, &m.path), m.path.clone()];
                candidates
                    .iter()
                    .find_map(|p| ElfSymbols::open(p).ok())
                    .map(Rc::new)
            })
            .clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A static in this test binary is named through the same path a traced process's is.
    static NAMED_STATIC_FOR_TEST: [u64; 4] = [1, 2, 3, 4];

    #[test]
    fn names_a_static_of_this_process() {
        let mut namer = ObjectNamer::default();
        let addr = std::ptr::addr_of!(NAMED_STATIC_FOR_TEST) as u64;
        let name = namer.name(std::process::id(), addr).expect("named");
        assert!(name.contains("NAMED_STATIC_FOR_TEST"), "{name}");
        let inner = namer.name(std::process::id(), addr + 16).expect("named");
        assert!(inner.ends_with("+0x10"), "{inner}");
        assert_eq!(namer.name(std::process::id(), 8), None);
    }
}
