//! What the engine knows: the sync graph, the MPI rank graph, the names of things, and
//! what happened to processes that the engine acts on between batches. Applying an
//! event touches memory only; what must be read from /proc is asked of the naming
//! worker ([`super::naming`]) and taken in between batches.

use std::collections::{HashMap, HashSet};

use rtm_common::{
    Primitive, SyncOp,
    decode::{Event, StacksRecord},
};

use super::{
    naming::{Answer, Ask, Naming},
    stacks::{StackJoin, Unwound},
};
use crate::{
    analyses::{Analyses, Asks, At, Kernel},
    model::{
        Snapshot, SyncGraph, Window,
        stacks::{MAX_STACK_ROWS, StackTable, StacksView, name_frames},
        sync::{ObjectKey, ThreadKey},
        wait_kind::WaitKind,
    },
    proc::process::{self, RankEnv},
    symbolize::{CodeNamer, ObjectNamer},
};

/// Takes a joined wait's stacks with their frames named (waiter's, waker's).
pub(super) type NamedStacks<'a> = dyn FnMut(&Unwound, &[String], &[String]) + 'a;

/// What happened to processes, for the engine to act on after a batch.
#[derive(Debug, Default)]
pub(super) struct Changes {
    /// Processes forked by traced processes: (child, parent, when).
    pub spawned: Vec<(u32, u32, u64)>,
    /// Traced processes that exec'd, with when.
    pub execd: Vec<(u32, u64)>,
    /// Traced processes that exited.
    pub gone: Vec<u32>,
    /// Threads seen for the first time (they get counters of their own).
    pub new_threads: Vec<ThreadKey>,
}

/// The model and the names.
pub(super) struct State {
    pub model: SyncGraph,
    /// What each process's launcher put in its environment (an MPI rank's job and
    /// rank), where read.
    pub rank_env: HashMap<u32, RankEnv>,
    pub namer: ObjectNamer,
    pub code: CodeNamer,
    /// Command names, read when each process's first event arrived (after any exec).
    pub comms: HashMap<u32, String>,
    pub changes: Changes,
    /// Processes that exec'd or were forked: their maps are read at their next sync
    /// event (after the loader has mapped the libraries).
    stale_maps: HashSet<u32>,
    /// Read a new process's maps at once: no mapping records follow its fork.
    pub eager_maps: bool,
    /// Processes whose environment an analysis asked for.
    env_asked: HashSet<u32>,
    /// Execs seen per process: an answer about an older program is dropped.
    generation: HashMap<u32, u32>,
    naming: Naming,
    /// Call stacks of contended waits (contention mode).
    pub stacks: StackTable,
    /// The join of stack records into `stacks`.
    pub(super) join: StackJoin,
    /// The analyses built as vertical slices (`analyses/`).
    pub analyses: Analyses,
    /// Processes that have exited (their pid may name another process now).
    pub ended: HashSet<u32>,
}

impl State {
    /// An empty model; `futex_objects` in contention mode.
    pub fn new(model: SyncGraph) -> Self {
        Self {
            model,
            rank_env: HashMap::new(),
            namer: ObjectNamer::default(),
            code: CodeNamer::default(),
            comms: HashMap::new(),
            changes: Changes::default(),
            stale_maps: HashSet::new(),
            eager_maps: false,
            env_asked: HashSet::new(),
            generation: HashMap::new(),
            naming: Naming::start(),
            stacks: StackTable::default(),
            join: StackJoin::default(),
            analyses: Analyses::default(),
            ended: HashSet::new(),
        }
    }

    fn ask(&mut self, ask: Ask) {
        if let Some(a) = self.naming.ask(ask) {
            self.answer(a);
        }
    }

    fn ask_space(&mut self, pid: u32) {
        let generation = self.generation.get(&pid).copied().unwrap_or(0);
        self.ask(Ask::Space { pid, generation });
    }

    /// The threads of an attached process, idle or not: each counts from the attach.
    /// (At attach, not on the event path: read here.)
    pub fn add_threads(&mut self, pid: u32, now_ns: u64) {
        for tid in process::thread_ids(pid) {
            let key = ThreadKey { pid, tid };
            let a = self.model.thread_seen(key, now_ns);
            if a.new_process.is_some() {
                // Its maps now, while it lives (names resolve after it exits); its
                // events will not say it is new any more.
                self.namer.remember(pid);
                if let Some(c) = process::comm(pid) {
                    self.comms.insert(pid, c);
                }
                // A rank's job and rank now, while it surely lives: a rank that ends
                // soon after its first MPI call may be gone before that call's records
                // are read (and then two jobs' parts could not be told apart).
                let env = process::mpi_env(pid);
                if env.rank.is_some() {
                    self.rank_env.insert(pid, env);
                }
            }
            if a.new_thread.is_some() {
                self.model.set_thread_info(
                    key,
                    process::thread_name(pid, tid),
                    process::thread_start_ns(pid, tid),
                );
            }
        }
    }

    /// Forgets everything about the processes `pids` (exited, in a daemon).
    pub fn forget(&mut self, pids: &HashSet<u32>) {
        self.model.forget_processes(pids);
        self.namer.forget(pids);
        self.code.forget(pids);
        self.stacks.forget(pids);
        self.join.forget(pids);
        self.analyses.forget(pids);
        for p in pids {
            self.ended.remove(p);
            self.rank_env.remove(p);
            self.comms.remove(p);
            self.stale_maps.remove(p);
            self.env_asked.remove(p);
            self.generation.remove(p);
        }
    }

    /// The waits joined with their stacks since the last call, frames named (for the
    /// sinks).
    pub(super) fn take_unwound(&mut self, out: &mut NamedStacks<'_>) {
        let State {
            join, code, namer, ..
        } = self;
        for u in join.take_unwound() {
            let mut names =
                |pid: u32, frames: &[u64]| name_frames(frames, &mut |a| code.name(namer, pid, a));
            let waiter = names(u.pid, &u.waiter);
            let waker = names(u.waker_pid, &u.waker);
            out(&u, &waiter, &waker);
        }
    }

    /// One decoded event into the model.
    pub fn apply(&mut self, ev: &Event) {
        if let Event::Stacks(StacksRecord {
            head,
            waiter,
            waker,
        }) = ev
        {
            self.join.record(
                &mut self.namer,
                &mut self.stacks,
                head,
                waiter,
                waker,
                false,
            );
            return;
        }
        if let Event::Sync(r) = ev
            && r.primitive == Primitive::Futex
            && r.op == SyncOp::Wait
            && r.raw.wait_ns > 0
        {
            let h = &r.raw.header;
            let key = (h.pid, h.tid, h.ts_ns.saturating_sub(r.raw.wait_ns));
            let woken = r.raw.extra != 0;
            self.join
                .wait_ended(&mut self.stacks, key, r.raw.wait_ns, woken);
        }
        let mut asks = Asks::default();
        self.analyses.event(ev, &mut asks);
        for pid in asks.environments {
            if !self.rank_env.contains_key(&pid) && self.env_asked.insert(pid) {
                self.ask(Ask::Env {
                    pid,
                    at_exec: false,
                });
            }
        }
        let a = self.model.apply(ev);
        let ts = ev.header().ts_ns;
        let parent = ev.header().pid;
        self.changes
            .spawned
            .extend(a.spawned_process.map(|p| (p, parent, ts)));
        if let Some(pid) = a.process_exited {
            self.stale_maps.remove(&pid);
            self.namer.exited(pid);
        }
        self.changes.gone.extend(a.process_exited);
        if let Some(pid) = a.exec {
            self.changes.execd.push((pid, ts));
            *self.generation.entry(pid).or_default() += 1;
            // A rank's environment names its job and rank; read it while the process
            // is young (a short rank may be gone by the time its MPI records are read).
            self.ask(Ask::Env { pid, at_exec: true });
            // The new program and the dynamic loader are mapped already: read them now
            // (the reader is woken at once for an exec), then again at the process's
            // first sync event, when its libraries are in.
            self.ask_space(pid);
            self.stale_maps.insert(pid);
            self.comms.remove(&pid);
        } else if !self.stale_maps.is_empty()
            && matches!(ev, Event::Sync(_))
            && self.stale_maps.remove(&ev.header().pid)
        {
            let pid = ev.header().pid;
            self.ask_space(pid);
            self.ask(Ask::Comm(pid));
        }
        if let Some(pid) = a.new_process {
            // Its maps are read at its first sync event, while it is alive, so names
            // resolve after it exits; until then the copy of its parent's that the fork
            // made and the kernel's mapping records stand in. A program that forks
            // thousands of children that never synchronize costs nothing per child.
            if self.eager_maps {
                self.ask_space(pid);
            } else {
                self.stale_maps.insert(pid);
            }
            self.ask(Ask::Comm(pid));
        }
        if let Some(t) = a.new_thread {
            self.changes.new_threads.push(t);
            self.ask(Ask::Thread {
                pid: t.pid,
                tid: t.tid,
            });
        }
    }

    fn answer(&mut self, a: Answer) {
        match a {
            Answer::Space { read, generation } => {
                let now = self.generation.get(&read.pid()).copied().unwrap_or(0);
                if generation == now {
                    self.namer.learn(read);
                }
            }
            Answer::Comm { pid, comm } => {
                if let Some(c) = comm {
                    self.comms.insert(pid, c);
                }
            }
            Answer::Thread {
                pid,
                tid,
                name,
                start_ns,
            } => self
                .model
                .set_thread_info(ThreadKey { pid, tid }, name, start_ns),
            Answer::Env { pid, env, at_exec } => {
                if !at_exec {
                    self.rank_env.entry(pid).or_insert(env);
                } else if env.rank.is_some() {
                    self.rank_env.insert(pid, env);
                }
            }
        }
    }

    /// Takes the answers in so far (between batches).
    pub fn take_answers(&mut self) {
        let mut answers = Vec::new();
        self.naming.take(&mut |a| answers.push(a));
        for a in answers {
            self.answer(a);
        }
        // Mappings may have come from the worker or the kernel's mapping records.
        if self.join.waiting() {
            self.join.retry(&mut self.namer, &mut self.stacks, false);
        }
    }

    /// Takes every answer still due (before a snapshot).
    pub fn flush_answers(&mut self) {
        let mut answers = Vec::new();
        self.naming.flush(&mut |a| answers.push(a));
        for a in answers {
            self.answer(a);
        }
        self.join.retry(&mut self.namer, &mut self.stacks, true);
    }

    /// Marks gone threads as exited, refreshes names of live ones, and builds the
    /// views; also returns what to tell about stripped files met (see
    /// [`ObjectNamer`]). `views` adds the system statistics and counters.
    pub fn snapshot(&mut self, window: Window, kernel: &dyn Kernel) -> (Snapshot<'_>, Vec<String>) {
        self.flush_answers();
        let threads: Vec<_> = self
            .model
            .threads()
            .map(|(k, n)| (*k, n.last_event_ns))
            .collect();
        for (k, last) in threads {
            // An ended process's pid may name another process now: its threads' names
            // are not read again.
            if !self.ended.contains(&k.pid) && process::thread_alive(k.pid, k.tid) {
                self.model
                    .set_thread_info(k, process::thread_name(k.pid, k.tid), None);
            } else {
                self.model.mark_thread_exited(k, last);
            }
        }
        let State {
            model,
            namer,
            code,
            rank_env,
            stacks,
            join,
            analyses,
            ..
        } = self;
        let objects = std::cell::RefCell::new(namer);
        let stacks = (!stacks.is_empty()).then(|| {
            StacksView::build(
                stacks,
                MAX_STACK_ROWS,
                &mut |pid, addr| objects.borrow_mut().name(pid, addr, Primitive::Futex),
                &mut |pid, addr| code.name(&mut objects.borrow_mut(), pid, addr),
                &mut |pid, addr| objects.borrow_mut().locate(pid, addr).map(|l| l.file.path),
            )
            .with_unwinding(join.unwinding)
        });
        let heap_names = stacks
            .as_ref()
            .map(StacksView::heap_names)
            .unwrap_or_default();
        let mut snap = Snapshot::build(
            model,
            window,
            &mut |o| {
                objects
                    .borrow_mut()
                    .name(o.pid, o.addr, o.primitive)
                    .or_else(|| heap_names.get(&(o.pid, o.addr)).cloned())
            },
            &mut |pid, addr| code.name(&mut objects.borrow_mut(), pid, addr),
        );
        drop_foreign_holders(&mut snap);
        // Each row's word by the name the snapshot gave it: numbered where objects
        // share one, or named in the snapshot only (a pthread_join's "exit of thread N").
        let mut stacks = stacks;
        for r in stacks.iter_mut().flat_map(|s| s.rows.iter_mut()) {
            let key = ObjectKey {
                pid: r.pid,
                primitive: Primitive::Futex,
                addr: r.object,
            };
            if let Some(n) = snap.objects.name(&key) {
                r.object_name = Some(n.to_owned());
            }
        }
        snap.stacks = stacks;
        let pids: std::collections::BTreeSet<u32> = snap.threads.iter().map(|t| t.pid).collect();
        snap.go_processes = pids
            .into_iter()
            .filter(|&p| objects.borrow_mut().runs_go(p))
            .collect();
        classify_words(&mut snap);
        snap.rank_threads_by_contention();
        // Threads by name, made only if a section asks for one.
        let mut names: Option<HashMap<(u32, u32), String>> = None;
        let threads = &snap.threads;
        let mut thread_name = |p: u32, t: u32| {
            names
                .get_or_insert_with(|| {
                    threads
                        .iter()
                        .filter_map(|t| Some(((t.pid, t.tid), t.name.clone()?)))
                        .collect()
                })
                .get(&(p, t))
                .cloned()
                .or_else(|| process::thread_name(p, t))
        };
        let host = process::host_name();
        let sections = analyses.sections(&mut At {
            end_ns: window.end_ns,
            host: &host,
            environment: rank_env,
            kernel,
            thread_name: &mut thread_name,
        });
        snap.sections = sections;
        let objects = objects.into_inner();
        // Each stripped file is said once on stderr, and every time in the report.
        for hint in objects.take_missing_symbols() {
            crate::say!("rtm-trace: note: {hint}");
        }
        (snap, objects.missing_symbols())
    }
}

/// A holder is a thread of a traced process (a private mutex's, of the waiter's own;
/// a process-shared one's may be another's), which the model or /proc knows. A TID that
/// is none (a word whose neighbours only looked like a glibc mutex) says no holder: its
/// waits count as holder unknown rather than inventing one.
fn drop_foreign_holders(snap: &mut Snapshot<'_>) {
    let mut known: HashSet<u32> = snap.threads.iter().map(|t| t.tid).collect();
    known.extend(
        snap.waits_for
            .rows()
            .iter()
            .filter(|w| !w.at_exit)
            .map(|w| w.waker),
    );
    let mut unknown = 0u64;
    snap.held_by.retain(|h| {
        let keep = known.contains(&h.holder) || process::thread_alive(h.pid, h.holder);
        if !keep {
            unknown = unknown.saturating_add(h.count);
        }
        keep
    });
    snap.model.waits_holder_unknown = snap.model.waits_holder_unknown.saturating_add(unknown);
}

/// Each futex word's kind from what the snapshot knows beyond the model: the waiter
/// stacks sampled on it (the kind most of its waits in them tell), else a glibc mutex
/// holder read at it.
fn classify_words(snap: &mut Snapshot<'_>) {
    let mut votes: HashMap<(u32, u64), HashMap<WaitKind, u64>> = HashMap::new();
    for r in snap.stacks.iter().flat_map(|s| s.rows.iter()) {
        if let Some(k) = WaitKind::of_frames(r.waiter.iter().map(String::as_str)) {
            *votes
                .entry((r.pid, r.object))
                .or_default()
                .entry(k)
                .or_default() += r.edge.waits.max(1);
        }
    }
    let held: HashSet<(u32, u64)> = snap.held_by.iter().map(|h| (h.pid, h.object)).collect();
    // Full mode: a word inside a pthread object the probes saw is that object's (a
    // condition variable's sequence word lies 8 bytes into its pthread_cond_t); of two
    // that hold it, the one that starts nearer. Memory in the futex words, not in the
    // objects: a graph of 100,000 mutexes has a handful of words to classify.
    let mut words: Vec<(u32, u64)> = snap
        .objects
        .rows()
        .iter()
        .filter(|r| r.key.primitive == Primitive::Futex && r.wait_kind == WaitKind::Unknown)
        .map(|r| (r.key.pid, r.key.addr))
        .collect();
    words.sort_unstable();
    let mut inside_of: HashMap<(u32, u64), (u64, WaitKind)> = HashMap::new();
    if !words.is_empty() {
        for r in snap.objects.rows() {
            let p = r.key.primitive;
            let (Some(extent), Some(kind)) = (
                crate::model::wait_kind::pthread_extent(p),
                WaitKind::of_primitive(p),
            ) else {
                continue;
            };
            let (pid, start) = (r.key.pid, r.key.addr);
            let end = start.saturating_add(extent);
            let first = words.partition_point(|w| *w < (pid, start));
            for w in words[first..]
                .iter()
                .take_while(|w| w.0 == pid && w.1 < end)
            {
                let e = inside_of.entry(*w).or_insert((start, kind));
                if start > e.0 {
                    *e = (start, kind);
                }
            }
        }
    }
    let inside = |pid: u32, addr: u64| inside_of.get(&(pid, addr)).map(|(_, k)| *k);
    snap.objects.classify(&mut |o| {
        inside(o.pid, o.addr)
            .or_else(|| {
                votes
                    .get(&(o.pid, o.addr))
                    .and_then(|v| v.iter().max_by_key(|&(k, n)| (*n, std::cmp::Reverse(*k))))
                    .map(|(k, _)| *k)
            })
            .or_else(|| held.contains(&(o.pid, o.addr)).then_some(WaitKind::Mutex))
    });
}
