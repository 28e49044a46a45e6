//! The hostile-input corpus: what a pull request can put in front of `check -f` / `plan -f`.
//! Every case runs the real binary under a memory limit (RLIMIT_AS) and a time limit, and
//! expects a clear outcome — exit 2 with a message naming the file (and line, where there is
//! one), or findings — never a hang, a panic, a crash or unbounded memory. The assertion is on
//! the outcome only, never on elapsed time: the time limit only turns a hang into a failure.
//!
//! Static inputs live in `tests/fixtures/hostile/`; inputs that cannot be stored in git (FIFOs,
//! sockets, symlink loops, device links, big files) are made here at run time.

// A scenario, not held to the limits on one function (Cargo.toml, `[workspace.lints]`).
#![allow(clippy::cognitive_complexity, clippy::too_many_lines)]

use std::ffi::OsString;
use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Address-space limit of every run: far above what any case needs when handled well, far
/// below what an unbounded read of `/dev/zero` reaches.
const MEMORY_LIMIT: u64 = 1 << 30;
/// A run that has not exited by then is killed and counts as a hang.
const TIME_LIMIT: Duration = Duration::from_secs(20);

fn fixture(name: &str) -> String {
    format!(
        "{}/tests/fixtures/hostile/{name}",
        env!("CARGO_MANIFEST_DIR")
    )
}

/// What the run is given on standard input.
#[derive(Clone, Copy)]
enum Stdin {
    /// No input at all: the pipe is closed (`</dev/null` in a shell that has none).
    Closed,
    /// An endless stream of zero bytes.
    DevZero,
}

/// Where the expected fragment is looked for.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Stream {
    Stdout,
    Stderr,
}

struct Case {
    name: &'static str,
    /// Builds the input under the case's own folder and returns the arguments.
    args: fn(&Path) -> Vec<OsString>,
    stdin: Option<Stdin>,
    /// Run as `nobody` (so permissions apply even when the tests run as root).
    unprivileged: bool,
    code: i32,
    stream: Stream,
    fragment: &'static str,
}

fn check(path: impl Into<OsString>) -> Vec<OsString> {
    vec!["check".into(), "-f".into(), path.into()]
}

fn write(dir: &Path, name: &str, data: &[u8]) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, data).expect("write input");
    p
}

#[allow(unsafe_code, reason = "libc's mkfifo: test support")]
fn mkfifo(p: &Path) {
    let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).expect("no NUL in path");
    // SAFETY: a valid NUL-terminated path; mkfifo has no other preconditions.
    let rc = unsafe { libc::mkfifo(c.as_ptr(), 0o644) };
    assert_eq!(rc, 0, "mkfifo {}", p.display());
}

fn symlink(target: impl AsRef<Path>, link: &Path) {
    std::os::unix::fs::symlink(target, link).expect("symlink");
}

const CLEAN: &str = "clean.yaml";

/// A List of `n` ConfigMaps, YAML block style.
fn big_list(n: usize) -> String {
    let mut s = String::from("apiVersion: v1\nkind: List\nitems:\n");
    for i in 0..n {
        s.push_str(&format!(
            "- apiVersion: v1\n  kind: ConfigMap\n  metadata: {{name: c{i}}}\n"
        ));
    }
    s
}

fn cases() -> Vec<Case> {
    use Stream::*;
    let case = |name, args, code, stream, fragment| Case {
        name,
        args,
        stdin: None,
        unprivileged: false,
        code,
        stream,
        fragment,
    };
    vec![
        // ── things that are not regular files ──────────────────────────────────────────────
        case(
            "fifo given",
            |d| {
                let p = d.join("pipe.yaml");
                mkfifo(&p);
                check(p)
            },
            2,
            Stderr,
            "pipe.yaml: is a FIFO",
        ),
        case(
            "fifo in a folder",
            |d| {
                std::fs::create_dir(d.join("in")).expect("mkdir");
                write(
                    &d.join("in"),
                    "a.yaml",
                    include_bytes!("fixtures/hostile/clean.yaml"),
                );
                mkfifo(&d.join("in/b.yaml"));
                check(d.join("in"))
            },
            2,
            Stderr,
            "b.yaml: is a FIFO",
        ),
        case(
            "socket in a folder",
            |d| {
                std::fs::create_dir(d.join("in")).expect("mkdir");
                // The listener is closed when this returns; the socket file stays.
                std::os::unix::net::UnixListener::bind(d.join("in/s.yaml")).expect("bind");
                check(d.join("in"))
            },
            2,
            Stderr,
            "s.yaml: is a socket",
        ),
        case(
            "/dev/zero given",
            |_| check("/dev/zero"),
            2,
            Stderr,
            "/dev/zero: is a character device",
        ),
        case(
            "a .yaml link to /dev/zero in a folder",
            |d| {
                std::fs::create_dir(d.join("in")).expect("mkdir");
                symlink("/dev/zero", &d.join("in/zero.yaml"));
                check(d.join("in"))
            },
            2,
            Stderr,
            "zero.yaml: is a character device",
        ),
        case(
            "/dev/null given",
            |_| check("/dev/null"),
            2,
            Stderr,
            "/dev/null: is a character device",
        ),
        // ── empty input must not pass a gate ───────────────────────────────────────────────
        case(
            "empty file",
            |_| check(fixture("empty.yaml")),
            2,
            Stderr,
            "no Kubernetes objects in",
        ),
        case(
            "comments only",
            |_| check(fixture("comments-only.yaml")),
            2,
            Stderr,
            "no Kubernetes objects in",
        ),
        Case {
            stdin: Some(Stdin::Closed),
            ..case(
                "closed stdin",
                |_| check("-"),
                2,
                Stderr,
                "no Kubernetes objects in <stdin>",
            )
        },
        case(
            "plan on an empty file",
            |_| vec!["plan".into(), "-f".into(), fixture("empty.yaml").into()],
            2,
            Stderr,
            "no Kubernetes objects in",
        ),
        // ── size ───────────────────────────────────────────────────────────────────────────
        Case {
            stdin: Some(Stdin::DevZero),
            ..case(
                "endless stdin",
                |_| check("-"),
                2,
                Stderr,
                "--max-input-bytes",
            )
        },
        case(
            "a file over the default cap",
            |d| {
                let p = d.join("huge.yaml");
                let f = std::fs::File::create(&p).expect("create");
                // Sparse: costs no disk, reads as 65 MiB of zero bytes.
                f.set_len(65 << 20).expect("set_len");
                check(p)
            },
            2,
            Stderr,
            "--max-input-bytes",
        ),
        case(
            "--max-input-bytes lowers the cap",
            |_| {
                let mut a = check(fixture(CLEAN));
                a.extend(["--max-input-bytes".into(), "100".into()]);
                a
            },
            2,
            Stderr,
            "more than 100 bytes",
        ),
        case(
            "--max-input-bytes takes a unit",
            |_| {
                let mut a = check(fixture(CLEAN));
                a.extend(["--max-input-bytes".into(), "1Ki".into()]);
                a
            },
            0,
            Stdout,
            "No findings",
        ),
        case(
            "a 10 MB single-line string",
            |d| {
                let mut s = String::from(
                    "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: big}\ndata: {x: \"",
                );
                s.push_str(&"x".repeat(10_000_000));
                s.push_str("\"}\n");
                check(write(d, "long.yaml", s.as_bytes()))
            },
            0,
            Stdout,
            "No findings",
        ),
        case(
            "a List of 100000 items",
            |d| check(write(d, "list.yaml", big_list(100_000).as_bytes())),
            0,
            Stdout,
            "No findings",
        ),
        // ── folders ────────────────────────────────────────────────────────────────────────
        case(
            "two self-symlinks in a folder",
            |d| {
                std::fs::create_dir(d.join("in")).expect("mkdir");
                write(
                    &d.join("in"),
                    "t.yaml",
                    include_bytes!("fixtures/hostile/clean.yaml"),
                );
                symlink(".", &d.join("in/a"));
                symlink(".", &d.join("in/b"));
                check(d.join("in"))
            },
            0,
            Stdout,
            "No findings",
        ),
        case(
            "a folder symlink loop",
            |d| {
                std::fs::create_dir_all(d.join("in/sub")).expect("mkdir");
                write(
                    &d.join("in/sub"),
                    "t.yaml",
                    include_bytes!("fixtures/hostile/clean.yaml"),
                );
                symlink("..", &d.join("in/sub/up"));
                check(d.join("in"))
            },
            0,
            Stdout,
            "No findings",
        ),
        case(
            "a file that is a symlink to itself",
            |d| {
                std::fs::create_dir(d.join("in")).expect("mkdir");
                symlink("me.yaml", &d.join("in/me.yaml"));
                check(d.join("in"))
            },
            2,
            Stderr,
            "me.yaml: cannot read: Too many levels of symbolic links",
        ),
        Case {
            unprivileged: true,
            ..case(
                "an unreadable file",
                |d| {
                    let p = write(
                        d,
                        "secret.yaml",
                        include_bytes!("fixtures/hostile/clean.yaml"),
                    );
                    std::fs::set_permissions(
                        &p,
                        std::os::unix::fs::PermissionsExt::from_mode(0o000),
                    )
                    .expect("chmod");
                    check(p)
                },
                2,
                Stderr,
                "secret.yaml: cannot read: Permission denied",
            )
        },
        // ── nesting ────────────────────────────────────────────────────────────────────────
        case(
            "YAML flow nested 100000 deep",
            |d| {
                check(write(
                    d,
                    "deep.yaml",
                    format!("a: {}\n", "[".repeat(100_000)).as_bytes(),
                ))
            },
            2,
            Stderr,
            "deep.yaml:1: nested deeper than 128 levels",
        ),
        case(
            "YAML flow mappings nested 100000 deep",
            |d| {
                check(write(
                    d,
                    "deep.yaml",
                    format!("a: {}\n", "{a: ".repeat(100_000)).as_bytes(),
                ))
            },
            2,
            Stderr,
            "deep.yaml:1: nested deeper than 128 levels",
        ),
        case(
            "JSON nested 100000 deep",
            |d| check(write(d, "deep.json", "[".repeat(100_000).as_bytes())),
            2,
            Stderr,
            "deep.json:1: nested deeper than 128 levels",
        ),
        case(
            "block sequences nested 100000 deep",
            |d| {
                check(write(
                    d,
                    "deep.yaml",
                    format!("{}x\n", "- ".repeat(100_000)).as_bytes(),
                ))
            },
            2,
            Stderr,
            "deep.yaml:1: nested deeper than 128 levels",
        ),
        case(
            "block mappings nested 3000 deep",
            |d| {
                let s: String = (0..3000)
                    .map(|i| format!("{}k:\n", " ".repeat(i)))
                    .collect();
                check(write(d, "deep.yaml", s.as_bytes()))
            },
            2,
            Stderr,
            "nested deeper than 128 levels",
        ),
        case(
            "a billion laughs",
            |_| check(fixture("billion-laughs.yaml")),
            2,
            Stderr,
            "billion-laughs.yaml:",
        ),
        // ── encodings and syntax ───────────────────────────────────────────────────────────
        case(
            "a UTF-8 BOM",
            |_| check(fixture("bom.yaml")),
            0,
            Stdout,
            "No findings",
        ),
        case(
            "CRLF line endings",
            |_| check(fixture("crlf.yaml")),
            0,
            Stdout,
            "No findings",
        ),
        case(
            "a YAML flow mapping document",
            |_| check(fixture("flow-object.yaml")),
            0,
            Stdout,
            "No findings",
        ),
        case(
            "a YAML flow sequence document",
            |_| check(fixture("flow-list.yaml")),
            0,
            Stdout,
            "No findings",
        ),
        case(
            "invalid UTF-8",
            |_| check(fixture("invalid-utf8.yaml")),
            2,
            Stderr,
            "invalid-utf8.yaml:3: not UTF-8 text (byte column 20)",
        ),
        case(
            "UTF-16",
            |_| check(fixture("utf16.yaml")),
            2,
            Stderr,
            "utf16.yaml:1: not UTF-8 text",
        ),
        case(
            "a NUL byte",
            |_| check(fixture("nul-byte.yaml")),
            2,
            Stderr,
            "nul-byte.yaml:4:",
        ),
        case(
            "tab indentation",
            |_| check(fixture("tabs.yaml")),
            2,
            Stderr,
            "tabs.yaml:4:",
        ),
        case(
            "a !!binary tag",
            |_| check(fixture("binary-tag.yaml")),
            0,
            Stdout,
            "No findings",
        ),
        case(
            "numbers out of range",
            |_| check(fixture("big-numbers.yaml")),
            2,
            Stderr,
            "big-numbers.yaml:3: invalid YAML: metadata.generation: number 99999999999999999999999999999 is out of range",
        ),
        case(
            "a duplicate YAML key",
            |_| check(fixture("duplicate-key.yaml")),
            2,
            Stderr,
            "duplicate-key.yaml:5: invalid YAML: metadata: duplicate key \"name\"",
        ),
        case(
            "a duplicate JSON key",
            |_| check(fixture("duplicate-key.json")),
            2,
            Stderr,
            "duplicate-key.json:5: invalid JSON: duplicate key \"kind\"",
        ),
        // ── what we read must be what the server serves ────────────────────────────────────
        case(
            "templates.gatekeeper.sh/v999",
            |_| check(fixture("template-v999.yaml")),
            2,
            Stderr,
            "template-v999.yaml:1: ConstraintTemplate templates.gatekeeper.sh/v999 is not a version Gatekeeper serves (known: templates.gatekeeper.sh/v1, templates.gatekeeper.sh/v1beta1, templates.gatekeeper.sh/v1alpha1)",
        ),
        case(
            "a VAP at v1alpha1",
            |_| check(fixture("vap-v1alpha1.yaml")),
            2,
            Stderr,
            "vap-v1alpha1.yaml:1: ValidatingAdmissionPolicy admissionregistration.k8s.io/v1alpha1 is not a version kubectl-vap reads",
        ),
        case(
            "a constraint at v2",
            |_| check(fixture("constraint-v2.yaml")),
            2,
            Stderr,
            "constraints.gatekeeper.sh/v1beta1, constraints.gatekeeper.sh/v1alpha1",
        ),
        case(
            "invalid CEL",
            |_| check(fixture("invalid-cel.yaml")),
            1,
            Stdout,
            "validations[1].expression: CEL syntax error at 1:",
        ),
        case(
            "plan does not create a policy from invalid CEL",
            |_| {
                vec![
                    "plan".into(),
                    "-f".into(),
                    fixture("invalid-cel.yaml").into(),
                ]
            },
            0,
            Stdout,
            "No changes",
        ),
        // ── terminal injection ─────────────────────────────────────────────────────────────
        case(
            "escape sequences in a name (table)",
            |_| check(fixture("escape-name.yaml")),
            0,
            Stdout,
            "evil\\x1b]0;owned\\x07\\x1b[2J\\u{9b}31m",
        ),
        case(
            "escape sequences in a name (JSON stays exact)",
            |_| {
                let mut a = check(fixture("escape-name.yaml"));
                a.extend(["-o".into(), "json".into()]);
                a
            },
            0,
            Stdout,
            "evil\\u001b]0;owned\\u0007\\u001b[2J\u{9b}31m",
        ),
        case(
            "escape sequences in a file name",
            |d| {
                std::fs::create_dir(d.join("in")).expect("mkdir");
                mkfifo(&d.join("in/\u{1b}[31mred.yaml"));
                check(d.join("in"))
            },
            2,
            Stderr,
            "\\x1b[31mred.yaml: is a FIFO",
        ),
    ]
}

struct Outcome {
    /// `None` when killed by a signal (the time limit's kill, or a crash).
    code: Option<i32>,
    signal: Option<i32>,
    timed_out: bool,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
}

#[allow(unsafe_code, reason = "pre_exec: setrlimit and setuid in the child")]
fn run(args: &[OsString], stdin: Option<Stdin>, unprivileged: bool) -> Outcome {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_kubectl-vap"));
    cmd.args(args)
        .env_remove("KUBECONFIG")
        .env_remove("KUBECTL_VAP_LOG")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .stdin(match stdin {
            None | Some(Stdin::Closed) => Stdio::null(),
            Some(Stdin::DevZero) => {
                Stdio::from(std::fs::File::open("/dev/zero").expect("/dev/zero"))
            }
        });
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            let limit = libc::rlimit {
                rlim_cur: MEMORY_LIMIT,
                rlim_max: MEMORY_LIMIT,
            };
            if libc::setrlimit(libc::RLIMIT_AS, &limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            if unprivileged && libc::geteuid() == 0 {
                // nobody: root reads any file whatever its mode.
                if libc::setgroups(0, std::ptr::null()) != 0
                    || libc::setgid(65534) != 0
                    || libc::setuid(65534) != 0
                {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
    let mut child = cmd.spawn().expect("the binary starts");
    let pump = |r: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(mut r) = r {
                let _ = r.read_to_end(&mut buf);
            }
            buf
        })
    };
    let out = pump(child.stdout.take().map(|s| Box::new(s) as _));
    let err = pump(child.stderr.take().map(|s| Box::new(s) as _));
    let start = Instant::now();
    let mut timed_out = false;
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break s;
        }
        if start.elapsed() > TIME_LIMIT {
            timed_out = true;
            let _ = child.kill();
            break child.wait().expect("wait after kill");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    use std::os::unix::process::ExitStatusExt;
    Outcome {
        code: status.code(),
        signal: status.signal(),
        timed_out,
        stdout: out.join().expect("stdout reader"),
        stderr: err.join().expect("stderr reader"),
    }
}

#[test]
fn every_hostile_input_ends_in_a_clear_outcome() {
    let root = tempfile::tempdir().expect("tempdir");
    // Readable by `nobody` for the unprivileged case.
    std::fs::set_permissions(
        root.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .expect("chmod tempdir");
    let mut failures = Vec::new();
    for (i, c) in cases().iter().enumerate() {
        let dir = root.path().join(format!("case{i}"));
        std::fs::create_dir(&dir).expect("case dir");
        std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .expect("chmod case dir");
        let args = (c.args)(&dir);
        let o = run(&args, c.stdin, c.unprivileged);
        let stdout = String::from_utf8_lossy(&o.stdout);
        let stderr = String::from_utf8_lossy(&o.stderr);
        let text = match c.stream {
            Stream::Stdout => &stdout,
            Stream::Stderr => &stderr,
        };
        let mut problems = Vec::new();
        if o.timed_out {
            problems.push(format!("no answer within {TIME_LIMIT:?}: killed"));
        } else if let Some(sig) = o.signal {
            problems.push(format!("killed by signal {sig} (crash or out of memory)"));
        }
        if stderr.contains("panicked") {
            problems.push("panicked".into());
        }
        if !o.timed_out && o.code != Some(c.code) {
            problems.push(format!("exit {:?}, want {}", o.code, c.code));
        }
        if !text.contains(c.fragment) {
            problems.push(format!("{:?} lacks {:?}", c.stream, c.fragment));
        }
        let json = args.iter().any(|a| a == "json");
        if !json && (o.stdout.contains(&0x1b) || o.stderr.contains(&0x1b)) {
            problems.push("a raw ESC reached the terminal".into());
        }
        if !problems.is_empty() {
            let cut = |s: &str| s.chars().take(300).collect::<String>();
            failures.push(format!(
                "{}: {}\n    stderr: {}\n    stdout: {}",
                c.name,
                problems.join("; "),
                cut(stderr.trim()),
                cut(stdout.trim())
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n{}",
        failures.len(),
        cases().len(),
        failures.join("\n")
    );
}
