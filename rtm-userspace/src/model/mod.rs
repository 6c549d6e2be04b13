//! The model: pure aggregation of decoded events. No aya, no I/O, no clocks: everything
//! here is driven by the events and arguments it is given, so it is tested without
//! root. By subject: the sync graph (`sync`: threads and the objects they wait on) and
//! the views every output reads (`views`: snapshots of it). The analyses built as vertical slices keep their
//! models in their own folders (`analyses/`).
//! Distributions (`dist`) serve them all.

pub mod blocked;
pub(crate) mod dist;
pub(crate) mod stacks;
pub(crate) mod sync;
pub(crate) mod views;
pub(crate) mod wait_kind;

pub use dist::HistogramBudget;
pub use sync::{Limits, SyncGraph};
pub use views::{
    EdgeView, ObjectView, ThreadView, WaitsForView,
    rows::{ObjectRow, Row},
    snapshot::{Sections, Snapshot, Window},
};
