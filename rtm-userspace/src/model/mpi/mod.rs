//! The MPI task graph: ranks, the messages and bytes between them, collectives and
//! requests, built from MPI events (`graph`); its view for outputs (`view`); and the
//! joining of views written on several nodes (`merge`).

pub mod graph;
pub mod merge;
pub mod view;

pub use graph::TaskGraph;
pub use view::{RankEnv, SentTo, TaskView};
