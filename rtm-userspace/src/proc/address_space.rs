//! Address spaces: the mappings of a process, from /proc/PID/maps or from the kernel's
//! mapping records, and the files (modules) they add up to.

use std::{collections::BTreeMap, path::PathBuf};

/// One mapping, as a line of /proc/PID/maps or a perf MMAP2 record describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mapping {
    /// First address.
    pub start: u64,
    /// End address (exclusive).
    pub end: u64,
    /// File offset mapped at `start`.
    pub offset: u64,
    /// Device number as in maps ("fd:01").
    pub dev: String,
    /// Inode; 0 for anonymous memory.
    pub inode: u64,
    /// The path inside the process's mount namespace; empty for anonymous memory,
    /// `[heap]`-style names for the kernel's special mappings.
    pub path: String,
    /// Whether the mapping is executable.
    pub executable: bool,
}

impl Mapping {
    fn is_file(&self) -> bool {
        self.inode != 0 && self.path.starts_with('/')
    }
}

/// A file mapped into a process (all mappings of one (device, inode) merged).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Module {
    /// The path as /proc/PID/maps shows it (inside the process's mount namespace).
    pub path: PathBuf,
    /// Device number as in maps ("fd:01").
    pub dev: String,
    /// Inode.
    pub inode: u64,
    /// Lowest mapped address.
    pub start: u64,
    /// Highest mapped address (exclusive), including an anonymous mapping that directly
    /// follows the file's last mapping (its .bss).
    pub end: u64,
    /// Address where file offset 0 is mapped, when such a mapping exists.
    pub base: Option<u64>,
    /// Whether any mapping is executable.
    pub executable: bool,
    /// The first mapping of the file, `(start, end)`: how /proc/PID/map_files names it.
    pub range: Option<(u64, u64)>,
}

/// Parses /proc/PID/maps text into mappings (lines that do not parse are skipped).
pub fn parse_mappings(text: &str) -> Vec<Mapping> {
    text.lines().filter_map(parse_line).collect()
}

fn parse_line(line: &str) -> Option<Mapping> {
    let mut f = line.split_whitespace();
    let (range, perms, offset, dev, inode) =
        (f.next()?, f.next()?, f.next()?, f.next()?, f.next()?);
    let path: String = f.collect::<Vec<_>>().join(" ");
    let (s, e) = range.split_once('-')?;
    Some(Mapping {
        start: u64::from_str_radix(s, 16).ok()?,
        end: u64::from_str_radix(e, 16).ok()?,
        offset: u64::from_str_radix(offset, 16).ok()?,
        dev: dev.to_owned(),
        inode: inode.parse().ok()?,
        path: path.trim_end_matches(" (deleted)").to_owned(),
        executable: perms.contains('x'),
    })
}

/// Parses /proc/PID/maps text into modules.
#[cfg(test)]
fn parse_maps(text: &str) -> Vec<Module> {
    modules_of(&parse_mappings(text))
}

/// The files that `mappings` (in address order) map, each with its .bss.
pub fn modules_of<'a>(mappings: impl IntoIterator<Item = &'a Mapping>) -> Vec<Module> {
    let mut out: Vec<Module> = Vec::new();
    let mut last_file: Option<usize> = None;
    let mut prev_end = 0u64;
    for m in mappings {
        if !m.is_file() {
            // An anonymous mapping right after a file's mapping is that file's .bss.
            if m.path.is_empty()
                && m.start == prev_end
                && let Some(i) = last_file
            {
                out[i].end = out[i].end.max(m.end);
            }
            last_file = None;
            prev_end = m.end;
            continue;
        }
        let idx = match out
            .iter()
            .position(|o| o.inode == m.inode && o.dev == m.dev)
        {
            Some(i) => i,
            None => {
                out.push(Module {
                    path: PathBuf::from(&m.path),
                    dev: m.dev.clone(),
                    inode: m.inode,
                    start: m.start,
                    end: m.end,
                    base: None,
                    executable: false,
                    range: Some((m.start, m.end)),
                });
                out.len() - 1
            }
        };
        let o = &mut out[idx];
        o.start = o.start.min(m.start);
        o.end = o.end.max(m.end);
        if m.offset == 0 && o.base.is_none() {
            o.base = Some(m.start);
        }
        o.executable |= m.executable;
        last_file = Some(idx);
        prev_end = m.end;
    }
    out
}

/// Most mappings one address space keeps; beyond it new ones are counted, not kept.
pub const MAX_MAPPINGS: usize = 16_384;
/// Most mapping records kept to be applied again over a /proc snapshot read before
/// them (a dynamic loader's burst at a program's start is a few dozen).
const MAX_RECENT: usize = 64;

/// A process's mappings as they change: a snapshot of /proc replaces them, a mapping
/// record overlays them (what it covers is unmapped first, as the kernel does), an exec
/// empties them. Anonymous memory is kept only where it can be a file's .bss, so a
/// program that maps and unmaps heap memory all day does not grow the table.
///
/// Snapshots are read apart from the records (by a worker, later): one read before
/// records already applied must not undo them (a program's libraries mapped by its
/// loader after a read taken at its exec), and one read before an exec describes the
/// old program. Records and snapshots carry their times (CLOCK_MONOTONIC) for that.
#[derive(Debug, Clone, Default)]
pub struct AddressSpace {
    mappings: BTreeMap<u64, Mapping>,
    /// The latest mapping records, with their times, to apply again over an older
    /// snapshot (the oldest go first beyond [`MAX_RECENT`]).
    recent: std::collections::VecDeque<(u64, Mapping)>,
    /// When the current program was execed (0: not seen).
    exec_ns: u64,
    /// Changes with every change of the mappings kept (unique across all spaces), so
    /// what is built from them knows when to build again.
    version: u64,
    /// The modules, worked out on first use after a change (shared copies read them
    /// without a copy).
    modules: std::cell::OnceCell<Vec<Module>>,
    /// Mappings not kept because the table was full.
    pub dropped: u64,
}

impl AddressSpace {
    /// The mappings of a snapshot worth keeping: files, and anonymous memory right after
    /// a file's last mapping (its .bss). Thread stacks and heaps are not (a process with
    /// thousands of threads has thousands of them).
    fn kept(all: Vec<Mapping>) -> impl Iterator<Item = Mapping> {
        let mut prev_file_end = None;
        all.into_iter()
            .filter(move |m| {
                let keep = m.is_file() || (m.path.is_empty() && prev_file_end == Some(m.start));
                prev_file_end = m.is_file().then_some(m.end);
                keep
            })
            .take(MAX_MAPPINGS)
    }

    /// Replaces everything with a full snapshot.
    pub fn replace(&mut self, all: Vec<Mapping>) {
        self.mappings = Self::kept(all).map(|m| (m.start, m)).collect();
        self.changed();
    }

    fn changed(&mut self) {
        static VERSIONS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        self.modules = Default::default();
        self.version = VERSIONS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// Which state of the mappings this is: another value after any change (0 for a
    /// space never changed).
    pub fn version(&self) -> u64 {
        self.version
    }

    /// Replaces everything with a snapshot read at `read_ns`, then applies again the
    /// records made since (the snapshot may predate them). A snapshot read before the
    /// last exec is of the old program: ignored (returns false).
    pub fn replace_read(&mut self, all: Vec<Mapping>, read_ns: u64) -> bool {
        if read_ns < self.exec_ns {
            return false;
        }
        self.replace(all);
        // Records older than this snapshot are in it; later snapshots are later still.
        while self.recent.front().is_some_and(|&(t, _)| t < read_ns) {
            self.recent.pop_front();
        }
        let again: Vec<Mapping> = self.recent.iter().map(|(_, m)| m.clone()).collect();
        for m in again {
            self.map(m);
        }
        true
    }

    /// The program was replaced (exec).
    pub fn clear(&mut self) {
        self.mappings.clear();
        self.recent.clear();
        self.changed();
    }

    /// The program was replaced by an exec at `at_ns`.
    pub fn exec_at(&mut self, at_ns: u64) {
        self.clear();
        self.exec_ns = self.exec_ns.max(at_ns);
    }

    /// Applies one mapping record made at `at_ns`.
    pub fn map_at(&mut self, at_ns: u64, m: Mapping) {
        if self.recent.len() >= MAX_RECENT {
            self.recent.pop_front();
        }
        self.recent.push_back((at_ns, m.clone()));
        self.map(m);
    }

    /// Applies one new mapping.
    pub fn map(&mut self, m: Mapping) {
        if m.end <= m.start {
            return;
        }
        self.unmap(m.start, m.end);
        let keep = m.is_file()
            || (m.path.is_empty()
                && self
                    .mappings
                    .range(..m.start)
                    .next_back()
                    .is_some_and(|(_, p)| p.end == m.start && p.is_file()));
        if !keep {
            return;
        }
        if self.mappings.len() >= MAX_MAPPINGS {
            self.dropped += 1;
            return;
        }
        self.mappings.insert(m.start, m);
        self.changed();
    }

    /// Removes `[start, end)`, trimming mappings that straddle its edges.
    fn unmap(&mut self, start: u64, end: u64) {
        let hit: Vec<u64> = self
            .mappings
            .range(..end)
            .rev()
            .take_while(|(_, m)| m.end > start || m.start >= start)
            .filter(|(_, m)| m.end > start)
            .map(|(&s, _)| s)
            .collect();
        if !hit.is_empty() {
            self.changed();
        }
        for s in hit {
            let old = self.mappings.remove(&s).expect("present");
            if old.start < start {
                let mut left = old.clone();
                left.end = start;
                self.mappings.insert(left.start, left);
            }
            if old.end > end {
                let mut right = old;
                right.offset += if right.is_file() {
                    end - right.start
                } else {
                    0
                };
                right.start = end;
                self.mappings.insert(right.start, right);
            }
        }
    }

    /// The files mapped, each with its .bss.
    pub fn modules(&self) -> &[Module] {
        self.modules
            .get_or_init(|| modules_of(self.mappings.values()))
    }

    /// Whether a snapshot would change nothing (a forked child's, whose files are its
    /// parent's, keeps sharing the parent's copy).
    pub fn holds(&self, all: &[Mapping]) -> bool {
        let kept: Vec<Mapping> = Self::kept(all.to_vec()).collect();
        kept.len() == self.mappings.len()
            && kept.iter().zip(self.mappings.values()).all(|(a, b)| a == b)
    }

    /// Whether nothing is known.
    pub fn is_empty(&self) -> bool {
        self.mappings.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAPS: &str = "\
55d0c0000000-55d0c0001000 r--p 00000000 fd:01 1234 /usr/bin/app
55d0c0001000-55d0c0002000 r-xp 00001000 fd:01 1234 /usr/bin/app
55d0c0003000-55d0c0004000 rw-p 00002000 fd:01 1234 /usr/bin/app
55d0c0004000-55d0c0010000 rw-p 00000000 00:00 0 
55d0c1000000-55d0c1021000 rw-p 00000000 00:00 0 [heap]
7f0000000000-7f0000028000 r--p 00000000 fd:01 99 /usr/lib/x86_64-linux-gnu/libc.so.6
7f0000028000-7f000019d000 r-xp 00028000 fd:01 99 /usr/lib/x86_64-linux-gnu/libc.so.6
7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0 [stack]
";

    #[test]
    fn maps_merge_per_file_and_absorb_bss() {
        let m = parse_maps(MAPS);
        assert_eq!(m.len(), 2);
        assert_eq!(m[0].path, PathBuf::from("/usr/bin/app"));
        assert_eq!((m[0].start, m[0].end), (0x55d0c0000000, 0x55d0c0010000));
        assert_eq!(m[0].base, Some(0x55d0c0000000));
        assert!(m[0].executable);
        assert_eq!(m[1].inode, 99);
        assert_eq!(m[1].end, 0x7f000019d000);
    }

    fn file(start: u64, end: u64, offset: u64, inode: u64) -> Mapping {
        Mapping {
            start,
            end,
            offset,
            dev: "fd:01".into(),
            inode,
            path: format!("/lib/{inode}.so"),
            executable: false,
        }
    }

    fn anon(start: u64, end: u64) -> Mapping {
        Mapping {
            inode: 0,
            path: String::new(),
            dev: "00:00".into(),
            ..file(start, end, 0, 0)
        }
    }

    #[test]
    fn records_build_the_same_modules_as_the_snapshot() {
        let mut a = AddressSpace::default();
        for m in parse_mappings(MAPS) {
            a.map(m);
        }
        assert_eq!(a.modules(), parse_maps(MAPS).as_slice());
    }

    #[test]
    fn a_new_mapping_trims_what_it_covers() {
        let mut a = AddressSpace::default();
        // The loader reserves the whole library, then maps segments over it.
        a.map(file(0x1000, 0x9000, 0, 7));
        a.map(file(0x3000, 0x5000, 0x8000, 7));
        let parts: Vec<_> = a
            .mappings
            .values()
            .map(|m| (m.start, m.end, m.offset))
            .collect();
        assert_eq!(
            parts,
            [
                (0x1000, 0x3000, 0),
                (0x3000, 0x5000, 0x8000),
                (0x5000, 0x9000, 0x4000)
            ]
        );
        // Another library at the same place replaces it entirely.
        a.map(file(0x0, 0xa000, 0, 8));
        assert_eq!(a.modules().len(), 1);
        assert_eq!(a.modules()[0].inode, 8);
        a.clear();
        assert!(a.is_empty());
    }

    #[test]
    fn anonymous_memory_is_kept_only_as_a_files_bss() {
        let mut a = AddressSpace::default();
        a.map(file(0x1000, 0x2000, 0, 7));
        a.map(anon(0x2000, 0x4000));
        a.map(anon(0x10000, 0x20000));
        assert_eq!(a.mappings.len(), 2);
        assert_eq!(a.modules()[0].end, 0x4000);
    }

    /// The race behind a deadlock's thread once shown with no stack: the maps read at
    /// a program's exec (program and loader only) came back after the records of the
    /// libraries its loader mapped, and replaced them.
    #[test]
    fn a_snapshot_older_than_the_records_keeps_them() {
        let (program, loader, libc) = (
            file(0x1000, 0x2000, 0, 1),
            file(0x8000, 0x9000, 0, 2),
            file(0x4000, 0x6000, 0, 3),
        );
        let mut a = AddressSpace::default();
        a.exec_at(100);
        a.map_at(101, program.clone());
        a.map_at(102, loader.clone());
        // The worker reads /proc at 103; the loader maps libc at 110.
        a.map_at(110, libc.clone());
        assert!(a.replace_read(vec![program.clone(), loader.clone()], 103));
        let inodes: Vec<u64> = a.modules().iter().map(|m| m.inode).collect();
        assert_eq!(inodes, [1, 3, 2], "libc kept, in address order");
        // A read after the records stands as read (libc unmapped since: gone), and the
        // records it covers are let go.
        assert!(a.replace_read(vec![program.clone(), loader.clone()], 120));
        assert_eq!(a.modules().len(), 2);
        assert!(a.recent.is_empty());
        // A read from before an exec is of the old program: not taken.
        a.exec_at(200);
        a.map_at(201, libc.clone());
        assert!(!a.replace_read(vec![program, loader], 150));
        let inodes: Vec<u64> = a.modules().iter().map(|m| m.inode).collect();
        assert_eq!(inodes, [3]);
        // The records kept are bounded.
        for i in 0..(MAX_RECENT as u64 + 5) {
            a.map_at(
                300 + i,
                file(0x10000 + i * 0x1000, 0x11000 + i * 0x1000, 0, 10 + i),
            );
        }
        assert_eq!(a.recent.len(), MAX_RECENT);
    }

    #[test]
    fn the_table_is_bounded() {
        let mut a = AddressSpace::default();
        for i in 0..(MAX_MAPPINGS as u64 + 10) {
            a.map(file(i * 0x1000, i * 0x1000 + 0x1000, 0, i + 1));
        }
        assert_eq!(a.mappings.len(), MAX_MAPPINGS);
        assert_eq!(a.dropped, 10);
    }
}

/// Property tests: any maps text parses without panicking, and any sequence of
/// mappings keeps the address space consistent and bounded.
#[cfg(test)]
mod fuzz {
    use proptest::prelude::*;

    use super::*;

    fn mapping() -> impl Strategy<Value = Mapping> {
        (0u64..64, 1u64..16, 0u64..8, 0u64..4, prop::bool::ANY).prop_map(
            |(page, pages, off, inode, exec)| Mapping {
                start: page * 0x1000,
                end: (page + pages) * 0x1000,
                offset: off * 0x1000,
                dev: "fd:01".into(),
                inode,
                path: if inode == 0 {
                    String::new()
                } else {
                    format!("/lib/{inode}.so")
                },
                executable: exec,
            },
        )
    }

    proptest! {
        #[test]
        fn any_text_parses(text in ".{0,400}") {
            let _ = parse_maps(&text);
        }

        #[test]
        fn lines_that_look_like_maps_parse(
            lines in prop::collection::vec(
                ("[0-9a-f]{1,16}", "[0-9a-f]{1,16}", "[rwxp-]{4}", "[0-9a-f]{1,16}",
                 "[0-9a-f]{2}:[0-9a-f]{2}", "[0-9]{1,19}", "[ -~]{0,30}"),
                0..20,
            )
        ) {
            let text: String = lines
                .iter()
                .map(|(s, e, p, o, d, i, path)| format!("{s}-{e} {p} {o} {d} {i} {path}\n"))
                .collect();
            // Every well-formed line is a mapping, whatever its path holds.
            prop_assert_eq!(parse_mappings(&text).len(), lines.len());
            let _ = parse_maps(&text);
        }

        #[test]
        fn mappings_never_overlap(ms in prop::collection::vec(mapping(), 0..60)) {
            let mut a = AddressSpace::default();
            for m in ms {
                a.map(m);
            }
            let v: Vec<&Mapping> = a.mappings.values().collect();
            for w in v.windows(2) {
                prop_assert!(w[0].end <= w[1].start, "{:?}", w);
            }
            prop_assert!(v.iter().all(|m| m.start < m.end));
            let _ = a.modules();
        }
    }
}
