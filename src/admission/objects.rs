//! The manifests `test -f` sends: every object of every kind, read with the same bounds and
//! checks as the snapshot loader (`load::input` for which files and how much, `load::scan`
//! for the text, strict values, known versions of our kinds), Lists flattened.

use crate::load::files::{LoadError, parse_documents};
use crate::load::input::{self, ReadOptions};
use crate::load::{scan, versions};
use crate::model::Source;
use serde_json::Value;

/// One manifest and where it was read.
#[derive(Debug, Clone)]
pub struct Manifest {
    pub source: Source,
    pub raw: Value,
}

fn parse_err(path: &str, line: usize, message: String) -> LoadError {
    LoadError::Parse {
        path: path.to_string(),
        line,
        message,
    }
}

fn push(out: &mut Vec<Manifest>, path: &str, line: usize, mut raw: Value) -> Result<(), LoadError> {
    versions::check(&raw).map_err(|m| parse_err(path, line, m))?;
    let (api_version, kind) = crate::model::meta::type_of(&raw);
    if api_version.is_empty() || kind.is_empty() {
        return Err(parse_err(
            path,
            line,
            "the object has no apiVersion or kind".into(),
        ));
    }
    if kind == "List" || (kind.ends_with("List") && raw.get("items").is_some()) {
        let items = match raw.get_mut("items").map(Value::take) {
            Some(Value::Array(items)) => items,
            _ => {
                return Err(parse_err(
                    path,
                    line,
                    "a List without an items array".into(),
                ));
            }
        };
        for (i, item) in items.into_iter().enumerate() {
            push(out, path, line, item)
                .map_err(|e| parse_err(path, line, format!("items[{i}]: {e}")))?;
        }
        return Ok(());
    }
    out.push(Manifest {
        source: Source {
            file: Some(path.to_string()),
            line: Some(line),
        },
        raw,
    });
    Ok(())
}

fn from_bytes(out: &mut Vec<Manifest>, path: &str, bytes: Vec<u8>) -> Result<usize, LoadError> {
    let text = scan::decode(bytes).map_err(|e| parse_err(path, e.line, e.message))?;
    let text = text.strip_prefix('\u{feff}').unwrap_or(&text);
    scan::check(text).map_err(|e| parse_err(path, e.line, e.message))?;
    let before = out.len();
    for (line, doc) in parse_documents(path, text)? {
        push(out, path, line, doc)?;
    }
    Ok(out.len() - before)
}

/// Why `m` is no object to send through the admission chain, if it is not one: what a samples
/// folder holds beside its objects (gatekeeper-library's AdmissionReview fixtures, a
/// kustomization). `test` skips it with this line and judges the rest.
pub fn not_an_object(m: &Manifest) -> Option<&'static str> {
    let (api_version, kind) = crate::model::meta::type_of(&m.raw);
    let group = api_version.split_once('/').map_or("", |(g, _)| g);
    match (group, kind) {
        ("admission.k8s.io", "AdmissionReview") => {
            Some("an AdmissionReview (a webhook request's fixture), not an object to dry-run")
        }
        ("kustomize.config.k8s.io", _) => Some("a kustomize file, not an object to dry-run"),
        _ => None,
    }
}

/// Reads every path (`-` is `stdin`). A path holding no object is an error, as for `-f`
/// elsewhere: an empty input tests nothing.
pub fn read(
    paths: &[String],
    stdin: &mut dyn std::io::Read,
    opts: ReadOptions,
) -> Result<Vec<Manifest>, LoadError> {
    let mut out = Vec::new();
    input::read_each(paths, stdin, opts, |path, bytes| {
        from_bytes(&mut out, path, bytes)
    })?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_are_flattened_and_errors_name_the_line() {
        let text = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\napiVersion: v1\nkind: List\nitems:\n- {apiVersion: v1, kind: Secret, metadata: {name: b}}\n";
        let got = read(&["-".into()], &mut text.as_bytes(), ReadOptions::default()).expect("reads");
        let kinds: Vec<_> = got
            .iter()
            .map(|m| m.raw["kind"].as_str().unwrap_or(""))
            .collect();
        assert_eq!(kinds, ["ConfigMap", "Secret"]);
        assert_eq!(got[1].source.line, Some(5));

        let bad = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a, name: b}\n";
        let e = read(&["-".into()], &mut bad.as_bytes(), ReadOptions::default())
            .expect_err("duplicate key");
        assert!(e.to_string().starts_with("<stdin>:"), "{e}");
        let e = read(&["-".into()], &mut "".as_bytes(), ReadOptions::default()).expect_err("empty");
        assert!(e.to_string().contains("no Kubernetes objects"), "{e}");
        let e = read(
            &["-".into()],
            &mut "kind: ConfigMap\n".as_bytes(),
            ReadOptions::default(),
        )
        .expect_err("no apiVersion");
        assert!(e.to_string().contains("no apiVersion"), "{e}");
    }
}
