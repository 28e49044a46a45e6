//! Which files `-f` reads, and reading them within bounds. Folders are walked once per folder
//! and once per file (by device and inode: symlink loops end, a file linked twice is read
//! once); only regular files are read (a FIFO would block forever, `/dev/zero` never ends:
//! data from a pipe comes through `-f -`); every input is read through `Read::take`, so no
//! input grows memory past the limit however long it is.

use super::error::LoadError;
use rustix::fs::OFlags;
use std::collections::HashSet;
use std::fs::{FileType, Metadata};
use std::io::Read;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// The default limit per input: 64 MiB. A `kubectl get -o yaml` of every template,
/// constraint, constraint CRD, VAP and binding of a large cluster (hundreds of templates,
/// thousands of constraints) is a few MiB to a few tens of MiB; parsing takes ~10× the text in
/// memory for typical manifests (up to ~100× for a file of tiny scalars, see docs/input.md).
pub const DEFAULT_MAX_INPUT_BYTES: u64 = 64 << 20;

/// How inputs are read.
#[derive(Debug, Clone, Copy)]
pub struct ReadOptions {
    /// Bytes read at most from each input (each file, or stdin); more is an error.
    pub max_input_bytes: u64,
}

impl Default for ReadOptions {
    fn default() -> Self {
        ReadOptions {
            max_input_bytes: DEFAULT_MAX_INPUT_BYTES,
        }
    }
}

const EXTENSIONS: [&str; 3] = ["yaml", "yml", "json"];

/// Folders walked and files taken, by (device, inode), across all of `-f`.
#[derive(Debug, Default)]
pub struct Seen {
    dirs: HashSet<(u64, u64)>,
    files: HashSet<(u64, u64)>,
}

fn id(m: &Metadata) -> (u64, u64) {
    (m.dev(), m.ino())
}

/// What a file that is not a regular file or a folder is, for messages.
fn kind(t: FileType) -> &'static str {
    if t.is_fifo() {
        "a FIFO"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else {
        "not a regular file"
    }
}

fn not_regular(path: &Path, t: FileType) -> LoadError {
    LoadError::NotRegular {
        path: path.display().to_string(),
        what: kind(t),
    }
}

fn cannot_read(path: &Path, source: std::io::Error) -> LoadError {
    LoadError::Read {
        path: path.display().to_string(),
        source,
    }
}

/// How standard input is named in messages.
pub const STDIN: &str = "<stdin>";

/// Reads every path of `-f` (`-` is `stdin`) and hands each input's bytes to `take`, which
/// says how many objects it held. A path holding no object is an error: an empty input
/// checks nothing.
pub fn read_each(
    paths: &[String],
    stdin: &mut dyn Read,
    opts: ReadOptions,
    mut take: impl FnMut(&str, Vec<u8>) -> Result<usize, LoadError>,
) -> Result<(), LoadError> {
    let mut seen = Seen::default();
    for p in paths {
        let objects = if p == "-" {
            take(
                STDIN,
                read_capped(&mut *stdin, STDIN, opts.max_input_bytes, 0)?,
            )?
        } else {
            let files = files_of(p, &mut seen)?;
            if files.is_empty() {
                // Every file below it was already taken through another path.
                continue;
            }
            let mut n = 0;
            for file in files {
                let bytes = read_file(&file, opts.max_input_bytes)?;
                n += take(&file.display().to_string(), bytes)?;
            }
            n
        };
        if objects == 0 {
            let name = if p == "-" { STDIN } else { p.as_str() };
            return Err(LoadError::NoObjects(name.into()));
        }
    }
    Ok(())
}

/// The files `arg` names: itself, or the YAML/JSON files below it (sorted, hidden entries
/// skipped), less those already taken (so possibly none).
pub fn files_of(arg: &str, seen: &mut Seen) -> Result<Vec<PathBuf>, LoadError> {
    let path = Path::new(arg);
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(LoadError::NotFound(arg.to_string()));
        }
        Err(e) => return Err(cannot_read(path, e)),
    };
    let mut out = Vec::new();
    if meta.is_dir() {
        seen.dirs.insert(id(&meta));
        let mut found = 0;
        walk(path, seen, &mut out, &mut found)?;
        if found == 0 {
            return Err(LoadError::EmptyFolder(arg.to_string()));
        }
    } else if meta.is_file() {
        if seen.files.insert(id(&meta)) {
            out.push(path.to_path_buf());
        }
    } else {
        return Err(not_regular(path, meta.file_type()));
    }
    Ok(out)
}

fn has_extension(path: &Path) -> bool {
    path.extension()
        .and_then(|x| x.to_str())
        .is_some_and(|x| EXTENSIONS.contains(&x.to_ascii_lowercase().as_str()))
}

/// Depth-first, in name order. Symlinks are followed (a linked folder of manifests is common),
/// each folder once. An entry that cannot be examined is an error if it would have been read
/// (a `.yaml` name), skipped otherwise (a dangling link to anything else).
fn walk(
    dir: &Path,
    seen: &mut Seen,
    out: &mut Vec<PathBuf>,
    found: &mut usize,
) -> Result<(), LoadError> {
    let mut entries = Vec::new();
    for e in std::fs::read_dir(dir).map_err(|e| cannot_read(dir, e))? {
        entries.push(e.map_err(|e| cannot_read(dir, e))?);
    }
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        if e.file_name().to_string_lossy().starts_with('.') {
            continue;
        }
        let path = e.path();
        let meta = match std::fs::metadata(&path) {
            Ok(m) => m,
            Err(err) if has_extension(&path) => return Err(cannot_read(&path, err)),
            Err(_) => continue,
        };
        if meta.is_dir() {
            if seen.dirs.insert(id(&meta)) {
                walk(&path, seen, out, found)?;
            }
        } else if has_extension(&path) {
            if !meta.is_file() {
                return Err(not_regular(&path, meta.file_type()));
            }
            *found += 1;
            if seen.files.insert(id(&meta)) {
                out.push(path);
            }
        }
    }
    Ok(())
}

/// A regular file's bytes, at most `max`. Opened without blocking (a file swapped for a FIFO
/// after it was examined cannot hang the open) and checked again on the open descriptor.
pub fn read_file(path: &Path, max: u64) -> Result<Vec<u8>, LoadError> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags((OFlags::NONBLOCK | OFlags::NOCTTY).bits().cast_signed())
        .open(path)
        .map_err(|e| cannot_read(path, e))?;
    let meta = file.metadata().map_err(|e| cannot_read(path, e))?;
    if !meta.is_file() {
        return Err(not_regular(path, meta.file_type()));
    }
    let hint = meta.len().min(max).saturating_add(1);
    read_capped(file, &path.display().to_string(), max, hint)
}

/// Up to `max` bytes of `r`; more is [`LoadError::TooLarge`]. `hint` sizes the buffer.
pub fn read_capped(r: impl Read, name: &str, max: u64, hint: u64) -> Result<Vec<u8>, LoadError> {
    let mut buf = Vec::with_capacity(usize::try_from(hint).unwrap_or(0));
    r.take(max.saturating_add(1))
        .read_to_end(&mut buf)
        .map_err(|source| LoadError::Read {
            path: name.to_string(),
            source,
        })?;
    if buf.len() as u64 > max {
        return Err(LoadError::TooLarge {
            path: name.to_string(),
            max,
        });
    }
    Ok(buf)
}

/// `--max-input-bytes`: a number of bytes, or with `Ki`, `Mi`, `Gi` (also `K`, `M`, `G`, in
/// the same binary sense, as kubectl's quantities would not be).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: u64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a size (e.g. 64Mi, 1Gi, 1048576)"))?;
    let factor: u64 = match unit.trim() {
        "" => 1,
        "K" | "Ki" | "KiB" => 1 << 10,
        "M" | "Mi" | "MiB" => 1 << 20,
        "G" | "Gi" | "GiB" => 1 << 30,
        u => return Err(format!("{s:?}: unknown unit {u:?} (use Ki, Mi or Gi)")),
    };
    match n.checked_mul(factor) {
        Some(0) => Err("the input limit must be at least 1 byte".into()),
        Some(v) => Ok(v),
        None => Err(format!("{s:?} is too large")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load::error::human;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("64Mi"), Ok(64 << 20));
        assert_eq!(parse_size("100"), Ok(100));
        assert_eq!(parse_size("1G"), Ok(1 << 30));
        assert!(parse_size("0").is_err());
        assert!(parse_size("1Ti").is_err());
        assert!(parse_size("-1").is_err());
        assert!(parse_size("99999999999Gi").is_err());
        assert_eq!(human(64 << 20), "64 MiB");
        assert_eq!(human(100), "100 bytes");
    }

    #[test]
    fn reading_stops_one_byte_past_the_limit() {
        let err = read_capped(std::io::repeat(b'a'), "<stdin>", 10, 0).unwrap_err();
        assert!(matches!(err, LoadError::TooLarge { max: 10, .. }), "{err}");
        assert_eq!(
            read_capped(&b"0123456789"[..], "x", 10, 0)
                .expect("fits")
                .len(),
            10
        );
    }
}
