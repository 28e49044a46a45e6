//! Printing reports: table for people, JSON and YAML as contracts for scripts (written out by
//! `cli::stdio`).

use super::jsonpath::Template;
use serde::Serialize;

/// `-o` of `version`, and what the reports' [`Output`] comes from in tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Table,
    /// The table with more columns (as kubectl's `-o wide`).
    Wide,
    Json,
    Yaml,
}

/// `-o` of the reports (`check`, `audit`): kubectl's formats.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Output {
    Table,
    Wide,
    Json,
    Yaml,
    /// `kind/name` of each object the report is about, once.
    Name,
    JsonPath(Template),
}

impl Output {
    pub fn parse(s: &str) -> Result<Output, String> {
        Ok(match s {
            "table" => Output::Table,
            "wide" => Output::Wide,
            "json" => Output::Json,
            "yaml" => Output::Yaml,
            "name" => Output::Name,
            _ => match s.strip_prefix("jsonpath=") {
                Some(t) => Output::JsonPath(Template::parse(t)?),
                None => {
                    return Err(
                        "one of: table, wide, json, yaml, name, jsonpath=TEMPLATE".to_string()
                    );
                }
            },
        })
    }
}

/// How a report is shown: `-o` and `--no-headers`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shown {
    pub output: Output,
    pub no_headers: bool,
}

impl From<Format> for Shown {
    fn from(f: Format) -> Shown {
        Shown {
            output: match f {
                Format::Table => Output::Table,
                Format::Wide => Output::Wide,
                Format::Json => Output::Json,
                Format::Yaml => Output::Yaml,
            },
            no_headers: false,
        }
    }
}

impl Shown {
    /// The table's flavour (table or wide); json, yaml, name and jsonpath are not tables.
    pub fn wide(&self) -> bool {
        self.output == Output::Wide
    }

    /// JSON, YAML or jsonpath of `value`; `names` for -o name (each once, in order);
    /// `None` for table and wide, which each report prints its own way.
    pub fn not_a_table<T: Serialize>(
        &self,
        value: &T,
        names: impl FnOnce() -> Vec<String>,
    ) -> anyhow::Result<Option<String>> {
        Ok(match &self.output {
            Output::Json => structured(value, Format::Json)?,
            Output::Yaml => structured(value, Format::Yaml)?,
            Output::JsonPath(t) => Some(t.render(&serde_json::to_value(value)?)),
            Output::Name => {
                let mut seen = std::collections::HashSet::new();
                let mut text = String::new();
                for n in names() {
                    if seen.insert(n.clone()) {
                        text.push_str(&n);
                        text.push('\n');
                    }
                }
                Some(text)
            }
            Output::Table | Output::Wide => None,
        })
    }

    /// [`table`], without its header line with `--no-headers`.
    pub fn table(&self, header: &[&str], rows: &[Vec<String>]) -> String {
        let text = table(header, rows);
        if self.no_headers {
            text.split_once('\n')
                .map(|(_, rows)| rows.to_string())
                .unwrap_or_default()
        } else {
            text
        }
    }
}

/// JSON (pretty) or YAML; `None` for table and wide, which each command prints its own way.
pub fn structured<T: Serialize>(value: &T, format: Format) -> anyhow::Result<Option<String>> {
    Ok(match format {
        Format::Json => Some(serde_json::to_string_pretty(value)? + "\n"),
        Format::Yaml => Some(serde_norway::to_string(value)?),
        Format::Table | Format::Wide => None,
    })
}

/// Pads columns to the widest cell; the last column is not padded, and its cell may hold lines
/// (the API server's caret diagram under a CEL error): each further line starts under the
/// column.
pub fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let cols = header.len();
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for r in rows {
        for (i, c) in r.iter().enumerate().take(cols) {
            widths[i] = widths[i].max(c.chars().count());
        }
    }
    let mut out = String::new();
    let mut line = |cells: Vec<&str>| {
        let mut l = String::new();
        let mut indent = 0;
        for (i, c) in cells.iter().enumerate() {
            if i + 1 == cells.len() {
                let mut lines = c.split('\n');
                l.push_str(lines.next().unwrap_or_default());
                for more in lines {
                    l.push('\n');
                    l.push_str(&" ".repeat(indent));
                    l.push_str(more);
                }
            } else {
                l.push_str(c);
                l.push_str(&" ".repeat(widths[i] - c.chars().count() + 2));
                indent += widths[i] + 2;
            }
        }
        out.push_str(l.trim_end());
        out.push('\n');
    };
    line(header.to_vec());
    for r in rows {
        line(r.iter().map(String::as_str).collect());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Columns as wide as their widest cell (in characters, not bytes) plus two spaces; the
    /// last column unpadded, no trailing blanks; cells past the header's columns printed as
    /// they come.
    #[test]
    fn tables_pad_to_the_widest_cell() {
        let rows = vec![
            vec!["ü-long-name".to_string(), "x".into(), "last".into()],
            vec!["b".to_string(), "yy".into(), String::new()],
        ];
        assert_eq!(
            table(&["NAME", "C", "MESSAGE"], &rows),
            "NAME         C   MESSAGE\nü-long-name  x   last\nb            yy\n"
        );
        assert_eq!(table(&["ONLY"], &[]), "ONLY\n");
        // The last cell's further lines start under its column (a caret diagram keeps its
        // shape), never as a literal `\n`.
        let diagram = vec![vec![
            "ERROR".to_string(),
            "compilation failed: undeclared reference\n | variables.nosuch == 'x'\n | ^".into(),
        ]];
        assert_eq!(
            table(&["SEVERITY", "MESSAGE"], &diagram),
            "SEVERITY  MESSAGE\nERROR     compilation failed: undeclared reference\n           | variables.nosuch == 'x'\n           | ^\n"
        );
    }

    #[test]
    fn json_and_yaml_are_structured_tables_are_not() {
        let v = serde_json::json!({"a": [1, 2]});
        assert_eq!(
            structured(&v, Format::Json).expect("JSON").as_deref(),
            Some("{\n  \"a\": [\n    1,\n    2\n  ]\n}\n")
        );
        assert_eq!(
            structured(&v, Format::Yaml).expect("YAML").as_deref(),
            Some("a:\n- 1\n- 2\n")
        );
        assert_eq!(structured(&v, Format::Table).expect("table"), None);
        assert_eq!(structured(&v, Format::Wide).expect("wide"), None);
    }
}
