//! Unwinding the stack copies of contended waits into return addresses, from the
//! `.eh_frame` / `.debug_frame` of the files each process maps (framehop), with frame
//! pointers where a frame has no unwind information. Works without frame pointers:
//! Debian's glibc and most -O2 programs have none, but all have `.eh_frame`.

use std::{
    collections::{HashMap, HashSet},
    ops::Range,
    sync::Arc,
};

use framehop::{
    ExplicitModuleSectionInfo, FrameAddress, Module as UnwindModule, Unwinder as _,
    x86_64::{CacheX86_64, UnwindRegsX86_64, UnwinderX86_64},
};
use object::{Object as _, ObjectSection as _, ObjectSegment as _};

use super::ObjectNamer;
use crate::proc::{Module, files::MAX_OBJECT_BYTES};

/// Section bytes shared by every process that maps the file.
type Bytes = Arc<[u8]>;

/// Most frames kept of one stack.
pub const MAX_FRAMES: usize = 64;

/// Most files whose unwind sections are kept.
const MAX_FILES: usize = 512;

/// The unwind sections of one file, and where its offset 0 is in its own addresses.
struct FileUnwind {
    image_base: u64,
    eh_frame: Option<(Range<u64>, Bytes)>,
    eh_frame_hdr: Option<(Range<u64>, Bytes)>,
    debug_frame: Option<Bytes>,
    text_svma: Option<Range<u64>>,
    got_svma: Option<Range<u64>>,
}

impl FileUnwind {
    /// Reads the unwind sections of `file` (only those: a program with gigabytes of
    /// debug information is not read whole).
    fn read(file: std::fs::File) -> Option<Self> {
        let cache = object::read::ReadCache::new(file);
        let file = object::File::parse(&cache).ok()?;
        let section = |name: &str| {
            let s = file.section_by_name(name)?;
            let data = s.data().ok()?;
            Some((s.address()..s.address() + s.size(), Bytes::from(data)))
        };
        let image_base = file
            .segments()
            .map(|s| s.address().saturating_sub(s.file_range().0))
            .min()
            .unwrap_or(0);
        let range = |name: &str| {
            file.section_by_name(name)
                .map(|s| s.address()..s.address() + s.size())
        };
        Some(Self {
            image_base,
            eh_frame: section(".eh_frame"),
            eh_frame_hdr: section(".eh_frame_hdr"),
            debug_frame: section(".debug_frame").map(|(_, b)| b),
            text_svma: range(".text"),
            got_svma: range(".got"),
        })
    }

    /// The file as mapped at `bias` (run-time address minus the file's own).
    fn module(&self, name: String, avma: Range<u64>, bias: u64) -> UnwindModule<Bytes> {
        let info = ExplicitModuleSectionInfo {
            base_svma: 0,
            text_svma: self.text_svma.clone(),
            got_svma: self.got_svma.clone(),
            eh_frame_svma: self.eh_frame.as_ref().map(|(r, _)| r.clone()),
            eh_frame: self.eh_frame.as_ref().map(|(_, b)| b.clone()),
            eh_frame_hdr_svma: self.eh_frame_hdr.as_ref().map(|(r, _)| r.clone()),
            eh_frame_hdr: self.eh_frame_hdr.as_ref().map(|(_, b)| b.clone()),
            debug_frame: self.debug_frame.clone(),
            ..Default::default()
        };
        UnwindModule::new(name, avma, bias, info)
    }
}

/// A process's unwinder: its modules as they were when it was built.
struct Space {
    unwinder: UnwinderX86_64<Bytes>,
    ranges: Vec<Range<u64>>,
    /// The state of the process's known mappings it was built from.
    version: u64,
    /// The code files it was built from: (start, end, inode).
    code: Vec<(u64, u64, u64)>,
}

/// The code files of `modules` an unwinder is built from: (start, end, inode).
fn code_of(modules: &[crate::proc::address_space::Module]) -> Vec<(u64, u64, u64)> {
    modules
        .iter()
        .filter(|m| m.executable && m.base.is_some())
        .map(|m| (m.start, m.end, m.inode))
        .collect()
}

/// The user registers and stack copy of a thread.
#[derive(Debug, Clone, Copy)]
pub struct Capture<'a> {
    /// Instruction pointer.
    pub ip: u64,
    /// Stack pointer: where `stack` starts.
    pub sp: u64,
    /// Frame pointer.
    pub bp: u64,
    /// The copy of the stack from `sp` up.
    pub stack: &'a [u8],
    /// Return addresses that return probes replaced with the kernel's trampoline:
    /// (stack address, the caller's address there before).
    pub fixes: &'a [(u64, u64)],
}

/// Unwinds stack copies of traced processes.
#[derive(Default)]
pub struct StackUnwinder {
    files: HashMap<(String, u64), Option<Arc<FileUnwind>>>,
    spaces: HashMap<u32, Space>,
    cache: CacheX86_64,
}

impl StackUnwinder {
    /// Forgets the processes `pids`.
    pub fn forget(&mut self, pids: &HashSet<u32>) {
        self.spaces.retain(|p, _| !pids.contains(p));
    }

    /// Whether `ip` of `pid` lies in a file whose unwind information is at hand, from
    /// the mappings `namer` knows (no /proc read): the process's unwinder is rebuilt
    /// when the code files `namer` knows have changed since it was built.
    pub fn covers(&mut self, namer: &mut ObjectNamer, pid: u32, ip: u64) -> bool {
        let version = namer.space_version(pid);
        if namer.module_count(pid) == 0 {
            return false;
        }
        match self.spaces.get_mut(&pid) {
            Some(s) if s.version == version => {}
            Some(s) if s.code == code_of(&namer.modules(pid)) => s.version = version,
            _ => {
                let space = self.build(namer, pid, version);
                self.spaces.insert(pid, space);
            }
        }
        self.spaces
            .get(&pid)
            .is_some_and(|s| s.ranges.iter().any(|r| r.contains(&ip)))
    }

    fn file(&mut self, pid: u32, m: &Module) -> Option<Arc<FileUnwind>> {
        let key = (m.dev.clone(), m.inode);
        if let Some(f) = self.files.get(&key) {
            return f.clone();
        }
        if self.files.len() >= MAX_FILES {
            return None;
        }
        let parsed = match m.mapped_file(pid).open(MAX_OBJECT_BYTES) {
            Ok((file, _)) => FileUnwind::read(file).map(Arc::new),
            Err(e) => {
                log::debug!("unwind info of {}: {e}", m.path.display());
                None
            }
        };
        self.files.insert(key, parsed.clone());
        parsed
    }

    fn build(&mut self, namer: &mut ObjectNamer, pid: u32, version: u64) -> Space {
        let mut unwinder = UnwinderX86_64::new();
        let mut ranges = Vec::new();
        let modules = namer.modules(pid);
        let code = code_of(&modules);
        for m in modules {
            let Some(base) = m.base.filter(|_| m.executable) else {
                continue;
            };
            let Some(f) = self.file(pid, &m) else {
                continue;
            };
            // Its names are read now, while the process is alive.
            namer.prepare(pid, &m);
            let bias = base.wrapping_sub(f.image_base);
            let name = m.path.display().to_string();
            unwinder.add_module(f.module(name, m.start..m.end, bias));
            ranges.push(m.start..m.end);
        }
        Space {
            unwinder,
            ranges,
            version,
            code,
        }
    }

    /// The return addresses of a capture of `pid`, innermost first (the first is the
    /// instruction pointer); empty when not even that is in a known module.
    pub fn unwind(&mut self, namer: &mut ObjectNamer, pid: u32, c: &Capture) -> Vec<u64> {
        if !self.covers(namer, pid, c.ip) {
            return Vec::new();
        }
        let Some(space) = self.spaces.get(&pid) else {
            return Vec::new();
        };
        let end = c.sp.saturating_add(c.stack.len() as u64);
        let ranges = &space.ranges;
        let mut read = |addr: u64| -> Result<u64, ()> {
            if addr < c.sp || addr.checked_add(8).is_none_or(|e| e > end) {
                return Err(());
            }
            let at = (addr - c.sp) as usize;
            let word: [u8; 8] = c.stack[at..at + 8].try_into().map_err(|_| ())?;
            let word = u64::from_le_bytes(word);
            // A return probe's trampoline in place of a caller's address (an address
            // in no mapped file where a probed call's entry saw its return address):
            // the caller's address it replaced.
            match c.fixes.iter().find(|f| f.0 == addr && f.1 != 0) {
                Some(&(_, ret)) if !ranges.iter().any(|r| r.contains(&word)) => Ok(ret),
                _ => Ok(word),
            }
        };
        let mut frames = Vec::new();
        let mut it = space.unwinder.iter_frames(
            c.ip,
            UnwindRegsX86_64::new(c.ip, c.sp, c.bp),
            &mut self.cache,
            &mut read,
        );
        while frames.len() < MAX_FRAMES {
            match it.next() {
                Ok(Some(f)) => {
                    let a = match f {
                        FrameAddress::InstructionPointer(a) => a,
                        FrameAddress::ReturnAddress(a) => a.get(),
                    };
                    frames.push(a);
                    // A return address in no file mapped: the kernel's uretprobe
                    // trampoline (a function with a return probe put it there in place
                    // of its caller's address), or garbage. It is kept, and nothing
                    // guessed beyond it.
                    if !space.ranges.iter().any(|r| r.contains(&a)) {
                        break;
                    }
                }
                // The end of the stack, the end of the copy, or a frame it cannot
                // unwind: what was recovered stands.
                Ok(None) | Err(_) => break,
            }
        }
        // A frame pointer walk off the end of a copy can yield zeros.
        while frames.last() == Some(&0) {
            frames.pop();
        }
        frames
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Unwinds this test's own stack (a copy of it, as the kernel makes one) through
    /// this process's own unwind information: the callers come out in order.
    #[inline(never)]
    fn capture_here(out: &mut Vec<u8>) -> (u64, u64, u64) {
        let (ip, sp, bp): (u64, u64, u64);
        // SAFETY: reads three registers, touches no memory.
        unsafe {
            std::arch::asm!(
                "lea {ip}, [rip]",
                "mov {sp}, rsp",
                "mov {bp}, rbp",
                ip = out(reg) ip,
                sp = out(reg) sp,
                bp = out(reg) bp,
            );
        }
        // SAFETY: the 4 KiB above the stack pointer are this thread's live stack
        // (callers' frames and the test harness's).
        let stack = unsafe { std::slice::from_raw_parts(sp as *const u8, 4096) };
        out.extend_from_slice(stack);
        (ip, sp, bp)
    }

    #[inline(never)]
    fn outer_caller(out: &mut Vec<u8>) -> (u64, u64, u64) {
        let r = capture_here(out);
        std::hint::black_box(r)
    }

    #[test]
    fn unwinds_a_copy_of_this_threads_stack_through_its_callers() {
        let mut bytes = Vec::new();
        let (ip, sp, bp) = outer_caller(&mut bytes);
        let mut namer = ObjectNamer::default();
        namer.remember(std::process::id());
        let mut u = StackUnwinder::default();
        let frames = u.unwind(
            &mut namer,
            std::process::id(),
            &Capture {
                ip,
                sp,
                bp,
                stack: &bytes,
                fixes: &[],
            },
        );
        assert!(frames.len() >= 3, "{frames:x?}");
        let mut code = super::super::CodeNamer::default();
        let names: Vec<String> = frames
            .iter()
            .enumerate()
            .map(|(i, a)| {
                let a = if i == 0 { *a } else { a - 1 };
                code.name(&mut namer, std::process::id(), a)
                    .unwrap_or_default()
            })
            .collect();
        let at = |f: &str| names.iter().position(|n| n.contains(f));
        let (inner, outer, test) = (
            at("capture_here"),
            at("outer_caller"),
            at("unwinds_a_copy_of_this_threads_stack"),
        );
        assert!(
            inner.is_some() && inner < outer && outer < test,
            "{names:#?}"
        );
    }

    /// The unwinder follows what the namer knows: after an exec into files as many as
    /// before but elsewhere, this process's code is no longer covered (it once went by
    /// the count of files and kept the old ones), and a fresh read covers it again.
    #[test]
    fn the_unwinder_is_rebuilt_when_the_code_files_change() {
        let me = std::process::id();
        let ip = the_unwinder_is_rebuilt_when_the_code_files_change as *const () as u64;
        let mut namer = ObjectNamer::default();
        namer.remember(me);
        let mut u = StackUnwinder::default();
        assert!(u.covers(&mut namer, me, ip));
        let n = namer.module_count(me) as u64;
        namer.exec(me, 1);
        for i in 0..n {
            let m = crate::proc::address_space::Mapping {
                start: 0x1000_0000 + i * 0x10_000,
                end: 0x1000_1000 + i * 0x10_000,
                offset: 0,
                dev: "fd:01".into(),
                inode: 1_000_000 + i,
                path: format!("/nowhere/{i}.so"),
                executable: true,
            };
            namer.mapped(me, 2, m);
        }
        assert_eq!(namer.module_count(me) as u64, n);
        assert!(!u.covers(&mut namer, me, ip));
        namer.remember(me);
        assert!(u.covers(&mut namer, me, ip));
    }

    #[test]
    fn a_return_probes_trampoline_is_seen_through_with_the_address_it_replaced() {
        let mut bytes = Vec::new();
        let (ip, sp, bp) = outer_caller(&mut bytes);
        let me = std::process::id();
        let mut namer = ObjectNamer::default();
        namer.remember(me);
        let mut u = StackUnwinder::default();
        let mut unwind = |stack: &[u8], fixes: &[(u64, u64)]| {
            let c = Capture {
                ip,
                sp,
                bp,
                stack,
                fixes,
            };
            u.unwind(&mut namer, me, &c)
        };
        let whole = unwind(&bytes, &[]);
        assert!(whole.len() >= 3, "{whole:x?}");
        // As a return probe on outer_caller would leave it: its return address swapped
        // for an address in no mapped file.
        let ret = whole[2];
        let at = bytes
            .chunks_exact(8)
            .position(|w| u64::from_le_bytes(w.try_into().unwrap()) == ret)
            .expect("the return address is in the copy")
            * 8;
        let trampoline = 0x7fff_ffff_e000u64;
        let mut probed = bytes.clone();
        probed[at..at + 8].copy_from_slice(&trampoline.to_le_bytes());
        let cut = unwind(&probed, &[]);
        assert_eq!(cut.len(), 3, "stops at the trampoline: {cut:x?}");
        assert_eq!(cut[2], trampoline);
        let slot = sp + at as u64;
        assert_eq!(unwind(&probed, &[(slot, ret)]), whole);
        // A fix where the copy holds a real address changes nothing.
        assert_eq!(unwind(&bytes, &[(slot, 0x1234)]), whole);
    }

    #[test]
    fn a_process_without_known_mappings_yields_no_frames() {
        let mut namer = ObjectNamer::default();
        let mut u = StackUnwinder::default();
        let frames = u.unwind(
            &mut namer,
            1,
            &Capture {
                ip: 0x1000,
                sp: 0x2000,
                bp: 0,
                stack: &[0; 64],
                fixes: &[],
            },
        );
        assert!(frames.is_empty());
    }
}
