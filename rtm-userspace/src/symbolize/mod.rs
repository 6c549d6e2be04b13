//! Turning addresses of traced processes into names.

pub mod objects;

pub use objects::ObjectNamer;
