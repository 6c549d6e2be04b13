//! The views every output reads: one thread, object, edge, waiter -> waker edge or call
//! site, named and summarized, ready to print or serialize; a [`snapshot::Snapshot`]
//! holds them, its long lists as [`rows`] made into views one at a time.

pub(crate) mod fold;
pub(crate) mod names;
pub(crate) mod rows;
pub(crate) mod snapshot;

use rtm_common::Primitive;
use serde::{Deserialize, Serialize};

use super::{
    dist::DistSummary,
    sync::{Counts, Role, ThreadKey, barrier::Round},
    wait_kind::WaitKind,
};

/// Serializes an address as a hex string, the way people read them.
pub(crate) fn hex<S: serde::Serializer>(v: &u64, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&format!("{v:#x}"))
}

fn hex_opt<S: serde::Serializer>(v: &Option<u64>, s: S) -> Result<S::Ok, S::Error> {
    match v {
        Some(v) => s.serialize_str(&format!("{v:#x}")),
        None => s.serialize_none(),
    }
}

/// Reads an address written by [`hex`] (`"0x1f"`); a plain number is taken too.
pub(crate) fn unhex<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Addr {
        Text(String),
        Number(u64),
    }
    match Addr::deserialize(d)? {
        Addr::Number(n) => Ok(n),
        Addr::Text(t) => {
            let digits = t.strip_prefix("0x").unwrap_or(&t);
            u64::from_str_radix(digits, 16)
                .map_err(|_| serde::de::Error::custom(format!("not an address: {t:?}")))
        }
    }
}

fn unhex_opt<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    #[derive(Deserialize)]
    struct Wrap(#[serde(deserialize_with = "unhex")] u64);
    Ok(Option::<Wrap>::deserialize(d)?.map(|w| w.0))
}

/// A thread and what it spent waiting.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct ThreadView {
    /// Process id.
    pub pid: u32,
    /// Thread id.
    pub tid: u32,
    /// Thread name, when known.
    pub name: Option<String>,
    /// The thread that created it, when that was seen (`pid`/`tid`).
    pub parent: Option<ThreadKey>,
    /// Whether it exited during the trace.
    pub exited: bool,
    /// Acquisitions across all objects.
    pub acquisitions: u64,
    /// Acquisitions that found the object held.
    pub contended: u64,
    /// Time inside blocking acquisitions, all objects.
    pub wait: DistSummary,
    /// Time holding objects, all objects.
    pub hold: DistSummary,
    /// How long the thread was observed: its life within the trace window, ns.
    pub observed_ns: u64,
    /// wait.total_ns / observed_ns.
    pub wait_share: f64,
    /// Of `wait`, the time waiting for work or for another thread (condition
    /// variables, semaphores, barriers, joins, parking: see `WaitKind::is_idle`), ns:
    /// the rest is contention or of unknown kind.
    pub idle_wait_ns: u64,
}

impl ThreadView {
    /// Its time waiting for locks: contention, or waits of unknown kind (its wait but
    /// the time waiting for work), ns.
    pub fn lock_wait_ns(&self) -> u64 {
        self.wait.total_ns.saturating_sub(self.idle_wait_ns)
    }
}

/// A synchronization object and its totals over every thread that used it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ObjectView {
    /// Process id.
    #[serde(default)]
    pub pid: u32,
    /// Kind of object.
    pub kind: Primitive,
    /// What its waits are for: contention (mutex, rwlock, spinlock), waiting for work
    /// or another thread (condvar, semaphore, barrier, join, park), or unknown.
    #[serde(default)]
    pub wait_kind: WaitKind,
    /// Address in the process.
    #[serde(serialize_with = "hex", deserialize_with = "unhex", default)]
    pub addr: u64,
    /// Symbol name (`name` or `name+0x10`) when the object is a global or static variable.
    #[serde(default)]
    pub name: Option<String>,
    /// Threads that used it.
    #[serde(default)]
    pub threads: usize,
    /// Operation counts over every thread that used it.
    #[serde(flatten)]
    pub counts: Counts,
    /// Time inside blocking calls.
    #[serde(default)]
    pub wait: DistSummary,
    /// Time held.
    #[serde(default)]
    pub hold: DistSummary,
    /// Condition variable: the mutex its waits released.
    #[serde(
        serialize_with = "hex_opt",
        deserialize_with = "unhex_opt",
        skip_serializing_if = "Option::is_none",
        default
    )]
    pub mutex: Option<u64>,
    /// Thread handle: the thread's id.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub thread_tid: Option<u32>,
    /// Barrier: its rounds.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub barrier: Option<BarrierView>,
}

/// A barrier's rounds.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct BarrierView {
    /// Rounds seen.
    pub rounds: u64,
    /// Spread between first and last arrival per round: the load imbalance.
    pub spread: DistSummary,
    /// How often each thread arrived last: (tid, rounds), most first.
    pub last_arrivals: Vec<(u32, u64)>,
    /// Calls that returned PTHREAD_BARRIER_SERIAL_THREAD.
    pub serial_returns: u64,
    /// The rounds, oldest first (at most 1000, the latest).
    pub round_list: Vec<Round>,
}

/// Where in the program an object was waited on.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CallSiteView {
    /// Process id.
    #[serde(default)]
    pub pid: u32,
    /// Kind of object.
    pub kind: Primitive,
    /// Object address.
    #[serde(serialize_with = "hex", deserialize_with = "unhex", default)]
    pub object: u64,
    /// The call's return address.
    #[serde(serialize_with = "hex", deserialize_with = "unhex", default)]
    pub site: u64,
    /// `function+0xOFF (file:line)` when the file has symbols (and debug info), else
    /// `file+0xOFF`.
    #[serde(default)]
    pub location: Option<String>,
    /// Blocking calls made from there.
    #[serde(default)]
    pub calls: u64,
    /// Those that found the object busy or slept.
    #[serde(default)]
    pub contended: u64,
    /// Time inside them, ns.
    #[serde(default)]
    pub wait_ns: u64,
}

/// A waiter -> waker edge: `waiter` slept on a futex word until `waker` woke it.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct WaitsForView {
    /// Process id.
    pub pid: u32,
    /// The waiting thread.
    pub waiter: u32,
    /// The waker's process: `pid`, or another process for a process-shared word.
    pub waker_pid: u32,
    /// The waker's process was not traced: a wake from outside.
    pub outside: bool,
    /// The thread whose wake ended the waits.
    pub waker: u32,
    /// The futex word (for a glibc mutex, the mutex).
    #[serde(serialize_with = "hex", deserialize_with = "unhex")]
    pub object: u64,
    /// Its symbol name, when it is a global or static variable.
    pub object_name: Option<String>,
    /// Waits ended by this waker.
    pub count: u64,
    /// Their lengths.
    pub wait: DistSummary,
    /// The waits ended when the waker exited (the kernel's wake for pthread_join), not
    /// by a FUTEX_WAKE it made.
    pub at_exit: bool,
}

impl ObjectView {
    /// The name if known, else the address.
    pub fn label(&self) -> String {
        self.name
            .clone()
            .unwrap_or_else(|| format!("{:#x}", self.addr))
    }

    /// Its kind as the tables name it: a futex word by what its waits are for when that
    /// is known (`mutex`, `condvar` ...), else `futex`.
    pub fn kind_label(&self) -> String {
        if self.kind == Primitive::Futex && self.wait_kind != WaitKind::Unknown {
            self.wait_kind.name().to_string()
        } else {
            self.kind.to_string()
        }
    }

    /// Its one display name, in every output: its kind, then its name or address
    /// (a thread handle is already "thread TID").
    pub fn titled(&self) -> String {
        match (self.kind, &self.name) {
            (Primitive::Thread, Some(n)) if n.starts_with("thread ") => n.clone(),
            _ => format!("{} {}", self.kind_label(), self.label()),
        }
    }

    /// Waiting for work or for another thread (a condition variable, semaphore,
    /// barrier, join or parked thread), not contention.
    pub fn is_idle(&self) -> bool {
        self.wait_kind.is_idle()
    }

    /// Whether its acquisitions and holds were seen: not for a futex word, whose waits
    /// are seen but not who took it or for how long (contention mode, or a word no
    /// probed call used). The tables then say "-", not 0.
    pub fn sees_acquisitions(&self) -> bool {
        self.kind != Primitive::Futex
    }
}

/// One thread -> object edge.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EdgeView {
    /// Process id.
    #[serde(default)]
    pub pid: u32,
    /// Thread id.
    #[serde(default)]
    pub tid: u32,
    /// Kind of object.
    pub kind: Primitive,
    /// Object address.
    #[serde(serialize_with = "hex", deserialize_with = "unhex", default)]
    pub object: u64,
    /// How the thread used it: `read` or `write` for rwlocks, `use` otherwise.
    #[serde(default)]
    pub role: Role,
    /// Operation counts of this thread on this object.
    #[serde(flatten)]
    pub counts: Counts,
    /// Time inside blocking acquisitions.
    #[serde(default)]
    pub wait: DistSummary,
    /// Time held.
    #[serde(default)]
    pub hold: DistSummary,
}
