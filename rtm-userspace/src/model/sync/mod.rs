//! The sync graph: threads, the objects they synchronize on, and the edges between
//! them (counts, wait and hold distributions, who woke whom), built from sync and
//! lifecycle events. What each pthread operation means (acquire, release, try, shared
//! or exclusive) is one table, [`semantics`].

pub(crate) mod barrier;
pub(crate) mod edge;
pub(crate) mod graph;
pub(crate) mod holds;
pub(crate) mod order;
pub(crate) mod semantics;
pub(crate) mod types;

pub use edge::EdgeStats;
pub use graph::SyncGraph;
pub use types::*;
