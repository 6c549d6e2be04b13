//! Communicators created during the trace, for implementations whose handles cannot be
//! followed to their members from a probe (MPICH: integer handles into tables that are
//! not exported). Every rank's MPI_Comm_split and MPI_Comm_dup is recorded; the k-th
//! creation on a parent communicator is the same collective call in every member, so
//! the ranks that made it with one color form one new communicator, ordered by key and
//! then by rank in the parent, exactly as MPI defines it. A peer's rank in such a
//! communicator is translated to a world rank only when every member of the parent was
//! traced (otherwise the order cannot be known), never guessed.

use foldhash::HashMap;
use rtm_common::MPI_UNDEFINED;

/// A communicator as the model names it: 0 is MPI_COMM_WORLD, the others are the
/// creations seen, numbered in the order first seen (the same in every rank).
pub type CommId = u32;
/// MPI_COMM_WORLD.
pub const WORLD: CommId = 0;

/// Most communicators followed; creations beyond are counted.
const MAX_COMMS: usize = 4096;

#[derive(Debug, Clone)]
struct Creation {
    parent: CommId,
    /// The k-th creation on the parent.
    k: u32,
    /// (process, key) of each member, in arrival order.
    members: Vec<(u32, i32)>,
}

/// The communicators created on the traced processes.
#[derive(Debug, Default)]
pub struct Communicators {
    /// (process, handle) -> communicator; a freed handle reused is overwritten.
    handles: HashMap<(u32, u64), CommId>,
    /// (parent, k-th creation on it, color) -> communicator.
    ids: HashMap<(CommId, u32, i32), CommId>,
    /// Communicator i + 1.
    created: Vec<Creation>,
    /// (process, parent) -> creations seen so far.
    sequence: HashMap<(u32, CommId), u32>,
    /// (parent, k) -> processes that took part (all colors).
    participants: HashMap<(CommId, u32), u32>,
    /// Creations not followed (parent unknown, or over the cap).
    pub lost: u64,
}

impl Communicators {
    /// The communicator `handle` names in `pid`, `world` being MPI_COMM_WORLD's handle.
    pub fn id(&self, pid: u32, handle: u64, world: u64) -> Option<CommId> {
        if handle == world {
            return Some(WORLD);
        }
        self.handles.get(&(pid, handle)).copied()
    }

    /// `pid` created `new` from `parent` with `color` (None: a duplicate) and `key`.
    pub fn create(
        &mut self,
        pid: u32,
        parent: u64,
        world: u64,
        color: Option<i32>,
        key: i32,
        new: u64,
    ) {
        let Some(parent) = self.id(pid, parent, world) else {
            self.lost += 1;
            return;
        };
        let seq = self.sequence.entry((pid, parent)).or_default();
        let k = *seq;
        *seq += 1;
        *self.participants.entry((parent, k)).or_default() += 1;
        let color = match color {
            Some(MPI_UNDEFINED) => return,
            Some(c) => c,
            None => i32::MIN,
        };
        let next = self.created.len() as CommId + 1;
        let id = *self.ids.entry((parent, k, color)).or_insert(next);
        if id == next {
            if self.created.len() >= MAX_COMMS {
                self.ids.remove(&(parent, k, color));
                self.lost += 1;
                return;
            }
            self.created.push(Creation {
                parent,
                k,
                members: Vec::new(),
            });
        }
        self.created[id as usize - 1].members.push((pid, key));
        self.handles.insert((pid, new), id);
    }

    /// Each communicator's members as world ranks, in rank order, where every member of
    /// its parent was traced; `world_of` gives a process's world rank, `world_size` the
    /// job's size.
    pub fn members(
        &self,
        world_of: &dyn Fn(u32) -> Option<i32>,
        world_size: Option<i32>,
    ) -> HashMap<CommId, Vec<i32>> {
        let mut out: HashMap<CommId, Vec<i32>> = HashMap::default();
        let mut parent_size: HashMap<CommId, usize> = HashMap::default();
        if let Some(n) = world_size {
            parent_size.insert(WORLD, n.max(0) as usize);
        }
        // Creations are numbered in the order first seen and a parent is always seen
        // before its children, so one pass in order resolves the whole tree.
        for (i, c) in self.created.iter().enumerate() {
            let id = i as CommId + 1;
            let (parent, k) = (c.parent, c.k);
            let Some(&size) = parent_size.get(&parent) else {
                continue;
            };
            if self.participants.get(&(parent, k)).copied().unwrap_or(0) as usize != size {
                continue;
            }
            let parent_rank = |w: i32| -> Option<usize> {
                if parent == WORLD {
                    Some(w as usize)
                } else {
                    out.get(&parent)?.iter().position(|&m| m == w)
                }
            };
            let mut ranked: Vec<(i32, usize, i32)> = Vec::with_capacity(c.members.len());
            for &(pid, key) in &c.members {
                let Some(w) = world_of(pid) else {
                    break;
                };
                let Some(pr) = parent_rank(w) else {
                    break;
                };
                ranked.push((key, pr, w));
            }
            if ranked.len() != c.members.len() {
                continue;
            }
            ranked.sort_unstable();
            parent_size.insert(id, ranked.len());
            out.insert(id, ranked.into_iter().map(|(_, _, w)| w).collect());
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const W: u64 = rtm_common::MPICH_COMM_WORLD;

    #[test]
    fn split_orders_members_by_key_then_parent_rank() {
        let mut c = Communicators::default();
        // 4 ranks (pid 100 + rank), color = rank / 2, key = -rank: {1, 0} and {3, 2}.
        for r in 0..4u32 {
            c.create(100 + r, W, W, Some(r as i32 / 2), -(r as i32), 0x8400_0000);
        }
        // Then a duplicate of each half.
        for r in 0..4u32 {
            c.create(100 + r, 0x8400_0000, W, None, 0, 0x8400_0001);
        }
        let world_of = |pid: u32| Some(pid as i32 - 100);
        let m = c.members(&world_of, Some(4));
        let half0 = c.id(100, 0x8400_0000, W).expect("seen");
        let half1 = c.id(103, 0x8400_0000, W).expect("seen");
        assert_ne!(half0, half1, "same handle, different communicators");
        assert_eq!(m[&half0], vec![1, 0]);
        assert_eq!(m[&half1], vec![3, 2]);
        let dup = c.id(102, 0x8400_0001, W).expect("seen");
        assert_eq!(m[&dup], vec![3, 2]);
        assert_eq!(c.id(100, W, W), Some(WORLD));
    }

    #[test]
    fn incomplete_parents_and_undefined_colors_translate_nothing() {
        let mut c = Communicators::default();
        // Only 3 of 4 world ranks traced: the order of the new groups cannot be known.
        for r in 0..3u32 {
            c.create(100 + r, W, W, Some(0), 0, 0x8400_0000);
        }
        let world_of = |pid: u32| Some(pid as i32 - 100);
        assert!(c.members(&world_of, Some(4)).is_empty());
        // MPI_UNDEFINED joins no group but takes part in the call.
        c.create(103, W, W, Some(MPI_UNDEFINED), 0, 0x0400_0000);
        let m = c.members(&world_of, Some(4));
        let id = c.id(100, 0x8400_0000, W).expect("seen");
        assert_eq!(m[&id], vec![0, 1, 2]);
        assert_eq!(c.id(103, 0x0400_0000, W), None);
        // A parent never seen created is counted, not guessed.
        c.create(100, 0x8400_0777, W, Some(0), 0, 0x8400_0778);
        assert_eq!(c.lost, 1);
    }
}
