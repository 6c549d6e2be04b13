//! The model: pure aggregation of decoded events into graphs. No aya, no I/O, no clocks:
//! everything here is driven by the events and arguments it is given, so it is tested
//! without root.

pub mod ambient;
pub mod barrier;
pub mod counters;
pub mod dist;
pub mod edge;
pub mod holds;
pub mod rows;
pub mod snapshot;
pub mod sync_graph;
pub mod sync_types;
pub mod task_graph;
pub mod task_merge;
pub mod task_view;
pub mod thresholds;
pub mod views;

pub use dist::{Dist, DistSummary, HistogramBudget};
pub use rows::{EdgeRow, ObjectRow, Row};
pub use snapshot::{Snapshot, Window};
pub use sync_graph::{Counts, Limits, SyncGraph};
pub use task_graph::TaskGraph;
pub use task_view::{RankEnv, TaskView};
pub use views::{BarrierView, EdgeView, ObjectView, ThreadView, WaitsForView};
