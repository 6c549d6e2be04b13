//! Names for synchronization objects that are global or static variables, from the
//! symbol tables of the files mapped where they live.

use std::{
    collections::{HashMap, HashSet, VecDeque},
    path::PathBuf,
    rc::Rc,
};

use rtm_common::Primitive;

use crate::proc::{
    Module,
    address_space::{AddressSpace, Mapping},
    elf::ElfSymbols,
    mapped::{self, MappedFile},
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
    /// Each process's root directory, held open (see [`ObjectNamer::keep_root`]).
    roots: HashMap<u32, Rc<mapped::ProcRoot>>,
    /// The same, by mount namespace and the identities of its / and /usr/lib/debug.
    root_of_ns: HashMap<RootKey, Rc<mapped::ProcRoot>>,
    /// The debug files found for stripped files, open, by (device, inode) of the file.
    debug_files: HashMap<(String, u64), Rc<std::fs::File>>,
    /// Stripped files without debug symbols, by (device, inode).
    stripped: HashSet<(String, u64)>,
    /// Those of them in which a name was wanted, each with what to tell the user (once).
    missing: std::collections::BTreeMap<PathBuf, String>,
    /// Files held open (see [`ObjectNamer::prepare`]), by (device, inode).
    kept: HashMap<(String, u64), Rc<std::fs::File>>,
}

/// Most files held open by [`ObjectNamer::prepare`].
const MAX_KEPT: usize = 512;

/// A mount namespace ("mnt:[N]") and the (device, inode) of its / and /usr/lib/debug.
type RootKey = (PathBuf, (u64, u64), (u64, u64));

/// Most stripped files remembered for the hint.
const MAX_MISSING: usize = 64;

/// A code address located in the file mapped there.
#[derive(Debug)]
pub struct Located {
    /// The file the process maps there.
    pub file: MappedFile,
    /// The address's virtual address in that file.
    pub vaddr: u64,
    /// A file to read its symbols from, open: its separate debug file when it is
    /// stripped and one was found, else the file itself when held open
    /// ([`ObjectNamer::prepare`]).
    pub debug: Option<Rc<std::fs::File>>,
    /// The file is stripped and no debug file was found.
    pub stripped: bool,
}

/// Most address spaces kept for processes that have exited. A program that forks
/// children all day would otherwise grow the tracer by a copy of each child's maps;
/// objects of the processes forgotten show as addresses.
pub const MAX_EXITED_SPACES: usize = 1024;

/// What was read of a live process's address space and root directory, on any thread
/// (see [`ObjectNamer::learn`]).
#[derive(Debug)]
pub struct SpaceRead {
    pid: u32,
    /// When the maps were read (CLOCK_MONOTONIC ns, the mapping records' clock).
    at_ns: u64,
    mappings: Result<Vec<Mapping>, String>,
    /// Its mount namespace and what its / and /usr/lib/debug are, and its root open.
    root: Option<(Option<RootKey>, mapped::ProcRoot)>,
}

impl SpaceRead {
    /// Reads `pid`'s mappings and opens its root directory: the /proc reads of
    /// [`ObjectNamer::remember`], done apart from the namer (a worker thread does them
    /// off the event path).
    pub fn read(pid: u32) -> Self {
        let at_ns = process::monotonic_ns();
        let mappings = process::mappings(pid).map_err(|e| e.to_string());
        let root = match &mappings {
            Ok(m) if !m.is_empty() => {
                // What the process sees now: its mount namespace ("mnt:[N]") and which
                // file systems its / and /usr/lib/debug are (something may be mounted
                // there since).
                let dir = process::proc_dir(pid);
                let id = |p: std::path::PathBuf| {
                    std::fs::metadata(p).map_or((0, 0), |m| {
                        use std::os::unix::fs::MetadataExt as _;
                        (m.dev(), m.ino())
                    })
                };
                let key = std::fs::read_link(dir.join("ns/mnt"))
                    .ok()
                    .map(|ns| (ns, id(dir.join("root")), id(dir.join("root/usr/lib/debug"))));
                mapped::open_root(pid).ok().map(|fd| (key, fd))
            }
            _ => None,
        };
        Self {
            pid,
            at_ns,
            mappings,
            root,
        }
    }

    /// The process read.
    pub fn pid(&self) -> u32 {
        self.pid
    }
}

impl ObjectNamer {
    /// Takes (or refreshes) a snapshot of `pid`'s mappings; keeps what is known when
    /// the process is gone.
    pub fn remember(&mut self, pid: u32) {
        self.learn(SpaceRead::read(pid));
    }

    /// Takes in what `SpaceRead::read` found.
    pub fn learn(&mut self, read: SpaceRead) {
        let pid = read.pid;
        match read.mappings {
            // An exiting process (a zombie) reads as empty: keep what the records say.
            Ok(m) if m.is_empty() => log::debug!("maps of {pid}: empty, the process is exiting"),
            Ok(m) => {
                let space = self.spaces.entry(pid).or_default();
                if !space.holds(&m) && !Rc::make_mut(space).replace_read(m, read.at_ns) {
                    log::debug!("maps of {pid}: read before its exec, not taken");
                    return;
                }
                if let Some((key, fd)) = read.root {
                    self.keep_root(pid, key, fd);
                }
            }
            Err(e) => log::debug!("maps of {pid}: {e}"),
        }
    }

    /// Holds `pid`'s root directory open: a stripped file's debug file may be only in
    /// its mount namespace, looked up when a name is wanted, perhaps after it exited.
    /// Processes of one mount namespace share one descriptor.
    fn keep_root(&mut self, pid: u32, key: Option<RootKey>, fd: mapped::ProcRoot) {
        if self.roots.contains_key(&pid) {
            return;
        }
        if let Some(shared) = key.as_ref().and_then(|k| self.root_of_ns.get(k)) {
            let shared = shared.clone();
            self.roots.insert(pid, shared);
            return;
        }
        let fd = Rc::new(fd);
        if let Some(k) = key {
            // Bounded: namespaces no remembered process uses any more are let go.
            if self.root_of_ns.len() >= 256 {
                self.root_of_ns.retain(|_, r| Rc::strong_count(r) > 1);
            }
            self.root_of_ns.insert(k, fd.clone());
        }
        self.roots.insert(pid, fd);
    }

    /// The files `pid` maps, as far as known (from /proc or the kernel's records).
    pub fn modules(&self, pid: u32) -> Vec<Module> {
        self.spaces
            .get(&pid)
            .map(|s| s.modules().to_vec())
            .unwrap_or_default()
    }

    /// Which state of `pid`'s known mappings this is (another value after any change;
    /// 0: none known).
    pub fn space_version(&self, pid: u32) -> u64 {
        self.spaces.get(&pid).map_or(0, |s| s.version())
    }

    /// How many files `pid` is known to map (0: its mappings are not known).
    pub fn module_count(&self, pid: u32) -> usize {
        self.spaces.get(&pid).map_or(0, |s| s.modules().len())
    }

    /// The kernel reported a new mapping in `pid`, made at `at_ns` (CLOCK_MONOTONIC).
    pub fn mapped(&mut self, pid: u32, at_ns: u64, m: Mapping) {
        Rc::make_mut(self.spaces.entry(pid).or_default()).map_at(at_ns, m);
    }

    /// `pid` runs a new program since `at_ns`: its old mappings are gone.
    pub fn exec(&mut self, pid: u32, at_ns: u64) {
        let mut space = AddressSpace::default();
        space.exec_at(at_ns);
        self.spaces.insert(pid, Rc::new(space));
        // A new program may run in another mount namespace (unshare -m, then exec).
        self.roots.remove(&pid);
        self.refreshed.remove(&pid);
    }

    /// `child` was forked from `parent` and starts with a copy of its mappings.
    pub fn forked(&mut self, parent: u32, child: u32) {
        let copy = self.spaces.get(&parent).cloned().unwrap_or_default();
        self.spaces.insert(child, copy);
        self.refreshed.remove(&child);
    }

    /// `pid` exited: its address space is kept for naming its objects, until
    /// `MAX_EXITED_SPACES` newer ones push it out.
    pub fn exited(&mut self, pid: u32) {
        if !self.spaces.contains_key(&pid) {
            return;
        }
        self.exited.push_back(pid);
        while self.exited.len() > MAX_EXITED_SPACES {
            if let Some(old) = self.exited.pop_front() {
                self.spaces.remove(&old);
                self.roots.remove(&old);
                self.refreshed.remove(&old);
            }
        }
    }

    /// Forgets the processes `pids` at once (a daemon that has dropped their objects).
    pub fn forget(&mut self, pids: &HashSet<u32>) {
        self.spaces.retain(|p, _| !pids.contains(p));
        self.roots.retain(|p, _| !pids.contains(p));
        self.refreshed.retain(|p| !pids.contains(p));
        self.exited.retain(|p| !pids.contains(p));
    }

    /// Mapping records not kept because a process's table was full.
    pub fn dropped_mappings(&self) -> u64 {
        self.spaces.values().map(|s| s.dropped).sum()
    }

    /// The symbol naming the object of kind `kind` at `addr` in `pid`, if it is inside a
    /// global or static variable (see `variable_name`).
    pub fn name(&mut self, pid: u32, addr: u64, kind: Primitive) -> Option<String> {
        let found = self.resolve(pid, addr, true)?;
        self.name_in(found, kind)
    }

    /// [`ObjectNamer::name`] from what is already known of `pid`'s mappings: never reads
    /// /proc (for the event path; the naming worker keeps the mappings current).
    pub fn name_known(&mut self, pid: u32, addr: u64, kind: Primitive) -> Option<String> {
        let found = self.resolve(pid, addr, false)?;
        self.name_in(found, kind)
    }

    fn name_in(&mut self, found: (Module, Rc<ElfSymbols>, u64), kind: Primitive) -> Option<String> {
        let (module, elf, vaddr) = found;
        if !elf.contains(vaddr) {
            return None;
        }
        let Some((name, off, size)) = elf.data_symbol_parts(vaddr) else {
            if self.stripped.contains(&(module.dev.clone(), module.inode)) {
                self.note_missing(&module.path);
            }
            return None;
        };
        Some(variable_name(name, off, size, kind, elf.is_go()))
    }

    /// The module covering `addr` in `pid`, its symbols, and the address's virtual
    /// address inside the file.
    /// `read_proc`: read the process's maps when they are not known or do not cover it.
    fn resolve(
        &mut self,
        pid: u32,
        addr: u64,
        read_proc: bool,
    ) -> Option<(Module, Rc<ElfSymbols>, u64)> {
        if self.spaces.get(&pid).is_none_or(|s| s.is_empty()) {
            if !read_proc {
                return None;
            }
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
            None if read_proc && self.refreshed.insert(pid) => {
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
    pub fn locate(&mut self, pid: u32, addr: u64) -> Option<Located> {
        let (module, _, vaddr) = self.resolve(pid, addr, true)?;
        let key = (module.dev.clone(), module.inode);
        let stripped = self.stripped.contains(&key);
        Some(Located {
            stripped,
            debug: self
                .debug_files
                .get(&key)
                .or_else(|| self.kept.get(&key).filter(|_| !stripped))
                .cloned(),
            file: module.mapped_file(pid),
            vaddr,
        })
    }

    /// Holds the file `m` of `pid` open while the process is alive: its code and
    /// variables can then be named after it exits, even when its file is reachable only
    /// through its mappings (another mount namespace, a file deleted or replaced since).
    pub fn prepare(&mut self, pid: u32, m: &Module) {
        // Only held open here (cheap, on the event path); its symbols are read when a
        // name is wanted, from this descriptor if the process is gone by then.
        let key = (m.dev.clone(), m.inode);
        if self.kept.len() >= MAX_KEPT || self.kept.contains_key(&key) {
            return;
        }
        match m
            .mapped_file(pid)
            .open(crate::proc::files::MAX_OBJECT_BYTES)
        {
            Ok((f, _)) => {
                self.kept.insert(key, Rc::new(f));
            }
            Err(e) => log::debug!("{}: {e}", m.path.display()),
        }
    }

    /// A name was wanted in `path`, a stripped file without debug symbols: the user is
    /// told what to install.
    pub fn note_missing(&mut self, path: &std::path::Path) {
        if self.missing.len() < MAX_MISSING {
            self.missing
                .entry(path.to_path_buf())
                .or_insert_with(|| super::debuginfo::hint(path));
        }
    }

    /// What to tell the user about stripped files without debug symbols (each once).
    pub fn take_missing_symbols(&mut self) -> Vec<String> {
        let mut out = Vec::new();
        for hint in self.missing.values_mut() {
            if !hint.is_empty() {
                out.push(std::mem::take(hint));
            }
        }
        out
    }

    /// `function+0xOFF` for a code address of a stripped Go program, from the
    /// program's own function table; None elsewhere.
    pub fn go_function(&mut self, pid: u32, addr: u64) -> Option<String> {
        let (_, elf, vaddr) = self.resolve(pid, addr, true)?;
        let (name, off) = elf.go_function(vaddr)?;
        Some(format!("{name}+{off:#x}"))
    }

    /// Whether process `pid` runs a Go program: its executable (the lowest mapped
    /// file with code) is one, from its remembered maps (a process that exited is
    /// known while its space is kept).
    pub fn runs_go(&mut self, pid: u32) -> bool {
        let Some(exe) = self.spaces.get(&pid).and_then(|s| {
            s.modules()
                .iter()
                .filter(|m| m.executable)
                .min_by_key(|m| m.start)
                .cloned()
        }) else {
            return false;
        };
        self.symbols(pid, &exe).is_some_and(|e| e.is_go())
    }

    /// The stripped files without debug symbols met so far, with the hint.
    pub fn missing_symbols(&self) -> Vec<String> {
        self.missing
            .keys()
            .map(|p| super::debuginfo::hint(p))
            .collect()
    }

    fn symbols(&mut self, pid: u32, m: &Module) -> Option<Rc<ElfSymbols>> {
        let key = (m.dev.clone(), m.inode);
        if let Some(s) = self.files.get(&key) {
            return s.clone();
        }
        // The running image (through the mapping), else the path through the process's
        // root or here, if it still names the same inode; else the file held open while
        // the process lived.
        let opened = ElfSymbols::open_mapped(&m.mapped_file(pid))
            .or_else(|e| self.kept.get(&key).and_then(|f| kept_symbols(f)).ok_or(e));
        let symbols = match opened {
            Ok((mut symbols, _, _)) => {
                if !symbols.has_symtab() {
                    let root = self.roots.get(&pid).cloned();
                    match super::debuginfo::find(root.as_deref(), &m.path, &symbols) {
                        Some(d) => {
                            log::debug!(
                                "symbols of {} from {}",
                                m.path.display(),
                                d.path.display()
                            );
                            symbols.add_debug_symbols(d.symbols);
                            self.debug_files.insert(key.clone(), Rc::new(d.file));
                        }
                        None => {
                            self.stripped.insert(key.clone());
                        }
                    }
                }
                Some(Rc::new(symbols))
            }
            Err(e) => {
                log::debug!("symbols of {}: {e}", m.path.display());
                None
            }
        };
        self.files.insert(key, symbols.clone());
        symbols
    }
}

/// The symbols of a file held open (read from its start, whatever its offset).
fn kept_symbols(f: &std::fs::File) -> Option<(ElfSymbols, Vec<u8>, PathBuf)> {
    use std::os::unix::fs::FileExt as _;
    let len = usize::try_from(f.metadata().ok()?.len()).ok()?;
    let mut bytes = vec![0u8; len];
    f.read_exact_at(&mut bytes, 0).ok()?;
    let symbols = ElfSymbols::parse(&bytes).ok()?;
    Some((symbols, bytes, PathBuf::new()))
}

/// The size of one `kind` object as glibc lays it out on x86-64 and aarch64 (a futex
/// word's is taken as a mutex's: the common case, and the one a word at an element's
/// start has).
fn element_size(kind: Primitive) -> Option<u64> {
    Some(match kind {
        Primitive::Mutex | Primitive::Futex => 40,
        Primitive::RwLock => 56,
        Primitive::Cond => 48,
        Primitive::Barrier | Primitive::Sem => 32,
        Primitive::Spin => 4,
        Primitive::Thread => return None,
    })
}

/// The largest glibc synchronization object (pthread_rwlock_t): a variable no larger
/// holds one object, named by its symbol alone.
const LARGEST_OBJECT: u64 = 56;

/// The name of a `kind` object `off` bytes into the variable `name` of `size` bytes. A
/// condition variable's futex word is named as the condition variable, an element of an
/// array of such objects by its index (`locks[3]`, element 0 too); elsewhere inside a
/// larger variable by its offset (`state+0x28`, `state+0x0` at its start: one style for
/// every element); a variable that is one object by its symbol.
fn variable_name(name: &str, off: u64, size: u64, kind: Primitive, go: bool) -> String {
    // A Go program's variables are its runtime's: none is a glibc condition variable or
    // an array of glibc mutexes, however their sizes fall.
    if go {
        return if off == 0 && size <= LARGEST_OBJECT {
            name.to_owned()
        } else {
            format!("{name}+{off:#x}")
        };
    }
    // glibc's condition variable has two groups of waiters, each waiting on its own
    // word: both are the condition variable.
    let group = (off % 48 == 44) as u8;
    match condvar_of(off, size) {
        Some(None) => return format!("{name} (condvar, group {group})"),
        Some(Some(i)) => return format!("{name}[{i}] (condvar, group {group})"),
        None => {}
    }
    if let Some(e) = element_size(kind)
        && size > e
        && size.is_multiple_of(e)
        && off.is_multiple_of(e)
    {
        return format!("{name}[{}]", off / e);
    }
    if off == 0 && size <= LARGEST_OBJECT {
        name.to_owned()
    } else {
        format!("{name}+{off:#x}")
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
    if size == 0 || !size.is_multiple_of(COND) || !matches!(off % COND, 40 | 44) {
        return None;
    }
    if size.is_multiple_of(MUTEX) && off.is_multiple_of(MUTEX) {
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

    #[test]
    fn every_element_of_an_array_is_named_one_way() {
        use super::variable_name;
        // Sixteen glibc mutexes (40 bytes each): element 0 as the others.
        let names: Vec<String> = (0..16)
            .map(|i| variable_name("private_locks", i * 40, 640, Primitive::Mutex, false))
            .collect();
        assert_eq!(names[0], "private_locks[0]");
        assert_eq!(names[3], "private_locks[3]");
        // A futex word at an element's start is taken as a mutex's.
        assert_eq!(
            variable_name("account_locks", 400, 640, Primitive::Futex, false),
            "account_locks[10]"
        );
        assert_eq!(
            variable_name("rw", 112, 56 * 4, Primitive::RwLock, false),
            "rw[2]"
        );
        // One object is its symbol.
        assert_eq!(
            variable_name("queue_lock", 0, 40, Primitive::Futex, false),
            "queue_lock"
        );
        assert_eq!(variable_name("flag", 0, 4, Primitive::Futex, false), "flag");
        // Elements of unknown size: offsets, the first one's too.
        assert_eq!(
            variable_name("slots", 0, 128, Primitive::Futex, false),
            "slots+0x0"
        );
        assert_eq!(
            variable_name("slots", 16, 128, Primitive::Futex, false),
            "slots+0x10"
        );
        // A condition variable's words.
        assert_eq!(
            variable_name("cvs", 88, 96, Primitive::Futex, false),
            "cvs[1] (condvar, group 0)"
        );
        assert_eq!(
            variable_name("cv", 44, 48, Primitive::Futex, false),
            "cv (condvar, group 1)"
        );
        // A Go program's runtime variable where a condition variable's words would be.
        assert_eq!(
            variable_name("runtime.m0", 328, 1152, Primitive::Futex, true),
            "runtime.m0+0x148"
        );
        assert_eq!(
            variable_name("runtime.m0", 328, 1152, Primitive::Futex, false),
            "runtime.m0[6] (condvar, group 0)"
        );
    }

    use super::*;

    /// A static in this test binary is named through the same path a traced process's is.
    static NAMED_STATIC_FOR_TEST: [u64; 4] = [1, 2, 3, 4];

    #[test]
    fn names_a_static_of_this_process() {
        let mut namer = ObjectNamer::default();
        let addr = std::ptr::addr_of!(NAMED_STATIC_FOR_TEST) as u64;
        let me = std::process::id();
        let name = namer.name(me, addr, Primitive::Futex).expect("named");
        assert!(name.contains("NAMED_STATIC_FOR_TEST"), "{name}");
        let inner = namer.name(me, addr + 16, Primitive::Futex).expect("named");
        assert!(inner.ends_with("+0x10"), "{inner}");
        assert_eq!(namer.name(me, 8, Primitive::Futex), None);
    }

    #[test]
    fn exited_processes_keep_a_bounded_number_of_spaces() {
        let mut namer = ObjectNamer::default();
        let me = std::process::id();
        namer.remember(me);
        // Children forked from this process share its space; each exits. (Their ids
        // skip this process's own: a test run can have a small pid.)
        let children: Vec<u32> = (1..)
            .filter(|&c| c != me)
            .take(MAX_EXITED_SPACES + 10)
            .collect();
        for &child in &children {
            namer.forked(me, child);
            namer.exited(child);
        }
        let (first, last) = (children[0], children[children.len() - 1]);
        assert_eq!(namer.spaces.len(), MAX_EXITED_SPACES + 1);
        assert!(!namer.spaces.contains_key(&first) && namer.spaces.contains_key(&last));
        // A forked child shares its parent's maps until either changes.
        assert!(Rc::ptr_eq(&namer.spaces[&me], &namer.spaces[&last]));
    }
}
