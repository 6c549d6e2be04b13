//! The stacks table as the outputs show it: rows named (frames as `function+0xOFF
//! (file:line)`, words by their symbol or by the code that waits on them), the rest
//! summed.

use std::{collections::HashMap, path::PathBuf};

use serde::Serialize;

#[cfg(test)]
use super::table::Side;
use super::table::{StackCounters, StackEdge, StackId, StackTable};

/// Rows of the stacks view kept in snapshots (the JSON, the report); the folded file
/// has every row.
pub const MAX_STACK_ROWS: usize = 500;

/// One (word, waiter stack, waker stack) row, named.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(default)]
pub struct StackRowView {
    /// The waiting process.
    pub pid: u32,
    /// The futex word.
    #[serde(
        serialize_with = "crate::model::views::hex",
        deserialize_with = "crate::model::views::unhex"
    )]
    pub object: u64,
    /// Its symbol, or the code that waits on it for a word on the heap.
    pub object_name: Option<String>,
    /// The waker's process.
    pub waker_pid: u32,
    /// Waits, their time asleep until the wake (ns) and the longest.
    #[serde(flatten)]
    pub edge: StackEdge,
    /// Where the waiter waited, innermost frame first (empty: not known).
    pub waiter: Vec<String>,
    /// Where the waker woke it, innermost first (for a mutex: its unlock).
    pub waker: Vec<String>,
}

/// The contended waits' stacks: the rows with the most wait, and why any are missing.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(default)]
pub struct StacksView {
    /// Rows, most wait first (at most [`MAX_STACK_ROWS`]).
    pub rows: Vec<StackRowView>,
    /// Rows in all.
    pub rows_total: usize,
    /// Waits and their time in the rows not shown.
    pub other_waits: u64,
    /// See `other_waits`.
    pub other_wait_ns: u64,
    /// Why stacks are missing or were not kept.
    pub counters: StackCounters,
    /// Stacks unwound (both sides of each record), and the time that took, ns.
    pub unwound: u64,
    /// See `unwound`.
    pub unwind_ns: u64,
}

/// Function names of the pthread, futex, stdio-lock and system-call layers a wait goes
/// through (in a static program the C library's frames are in the program itself), and
/// of the lock layers other languages' libraries link into a program (Rust's and C++'s
/// standard libraries, parking_lot, Go's runtime).
const LIBRARY_FRAMES: [&str; 22] = [
    "pthread_",
    "__pthread",
    "___pthread",
    "__lll_",
    "lll_",
    "__futex",
    "futex_",
    "syscall",
    "__GI_",
    "sem_",
    "__new_sem",
    "__condvar",
    "_IO_",
    "__gthread",
    "std::",
    "<std::",
    "core::",
    "<core::",
    "alloc::",
    "parking_lot",
    "<parking_lot",
    "runtime.",
];

/// C library functions that take a lock of their own (stdio, malloc), by their plain
/// names: in a static program they are in the program itself.
const C_LIBRARY_CALLS: [&str; 18] = [
    "fputs", "fputc", "fwrite", "fread", "fgets", "fflush", "fclose", "getc", "putc", "puts",
    "printf", "fprintf", "vfprintf", "malloc", "free", "calloc", "realloc", "getline",
];

/// Directories the system's shared libraries are installed in.
const SYSTEM_DIRS: [&str; 7] = [
    "/lib/",
    "/lib32/",
    "/lib64/",
    "/usr/lib/",
    "/usr/lib32/",
    "/usr/lib64/",
    "/usr/local/lib/",
];

/// Whether `path` is the program's own code: its executable (any file that is not a
/// shared library), or a shared library of its own (one not installed in a system
/// directory).
fn is_own_code(path: &std::path::Path) -> bool {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    let shared = name.ends_with(".so") || name.contains(".so.");
    let system = path
        .to_str()
        .is_some_and(|p| SYSTEM_DIRS.iter().any(|d| p.starts_with(d)));
    !shared || !system
}

/// The frame of `frames` (named as [`StacksView::build`] names them; `modules[i]`: the
/// file frame `i` is in, when known) that names a word by the code that waits on it, as
/// `FUNCTION (FILE:LINE)`: the innermost with a symbol that is the program's own code
/// (see [`is_own_code`]); else, in a stripped program, its innermost own frame as
/// `file+0xOFF` (its call site still told apart); else the innermost with a symbol in no
/// C library. Frames in a system C library and frames of known library layers are
/// passed over.
pub fn user_frame(frames: &[String], modules: &[Option<PathBuf>]) -> Option<String> {
    let named = |i: usize, f: &String| {
        let module = modules.get(i).and_then(Option::as_deref);
        if module.is_some_and(crate::proc::is_system_library) {
            return None;
        }
        let (func, rest) = f.split_once('+')?;
        let file = module.and_then(|m| m.file_name()).and_then(|n| n.to_str());
        if file == Some(func)
            || LIBRARY_FRAMES.iter().any(|p| func.starts_with(p))
            || C_LIBRARY_CALLS.contains(&func)
        {
            return None;
        }
        let line = rest.split_once(" (").map(|(_, l)| format!(" ({l}"));
        Some(format!("{func}{}", line.unwrap_or_default()))
    };
    let own = |i: usize| {
        modules
            .get(i)
            .and_then(Option::as_deref)
            .is_some_and(is_own_code)
    };
    // In a stripped program its own frames have no symbol: `file+0xOFF` still tells
    // its call site apart, where a library's symbol further out would not.
    let unsymbolized = |i: usize, f: &String| {
        let file = modules
            .get(i)
            .and_then(Option::as_deref)
            .and_then(|m| m.file_name())
            .and_then(|n| n.to_str())?;
        f.strip_prefix(file)?.starts_with("+0x").then(|| f.clone())
    };
    let own_frames = || frames.iter().enumerate().filter(|(i, _)| own(*i));
    own_frames()
        .find_map(|(i, f)| named(i, f))
        .or_else(|| own_frames().find_map(|(i, f)| unsymbolized(i, f)))
        .or_else(|| frames.iter().enumerate().find_map(|(i, f)| named(i, f)))
}

/// The address to name frame `i` of a stack by: a return address (every frame but the
/// innermost) is named by its call, the byte before it.
pub fn call_address(i: usize, addr: u64) -> u64 {
    if i == 0 { addr } else { addr.saturating_sub(1) }
}

/// The names of `frames` (innermost first) by `name`, the address where it has none.
pub fn name_frames(frames: &[u64], name: &mut dyn FnMut(u64) -> Option<String>) -> Vec<String> {
    frames
        .iter()
        .enumerate()
        .map(|(i, &a)| name(call_address(i, a)).unwrap_or_else(|| format!("{a:#x}")))
        .collect()
}

impl StacksView {
    /// The view of `table`: `rows` rows at most, frames named by `locate(pid, addr)`
    /// (`function+0xOFF (file:line)`), objects by `name_of(pid, addr)`; `module(pid,
    /// addr)`: the file the address is in.
    pub fn build(
        table: &StackTable,
        rows: usize,
        name_of: &mut dyn FnMut(u32, u64) -> Option<String>,
        locate: &mut dyn FnMut(u32, u64) -> Option<String>,
        module: &mut dyn FnMut(u32, u64) -> Option<PathBuf>,
    ) -> StacksView {
        let mut names = |pid: u32, id: StackId| -> Vec<String> {
            name_frames(table.frames(id).unwrap_or_default(), &mut |a| {
                locate(pid, a)
            })
        };
        let top = table.top(rows);
        // A word with no symbol (on the heap) is named by the code that waits on it
        // most, among the waits a thread woke: a pthread_join's word (woken by a
        // thread's exit) is named for what it is elsewhere.
        let mut heap: HashMap<(u32, u64), Option<String>> = HashMap::new();
        for (k, _) in top.iter().filter(|(k, _)| k.waker_pid != 0) {
            if heap.contains_key(&(k.pid, k.addr)) || name_of(k.pid, k.addr).is_some() {
                continue;
            }
            let frames = table.frames(k.waiter).unwrap_or_default();
            let modules: Vec<Option<PathBuf>> = frames
                .iter()
                .enumerate()
                .map(|(i, &a)| module(k.pid, call_address(i, a)))
                .collect();
            let named = user_frame(&names(k.pid, k.waiter), &modules);
            heap.insert((k.pid, k.addr), named.map(|f| format!("in {f}")));
        }
        let rows: Vec<StackRowView> = top
            .into_iter()
            .map(|(k, edge)| StackRowView {
                pid: k.pid,
                object: k.addr,
                object_name: name_of(k.pid, k.addr)
                    .or_else(|| heap.get(&(k.pid, k.addr)).cloned().flatten()),
                waker_pid: k.waker_pid,
                edge,
                waiter: names(k.pid, k.waiter),
                waker: names(k.waker_pid, k.waker),
            })
            .collect();
        let (shown_waits, shown_ns) = rows.iter().fold((0u64, 0u64), |(w, t), r: &StackRowView| {
            (w + r.edge.waits, t.saturating_add(r.edge.wait_ns))
        });
        let (all_waits, all_ns) = table
            .edges()
            .map(|(_, e)| e)
            .fold((0u64, 0u64), |(w, t), e| {
                (w + e.waits, t.saturating_add(e.wait_ns))
            });
        StacksView {
            rows,
            rows_total: table.edges().count(),
            other_waits: all_waits - shown_waits,
            other_wait_ns: all_ns.saturating_sub(shown_ns),
            counters: table.counters(),
            unwound: 0,
            unwind_ns: 0,
        }
    }

    /// The view with how many stacks were unwound in how long (`(stacks, ns)`).
    pub fn with_unwinding(self, (unwound, unwind_ns): (u64, u64)) -> Self {
        Self {
            unwound,
            unwind_ns,
            ..self
        }
    }

    /// Names for words on the heap, from the code that waits on them.
    pub fn heap_names(&self) -> HashMap<(u32, u64), String> {
        self.rows
            .iter()
            .filter_map(|r| {
                let n = r.object_name.as_ref()?;
                n.starts_with("in ").then(|| ((r.pid, r.object), n.clone()))
            })
            .collect()
    }
}

#[cfg(test)]
mod view_tests {
    use super::*;

    #[test]
    fn a_heap_word_is_named_by_the_first_frame_above_the_pthread_layer() {
        let mut t = StackTable::default();
        t.add(
            1,
            0x10,
            5,
            Side::Frames(vec![100, 200, 300].into()),
            1,
            Side::Frames(vec![400].into()),
            0,
        );
        let view = StacksView::build(
            &t,
            10,
            &mut |_, _| None,
            &mut |_, a| {
                Some(match a {
                    100 => "__lll_lock_wait+0x2f (lowlevellock.c:49)".into(),
                    199 => "___pthread_mutex_lock+0x7f (pthread_mutex_lock.c:93)".into(),
                    299 => "cache_get+0x12 (cache.c:88)".into(),
                    _ => "unlock_path+0x4".into(),
                })
            },
            &mut |_, _| None,
        );
        assert_eq!(
            view.rows[0].object_name.as_deref(),
            Some("in cache_get (cache.c:88)")
        );
        assert_eq!(view.rows[0].waiter.len(), 3);
        assert_eq!(view.rows[0].waker, vec!["unlock_path+0x4".to_string()]);
        assert_eq!(
            view.heap_names().get(&(1, 0x10)).map(String::as_str),
            Some("in cache_get (cache.c:88)")
        );
    }

    #[test]
    fn system_library_frames_never_name_a_word_and_symbols_come_first() {
        let libc = Some(PathBuf::from("/usr/lib/x86_64-linux-gnu/libc.so.6"));
        let exe = Some(PathBuf::from("/opt/app"));
        let names = [
            "fputs+0x7f (iofputs.c:35)".to_string(),
            "app+0x1380".into(),
            "log_line+0x1 (a.c:3)".into(),
        ];
        assert_eq!(
            user_frame(&names, &[libc.clone(), exe.clone(), exe.clone()]).as_deref(),
            Some("log_line (a.c:3)")
        );
        // With no symbol in the program's own code, its call site by address.
        assert_eq!(
            user_frame(&names[..2], &[libc, exe]).as_deref(),
            Some("app+0x1380")
        );
        // Without module knowledge, the C library's known layers are still passed over.
        let names = [
            "_IO_fputs+0x7f (iofputs.c:35)".to_string(),
            "main+0x9".into(),
        ];
        assert_eq!(user_frame(&names, &[]).as_deref(), Some("main"));
    }

    #[test]
    fn the_programs_own_code_names_a_word_before_any_librarys() {
        let libc = Some(PathBuf::from("/usr/lib/x86_64-linux-gnu/libc.so.6"));
        let libevent = Some(PathBuf::from("/usr/lib/x86_64-linux-gnu/libevent-2.1.so.7"));
        let exe = Some(PathBuf::from("/opt/server/bin/server"));
        let names = [
            "__lll_lock_wait+0x2f (lowlevellock.c:49)".to_string(),
            "event_base_loop+0x40".into(),
            "worker_loop+0x12 (server.c:88)".into(),
        ];
        let modules = [libc.clone(), libevent.clone(), exe.clone()];
        assert_eq!(
            user_frame(&names, &modules).as_deref(),
            Some("worker_loop (server.c:88)")
        );
        // A library of the program's own (not in a system directory) is its code.
        let own_lib = Some(PathBuf::from("/opt/server/lib/libcache.so"));
        let names = [
            "__lll_lock_wait+0x2f".to_string(),
            "cache_get+0x9 (cache.c:12)".into(),
            "event_base_loop+0x40".into(),
            "main+0x1 (server.c:3)".into(),
        ];
        let modules = [libc.clone(), own_lib, libevent.clone(), exe.clone()];
        assert_eq!(
            user_frame(&names, &modules).as_deref(),
            Some("cache_get (cache.c:12)")
        );
        // A language's lock layer linked into the program is not its code.
        let names = [
            "syscall+0x1d".to_string(),
            "std::sys::sync::mutex::futex::Mutex::lock_contended+0x5".into(),
            "app::handle+0x10 (main.rs:9)".into(),
        ];
        let modules = [libc.clone(), exe.clone(), exe];
        assert_eq!(
            user_frame(&names, &modules).as_deref(),
            Some("app::handle (main.rs:9)")
        );
        // A stripped program: its own call site by address, before a library's symbol.
        let stripped = Some(PathBuf::from("/usr/bin/memcached"));
        let names = [
            "__lll_lock_wait+0x2f".to_string(),
            "___pthread_mutex_lock+0x111".into(),
            "memcached+0x16772".into(),
            "event_base_loop+0x40".into(),
        ];
        let modules = [libc.clone(), libc.clone(), stripped, libevent.clone()];
        assert_eq!(
            user_frame(&names, &modules).as_deref(),
            Some("memcached+0x16772")
        );
        // Only a system library's frames: the innermost outside the C library, as before.
        let names = [
            "__lll_lock_wait+0x2f".to_string(),
            "event_base_loop+0x40".into(),
        ];
        assert_eq!(
            user_frame(&names, &[libc, libevent]).as_deref(),
            Some("event_base_loop")
        );
    }
}
