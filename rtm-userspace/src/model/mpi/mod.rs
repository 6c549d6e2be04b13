//! The MPI rank graph: ranks, the messages and bytes between them, collectives and
//! requests, built from MPI events (`graph`); its view for outputs (`view`); and the
//! joining of views written on several nodes (`merge`).
//!
//! The outputs still call it the task graph: the JSON document's `task_graph`, the
//! report's and the DOT file's headings.

pub(crate) mod graph;
pub(crate) mod merge;
pub(crate) mod view;

pub use graph::RankGraph;
pub use view::{RankEnv, RankGraphView, SentTo};
