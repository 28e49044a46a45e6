//! `render`: the objects the reconciler would hold (`core::render`), as a YAML stream, a JSON
//! `List` or one file per object; `--static`, the static admission manifests and the
//! AdmissionConfiguration that loads them (`check --static DIR`: `static_check`).

use super::args::{Cli, RenderArgs, RenderOutput};
use super::exit::Exit;
use super::output;
use super::report::{self, kubectl_name};
use super::stdio::{self, errln};
use crate::core::render::{self as core_render, Rendered, Selected};
use crate::core::settings::Settings;
use crate::core::{Finding, Options, Summary};
use crate::text::printable;
use anyhow::Context;
use serde_json::{Value, json};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// The first line of every file `render` writes: how `-o dir=` knows which files in the
/// folder are its own (only those are removed when their object is no longer rendered).
const MARK: &str = "# Rendered by kubectl vap render";
/// Where the static manifests go on a control-plane node unless said otherwise.
const DEFAULT_STATIC_DIR: &str = "/etc/kubernetes/admission/kubectl-vap";

pub fn render(cli: &Cli, args: &RenderArgs) -> anyhow::Result<Exit> {
    let (snap, opts, from, settings_note) = if cli.input().filenames.is_empty() {
        let (snap, opts, judged, url) = super::live::read_cluster_for_render(cli)?;
        let note = judged.lines().join("; ");
        (snap, opts, format!("the cluster at {url}"), Some(note))
    } else {
        let snap = report::load_files(cli)?;
        let files = cli.input().filenames.clone();
        (
            snap,
            cli.generation_options(),
            format!("files {}", files.join(", ")),
            None,
        )
    };
    let selection: Vec<Selected> = args.names.iter().map(|n| Selected::parse(n)).collect();
    let rendered = if args.static_manifests {
        core_render::render_static(&snap, &opts, &selection)
    } else {
        core_render::render(&snap, &opts, &selection)
    };
    if !rendered.unknown.is_empty() {
        let names: Vec<String> = rendered.unknown.iter().map(ToString::to_string).collect();
        anyhow::bail!(
            "{} not in {from}: a template is selected by its name, a constraint as Kind/name",
            names.join(", ")
        );
    }
    let header = Header {
        from: &from,
        selection: &args.names,
        opts: &opts,
        settings_note: settings_note.as_deref(),
        rendered: &rendered,
        statics: args.static_manifests,
    };
    let out = args.output();
    let static_dir = args
        .static_manifests_dir
        .clone()
        .unwrap_or_else(|| match &out {
            RenderOutput::Dir(d) if d.is_absolute() => d.display().to_string(),
            _ => DEFAULT_STATIC_DIR.to_string(),
        });
    match &out {
        RenderOutput::Yaml => {
            let mut text = header.text();
            if args.static_manifests {
                text.push_str(&commented(&admission_config(&static_dir)));
            }
            for o in &rendered.objects {
                text.push_str("---\n");
                text.push_str(&serde_norway::to_string(o).context("writing YAML")?);
            }
            stdio::stdout(&text)?;
        }
        RenderOutput::Json => {
            let list = json!({"apiVersion": "v1", "kind": "List", "items": rendered.objects});
            stdio::stdout(&(serde_json::to_string_pretty(&list)? + "\n"))?;
        }
        RenderOutput::Dir(dir) => write_dir(dir, &header, &rendered.objects)?,
    }
    if args.static_manifests {
        let config = admission_config(&static_dir);
        match &args.admission_config {
            Some(path) => std::fs::write(path, &config)
                .with_context(|| format!("writing {}", path.display()))?,
            // On stdout it is in the header; with files, it must not go into the folder (the
            // API server would try to load it as a policy and refuse the whole folder).
            None if matches!(out, RenderOutput::Dir(_)) => {
                errln!(
                    "The AdmissionConfiguration that loads them (--admission-config FILE writes it):"
                );
                for line in config.lines() {
                    errln!("  {line}");
                }
            }
            None => {}
        }
    }
    report_findings(&rendered.findings);
    Ok(Exit::findings_if(
        Summary::of(&rendered.findings).has_problems(),
    ))
}

/// The findings of what could not be rendered, on stderr as `check` prints them.
fn report_findings(findings: &[Finding]) {
    if findings.is_empty() {
        return;
    }
    let rows: Vec<Vec<String>> = findings
        .iter()
        .map(|f| {
            vec![
                f.severity.as_str().to_uppercase(),
                f.code.as_str().to_string(),
                printable(&kubectl_name(&f.object)).into_owned(),
                printable(&f.message).into_owned(),
            ]
        })
        .collect();
    for line in output::table(&["SEVERITY", "CODE", "OBJECT", "MESSAGE"], &rows).lines() {
        errln!("{line}");
    }
}

/// What a rendering says about itself.
struct Header<'a> {
    from: &'a str,
    selection: &'a [String],
    opts: &'a Options,
    settings_note: Option<&'a str>,
    rendered: &'a Rendered,
    statics: bool,
}

impl Header<'_> {
    /// Comment lines: the version, the input, the selection, every generation setting (as
    /// flags), the shape each template got, the count. Nothing that changes between two runs
    /// on the same input (no time), so the output is the same bytes.
    fn text(&self) -> String {
        let mut h = String::new();
        let what = if self.statics {
            "static admission manifests (staticManifestsDir)"
        } else {
            "the objects the reconciler would hold"
        };
        let _ = writeln!(h, "{MARK} {}: {what}", env!("CARGO_PKG_VERSION"));
        let _ = writeln!(h, "# from: {}", self.from);
        let selection = if self.selection.is_empty() {
            "everything".to_string()
        } else {
            self.selection.join(" ")
        };
        let _ = writeln!(h, "# selection: {selection}");
        if let Some(note) = self.settings_note {
            let _ = writeln!(h, "# {note}");
        }
        let flags: Vec<String> = Settings::of(self.opts)
            .0
            .into_iter()
            .map(|(k, v)| format!("--{k}={v}"))
            .collect();
        let _ = writeln!(h, "# settings: {}", flags.join(" "));
        if self.statics {
            let _ = writeln!(h, "# shape: inline, renamed *.static.k8s.io (no paramKind)");
        } else {
            let shapes: Vec<String> = self
                .rendered
                .shapes
                .iter()
                .map(|(t, s)| format!("{t}={}", s.as_str()))
                .collect();
            let _ = writeln!(h, "# shapes: {}", shapes.join(" "));
        }
        let _ = writeln!(
            h,
            "# {}",
            report::count(self.rendered.objects.len(), "object", "objects")
        );
        printable_comment(&h)
    }
}

/// Comment lines stay comment lines: a name or path with a line break in it cannot start a
/// line of YAML.
fn printable_comment(text: &str) -> String {
    text.lines()
        .map(|l| format!("{}\n", printable(l)))
        .collect()
}

fn commented(text: &str) -> String {
    let mut out = String::from(
        "#\n# Load them with this AdmissionConfiguration (kube-apiserver --admission-control-config-file):\n",
    );
    for line in text.lines() {
        let _ = writeln!(out, "#   {line}");
    }
    out
}

/// The AdmissionConfiguration whose ValidatingAdmissionPolicy plugin loads `dir`
/// (`k8s.io/apiserver/pkg/admission/plugin/policy/config`).
pub fn admission_config(dir: &str) -> String {
    format!(
        "\
# kube-apiserver --admission-control-config-file=<this file>
# Kubernetes 1.36 also needs --feature-gates=ManifestBasedAdmissionControlConfig=true (beta, on by default, in 1.37).
apiVersion: apiserver.config.k8s.io/v1
kind: AdmissionConfiguration
plugins:
- name: ValidatingAdmissionPolicy
  configuration:
    apiVersion: apiserver.config.k8s.io/v1
    kind: ValidatingAdmissionPolicyConfiguration
    staticManifestsDir: {}
",
        serde_json::to_string(dir).unwrap_or_else(|_| format!("\"{dir}\""))
    )
}

/// The file an object is written to: `<kind>-<name>.yaml`, lowercase kind, the name as it is
/// (a DNS subdomain: no slash, nothing a file system refuses).
fn file_name(o: &Value) -> String {
    format!(
        "{}-{}.yaml",
        o["kind"].as_str().unwrap_or("object").to_lowercase(),
        o["metadata"]["name"].as_str().unwrap_or("unnamed")
    )
}

/// One file per object, each with the header; files this command wrote before whose object is
/// no longer rendered are removed (a static manifest left behind would go on enforcing), and
/// said; other files are left alone.
fn write_dir(dir: &Path, header: &Header<'_>, objects: &[Value]) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let head = header.text();
    let mut written = std::collections::BTreeSet::new();
    for o in objects {
        let name = file_name(o);
        let path = dir.join(&name);
        let body = format!(
            "{head}{}",
            serde_norway::to_string(o).context("writing YAML")?
        );
        std::fs::write(&path, body).with_context(|| format!("writing {}", path.display()))?;
        written.insert(name);
    }
    let entries = std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))?;
    for e in entries {
        let e = e.with_context(|| format!("reading {}", dir.display()))?;
        let name = e.file_name().to_string_lossy().into_owned();
        if written.contains(&name) || !name.ends_with(".yaml") {
            continue;
        }
        let path: PathBuf = e.path();
        let ours = std::fs::read_to_string(&path)
            .map(|t| t.starts_with(MARK))
            .unwrap_or(false);
        if ours {
            std::fs::remove_file(&path).with_context(|| format!("removing {}", path.display()))?;
            errln!(
                "removed {} (its object is no longer rendered)",
                path.display()
            );
        }
    }
    errln!(
        "wrote {} to {}",
        report::count(objects.len(), "file", "files"),
        dir.display()
    );
    Ok(())
}
