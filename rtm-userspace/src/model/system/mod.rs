//! The system and the traced processes over time: ambient statistics turned into
//! intervals of rates and shares (`interval`, `ambient`), the thresholds that flag trouble in them
//! (`thresholds`), and performance counters (`counters`).

// Statistics records whose fields are the kernel's own figures (/proc, perf, BPF
// fdinfo), named as there and described by their type's doc.
#[allow(missing_docs)]
pub(crate) mod ambient;
// Statistics records whose fields are the kernel's own figures (/proc, perf, BPF
// fdinfo), named as there and described by their type's doc.
#[allow(missing_docs)]
pub(crate) mod counters;
// Statistics records whose fields are the kernel's own figures (/proc, perf, BPF
// fdinfo), named as there and described by their type's doc.
#[allow(missing_docs)]
pub(crate) mod interval;
// Statistics records whose fields are the kernel's own figures (/proc, perf, BPF
// fdinfo), named as there and described by their type's doc.
#[allow(missing_docs)]
pub(crate) mod thresholds;
