//! Snapshot input from files: YAML or JSON, multi-document, `kind: List`, folders read
//! recursively, `-` for stdin. Every error names the file and the line.

use crate::model::Source;
use crate::snapshot::Snapshot;
use serde::de::DeserializeSeed;
use serde_json::Value;
use std::path::{Path, PathBuf};
use thiserror::Error;

#[derive(Debug, Error)]
pub enum LoadError {
    #[error("{path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}:{line}: {message}")]
    Parse {
        path: String,
        line: usize,
        message: String,
    },
    #[error("{0}: no such file or folder")]
    NotFound(String),
    #[error("{0}: no YAML or JSON files in this folder")]
    EmptyFolder(String),
}

const EXTENSIONS: [&str; 3] = ["yaml", "yml", "json"];

/// Reads every path into one snapshot. `stdin` is read for `-`.
pub fn load_paths(paths: &[String], stdin: &mut dyn std::io::Read) -> Result<Snapshot, LoadError> {
    let mut snapshot = Snapshot::default();
    for p in paths {
        if p == "-" {
            let mut text = String::new();
            stdin
                .read_to_string(&mut text)
                .map_err(|source| LoadError::Read {
                    path: "<stdin>".into(),
                    source,
                })?;
            load_text(&mut snapshot, "<stdin>", &text)?;
            continue;
        }
        let path = Path::new(p);
        if !path.exists() {
            return Err(LoadError::NotFound(p.clone()));
        }
        let files = if path.is_dir() {
            let mut files = Vec::new();
            walk(path, &mut files).map_err(|source| LoadError::Read {
                path: p.clone(),
                source,
            })?;
            if files.is_empty() {
                return Err(LoadError::EmptyFolder(p.clone()));
            }
            files
        } else {
            vec![path.to_path_buf()]
        };
        for file in files {
            let name = file.display().to_string();
            let bytes = std::fs::read(&file).map_err(|source| LoadError::Read {
                path: name.clone(),
                source,
            })?;
            let text = String::from_utf8(bytes).map_err(|e| LoadError::Parse {
                path: name.clone(),
                line: 1,
                message: format!("not UTF-8 text: {e}"),
            })?;
            load_text(&mut snapshot, &name, &text)?;
        }
    }
    let dropped = snapshot.dedupe();
    if dropped > 0 {
        tracing::warn!(
            "{dropped} object(s) appeared more than once in the input; the last one of each was used"
        );
    }
    Ok(snapshot)
}

/// Files below `dir` with a YAML/JSON extension, sorted so output is stable. Hidden entries are skipped.
fn walk(dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    let mut entries: Vec<_> = std::fs::read_dir(dir)?.collect::<Result<_, _>>()?;
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        let path = e.path();
        if e.file_name().to_string_lossy().starts_with('.') {
            continue;
        }
        if path.is_dir() {
            walk(&path, out)?;
        } else if path
            .extension()
            .and_then(|x| x.to_str())
            .is_some_and(|x| EXTENSIONS.contains(&x.to_ascii_lowercase().as_str()))
        {
            out.push(path);
        }
    }
    Ok(())
}

/// Parses one file's text (any number of documents) into the snapshot. A `List`'s items are
/// turned into typed objects one by one while parsing (see [`DocSeed`]), so a large
/// `kubectl get -o json` never exists as one JSON tree in memory.
pub fn load_text(snapshot: &mut Snapshot, path: &str, text: &str) -> Result<(), LoadError> {
    let at = |line: usize| Source {
        file: Some(path.to_string()),
        line: Some(line),
    };
    let parse_err = |line: usize, message: String| LoadError::Parse {
        path: path.to_string(),
        line,
        message,
    };
    let trimmed = text.trim_start();
    let mut docs: Vec<(usize, Doc)> = Vec::new();
    if trimmed.starts_with('{') || trimmed.starts_with('[') {
        let line = 1 + text[..text.len() - trimmed.len()].matches('\n').count();
        let mut de = serde_json::Deserializer::from_str(text);
        let single = DocSeed { source: at(line) }
            .deserialize(&mut de)
            .and_then(|doc| de.end().map(|()| doc));
        match single {
            Ok(doc) => docs.push((line, doc)),
            // Several JSON values in a row: rare, read them whole.
            Err(e) if e.is_syntax() && e.to_string().contains("trailing characters") => {
                for (line, v) in parse_documents(path, text)? {
                    docs.push((line, Doc::Object(v)));
                }
            }
            Err(e) => return Err(parse_err(e.line(), format!("invalid JSON: {e}"))),
        }
    } else {
        for (start, chunk) in split_yaml(text) {
            if chunk
                .lines()
                .all(|l| l.trim().is_empty() || l.trim_start().starts_with('#'))
            {
                continue;
            }
            let line = start + leading_newlines(&chunk);
            let doc = DocSeed { source: at(line) }
                .deserialize(serde_norway::Deserializer::from_str(&chunk))
                .map_err(|e| {
                    let l = e.location().map(|l| l.line()).unwrap_or(1);
                    parse_err(
                        start + l - 1,
                        format!("invalid YAML: {}", strip_location(&e.to_string())),
                    )
                })?;
            docs.push((line, doc));
        }
    }
    for (line, doc) in docs {
        match doc {
            Doc::Empty => {}
            Doc::Object(value) => snapshot
                .insert(value, at(line))
                .map_err(|m| parse_err(line, m))?,
            Doc::Items { items, error } => {
                if let Some(m) = error {
                    return Err(parse_err(line, m));
                }
                snapshot.extend(items);
            }
            Doc::Scalar(what) => {
                return Err(parse_err(
                    line,
                    format!("a document must be an object, not {what}"),
                ));
            }
        }
    }
    Ok(())
}

/// One document, parsed.
enum Doc {
    Empty,
    Object(Value),
    /// A List (or a top-level JSON array): its items, already typed, and the first bad item.
    Items {
        items: Snapshot,
        error: Option<String>,
    },
    Scalar(&'static str),
}

/// Parses a document; a top-level `items` array is turned into typed objects element by
/// element instead of being kept as JSON.
struct DocSeed {
    source: Source,
}

impl<'de> serde::de::DeserializeSeed<'de> for DocSeed {
    type Value = Doc;
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Doc, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> serde::de::Visitor<'de> for DocSeed {
    type Value = Doc;
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a Kubernetes object or List")
    }
    fn visit_unit<E>(self) -> Result<Doc, E> {
        Ok(Doc::Empty)
    }
    fn visit_none<E>(self) -> Result<Doc, E> {
        Ok(Doc::Empty)
    }
    fn visit_bool<E>(self, _: bool) -> Result<Doc, E> {
        Ok(Doc::Scalar("a boolean"))
    }
    fn visit_i64<E>(self, _: i64) -> Result<Doc, E> {
        Ok(Doc::Scalar("a number"))
    }
    fn visit_u64<E>(self, _: u64) -> Result<Doc, E> {
        Ok(Doc::Scalar("a number"))
    }
    fn visit_f64<E>(self, _: f64) -> Result<Doc, E> {
        Ok(Doc::Scalar("a number"))
    }
    fn visit_str<E>(self, _: &str) -> Result<Doc, E> {
        Ok(Doc::Scalar("a string"))
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, seq: A) -> Result<Doc, A::Error> {
        let (items, error) = ItemsSeed {
            source: self.source,
        }
        .visit_seq(seq)?;
        Ok(Doc::Items { items, error })
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Doc, A::Error> {
        let mut obj = serde_json::Map::new();
        let mut streamed = None;
        while let Some(key) = map.next_key::<String>()? {
            if key == "items" && streamed.is_none() {
                streamed = Some(map.next_value_seed(ItemsSeed {
                    source: self.source.clone(),
                })?);
            } else {
                obj.insert(key, map.next_value()?);
            }
        }
        let is_list = obj
            .get("kind")
            .and_then(Value::as_str)
            .is_some_and(|k| k.ends_with("List"));
        match streamed {
            Some((items, error)) if is_list => Ok(Doc::Items { items, error }),
            // Not a List: its `items` mean nothing to us (no kind we read has them).
            _ => Ok(Doc::Object(Value::Object(obj))),
        }
    }
}

/// The elements of `items`, each inserted into a snapshot of its own as soon as it is parsed.
struct ItemsSeed {
    source: Source,
}

impl<'de> serde::de::DeserializeSeed<'de> for ItemsSeed {
    type Value = (Snapshot, Option<String>);
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> serde::de::Visitor<'de> for ItemsSeed {
    type Value = (Snapshot, Option<String>);
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a list of objects")
    }
    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok((Snapshot::default(), None))
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut items = Snapshot::default();
        let mut error = None;
        let mut i = 0;
        while let Some(item) = seq.next_element::<Value>()? {
            if error.is_none()
                && let Err(e) = items.insert(item, self.source.clone())
            {
                error = Some(format!("items[{i}]: {e}"));
            }
            i += 1;
        }
        Ok((items, error))
    }
}

/// The documents of a text with the line each starts on. JSON is read as JSON (exact
/// positions; tabs are fine), everything else as YAML split at `---` lines.
pub fn parse_documents(path: &str, text: &str) -> Result<Vec<(usize, Value)>, LoadError> {
    let trimmed = text.trim_start();
    if trimmed.starts_with('{') || trimmed.starts_with('[') {
        let mut out = Vec::new();
        let mut stream = serde_json::Deserializer::from_str(text).into_iter::<Value>();
        loop {
            let before = stream.byte_offset();
            match stream.next() {
                None => break,
                Some(Ok(v)) => {
                    let rest = &text[before..];
                    let skipped = rest.len() - rest.trim_start().len();
                    let line = 1 + text[..before + skipped].matches('\n').count();
                    out.push((line, v));
                }
                Some(Err(e)) => {
                    return Err(LoadError::Parse {
                        path: path.into(),
                        line: e.line(),
                        message: format!("invalid JSON: {e}"),
                    });
                }
            }
        }
        // A JSON array at top level is a list of objects.
        return Ok(out
            .into_iter()
            .flat_map(|(line, v)| match v {
                Value::Array(items) => items.into_iter().map(|i| (line, i)).collect::<Vec<_>>(),
                v => vec![(line, v)],
            })
            .collect());
    }
    let mut out = Vec::new();
    for (start, chunk) in split_yaml(text) {
        if chunk.trim().is_empty()
            || chunk
                .lines()
                .all(|l| l.trim().is_empty() || l.trim_start().starts_with('#'))
        {
            continue;
        }
        let value: Value = serde_norway::from_str(&chunk).map_err(|e| {
            let line = e.location().map(|l| l.line()).unwrap_or(1);
            LoadError::Parse {
                path: path.into(),
                line: start + line - 1,
                message: format!("invalid YAML: {}", strip_location(&e.to_string())),
            }
        })?;
        match value {
            Value::Null => {}
            Value::Object(_) => out.push((start + leading_newlines(&chunk), value)),
            other => {
                return Err(LoadError::Parse {
                    path: path.into(),
                    line: start + leading_newlines(&chunk),
                    message: format!("a document must be an object, not {}", type_name(&other)),
                });
            }
        }
    }
    Ok(out)
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

/// serde_norway appends " at line X column Y"; we print our own (file-relative) line.
fn strip_location(msg: &str) -> String {
    match msg.find(" at line ") {
        Some(i) => msg[..i].to_string(),
        None => msg.to_string(),
    }
}

fn leading_newlines(s: &str) -> usize {
    let mut n = 0;
    for line in s.split_inclusive('\n') {
        let t = line.trim();
        if t.is_empty() || t.starts_with('#') {
            n += 1;
        } else {
            break;
        }
    }
    n
}

/// Splits a YAML stream at document markers (`---` or `...` at column 0), keeping the
/// 1-based line each chunk starts on.
fn split_yaml(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut start = 1;
    let mut current = String::new();
    for (i, line) in text.split_inclusive('\n').enumerate() {
        let bare = line.trim_end();
        let is_marker = bare == "---" || bare.starts_with("--- ") || bare == "...";
        if is_marker {
            out.push((start, std::mem::take(&mut current)));
            start = i + 2;
            // `--- {inline: doc}` keeps its content on the marker line.
            if let Some(rest) = bare.strip_prefix("--- ") {
                current.push_str(rest);
                current.push('\n');
                start = i + 1;
            }
        } else {
            current.push_str(line);
        }
    }
    out.push((start, current));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(text: &str) -> Result<Snapshot, LoadError> {
        let mut s = Snapshot::default();
        load_text(&mut s, "t.yaml", text)?;
        Ok(s)
    }

    #[test]
    fn multi_document_yaml_with_lines() {
        let docs = parse_documents("t", "# c\n---\na: 1\n---\n\nb: 2\n").expect("parses");
        assert_eq!(docs.iter().map(|d| d.0).collect::<Vec<_>>(), vec![3, 6]);
    }

    #[test]
    fn yaml_errors_name_the_file_line() {
        let err =
            load("---\napiVersion: v1\nkind: ConfigMap\n---\napiVersion: v1\nkind: [unclosed\n")
                .unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.starts_with("t.yaml:6:") || msg.starts_with("t.yaml:7:"),
            "{msg}"
        );
    }

    #[test]
    fn lists_are_flattened_and_unknown_kinds_counted() {
        let s = load(
            "apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: ConfigMap\n  metadata: {name: a}\n- apiVersion: templates.gatekeeper.sh/v1\n  kind: ConstraintTemplate\n  metadata: {name: k8sx}\n",
        )
        .expect("loads");
        assert_eq!(s.templates.len(), 1);
        assert_eq!(s.ignored.get("ConfigMap"), Some(&1));
    }

    #[test]
    fn a_bad_list_item_is_named_by_index_and_document_line() {
        let err = load("# header\napiVersion: v1\nkind: List\nitems:\n- {apiVersion: v1, kind: ConfigMap, metadata: {name: a}}\n- {foo: bar}\n")
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "t.yaml:2: items[1]: the object has no apiVersion or kind"
        );
        // `items` first (as `kubectl get -o json` prints it), `kind: List` after.
        let mut s = Snapshot::default();
        load_text(&mut s, "l.json", r#"{"apiVersion":"v1","items":[{"apiVersion":"templates.gatekeeper.sh/v1","kind":"ConstraintTemplate","metadata":{"name":"a"}}],"kind":"List"}"#)
            .expect("loads");
        assert_eq!(s.templates.len(), 1);
        // An object that is not a List keeps its own kind; its `items` are not objects of ours.
        let mut s = Snapshot::default();
        load_text(&mut s, "o.yaml", "apiVersion: example.com/v1\nkind: Shelf\nmetadata: {name: s}\nitems: [{apiVersion: templates.gatekeeper.sh/v1, kind: ConstraintTemplate, metadata: {name: a}}]\n")
            .expect("loads");
        assert!(s.templates.is_empty());
        assert_eq!(s.ignored.get("Shelf"), Some(&1));
    }

    #[test]
    fn missing_kind_is_an_error_with_line() {
        let err = load("---\nfoo: bar\n").unwrap_err().to_string();
        assert_eq!(err, "t.yaml:2: the object has no apiVersion or kind");
    }

    #[test]
    fn duplicates_keep_the_last() {
        let doc = "apiVersion: templates.gatekeeper.sh/v1\nkind: ConstraintTemplate\nmetadata: {name: k8sx, uid: A}\n";
        let mut s = Snapshot::default();
        load_text(&mut s, "a.yaml", doc).expect("loads");
        load_text(&mut s, "b.yaml", &doc.replace("uid: A", "uid: B")).expect("loads");
        assert_eq!(s.dedupe(), 1);
        assert_eq!(s.templates.len(), 1);
        assert_eq!(s.templates[0].meta.uid, "B");
    }

    #[test]
    fn scalars_are_rejected() {
        let err = load("just a string\n").unwrap_err().to_string();
        assert!(err.contains("must be an object"), "{err}");
    }

    #[test]
    fn json_stream_and_array() {
        let mut s = Snapshot::default();
        load_text(
            &mut s,
            "t.json",
            r#"[{"apiVersion":"templates.gatekeeper.sh/v1","kind":"ConstraintTemplate","metadata":{"name":"a"}}]"#,
        )
        .expect("loads");
        assert_eq!(s.templates.len(), 1);
        let err = load_text(&mut s, "bad.json", "{\n\"a\": \n}")
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("bad.json:3:"), "{err}");
    }
}
