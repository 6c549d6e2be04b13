//! The sync graph: threads, the objects they synchronize on, and the edges between
//! them (counts, wait and hold distributions, who woke whom), built from sync and
//! lifecycle events. What each pthread operation means (acquire, release, try, shared
//! or exclusive) is one table, [`semantics`].

pub mod barrier;
pub mod edge;
pub mod graph;
pub mod holds;
pub mod order;
pub mod semantics;
pub mod types;

pub use edge::{Count, EdgeStats, Span};
pub use graph::SyncGraph;
pub use types::*;
