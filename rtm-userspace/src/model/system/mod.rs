//! The system and the traced processes over time: ambient statistics turned into
//! intervals of rates and shares (`interval`, `ambient`), the thresholds that flag trouble in them
//! (`thresholds`), and performance counters (`counters`).

pub mod ambient;
pub mod counters;
pub mod interval;
pub mod thresholds;
