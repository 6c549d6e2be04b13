//! MPI messages as arrows: each send is matched with its receive (same communicator,
//! source and destination world ranks, the first pending one with a matching tag: MPI's
//! non-overtaking order) and drawn as a flow from an instant at the send's start on the
//! sender to an instant at the receive's completion on the receiver. Either end may be
//! read first (a send is recorded at its return, which a rendezvous send reaches after
//! the receive completed); the unmatched wait, boundedly.

use std::collections::{HashMap, VecDeque};

use rtm_common::{MPI_FLAG_COMPLETION, MPI_FLAG_STATUS_IGNORED, MpiOp, RANK_UNKNOWN};

use super::{
    names::Names,
    proto::Writer,
    write::{Arg, Ev, INSTANT, track_event},
};

/// Unmatched ends kept, each side; past it the oldest are let go (counted).
const MAX_PENDING: usize = 100_000;
/// Receive requests posted and not completed kept, to know a completion is a receive's.
const MAX_REQUESTS: usize = 100_000;

/// One end of a message.
#[derive(Clone, Copy)]
pub struct End {
    /// When: the send's start, the receive's completion.
    pub ts: u64,
    /// Its thread's track.
    pub track: u64,
    /// The tag (a receive's may be a wildcard: negative).
    pub tag: i32,
    /// Bytes, when known (-1 otherwise).
    pub bytes: i64,
}

/// (communicator, source world rank, destination world rank).
type Pair = (u32, i32, i32);

/// An Irecv posted.
struct Posted {
    /// The source named (a world rank; negative: a wildcard or unknown).
    source: i32,
    tag: i32,
    comm: u32,
    /// The receiver's world rank.
    me: i32,
}

/// The ends not matched yet.
#[derive(Default)]
pub struct Messages {
    sends: HashMap<Pair, VecDeque<End>>,
    recvs: HashMap<Pair, VecDeque<End>>,
    pending: usize,
    /// Irecv requests posted, by (pid, request).
    irecvs: HashMap<(u32, u64), Posted>,
    /// Ends let go unmatched (over the bound).
    pub let_go: u64,
}

/// What an MPI record is to the message arrows.
pub enum Side {
    /// A send, from its start.
    Send(Pair),
    /// A receive's completion, with the tag it asked for.
    Recv(Pair, i32),
    /// Neither.
    None,
}

impl Messages {
    /// Which end of a message `m` is, if any (and notes the receives it posts). A
    /// receive's source is its status's, else the rank it named (not a wildcard).
    pub fn side(&mut self, m: &rtm_common::decode::MpiRecord) -> Side {
        let r = &m.raw;
        let me = r.self_world;
        let status = (r.flags & MPI_FLAG_STATUS_IGNORED == 0 && r.status_source_world >= 0)
            .then_some(r.status_source_world);
        if r.flags & MPI_FLAG_COMPLETION != 0 {
            // A completion names neither its rank nor its communicator: the Irecv did.
            let Some(posted) = self.irecvs.remove(&(r.header.pid, r.request)) else {
                return Side::None;
            };
            return match status.or((posted.source >= 0).then_some(posted.source)) {
                Some(src) => Side::Recv((posted.comm, src, posted.me), posted.tag),
                None => Side::None,
            };
        }
        if me == RANK_UNKNOWN || r.ret != 0 {
            return Side::None;
        }
        match m.op {
            MpiOp::Send
            | MpiOp::Ssend
            | MpiOp::Bsend
            | MpiOp::Rsend
            | MpiOp::Isend
            | MpiOp::Issend
            | MpiOp::Sendrecv
            | MpiOp::SendrecvReplace
                if r.peer_world >= 0 =>
            {
                Side::Send((r.comm_id, me, r.peer_world))
            }
            MpiOp::Irecv => {
                if self.irecvs.len() < MAX_REQUESTS {
                    let posted = Posted {
                        source: r.peer_world,
                        tag: r.tag,
                        comm: r.comm_id,
                        me,
                    };
                    self.irecvs.insert((r.header.pid, r.request), posted);
                }
                Side::None
            }
            MpiOp::Recv => match status.or((r.peer_world >= 0).then_some(r.peer_world)) {
                Some(src) => Side::Recv((r.comm_id, src, me), r.tag),
                None => Side::None,
            },
            _ => Side::None,
        }
    }

    /// A Sendrecv's receive (its send is [`Messages::side`]'s): from its status's
    /// source, else the source it named; its tag is not recorded (any).
    pub fn sendrecv_recv(&self, m: &rtm_common::decode::MpiRecord) -> Side {
        let r = &m.raw;
        if !matches!(m.op, MpiOp::Sendrecv | MpiOp::SendrecvReplace)
            || r.self_world == RANK_UNKNOWN
            || r.ret != 0
        {
            return Side::None;
        }
        let status = (r.flags & MPI_FLAG_STATUS_IGNORED == 0 && r.status_source_world >= 0)
            .then_some(r.status_source_world);
        match status.or((r.peer2_world >= 0).then_some(r.peer2_world)) {
            Some(src) => Side::Recv((r.comm_id, src, r.self_world), -1),
            None => Side::None,
        }
    }

    /// One end of a message (`send`: its send, else its receive): drawn at once with
    /// the other end when that was read (the first pending one whose tag matches, the
    /// receive's tag may be a wildcard), else kept.
    pub fn meet(
        &mut self,
        w: &mut Writer,
        names: &mut Names,
        flows: &mut u64,
        pair: Pair,
        end: End,
        send: bool,
    ) {
        let others = if send {
            &mut self.recvs
        } else {
            &mut self.sends
        };
        let pairs = |o: &End| if send { (end, *o) } else { (*o, end) };
        if let Some(q) = others.get_mut(&pair)
            && let Some(at) = q.iter().position(|o| {
                let (s, r) = pairs(o);
                r.tag < 0 || r.tag == s.tag
            })
        {
            let other = q.remove(at).expect("found");
            if q.is_empty() {
                others.remove(&pair);
            }
            self.pending -= 1;
            let (s, r) = pairs(&other);
            return arrow(w, names, flows, pair, &s, &r);
        }
        self.keep(send, pair, end);
    }

    fn keep(&mut self, send: bool, pair: Pair, end: End) {
        if self.pending >= MAX_PENDING {
            // Let the oldest end of the longest queue go.
            let map = if send {
                &mut self.sends
            } else {
                &mut self.recvs
            };
            if let Some(q) = map.values_mut().max_by_key(|q| q.len()) {
                q.pop_front();
                self.pending -= 1;
                self.let_go += 1;
            }
            map.retain(|_, q| !q.is_empty());
        }
        let map = if send {
            &mut self.sends
        } else {
            &mut self.recvs
        };
        map.entry(pair).or_default().push_back(end);
        self.pending += 1;
    }
}

/// The arrow of one message.
fn arrow(
    w: &mut Writer,
    names: &mut Names,
    flows: &mut u64,
    (comm, src, dst): Pair,
    send: &End,
    recv: &End,
) {
    *flows += 1;
    let id = *flows;
    let bytes = if recv.bytes >= 0 {
        recv.bytes
    } else {
        send.bytes
    };
    let to = names.fixed(w, "send to rank", dst as u32, || {
        format!("send to rank {dst}")
    });
    track_event(
        w,
        send.ts,
        send.track,
        &Ev {
            ty: INSTANT,
            name: Some((&to).into()),
            flow: Some(id),
            args: &[
                ("bytes", Arg::Int(bytes)),
                ("tag", Arg::Int(i64::from(send.tag))),
                ("communicator", Arg::Int(i64::from(comm))),
            ],
            ..Ev::default()
        },
    );
    let from = names.fixed(w, "received from rank", src as u32, || {
        format!("received from rank {src}")
    });
    track_event(
        w,
        recv.ts.max(send.ts),
        recv.track,
        &Ev {
            ty: INSTANT,
            name: Some((&from).into()),
            terminating_flow: Some(id),
            args: &[("bytes", Arg::Int(bytes))],
            ..Ev::default()
        },
    );
}
