//! Who is blocked on what, held by whom, read from /proc and the targets' memory: for
//! `--blocked` (a snapshot of every thread) and for the engine's live deadlock check
//! (the threads asleep in futex waits, and the stacks of a deadlock's threads).

use std::time::Instant;

use rtm_common::{FUTEX_CMD_MASK, arch::SYS_FUTEX, futex_cmd_waits};

use crate::{
    model::{
        blocked::{self, BlockedThread, BlockedView, Holder, MUTEX_BYTES},
        stacks::{name_frames, user_frame},
        views::names,
        wait_kind::WaitKind,
    },
    proc::{
        blocked::{CpuClocks, read_memory, switches, syscall_of},
        process,
    },
    symbolize::{CodeNamer, ObjectNamer, StackUnwinder, unwind::Capture},
};

/// A futex op's flag: the word is private to its process.
const FUTEX_PRIVATE_FLAG: u64 = 128;
/// Bytes of a blocked thread's stack read to unwind it.
const STACK_BYTES: usize = 16 * 1024;

/// What names a blocked thread's word and stack.
pub struct Namers<'a> {
    /// Names words (variables) and knows the mappings.
    pub objects: &'a mut ObjectNamer,
    /// Names code addresses.
    pub code: &'a mut CodeNamer,
    /// Unwinds stacks.
    pub unwinder: &'a mut StackUnwinder,
    /// Tells how long threads have been off their CPU.
    pub clocks: CpuClocks,
}

/// Thread `tid` of `pid` when it is blocked in a futex wait now: its word and the word's
/// holder; with `namers` also its name, the holder's process, the word's name, its
/// stack, and how long since it ran (the live check reads those only for a deadlock's
/// threads).
pub fn read_thread(pid: u32, tid: u32, namers: Option<&mut Namers<'_>>) -> Option<BlockedThread> {
    // First: a run after it changes the count (see BlockedThread::unchanged_in).
    let switches = switches(pid, tid);
    let s = syscall_of(pid, tid)?;
    if s.nr != SYS_FUTEX || !futex_cmd_waits(s.args[1] as u32 & FUTEX_CMD_MASK) {
        return None;
    }
    let word = s.args[0];
    let mut holder = blocked::holder(s.args[1], &read_memory(pid, word, MUTEX_BYTES));
    if let Holder::Thread { tid: h, .. } = holder
        && s.args[1] & FUTEX_PRIVATE_FLAG != 0
        && process::tgid_of(h).is_some_and(|p| p != pid)
    {
        holder = blocked::foreign_owner();
    }
    let mut t = BlockedThread {
        pid,
        tid,
        name: None,
        word,
        word_name: None,
        holder,
        holder_pid: None,
        off_cpu_ns: None,
        waited_ns: None,
        stack: Vec::new(),
        switches,
    };
    if let Some(n) = namers {
        t.name = process::thread_name(pid, tid);
        // A holder that is no thread now exited holding the lock (the outputs say so).
        t.holder_pid = match t.holder {
            Holder::Thread { tid: h, .. } => process::tgid_of(h),
            Holder::Unknown { .. } => None,
        };
        let bytes = read_memory(pid, s.sp, STACK_BYTES);
        let capture = Capture {
            ip: s.pc,
            sp: s.sp,
            bp: 0,
            stack: &bytes,
            fixes: &[],
        };
        let mut frames = n.unwinder.unwind(n.objects, pid, &capture);
        if frames.is_empty() {
            // Its code is in no file the mappings known say it maps (records lost, or
            // not read yet): the process lives, so read them and try once more.
            n.objects.remember(pid);
            frames = n.unwinder.unwind(n.objects, pid, &capture);
        }
        t.stack = name_frames(&frames, &mut |a| n.code.name(n.objects, pid, a));
        let modules: Vec<_> = frames
            .iter()
            .map(|&a| n.objects.locate(pid, a).map(|l| l.file.path))
            .collect();
        // Named as the trace's outputs name it: a variable by its symbol, a join's word
        // by the exit it waits for (glibc's pthread_join expects the joined TID in it),
        // else by the code that waits on it.
        let expected = s.args[2] as u32;
        t.word_name = n
            .objects
            .name(pid, word, rtm_common::Primitive::Futex)
            .or_else(|| {
                (expected != 0
                    && WaitKind::of_frames(t.stack.iter().map(String::as_str))
                        == Some(WaitKind::Join))
                .then(|| format!("exit of thread {expected}"))
            })
            .or_else(|| user_frame(&t.stack, &modules).map(|f| format!("in {f}")));
        t.off_cpu_ns = n.clocks.off_cpu_ns(pid, tid);
    }
    Some(t)
}

/// Words of `threads` that share a name (reached from one call site) told apart, as in
/// a trace's outputs ([`names::unique`]).
pub fn tell_apart(threads: &mut [BlockedThread]) {
    let unique = names::unique(
        threads
            .iter()
            .filter_map(|t| Some(((t.pid, t.word), t.word_name.clone()?)))
            .collect(),
    );
    for t in threads {
        if let Some(n) = unique.get(&(t.pid, t.word)) {
            t.word_name = Some(n.clone());
        }
    }
}

/// Every thread of `pids` blocked in a futex wait now, and the deadlocks among them.
pub fn snapshot(pids: &[u32]) -> BlockedView {
    let started = Instant::now();
    let at_ns = process::monotonic_ns();
    let mut objects = ObjectNamer::default();
    let mut code = CodeNamer::default();
    let mut unwinder = StackUnwinder::default();
    let mut namers = Namers {
        objects: &mut objects,
        code: &mut code,
        unwinder: &mut unwinder,
        clocks: CpuClocks::default(),
    };
    let mut seen = 0;
    let mut out = Vec::new();
    for &pid in pids {
        namers.objects.remember(pid);
        for tid in process::thread_ids(pid) {
            seen += 1;
            out.extend(read_thread(pid, tid, Some(&mut namers)));
        }
    }
    tell_apart(&mut out);
    out.sort_by(|a, b| b.off_cpu_ns.cmp(&a.off_cpu_ns).then(a.tid.cmp(&b.tid)));
    // The reads above took a while, one thread after another: a cycle stands only when
    // a second read finds each of its threads in the same wait for the same holder,
    // none of them having run since (so none let a lock go: every edge held at once).
    let cycles = blocked::cycles(&out)
        .into_iter()
        .filter(|c| {
            c.threads.iter().all(|&(p, t)| {
                let first = out.iter().find(|b| b.pid == p && b.tid == t);
                let again = read_thread(p, t, None);
                first
                    .zip(again.as_ref())
                    .is_some_and(|(f, a)| f.unchanged_in(a))
            })
        })
        .collect();
    // Likewise a wait with no holder known stands only when read again unchanged: a
    // mutex caught between its unlock's clearing of the owner and the wake of its next
    // owner shows none for an instant.
    let cannot_tell = blocked::undecided(&out)
        .into_iter()
        .filter(|u| {
            let first = out.iter().find(|b| b.pid == u.pid && b.tid == u.tid);
            let again = read_thread(u.pid, u.tid, None);
            first
                .zip(again.as_ref())
                .is_some_and(|(f, a)| f.unchanged_in(a))
        })
        .collect();
    BlockedView {
        at_ns,
        took_ns: started.elapsed().as_nanos() as u64,
        threads_seen: seen,
        blocked: out,
        cycles,
        cannot_tell,
    }
}
