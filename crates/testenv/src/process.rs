//! Child processes that cannot outlive the test binary.
//!
//! `PR_SET_PDEATHSIG` fires when the *thread* that forked the child exits, not the process.
//! cargo's test harness runs every test on its own short-lived thread, so children are forked
//! by one dedicated thread that lives as long as the process.

use std::io;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command};
use std::sync::OnceLock;
use std::sync::mpsc;
use std::time::{Duration, Instant};

type SpawnRequest = (Command, mpsc::Sender<io::Result<Child>>);

/// Spawns `cmd` from the long-lived spawner thread with `SIGKILL` as its parent-death signal:
/// it dies with this process, whatever ends it (Ctrl-C, SIGTERM, SIGKILL, a panic), and not
/// before.
pub fn spawn_tied_to_process(mut cmd: Command) -> io::Result<Child> {
    let parent = std::process::id();
    // SAFETY: the closure runs between fork and exec and only makes async-signal-safe calls
    // (prctl, getppid, _exit).
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(io::Error::last_os_error());
            }
            // The parent may have died before prctl took effect: then nobody would kill us.
            if libc::getppid() as u32 != parent {
                libc::_exit(1);
            }
            Ok(())
        });
    }
    let (reply_tx, reply_rx) = mpsc::channel();
    spawner()
        .send((cmd, reply_tx))
        .map_err(|_| io::Error::other("testenv spawner thread is gone"))?;
    reply_rx
        .recv()
        .map_err(|_| io::Error::other("testenv spawner thread dropped the request"))?
}

fn spawner() -> &'static mpsc::Sender<SpawnRequest> {
    static SPAWNER: OnceLock<mpsc::Sender<SpawnRequest>> = OnceLock::new();
    SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<SpawnRequest>();
        std::thread::Builder::new()
            .name("testenv-spawner".into())
            .spawn(move || {
                // The sender lives in a static, so this loop (and the thread) never ends
                // before the process does.
                for (mut cmd, reply) in rx {
                    let _ = reply.send(cmd.spawn());
                }
            })
            .expect("cannot start the testenv spawner thread");
        tx
    })
}

/// Sends SIGTERM, waits up to `grace`, then SIGKILLs. Always reaps the child.
pub(crate) fn terminate(child: &mut Child, grace: Duration) {
    if let Ok(Some(_)) = child.try_wait() {
        return;
    }
    let pid = child.id() as libc::pid_t;
    // SAFETY: plain kill(2) on our own un-reaped child, so the pid cannot have been reused.
    unsafe {
        libc::kill(pid, libc::SIGTERM);
    }
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// How a stopped child ended: the signal it was sent, how it exited, and how long after.
#[derive(Debug, Clone)]
pub struct Stopped {
    /// The signal the harness sent: `SIGTERM` or `SIGKILL`.
    pub sent: &'static str,
    /// Whether the harness had to send SIGKILL after `sent` (SIGTERM not obeyed in time).
    pub killed_after_wait: bool,
    pub status: Option<std::process::ExitStatus>,
    pub took: Duration,
}

impl std::fmt::Display for Stopped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use std::os::unix::process::ExitStatusExt;
        let ended = match self.status {
            Some(s) => match (s.code(), s.signal()) {
                (Some(code), _) => format!("exited with code {code}"),
                (None, Some(sig)) => format!("was ended by {}", signal_name(sig)),
                _ => format!("ended ({s})"),
            },
            None => "could not be reaped".to_string(),
        };
        let how = if self.killed_after_wait {
            format!("sent {}, not gone in time, then SIGKILL", self.sent)
        } else {
            format!("sent {}", self.sent)
        };
        write!(f, "{how}; it {ended} after {:.1}s", self.took.as_secs_f64())
    }
}

fn signal_name(sig: i32) -> String {
    match sig {
        libc::SIGTERM => "SIGTERM".into(),
        libc::SIGKILL => "SIGKILL".into(),
        libc::SIGINT => "SIGINT".into(),
        libc::SIGABRT => "SIGABRT".into(),
        other => format!("signal {other}"),
    }
}

/// Sends SIGTERM and waits up to `bound` for the child to exit by itself; if it has not,
/// SIGKILLs it and says so (`Err`): a stop that claims to be a SIGTERM must not quietly be a
/// SIGKILL. Always reaps the child.
pub(crate) fn terminate_waiting(child: &mut Child, bound: Duration) -> Result<Stopped, Stopped> {
    let start = Instant::now();
    let stopped = |status, killed_after_wait| Stopped {
        sent: "SIGTERM",
        killed_after_wait,
        status,
        took: start.elapsed(),
    };
    if let Ok(Some(status)) = child.try_wait() {
        return Ok(stopped(Some(status), false));
    }
    let pid = child.id() as libc::pid_t;
    // SAFETY: plain kill(2) on our own un-reaped child, so the pid cannot have been reused.
    unsafe {
        libc::kill(pid, libc::SIGTERM);
    }
    let deadline = start + bound;
    while Instant::now() < deadline {
        if let Ok(Some(status)) = child.try_wait() {
            return Ok(stopped(Some(status), false));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    Err(stopped(child.wait().ok(), true))
}

/// SIGKILLs the child and reaps it.
pub(crate) fn kill(child: &mut Child) -> Stopped {
    let start = Instant::now();
    let _ = child.kill();
    Stopped {
        sent: "SIGKILL",
        killed_after_wait: false,
        status: child.wait().ok(),
        took: start.elapsed(),
    }
}

/// Resident memory of a process in KiB, from `/proc/<pid>/status`.
pub fn rss_kib(pid: u32) -> Option<u64> {
    status_kib(pid, "VmRSS:")
}

/// Peak resident memory (VmHWM) of a process in KiB, from `/proc/<pid>/status`.
pub fn peak_rss_kib(pid: u32) -> Option<u64> {
    status_kib(pid, "VmHWM:")
}

fn status_kib(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|n| n.parse().ok())
}

/// CPU seconds (user + system) process `pid` has used, from `/proc/<pid>/stat`; 0 when it is
/// gone.
pub fn cpu_secs(pid: u32) -> f64 {
    cpu_secs_of(&pid.to_string())
}

/// CPU seconds (user + system) this process has used.
pub fn own_cpu_secs() -> f64 {
    cpu_secs_of("self")
}

fn cpu_secs_of(pid: &str) -> f64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0.0;
    };
    // Fields after the command name (which may hold spaces) start at field 3.
    let Some((_, rest)) = stat.rsplit_once(") ") else {
        return 0.0;
    };
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // utime and stime are fields 14 and 15 (indices 11 and 12 here), in clock ticks of 1/100 s.
    (ticks(11) + ticks(12)) / 100.0
}

/// Runs `cmd` and returns its standard output; fails the test (with the command, its status
/// and its standard error) unless it succeeds.
pub fn stdout_of(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Sends `signal` (`libc::SIGTERM`, `SIGSTOP`, ...) to `pid`, a child of this process.
pub fn signal(pid: u32, signal: i32) {
    // SAFETY: plain kill(2); the callers name their own children.
    unsafe {
        libc::kill(pid as libc::pid_t, signal);
    }
}
