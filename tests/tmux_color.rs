//! Colour follows `--color` and NO_COLOR everywhere: logs, clap's usage errors and the TUI on a
//! real terminal (tmux, read with `capture-pane -e`, which keeps the escape sequences), and
//! `--color=always` through a pipe.
//!
//! Needs tmux (skipped outside CI when missing, as tests/tmux_tui.rs).

// A scenario, not held to the limits on one function (Cargo.toml, `[workspace.lints]`).
#![allow(clippy::cognitive_complexity, clippy::too_many_lines)]

mod support;

use std::process::Command;
use support::tmux::{Tmux, require_tmux};

const BIN: &str = env!("CARGO_BIN_EXE_kubectl-vap");

fn demo() -> String {
    format!("{}/assets/demo", env!("CARGO_MANIFEST_DIR"))
}

/// The colour parameters of the SGR sequences in `text` (foreground/background, 8, 16, 256
/// and true colour; 39 and 49, "the default colour", are not colour).
fn colours(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find("\x1b[") {
        let after = &rest[start + 2..];
        let Some(end) = after.find(|c: char| !(c.is_ascii_digit() || c == ';')) else {
            break;
        };
        if after[end..].starts_with('m') {
            let params = &after[..end];
            let coloured = params.split(';').any(|p| {
                matches!(
                    p.parse::<u16>(),
                    Ok(30..=38 | 40..=48 | 90..=97 | 100..=107)
                )
            });
            if coloured {
                found.push(params.to_string());
            }
        }
        rest = &after[end..];
    }
    found
}

/// What the pane shows, escape sequences included.
fn screen_with_escapes(t: &Tmux) -> String {
    String::from_utf8_lossy(&t.run(&["capture-pane", "-t", "t", "-e", "-p"]).stdout).into_owned()
}

/// Runs `line` in the pane's shell, waits for its end marker, and returns the pane with
/// escapes; the pane is cleared first so each check sees only its own command.
fn run_in_pane(t: &Tmux, line: &str, marker: &str) -> String {
    t.text(&format!("clear; {line}; echo {marker}"));
    t.keys(&["Enter"]);
    t.wait_for(marker, |s| s.lines().any(|l| l.trim() == marker));
    screen_with_escapes(t)
}

#[test]
fn logs_and_usage_errors_follow_no_color_on_a_terminal() {
    if !require_tmux() {
        return;
    }
    let t = Tmux::start("colour", 200, 40);
    t.wait_text("shell$");
    // A bad --log filter is said as a WARN log line; an unknown flag is clap's usage error.
    let warn = format!("{BIN} --log 'x[[' check -f {} -o json >/dev/null", demo());
    let usage = format!("{BIN} check --no-such-flag");

    let plain = run_in_pane(&t, &format!("{warn}; {usage}"), "DONE-1");
    assert!(plain.contains("is not a log filter"), "{plain}");
    assert!(
        !colours(&plain).is_empty(),
        "on a terminal the log and the error are coloured:\n{plain:?}"
    );

    for (env, marker) in [("NO_COLOR=1", "DONE-2"), ("", "DONE-3")] {
        let flag = if env.is_empty() { "--color=never" } else { "" };
        let line = format!(
            "{env} {BIN} --log 'x[[' {flag} check -f {} -o json >/dev/null; {env} {BIN} check {flag} --no-such-flag",
            demo()
        );
        let s = run_in_pane(&t, &line, marker);
        assert!(s.contains("is not a log filter"), "{s}");
        assert!(s.contains("--no-such-flag"), "{s}");
        assert_eq!(colours(&s), Vec::<String>::new(), "{env}{flag}:\n{s:?}");
    }
}

#[test]
fn the_tui_has_no_colour_with_no_color() {
    if !require_tmux() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("tui.log");
    let t = Tmux::start("colour-tui", 160, 45);
    t.wait_text("shell$");
    for (env, coloured) in [("", true), ("NO_COLOR=1", false)] {
        t.text(&format!(
            "clear; {env} KUBECTL_VAP_LOG_FILE={} {BIN} -f {}",
            log.display(),
            demo()
        ));
        t.keys(&["Enter"]);
        // Loaded, a row selected.
        t.wait_text("Tree (1/");
        let s = screen_with_escapes(&t);
        assert_eq!(
            !colours(&s).is_empty(),
            coloured,
            "{env:?}: colours {:?}:\n{s}",
            colours(&s)
        );
        // The selection is still to be seen: reverse video stands in for its background.
        if !coloured {
            assert!(
                s.contains("\x1b[7m") || s.contains(";7m"),
                "the selection in reverse video:\n{s:?}"
            );
        }
        t.keys(&["q"]);
        t.wait_text("shell$");
    }
}

#[test]
fn color_always_colours_a_pipe_and_auto_does_not() {
    let run = |args: &[&str]| {
        let out = Command::new(BIN)
            .args(args)
            .args(["check", "-f", &demo(), "-o", "json"])
            .env_remove("NO_COLOR")
            .output()
            .expect("runs");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let always = run(&["--color=always", "--log", "x[["]);
    assert!(!colours(&always).is_empty(), "{always:?}");
    let auto = run(&["--log", "x[["]);
    assert!(auto.contains("is not a log filter"), "{auto}");
    assert_eq!(colours(&auto), Vec::<String>::new(), "{auto:?}");
    // After the command too, as every global flag.
    let after = Command::new(BIN)
        .args(["check", "--color", "always", "--log", "x[[", "-f", &demo()])
        .output()
        .expect("runs");
    assert!(!colours(&String::from_utf8_lossy(&after.stderr)).is_empty());
}
