//! Names for synchronization objects that are global or static variables, from the
//! symbol tables of the files mapped where they live.

use std::{
    collections::{HashMap, HashSet, VecDeque},
    rc::Rc,
};

use crate::target::{
    Module,
    elf::ElfSymbols,
    files::MappedFile,
    maps::{AddressSpace, Mapping},
    process::{self},
};

/// Names addresses by data symbol. Keeps each process's address space (from /proc while
/// it is alive, and from the kernel's mapping records, which outlive it) and each file's
/// symbols, so names still resolve after a process exits. A forked child shares its
/// parent's address space until either changes: a program that forks thousands of
/// short children keeps one copy, not one each.
#[derive(Default)]
pub struct ObjectNamer {
    spaces: HashMap<u32, Rc<AddressSpace>>,
    files: HashMap<(String, u64), Option<Rc<ElfSymbols>>>,
    /// Processes whose maps were re-read because an address was outside them (once
    /// each: a library loaded after the last snapshot).
    refreshed: HashSet<u32>,
    /// Processes that exited, oldest first: their address spaces are kept for naming,
    /// at most [`MAX_EXITED_SPACES`] of them.
    exited: VecDeque<u32>,
}

/// Most address spaces kept for processes that have exited. A program that forks
/// children all day would otherwise grow the tracer by a copy of each child's maps;
/// objects of the processes forgotten show as addresses.
pub const MAX_EXITED_SPACES: usize = 1024;

impl ObjectNamer {
    /// Takes (or refreshes) a snapshot of `pid`'s mappings; keeps what is known when
    /// the process is gone.
    pub fn remember(&mut self, pid: u32) {
        match process::mappings(pid) {
            // An exiting process (a zombie) reads as empty: keep what the records say.
            Ok(m) if m.is_empty() => log::debug!("maps of {pid}: empty, the process is exiting"),
            Ok(m) => {
                let space = self.spaces.entry(pid).or_default();
                if !space.holds(&m) {
                    Rc::make_mut(space).replace(m);
                }
            }
            Err(e) => log::debug!("maps of {pid}: {e}"),
        }
    }

    /// The kernel reported a new mapping in `pid`.
    pub fn mapped(&mut self, pid: u32, m: Mapping) {
        Rc::make_mut(self.spaces.entry(pid).or_default()).map(m);
    }

    /// `pid` runs a new program: its old mappings are gone.
    pub fn exec(&mut self, pid: u32) {
        self.spaces.insert(pid, Rc::default());
        self.refreshed.remove(&pid);
    }

    /// `child` was forked from `parent` and starts with a copy of its mappings.
    pub fn forked(&mut self, parent: u32, child: u32) {
        let copy = self.spaces.get(&parent).cloned().unwrap_or_default();
        self.spaces.insert(child, copy);
        self.refreshed.remove(&child);
    }

    /// `pid` exited: its address space is kept for naming its objects, until
    /// [`MAX_EXITED_SPACES`] newer ones push it out.
    pub fn exited(&mut self, pid: u32) {
        if !self.spaces.contains_key(&pid) {
            return;
        }
        self.exited.push_back(pid);
        while self.exited.len() > MAX_EXITED_SPACES {
            if let Some(old) = self.exited.pop_front() {
                self.spaces.remove(&old);
                self.refreshed.remove(&old);
            }
        }
    }

    /// Mapping records not kept because a process's table was full.
    pub fn dropped_mappings(&self) -> u64 {
        self.spaces.values().map(|s| s.dropped).sum()
    }

    /// The symbol naming `addr` in `pid`, if it is inside a global or static variable.
    /// A condition variable's futex word is named as the condition variable.
    pub fn name(&mut self, pid: u32, addr: u64) -> Option<String> {
        let (_, elf, vaddr) = self.resolve(pid, addr)?;
        if !elf.contains(vaddr) {
            return None;
        }
        let (name, off, size) = elf.data_symbol_parts(vaddr)?;
        // glibc's condition variable has two groups of waiters, each waiting on its own
        // word: both are the condition variable.
        let group = (off % 48 == 44) as u8;
        Some(match condvar_of(off, size) {
            Some(None) => format!("{name} (condvar, group {group})"),
            Some(Some(i)) => format!("{name}[{i}] (condvar, group {group})"),
            None if off == 0 => name.to_owned(),
            None => format!("{name}+{off:#x}"),
        })
    }

    /// The module covering `addr` in `pid`, its symbols, and the address's virtual
    /// address inside the file.
    fn resolve(&mut self, pid: u32, addr: u64) -> Option<(Module, Rc<ElfSymbols>, u64)> {
        if self.spaces.get(&pid).is_none_or(|s| s.is_empty()) {
            self.remember(pid);
        }
        let covering = |spaces: &HashMap<u32, Rc<AddressSpace>>| {
            spaces
                .get(&pid)?
                .modules()
                .iter()
                .find(|m| addr >= m.start && addr < m.end)
                .cloned()
        };
        let module = match covering(&self.spaces) {
            Some(m) => m,
            None if self.refreshed.insert(pid) => {
                self.remember(pid);
                covering(&self.spaces)?
            }
            None => return None,
        };
        let base = module.base?;
        let elf = self.symbols(pid, &module)?;
        let vaddr = elf.vaddr_of(addr, base);
        Some((module, elf, vaddr))
    }

    /// The file mapped at `addr` in `pid` (how to open it as the process runs it) and
    /// the address's virtual address inside that file, from the remembered maps.
    pub fn locate(&mut self, pid: u32, addr: u64) -> Option<(MappedFile, u64)> {
        let (module, _, vaddr) = self.resolve(pid, addr)?;
        Some((module.mapped_file(pid), vaddr))
    }

    fn symbols(&mut self, pid: u32, m: &Module) -> Option<Rc<ElfSymbols>> {
        self.files
            .entry((m.dev.clone(), m.inode))
            .or_insert_with(|| {
                // The running image (through the mapping), else the path through the
                // process's root or here, if it still names the same inode.
                match ElfSymbols::open_mapped(&m.mapped_file(pid)) {
                    Ok((symbols, _, _)) => Some(Rc::new(symbols)),
                    Err(e) => {
                        log::debug!("symbols of {}: {e}", m.path.display());
                        None
                    }
                }
            })
            .clone()
    }
}

/// glibc's pthread_cond_t (48 bytes) is waited on at its `__g_signals` words, 40 and 44
/// bytes in: a futex word there in a variable made of condition variables is that
/// condition variable (Some(None) for a single one, Some(Some(i)) for element i of an
/// array). An array of mutexes (40 bytes each, waited on at their start) whose size is
/// also a multiple of 48 keeps its element offsets as they are.
fn condvar_of(off: u64, size: u64) -> Option<Option<u64>> {
    const COND: u64 = 48;
    const MUTEX: u64 = 40;
    if size == 0 || size % COND != 0 || !matches!(off % COND, 40 | 44) {
        return None;
    }
    if size % MUTEX == 0 && off % MUTEX == 0 {
        return None;
    }
    Some((size > COND).then_some(off / COND))
}

#[cfg(test)]
mod tests {
    #[test]
    fn condition_variables_are_named_at_their_futex_words() {
        use super::condvar_of;
        assert_eq!(condvar_of(40, 48), Some(None));
        assert_eq!(condvar_of(44, 48), Some(None));
        assert_eq!(condvar_of(0, 48), None);
        assert_eq!(condvar_of(88, 96), Some(Some(1)));
        // A mutex at 40 in an array of six (240 bytes): a mutex, not a condvar.
        assert_eq!(condvar_of(40, 240), None);
        assert_eq!(condvar_of(0x28, 40 * 16), None);
    }

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

    #[test]
    fn exited_processes_keep_a_bounded_number_of_spaces() {
        let mut namer = ObjectNamer::default();
        let me = std::process::id();
        namer.remember(me);
        // Children forked from this process share its space; each exits.
        let n = MAX_EXITED_SPACES as u32 + 10;
        for child in 1..=n {
            namer.forked(me, child);
            namer.exited(child);
        }
        assert_eq!(namer.spaces.len(), MAX_EXITED_SPACES + 1);
        assert!(!namer.spaces.contains_key(&1) && namer.spaces.contains_key(&n));
        // A forked child shares its parent's maps until either changes.
        assert!(Rc::ptr_eq(&namer.spaces[&me], &namer.spaces[&n]));
    }
}
