//! Readers: everything that brings data from the kernel into the model. The ring-buffer
//! reader hides aya's ring buffer and counts what could not be decoded; the loss counters
//! report what the eBPF side could not send; the mapping reader follows address spaces.

pub mod ambient;
pub mod counters;
pub mod losses;
pub mod mappings;
pub mod ring;
pub mod ring_map;

pub use losses::Losses;
pub use mappings::{MappingReader, MappingRecord};
pub use ring::{EventReader, ReaderStats};
