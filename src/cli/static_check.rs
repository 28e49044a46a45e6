//! `check --static DIR`: the static manifests `render --static` wrote, judged against what
//! their constraints render to now (`core::render::check_static`). Below `report` and `live`,
//! which add its findings to `check`'s.

use super::args::{Cli, Command};
use super::exit;
use crate::core::{Finding, Options};
use crate::snapshot::Snapshot;
use anyhow::Context;

/// `check --static DIR`'s findings (none without the flag): the static manifests read like
/// `-f` input (file and line in errors, exit 2), judged by `core::render::check_static`.
pub fn static_findings(cli: &Cli, snap: &Snapshot, opts: &Options) -> anyhow::Result<Vec<Finding>> {
    let Some(Command::Check(c)) = &cli.command else {
        return Ok(Vec::new());
    };
    let Some(dir) = &c.static_dir else {
        return Ok(Vec::new());
    };
    if !dir.is_dir() {
        return Err(exit::usage(format!(
            "--static {}: not a folder (give the folder `render --static -o dir=…` wrote)",
            dir.display()
        )));
    }
    let read = crate::load::files::read_input(
        &[dir.display().to_string()],
        crate::load::input::ReadOptions {
            max_input_bytes: cli.input().max_input_bytes,
        },
    )
    .with_context(|| format!("reading the static manifests in {}", dir.display()))?;
    Ok(crate::core::render::check_static(
        snap,
        opts,
        &read.policies,
        &read.bindings,
    ))
}
