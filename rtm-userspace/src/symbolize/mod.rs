//! Turning addresses of traced processes into names.

pub(crate) mod code;
pub(crate) mod debuginfo;
pub mod objects;
pub(crate) mod unwind;

pub use code::CodeNamer;
pub use objects::ObjectNamer;
pub use unwind::StackUnwinder;
