//! Input from files, bottom up: the error every step returns ([`error`]), which files, read
//! within which bounds ([`input`]), what their text must be ([`scan`]), how values are read
//! ([`strict`]) and which versions of our kinds are accepted ([`versions`]); [`files`] puts
//! them together. [`cel_syntax`]: templates' CEL parsed (syntax only); [`cel_rename`]: a
//! template's `variables.<name>` renamed on the parsed form (one VAP holding several
//! constraints); [`cel`]: those parses on a thread with the stack they need, answers remembered
//! (what `cel::default_options()` checks with).

pub mod cel;
pub mod cel_rename;
pub mod cel_syntax;
pub mod error;
pub mod files;
pub mod input;
pub mod scan;
pub mod strict;
pub mod versions;
