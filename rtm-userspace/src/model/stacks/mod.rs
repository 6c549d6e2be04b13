//! Call stacks of contended waits: the table they are counted in (`table`) and the
//! view the outputs show (`view`).

mod table;
mod view;

pub use table::*;
pub use view::*;
