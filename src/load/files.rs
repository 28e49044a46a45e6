//! Snapshot input from files: YAML or JSON, multi-document, `kind: List`, folders read
//! recursively, `-` for stdin. Every error names the file and the line. What is read, and
//! within which bounds, is [`super::input`]'s; what the text must be before a parser sees it,
//! [`super::scan`]'s (see docs/input.md for the guarantees).

pub use super::error::LoadError;
use super::input::{self, ReadOptions};
use super::scan;
use super::strict::{self, Strict, StrictValue};
use crate::model::Source;
use crate::snapshot::Snapshot;
use serde::de::DeserializeSeed;
use serde_json::Value;

/// Reads every path into one snapshot, with the default [`ReadOptions`]. `stdin` is read for `-`.
pub fn load_paths(paths: &[String], stdin: &mut dyn std::io::Read) -> Result<Snapshot, LoadError> {
    load_paths_with(paths, stdin, ReadOptions::default())
}

/// Reads every path into one snapshot. `stdin` is read for `-`. Each path must hold at least
/// one Kubernetes object (an empty `kind: List` counts: it is an answer) unless all its files
/// were read for an earlier path already.
/// `-f` input as the commands and the TUI read it: `paths` (files, folders, `-` for standard
/// input) as one snapshot, stamped with the current time unless the input says otherwise.
pub fn read_input(paths: &[String], opts: ReadOptions) -> Result<Snapshot, LoadError> {
    let mut snap = load_paths_with(paths, &mut std::io::stdin().lock(), opts)?;
    snap.now.get_or_insert_with(chrono::Utc::now);
    Ok(snap)
}

pub fn load_paths_with(
    paths: &[String],
    stdin: &mut dyn std::io::Read,
    opts: ReadOptions,
) -> Result<Snapshot, LoadError> {
    let mut snapshot = Snapshot::offline();
    input::read_each(paths, stdin, opts, |path, bytes| {
        load_bytes(&mut snapshot, path, bytes)
    })?;
    // Each dropped copy becomes an `input-duplicate` finding, named by file and line.
    snapshot.dedupe();
    Ok(snapshot)
}

/// An input's bytes into the snapshot; how many objects it held.
fn load_bytes(snapshot: &mut Snapshot, path: &str, bytes: Vec<u8>) -> Result<usize, LoadError> {
    let text = scan::decode(bytes).map_err(|e| LoadError::Parse {
        path: path.to_string(),
        line: e.line,
        message: e.message,
    })?;
    load_text(snapshot, path, &text)
}

/// Parses one file's text (any number of documents) into the snapshot and returns how many
/// Kubernetes objects it held (a List counts as one, plus its items). A `List`'s items are
/// turned into typed objects one by one while parsing (see [`DocSeed`]), so a large
/// `kubectl get -o json` never exists as one JSON tree in memory. Text that starts like JSON
/// is read as JSON, and as YAML if it is not JSON (`{a: 1}` is YAML's flow style).
pub fn load_text(snapshot: &mut Snapshot, path: &str, text: &str) -> Result<usize, LoadError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let at = |line: usize| Source {
        file: Some(path.to_string()),
        line: Some(line),
    };
    let parse_err = |line: usize, message: String| LoadError::Parse {
        path: path.to_string(),
        line,
        message,
    };
    scan::check(text).map_err(|e| parse_err(e.line, e.message))?;
    let trimmed = text.trim_start();
    let docs = if trimmed.starts_with('{') || trimmed.starts_with('[') {
        match json_docs(path, text, &at) {
            Ok(docs) => docs,
            // A `.json` file is JSON: its errors are JSON's, at their exact place.
            Err((_, true)) if !path.ends_with(".json") => yaml_docs(path, text, &at)?,
            Err((e, _)) => return Err(e),
        }
    } else {
        yaml_docs(path, text, &at)?
    };
    let mut objects = 0;
    for (line, doc) in docs {
        match doc {
            Doc::Empty => {}
            Doc::Object(value) => {
                super::versions::check(&value).map_err(|m| parse_err(line, m))?;
                snapshot
                    .insert(value, at(line))
                    .map_err(|m| parse_err(line, m))?;
                objects += 1;
            }
            Doc::Items {
                items,
                error,
                count,
            } => {
                if let Some(m) = error {
                    return Err(parse_err(line, m));
                }
                snapshot.extend(*items);
                objects += count;
            }
            Doc::Scalar(what) => {
                return Err(parse_err(
                    line,
                    format!("a document must be an object, not {what}"),
                ));
            }
        }
    }
    Ok(objects)
}

/// The text as JSON: one value (streamed, see [`DocSeed`]) or several in a row. `Err` says
/// whether the text may still be YAML (a syntax error, not an error in what it holds).
fn json_docs(
    path: &str,
    text: &str,
    at: &dyn Fn(usize) -> Source,
) -> Result<Vec<(usize, Doc)>, (LoadError, bool)> {
    let trimmed = text.trim_start();
    let line = 1 + text[..text.len() - trimmed.len()].matches('\n').count();
    let mut de = serde_json::Deserializer::from_str(text);
    let single = DocSeed { source: at(line) }
        .deserialize(&mut de)
        .and_then(|doc| de.end().map(|()| doc));
    let json_err = |e: serde_json::Error| {
        let syntax = matches!(
            e.classify(),
            serde_json::error::Category::Syntax | serde_json::error::Category::Eof
        );
        (
            LoadError::Parse {
                path: path.into(),
                line: e.line().max(1),
                message: json_message(&e),
            },
            syntax,
        )
    };
    match single {
        Ok(doc) => Ok(vec![(line, doc)]),
        // Several JSON values in a row: rare, read them whole.
        Err(e) if e.is_syntax() && e.to_string().contains("trailing characters") => {
            let values = json_stream(text).map_err(json_err)?;
            Ok(values
                .into_iter()
                .map(|(line, v)| (line, Doc::Object(v)))
                .collect())
        }
        Err(e) => Err(json_err(e)),
    }
}

fn json_message(e: &serde_json::Error) -> String {
    if e.to_string().contains("recursion limit exceeded") {
        format!("nested deeper than {} levels", scan::MAX_DEPTH)
    } else {
        format!("invalid JSON: {e}")
    }
}

/// Several JSON values in a row, with the line each starts on; a top-level array's elements
/// are values of their own.
fn json_stream(text: &str) -> Result<Vec<(usize, Value)>, serde_json::Error> {
    let mut out = Vec::new();
    let mut stream = serde_json::Deserializer::from_str(text).into_iter::<StrictValue>();
    loop {
        let before = stream.byte_offset();
        match stream.next() {
            None => break,
            Some(Ok(StrictValue(v))) => {
                let rest = &text[before..];
                let skipped = rest.len() - rest.trim_start().len();
                let line = 1 + text[..before + skipped].matches('\n').count();
                match v {
                    Value::Array(items) => out.extend(items.into_iter().map(|i| (line, i))),
                    v => out.push((line, v)),
                }
            }
            Some(Err(e)) => return Err(e),
        }
    }
    Ok(out)
}

/// The text as YAML documents (split at `---` lines), with the line each starts on.
fn yaml_docs(
    path: &str,
    text: &str,
    at: &dyn Fn(usize) -> Source,
) -> Result<Vec<(usize, Doc)>, LoadError> {
    let mut docs = Vec::new();
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
            .map_err(|e| yaml_error(path, start, &chunk, &e))?;
        docs.push((line, doc));
    }
    Ok(docs)
}

/// serde_norway's error at its line in the file: from its location, or from the byte
/// position some of its errors (control characters) give instead.
fn yaml_error(path: &str, start: usize, chunk: &str, e: &serde_norway::Error) -> LoadError {
    let full = e.to_string();
    let (line, message) = match e.location() {
        Some(l) => (start + l.line().max(1) - 1, strip_location(&full)),
        None => match full
            .rsplit_once(" at position ")
            .map(|(m, p)| (m, p.parse::<usize>()))
        {
            Some((m, Ok(pos))) => {
                let upto = &chunk.as_bytes()[..pos.min(chunk.len())];
                (
                    start + upto.iter().filter(|&&b| b == b'\n').count(),
                    m.to_string(),
                )
            }
            _ => (start, full),
        },
    };
    // serde_norway places a duplicate key at its mapping's first entry: find the duplicate.
    let line = duplicate_key(&message)
        .and_then(|key| duplicate_line(chunk, line + 1 - start, &key))
        .map_or(line, |l| start + l - 1);
    let message = if message.contains("recursion limit exceeded") {
        format!("nested deeper than {} levels", scan::MAX_DEPTH)
    } else {
        format!("invalid YAML: {message}")
    };
    LoadError::Parse {
        path: path.to_string(),
        line,
        message,
    }
}

/// The key of a [`strict::duplicate`] error, when it needs no unescaping.
fn duplicate_key(message: &str) -> Option<String> {
    let rest = message.split_once("duplicate key \"")?.1;
    let key = rest.split_once('"')?.0;
    (!key.contains('\\')).then(|| key.to_string())
}

/// The line (1-based, in `chunk`) of the second `key:` of the block mapping whose first entry
/// is on line `first`; `None` when the mapping is not laid out that way (flow style).
fn duplicate_line(chunk: &str, first: usize, key: &str) -> Option<usize> {
    let lines: Vec<&str> = chunk.lines().collect();
    let head = lines.get(first.checked_sub(1)?)?;
    // The mapping's column: past the indentation and any `- ` of the first entry's line.
    let mut col = 0;
    let bytes = head.as_bytes();
    loop {
        while bytes.get(col) == Some(&b' ') {
            col += 1;
        }
        if bytes.get(col) == Some(&b'-') && matches!(bytes.get(col + 1), Some(b' ') | None) {
            col += 1;
            continue;
        }
        break;
    }
    let is_key = |text: &str| {
        [
            format!("{key}:"),
            format!("\"{key}\":"),
            format!("'{key}':"),
        ]
        .iter()
        .any(|k| {
            text.strip_prefix(k.as_str())
                .is_some_and(|r| r.is_empty() || r.starts_with([' ', '\t']))
        })
    };
    let mut seen = 0;
    for (i, l) in lines.iter().enumerate().skip(first - 1) {
        let indent = if i + 1 == first {
            col
        } else {
            l.len() - l.trim_start_matches(' ').len()
        };
        let text = l.get(indent..).unwrap_or("");
        if i + 1 > first && indent < col && !text.trim().is_empty() && !text.starts_with('#') {
            return None;
        }
        if indent == col && is_key(text.trim_end()) {
            seen += 1;
            if seen == 2 {
                return Some(i + 1);
            }
        }
    }
    None
}

/// One document, parsed.
enum Doc {
    Empty,
    Object(Value),
    /// A List (or a top-level JSON array): its items, already typed, the first bad item, and
    /// how many objects it held (the List itself and its items).
    Items {
        items: Box<Snapshot>,
        error: Option<String>,
        count: usize,
    },
    Scalar(&'static str),
}

/// Parses a document; a top-level `items` array is turned into typed objects element by
/// element instead of being kept as JSON. Values are read strictly ([`Strict`]).
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
        let (items, error, count) = ItemsSeed {
            source: self.source,
        }
        .visit_seq(seq)?;
        Ok(Doc::Items {
            items: Box::new(items),
            error,
            count,
        })
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Doc, A::Error> {
        let mut obj = serde_json::Map::new();
        let mut streamed = None;
        while let Some(key) = map.next_key::<String>()? {
            if obj.contains_key(&key) || (key == "items" && streamed.is_some()) {
                return Err(strict::duplicate(&key));
            }
            if key == "items" {
                streamed = Some(map.next_value_seed(ItemsSeed {
                    source: self.source.clone(),
                })?);
            } else {
                obj.insert(key, map.next_value_seed(Strict)?);
            }
        }
        let is_list = obj
            .get("kind")
            .and_then(Value::as_str)
            .is_some_and(|k| k.ends_with("List"));
        match streamed {
            Some((items, error, count)) if is_list => Ok(Doc::Items {
                items: Box::new(items),
                error,
                count: count + 1,
            }),
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
    type Value = (Snapshot, Option<String>, usize);
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> serde::de::Visitor<'de> for ItemsSeed {
    type Value = (Snapshot, Option<String>, usize);
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a list of objects")
    }
    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok((Snapshot::default(), None, 0))
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut items = Snapshot::default();
        let mut error = None;
        let mut i = 0;
        while let Some(item) = seq.next_element_seed(Strict)? {
            if error.is_none()
                && let Err(e) = super::versions::check(&item)
                    .and_then(|()| items.insert(item, self.source.clone()))
            {
                error = Some(format!("items[{i}]: {e}"));
            }
            i += 1;
        }
        Ok((items, error, i))
    }
}

/// The documents of a text with the line each starts on. JSON is read as JSON (exact
/// positions; tabs are fine), everything else as YAML split at `---` lines. Values are read
/// strictly (duplicate keys are errors).
pub fn parse_documents(path: &str, text: &str) -> Result<Vec<(usize, Value)>, LoadError> {
    let trimmed = text.trim_start();
    if trimmed.starts_with('{') || trimmed.starts_with('[') {
        return json_stream(text).map_err(|e| LoadError::Parse {
            path: path.into(),
            line: e.line().max(1),
            message: json_message(&e),
        });
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
        let StrictValue(value) =
            serde_norway::from_str(&chunk).map_err(|e| yaml_error(path, start, &chunk, &e))?;
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
        let [d] = s.duplicates.as_slice() else {
            panic!("one duplicate: {:?}", s.duplicates)
        };
        assert_eq!(
            (d.dropped.to_string(), d.kept.to_string()),
            ("a.yaml:1".to_string(), "b.yaml:1".to_string())
        );
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
