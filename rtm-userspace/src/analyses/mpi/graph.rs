//! The rank graph: MPI ranks and who sends what to whom. Pure: fed decoded MPI records,
//! no aya, testable without root.
//!
//! Ranks are processes; peers are world ranks as the kernel translated them. Messages
//! are counted on the sending side (blocking sends at return, non-blocking ones when
//! posted) and on the receiving side (at return or when the request completes, where
//! the status names a wildcard receive's source). Collectives are counted per
//! communicator and call, and the k-th call of a collective on a communicator in every
//! rank forms one instance, whose arrival spread shows imbalance.
//!
//! Memory is bounded: open requests and collective arrivals are capped and what is
//! dropped is counted.

use foldhash::HashMap;
use rtm_common::{
    BYTES_UNKNOWN, COMM_ID_UNKNOWN, MPI_FLAG_COMPLETION, MPI_FLAG_NOT_DONE,
    MPI_FLAG_REQS_TRUNCATED, MPI_FLAG_STATUS_IGNORED, MPICH_COMM_WORLD, MpiImpl, MpiOp,
    RANK_UNKNOWN, decode::MpiRecord,
};

mod comms;
pub use comms::{CommId, Communicators, WORLD};

/// Most requests open at once (posted, not completed) over all ranks.
const MAX_OPEN_REQUESTS: usize = 1 << 16;
/// Most collective arrivals kept for the spread.
const MAX_ARRIVALS: usize = 1 << 18;
/// Size-histogram buckets: bucket i holds sizes in [2^(i-1), 2^i), bucket 0 empty messages.
pub const SIZE_BUCKETS: usize = 32;

/// Traffic one side saw on a (rank, peer) pair.
#[derive(Debug, Clone, Default)]
pub struct Traffic {
    /// Messages.
    pub messages: u64,
    /// Bytes, over the messages whose size was known.
    pub bytes: u64,
    /// Messages whose size could not be known.
    pub unknown_size: u64,
    /// Time inside the calls that sent or received them (ns).
    pub time_ns: u64,
    /// Message sizes: bucket i counts sizes in [2^(i-1), 2^i); bucket 0 empty messages.
    pub sizes: [u64; SIZE_BUCKETS],
}

impl Traffic {
    fn add(&mut self, bytes: Option<u64>, time_ns: u64) {
        self.messages += 1;
        self.time_ns = self.time_ns.saturating_add(time_ns);
        match bytes {
            Some(b) => {
                self.bytes = self.bytes.saturating_add(b);
                let bucket = (64 - b.leading_zeros()) as usize;
                self.sizes[bucket.min(SIZE_BUCKETS - 1)] += 1;
            }
            None => self.unknown_size += 1,
        }
    }
}

/// Per MPI function, in one rank.
#[derive(Debug, Clone, Copy, Default)]
pub struct CallStats {
    /// Calls.
    pub calls: u64,
    /// Time inside them (ns).
    pub time_ns: u64,
    /// Calls that returned an error.
    pub errors: u64,
}

/// A rank's MPI activity.
#[derive(Debug, Clone, Default)]
pub struct RankStats {
    /// The implementation its library is.
    pub implementation: Option<MpiImpl>,
    /// World rank, as read from the communicator by the kernel.
    pub world_rank: Option<i32>,
    /// Per function.
    pub calls: HashMap<MpiOp, CallStats>,
    /// First call's entry and last call's return (ns).
    pub first_ns: u64,
    /// Last call's return.
    pub last_ns: u64,
    /// MPI_Init's return and MPI_Finalize's entry, when seen.
    pub init_ns: Option<u64>,
    /// MPI_Finalize's entry.
    pub finalize_ns: Option<u64>,
}

impl RankStats {
    /// Time inside MPI calls between MPI_Init and MPI_Finalize (ns; the two themselves
    /// are start-up and tear-down, not communication).
    pub fn time_in_mpi(&self) -> u64 {
        self.calls
            .iter()
            .filter(|(op, _)| !matches!(op, MpiOp::Init | MpiOp::InitThread | MpiOp::Finalize))
            .map(|(_, c)| c.time_ns)
            .sum()
    }

    /// Calls made.
    pub fn total_calls(&self) -> u64 {
        self.calls.values().map(|c| c.calls).sum()
    }
}

/// A collective on one communicator, in one rank.
#[derive(Debug, Clone, Default)]
pub struct CollectiveStats {
    /// Calls.
    pub calls: u64,
    /// Bytes the rank contributed (count x datatype size), over calls where known.
    pub bytes: u64,
    /// Time inside the calls (ns).
    pub time_ns: u64,
    /// The root of the last rooted call.
    pub root: Option<i32>,
}

/// One rank's arrival at one collective instance.
#[derive(Debug, Clone, Copy)]
pub struct Arrival {
    /// The process.
    pub pid: u32,
    /// Entry (ns).
    pub start_ns: u64,
}

/// Things that could not be attributed, counted.
#[derive(Debug, Clone, Copy, Default, serde::Serialize, serde::Deserialize)]
pub struct RankGraphCounters {
    /// Receives whose source is unknown (a wildcard with MPI_STATUS_IGNORE).
    pub unknown_source: u64,
    /// Messages whose peer could not be translated to a world rank (e.g. in an MPICH
    /// communicator whose creation was not seen on every member).
    pub untranslated_peer: u64,
    /// MPICH communicator creations that could not be followed (their parent was
    /// created before the trace, or over the cap).
    pub untracked_comms: u64,
    /// Sends or receives to MPI_PROC_NULL.
    pub proc_null: u64,
    /// Completions of requests whose post was not seen (posted before the trace,
    /// persistent requests).
    pub unmatched_completions: u64,
    /// Requests beyond the followed 16 of one wait/test call.
    pub truncated_requests: u64,
    /// Requests or arrivals dropped over the memory caps.
    pub dropped_over_limits: u64,
}

/// The other side of a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Peer {
    /// A world rank.
    World(i32),
    /// A rank in a communicator whose members are only known at the end (MPICH).
    InComm(CommId, i32),
    /// Not known.
    Unknown,
}

#[derive(Debug, Clone, Copy)]
struct Posted {
    send: bool,
    peer: Peer,
    /// The communicator, where the model follows it (to translate a status's source).
    comm: Option<CommId>,
    /// Bytes the post implies (count x size); the status may say otherwise for receives.
    bytes: Option<u64>,
    time_ns: u64,
    /// The source or destination as passed (comm-local; may be MPI_ANY_SOURCE).
    passed: i32,
}

/// Key of a (rank process, peer) pair.
pub type PairKey = (u32, Peer);

/// The rank graph.
#[derive(Debug, Default)]
pub struct RankGraph {
    ranks: HashMap<u32, RankStats>,
    sent: HashMap<PairKey, Traffic>,
    received: HashMap<PairKey, Traffic>,
    open: HashMap<(u32, u64), Posted>,
    collectives: HashMap<(u32, u32, MpiOp), CollectiveStats>,
    /// (communicator id, op) -> per instance, the arrivals.
    instances: HashMap<(u32, MpiOp), Vec<Vec<Arrival>>>,
    /// (pid, communicator id, op) -> calls seen so far (the instance index).
    sequence: HashMap<(u32, u32, MpiOp), usize>,
    arrivals: usize,
    comms: Communicators,
    counters: RankGraphCounters,
}

fn known_rank(r: i32) -> Option<i32> {
    (r != RANK_UNKNOWN && r >= 0).then_some(r)
}

fn bytes_of(count: i32, size: u32) -> Option<u64> {
    (count >= 0 && size > 0).then(|| count as u64 * u64::from(size))
}

fn any_source(imp: MpiImpl, peer: i32) -> bool {
    match imp {
        MpiImpl::OpenMpi => peer == -1,
        MpiImpl::Mpich => peer == -2,
    }
}

fn proc_null(imp: MpiImpl, peer: i32) -> bool {
    match imp {
        MpiImpl::OpenMpi => peer == -2,
        MpiImpl::Mpich => peer == -1,
    }
}

impl RankGraph {
    /// Applies one MPI record.
    pub fn apply(&mut self, m: &MpiRecord) {
        let raw = &m.raw;
        let pid = raw.header.pid;
        let end = raw.header.ts_ns;
        let dur = end.saturating_sub(raw.start_ns);
        if raw.flags & MPI_FLAG_COMPLETION != 0 {
            return self.complete(pid, m, dur);
        }
        let rank = self.ranks.entry(pid).or_default();
        rank.implementation = Some(m.implementation);
        if let Some(me) = known_rank(raw.self_world) {
            rank.world_rank = Some(me);
        }
        if rank.first_ns == 0 {
            rank.first_ns = raw.start_ns;
        }
        rank.last_ns = rank.last_ns.max(end);
        let c = rank.calls.entry(m.op).or_default();
        c.calls += 1;
        c.time_ns = c.time_ns.saturating_add(dur);
        if raw.ret != 0 {
            c.errors += 1;
            return;
        }
        match m.op {
            MpiOp::Init | MpiOp::InitThread => rank.init_ns = Some(end),
            MpiOp::Finalize => rank.finalize_ns = Some(raw.start_ns),
            _ => {}
        }
        if raw.flags & MPI_FLAG_REQS_TRUNCATED != 0 {
            self.counters.truncated_requests += 1;
        }
        if raw.flags & MPI_FLAG_NOT_DONE != 0 {
            return;
        }
        let imp = m.implementation;
        let comm = self.comm_of(pid, m);
        match m.op {
            MpiOp::Send | MpiOp::Ssend | MpiOp::Bsend | MpiOp::Rsend => {
                let peer = self.peer(comm, raw.peer, raw.peer_world);
                self.send(
                    pid,
                    imp,
                    raw.peer,
                    peer,
                    bytes_of(raw.count, raw.dtype_size),
                    dur,
                );
            }
            MpiOp::Isend | MpiOp::Issend | MpiOp::Irecv => {
                let send = m.op != MpiOp::Irecv;
                let bytes = bytes_of(raw.count, raw.dtype_size);
                let peer = self.peer(comm, raw.peer, raw.peer_world);
                if send {
                    // The message is committed when posted: count it now, add the
                    // completion's time later.
                    self.send(pid, imp, raw.peer, peer, bytes, dur);
                } else if proc_null(imp, raw.peer) {
                    self.counters.proc_null += 1;
                    return;
                }
                if self.open.len() >= MAX_OPEN_REQUESTS {
                    self.counters.dropped_over_limits += 1;
                    return;
                }
                self.open.insert(
                    (pid, raw.request),
                    Posted {
                        send,
                        peer,
                        comm,
                        bytes,
                        time_ns: dur,
                        passed: raw.peer,
                    },
                );
            }
            MpiOp::Recv => {
                let bytes = bytes_of(raw.count, raw.dtype_size);
                let peer = self.peer(comm, raw.peer, raw.peer_world);
                self.receive(pid, imp, m, comm, raw.peer, peer, bytes, dur);
            }
            MpiOp::Sendrecv | MpiOp::SendrecvReplace => {
                let half = dur / 2;
                let to = self.peer(comm, raw.peer, raw.peer_world);
                let bytes = bytes_of(raw.count, raw.dtype_size);
                self.send(pid, imp, raw.peer, to, bytes, half);
                let from = self.peer(comm, raw.peer2, raw.peer2_world);
                let bytes = bytes_of(raw.count2, raw.dtype2_size);
                self.receive(pid, imp, m, comm, raw.peer2, from, bytes, dur - half);
            }
            MpiOp::CommRank if comm == Some(WORLD) && imp == MpiImpl::Mpich => {
                // The rank written at return (Open MPI's is read from the communicator).
                let me = raw.request as u32 as i32;
                if let Some(r) = self.ranks.get_mut(&pid) {
                    r.world_rank = known_rank(me).or(r.world_rank);
                }
            }
            MpiOp::CommSplit | MpiOp::CommDup if imp == MpiImpl::Mpich => {
                let color = (m.op == MpiOp::CommSplit).then_some(raw.count);
                let key = if m.op == MpiOp::CommSplit { raw.tag } else { 0 };
                let new = raw.request & 0xffff_ffff;
                self.comms
                    .create(pid, raw.comm, MPICH_COMM_WORLD, color, key, new);
                self.counters.untracked_comms = self.comms.lost;
            }
            op if op.is_collective() => self.collective(pid, m, comm, dur),
            _ => {}
        }
    }

    /// The communicator as the model follows it: MPICH handles through the creations
    /// seen (None when not seen); Open MPI's are followed in the kernel, not here.
    fn comm_of(&self, pid: u32, m: &MpiRecord) -> Option<CommId> {
        match m.implementation {
            MpiImpl::Mpich => self.comms.id(pid, m.raw.comm, MPICH_COMM_WORLD),
            MpiImpl::OpenMpi => None,
        }
    }

    /// A peer passed as `local` in `comm`, `world` when the kernel translated it.
    fn peer(&self, comm: Option<CommId>, local: i32, world: i32) -> Peer {
        if let Some(w) = known_rank(world) {
            return Peer::World(w);
        }
        match comm {
            _ if local < 0 => Peer::Unknown,
            Some(WORLD) => Peer::World(local),
            Some(c) => Peer::InComm(c, local),
            None => Peer::Unknown,
        }
    }

    fn send(
        &mut self,
        pid: u32,
        imp: MpiImpl,
        passed: i32,
        peer: Peer,
        bytes: Option<u64>,
        dur: u64,
    ) {
        if proc_null(imp, passed) {
            self.counters.proc_null += 1;
            return;
        }
        if peer == Peer::Unknown {
            self.counters.untranslated_peer += 1;
        }
        self.sent.entry((pid, peer)).or_default().add(bytes, dur);
    }

    /// A receive from `passed` (comm-local, as passed; `peer` translated) completed
    /// with `m`'s status.
    #[allow(clippy::too_many_arguments)]
    fn receive(
        &mut self,
        pid: u32,
        imp: MpiImpl,
        m: &MpiRecord,
        comm: Option<CommId>,
        passed: i32,
        peer: Peer,
        bytes: Option<u64>,
        dur: u64,
    ) {
        if proc_null(imp, passed) {
            self.counters.proc_null += 1;
            return;
        }
        let raw = &m.raw;
        let status = raw.flags & MPI_FLAG_STATUS_IGNORED == 0;
        let from_status = self.peer(comm, raw.status_source, raw.status_source_world);
        let source = if status && from_status != Peer::Unknown {
            from_status
        } else if any_source(imp, passed) {
            self.counters.unknown_source += 1;
            Peer::Unknown
        } else {
            if peer == Peer::Unknown {
                self.counters.untranslated_peer += 1;
            }
            peer
        };
        let bytes = if raw.status_bytes != BYTES_UNKNOWN && status {
            Some(raw.status_bytes)
        } else {
            bytes
        };
        self.received
            .entry((pid, source))
            .or_default()
            .add(bytes, dur);
    }

    fn complete(&mut self, pid: u32, m: &MpiRecord, dur: u64) {
        let raw = &m.raw;
        let Some(p) = self.open.remove(&(pid, raw.request)) else {
            self.counters.unmatched_completions += 1;
            return;
        };
        // The wait or test call's time is shared among the requests it was given.
        let share = dur / u64::from(raw.total.max(1));
        if p.send {
            if let Some(t) = self.sent.get_mut(&(pid, p.peer)) {
                t.time_ns = t.time_ns.saturating_add(share);
            }
            return;
        }
        self.receive(
            pid,
            m.implementation,
            m,
            p.comm,
            p.passed,
            p.peer,
            p.bytes,
            p.time_ns.saturating_add(share),
        );
    }

    fn collective(&mut self, pid: u32, m: &MpiRecord, comm: Option<CommId>, dur: u64) {
        let raw = &m.raw;
        // MPICH's handles are per process: name its communicators as the model follows
        // them (MPI_COMM_WORLD is 0, as Open MPI's context id).
        let cid = match m.implementation {
            MpiImpl::Mpich => comm.unwrap_or(COMM_ID_UNKNOWN),
            MpiImpl::OpenMpi => raw.comm_id,
        };
        let c = self.collectives.entry((pid, cid, m.op)).or_default();
        c.calls += 1;
        c.time_ns = c.time_ns.saturating_add(dur);
        if let Some(b) = bytes_of(raw.count, raw.dtype_size) {
            c.bytes = c.bytes.saturating_add(b);
        }
        if raw.peer != RANK_UNKNOWN && raw.peer >= 0 {
            c.root = Some(known_rank(raw.peer_world).unwrap_or(raw.peer));
        }
        if cid == COMM_ID_UNKNOWN {
            return;
        }
        let seq = self.sequence.entry((pid, cid, m.op)).or_default();
        let k = *seq;
        *seq += 1;
        if self.arrivals >= MAX_ARRIVALS {
            self.counters.dropped_over_limits += 1;
            return;
        }
        let inst = self.instances.entry((cid, m.op)).or_default();
        if inst.len() <= k {
            inst.resize_with(k + 1, Vec::new);
        }
        inst[k].push(Arrival {
            pid,
            start_ns: raw.start_ns,
        });
        self.arrivals += 1;
    }

    /// The followed communicators' members as world ranks (see `Communicators`).
    pub fn comm_members(
        &self,
        world_of: &dyn Fn(u32) -> Option<i32>,
        world_size: Option<i32>,
    ) -> HashMap<CommId, Vec<i32>> {
        self.comms.members(world_of, world_size)
    }

    /// Ranks by process.
    pub fn ranks(&self) -> impl Iterator<Item = (&u32, &RankStats)> {
        self.ranks.iter()
    }

    /// What each rank sent, by (process, destination).
    pub fn sent(&self) -> impl Iterator<Item = (&PairKey, &Traffic)> {
        self.sent.iter()
    }

    /// What each rank received, by (process, source).
    pub fn received(&self) -> impl Iterator<Item = (&PairKey, &Traffic)> {
        self.received.iter()
    }

    /// Collectives by (process, communicator id, op).
    pub fn collectives(&self) -> impl Iterator<Item = (&(u32, u32, MpiOp), &CollectiveStats)> {
        self.collectives.iter()
    }

    /// Collective instances by (communicator id, op).
    pub fn instances(&self) -> impl Iterator<Item = (&(u32, MpiOp), &Vec<Vec<Arrival>>)> {
        self.instances.iter()
    }

    /// Requests posted and not completed yet.
    pub fn open_requests(&self) -> usize {
        self.open.len()
    }

    /// Attribution counters.
    pub fn counters(&self) -> RankGraphCounters {
        self.counters
    }

    /// Whether any MPI call was seen.
    pub fn is_empty(&self) -> bool {
        self.ranks.is_empty()
    }
}

#[cfg(test)]
mod tests;
