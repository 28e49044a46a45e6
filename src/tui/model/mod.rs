//! The UI's state and the one place it changes: what a source delivers (`data`), what can
//! happen (`action`), the one key table (`keymap`), the kubeconfig's contexts (`contexts`),
//! audit results kept (`violations`), the tree's cached items (`tree_view`), the texts of the
//! selection (`detail`), the state itself (`app`), and `update`, which changes it and never
//! draws.

pub mod action;
pub mod app;
pub mod contexts;
pub mod data;
pub mod detail;
pub mod keymap;
pub mod tree_view;
pub mod update;
pub mod violations;
