//! Readers: everything that brings data from the kernel into the model. The ring-buffer
//! reader hides aya's ring buffer and counts what could not be decoded; the loss counters
//! report what the eBPF side could not send; the mapping reader follows address spaces;
//! the futex reader takes waits the programs have not sent yet.

pub mod ambient;
pub mod bpf_stats;
pub mod counters;
pub mod futex_done;
pub mod losses;
pub mod mappings;
pub mod ring;
pub mod ring_map;

pub use futex_done::LeftWaits;
pub use losses::Losses;
pub use mappings::{MappingReader, MappingRecord};
pub use ring::{EventReader, ReaderStats};
