//! A real terminal for the TUI tests: a private tmux server driven with send-keys and read
//! with capture-pane. Outside CI a missing tmux skips the test (with a message); with
//! `CI=true` it fails it, so CI never passes without running it.

use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// How long a screen may take to show what a test waits for.
pub const WAIT: Duration = Duration::from_secs(15);

pub fn tmux_available() -> bool {
    Command::new("tmux")
        .arg("-V")
        .output()
        .is_ok_and(|o| o.status.success())
}

pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false" && v != "0")
}

/// A private tmux server (its own socket), killed on drop.
pub struct Tmux {
    socket: String,
}

impl Tmux {
    pub fn start(name: &str, width: u16, height: u16) -> Tmux {
        let t = Tmux {
            socket: format!("kubectl-vap-{name}-{}", std::process::id()),
        };
        let out = t.run(&[
            "new-session",
            "-d",
            "-s",
            "t",
            "-x",
            &width.to_string(),
            "-y",
            &height.to_string(),
            // The command line's defaults (`--policy-shape auto`), as a user has them.
            "env -u KUBECTL_VAP_POLICY_SHAPE PS1='shell$ ' sh",
        ]);
        assert!(out.status.success(), "tmux new-session: {out:?}");
        t
    }

    pub fn run(&self, args: &[&str]) -> Output {
        Command::new("tmux")
            .arg("-L")
            .arg(&self.socket)
            .arg("-f")
            .arg("/dev/null")
            .args(args)
            .output()
            .expect("tmux runs")
    }

    pub fn keys(&self, keys: &[&str]) {
        let mut args = vec!["send-keys", "-t", "t"];
        args.extend_from_slice(keys);
        assert!(self.run(&args).status.success());
    }

    pub fn text(&self, text: &str) {
        assert!(
            self.run(&["send-keys", "-t", "t", "-l", text])
                .status
                .success()
        );
    }

    pub fn screen(&self) -> String {
        String::from_utf8_lossy(&self.run(&["capture-pane", "-t", "t", "-p"]).stdout).into_owned()
    }

    pub fn alternate_on(&self) -> bool {
        let out = self.run(&["display-message", "-p", "-t", "t", "#{alternate_on}"]);
        String::from_utf8_lossy(&out.stdout).trim() == "1"
    }

    /// Waits until the screen satisfies `ok` and has settled (two captures 50 ms apart agree:
    /// a capture can land in the middle of a frame being written); fails with the last screen.
    pub fn wait_for(&self, what: &str, ok: impl Fn(&str) -> bool) -> String {
        let start = Instant::now();
        loop {
            let s = self.screen();
            if ok(&s) {
                std::thread::sleep(Duration::from_millis(50));
                let again = self.screen();
                if again == s {
                    return s;
                }
                continue;
            }
            if start.elapsed() > WAIT {
                panic!("timed out waiting for {what}; the screen:\n{s}");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub fn wait_text(&self, text: &str) -> String {
        self.wait_for(&format!("{text:?}"), |s| s.contains(text))
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.run(&["kill-server"]);
    }
}

pub fn require_tmux() -> bool {
    if tmux_available() {
        return true;
    }
    if in_ci() {
        panic!(
            "tmux is required for the real-terminal TUI test in CI (CI=true): install it (e.g. `apt-get install tmux`)"
        );
    }
    eprintln!("SKIPPED: tmux is not installed (in CI this test fails instead)");
    false
}
