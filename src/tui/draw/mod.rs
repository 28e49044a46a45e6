//! Drawing: lines wrapped, cut and fitted to columns (`lines`), the frame drawn from the state
//! (`view`; it notes what it measured for `update`), and the terminal's clipboard
//! (`terminal`).

pub mod lines;
pub mod terminal;
pub mod view;
