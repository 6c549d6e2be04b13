//! What each pthread operation means to the sync graph, in one table: which role the
//! thread takes, whether a successful call acquires the object (and holds it, shared
//! or exclusive), releases it, only tries, or wakes others, and how its failure is
//! told. The graph asks [`of`] and never lists operations itself.

use rtm_common::{Primitive, SyncOp};

use super::types::Role;

/// How a call reports failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// pthread style: the error number is the return value (EBUSY, ETIMEDOUT ...).
    ErrorNumber,
    /// sem_* style: -1, the error in errno (a try would have blocked, a timed wait
    /// timed out).
    MinusOne,
}

/// What one operation on one kind of object does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Semantics {
    /// How the thread uses the object (rwlocks: read or write).
    pub role: Role,
    /// A successful call acquires the object: counted as an acquisition, contended or
    /// not (mutexes, rwlocks, spinlocks, semaphores).
    pub acquires: bool,
    /// The acquisition starts a hold, ended by the release: exclusive (one owner) or
    /// shared (read locks). Semaphores are counted, not held: they have no owner.
    pub holds: Option<Hold>,
    /// The call releases the object (recorded at its entry).
    pub releases: bool,
    /// The call never blocks: "would block" is a failed try, and its time is no wait.
    pub is_try: bool,
    /// The call has a deadline: failing at it is a timeout.
    pub timed: bool,
    /// The call wakes others and waits for nothing (post, signal, broadcast, create).
    pub wakes: bool,
    /// Where it is called from is listed (not for posts and thread creation, which
    /// wait for nothing).
    pub has_call_site: bool,
    /// How failure is told.
    pub failure: Failure,
}

/// A hold's kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hold {
    /// One owner at a time.
    Exclusive,
    /// Held by several threads at once (read locks).
    Shared,
}

/// The semantics of `op` on a `primitive`.
pub fn of(primitive: Primitive, op: SyncOp) -> Semantics {
    use SyncOp::*;
    let role = match op {
        RdLock | TryRdLock | TimedRdLock => Role::Read,
        WrLock | TryWrLock | TimedWrLock => Role::Write,
        _ => Role::Use,
    };
    let acquires = matches!(
        primitive,
        Primitive::Mutex | Primitive::RwLock | Primitive::Spin | Primitive::Sem
    ) && !matches!(op, Unlock | Post);
    let holds = match (acquires, primitive, role) {
        (false, ..) | (true, Primitive::Sem, _) => None,
        (true, _, Role::Read) => Some(Hold::Shared),
        (true, ..) => Some(Hold::Exclusive),
    };
    Semantics {
        role,
        acquires,
        holds,
        releases: op == Unlock,
        is_try: matches!(op, TryLock | TryRdLock | TryWrLock | TryWait),
        timed: matches!(op, TimedLock | TimedRdLock | TimedWrLock | TimedWait),
        wakes: matches!(op, Post | Signal | Broadcast | Create),
        has_call_site: !matches!(op, Post | Create),
        failure: if primitive == Primitive::Sem {
            Failure::MinusOne
        } else {
            Failure::ErrorNumber
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_says_what_each_call_does() {
        let lock = of(Primitive::Mutex, SyncOp::Lock);
        assert!(lock.acquires && !lock.is_try && !lock.releases);
        assert_eq!(lock.holds, Some(Hold::Exclusive));
        assert!(of(Primitive::Mutex, SyncOp::TryLock).is_try);
        assert!(of(Primitive::Mutex, SyncOp::Unlock).releases);
        assert!(!of(Primitive::Mutex, SyncOp::Unlock).acquires);
        let rd = of(Primitive::RwLock, SyncOp::RdLock);
        assert_eq!((rd.role, rd.holds), (Role::Read, Some(Hold::Shared)));
        let wr = of(Primitive::RwLock, SyncOp::TimedWrLock);
        assert_eq!((wr.role, wr.holds), (Role::Write, Some(Hold::Exclusive)));
        let sem = of(Primitive::Sem, SyncOp::Wait);
        assert!(sem.acquires && sem.holds.is_none());
        assert_eq!(sem.failure, Failure::MinusOne);
        let post = of(Primitive::Sem, SyncOp::Post);
        assert!(post.wakes && !post.acquires && !post.has_call_site);
        let wait = of(Primitive::Cond, SyncOp::Wait);
        assert!(!wait.acquires && !wait.wakes && wait.has_call_site);
        assert!(of(Primitive::Cond, SyncOp::Broadcast).wakes);
        assert!(!of(Primitive::Barrier, SyncOp::Wait).acquires);
        let create = of(Primitive::Thread, SyncOp::Create);
        assert!(create.wakes && !create.has_call_site);
        assert!(!of(Primitive::Thread, SyncOp::Join).acquires);
    }
}
