//! Readers: everything that brings data from the kernel into the model. The event
//! reader (`events`, over `ring_buffer`) hides the BPF ring buffers and counts what
//! could not be decoded; the loss counters report what the eBPF side could not send;
//! the mmap-record reader follows address spaces; the futex reader takes waits the
//! programs have not sent yet; `ambient` and `counters` sample procfs and perf
//! counters; `bpf_stats` measures the eBPF side itself.

// Statistics records whose fields are the kernel's own figures (/proc, perf, BPF
// fdinfo), named as there and described by their type's doc.
#[allow(missing_docs)]
pub(crate) mod ambient;
// Statistics records whose fields are the kernel's own figures (/proc, perf, BPF
// fdinfo), named as there and described by their type's doc.
#[allow(missing_docs)]
pub(crate) mod bpf_stats;
// Statistics records whose fields are the kernel's own figures (/proc, perf, BPF
// fdinfo), named as there and described by their type's doc.
#[allow(missing_docs)]
pub(crate) mod counters;
pub(crate) mod events;
pub(crate) mod futex_done;
pub(crate) mod futex_sums;
pub(crate) mod losses;
// Statistics records whose fields are the kernel's own figures (/proc, perf, BPF
// fdinfo), named as there and described by their type's doc.
#[allow(missing_docs)]
pub(crate) mod mmap_records;
pub(crate) mod ring_buffer;

pub use events::{EventReader, ReaderStats};
pub use futex_done::LeftWaits;
pub use futex_sums::FutexSums;
pub use losses::Losses;
pub use mmap_records::{MmapRecord, MmapRecordReader};
