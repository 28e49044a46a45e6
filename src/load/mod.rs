//! Input from files, bottom up: the error every step returns ([`error`]), which files, read
//! within which bounds ([`input`]), what their text must be ([`scan`]), how values are read
//! ([`strict`]) and which versions of our kinds are accepted ([`versions`]); [`files`] puts
//! them together. [`cel`]: templates' CEL parsed with the stack the parser needs, answers
//! remembered (what `Options::default()` checks with).

pub mod cel;
pub mod error;
pub mod files;
pub mod input;
pub mod scan;
pub mod strict;
pub mod versions;
