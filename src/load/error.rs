//! The one error of reading input: what went wrong, naming the file (and line). Below
//! `input` and `files`, which both return it.

#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("{path}: cannot read: {source}")]
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
    #[error(
        "{path}: is {what}; only regular files and folders are read (`-f -` reads standard input)"
    )]
    NotRegular { path: String, what: &'static str },
    #[error(
        "{path}: more than {}, the limit per input; raise it with --max-input-bytes",
        human(*max)
    )]
    TooLarge { path: String, max: u64 },
    #[error("no Kubernetes objects in {0}: an empty input proves nothing, so it is an error")]
    NoObjects(String),
}

/// `64 MiB`, `100 bytes`: a size for messages.
pub fn human(bytes: u64) -> String {
    for (unit, size) in [("GiB", 1u64 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)] {
        if bytes >= size && bytes.is_multiple_of(size) {
            return format!("{} {unit}", bytes / size);
        }
    }
    format!("{bytes} bytes")
}
