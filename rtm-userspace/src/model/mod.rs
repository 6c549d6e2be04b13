//! The model: pure aggregation of decoded events into graphs. No aya, no I/O, no clocks:
//! everything here is driven by the events and arguments it is given, so it is tested
//! without root.

pub mod dist;
pub mod snapshot;
pub mod sync_graph;

pub use dist::{Dist, DistSummary, HistogramBudget};
pub use snapshot::{EdgeView, ObjectView, Snapshot, ThreadView, Window};
pub use sync_graph::{Counts, Limits, SyncGraph};
