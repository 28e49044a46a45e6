//! How the UI says things, the same in every pane: counts, ages and countdowns in words
//! (`words`), states and severities as glyphs and colours, and the styles every pane shares
//! (`glyphs`). Pure.

pub mod glyphs;
pub mod words;
