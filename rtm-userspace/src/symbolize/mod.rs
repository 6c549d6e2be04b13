//! Turning addresses of traced processes into names.

pub mod code;
pub mod debuginfo;
pub mod objects;
pub mod unwind;

pub use code::CodeNamer;
pub use objects::ObjectNamer;
pub use unwind::StackUnwinder;
