//! Checks of an input's text before any parser sees it, each one linear in the text:
//! UTF-8 (with the real line and byte column of the first bad byte), control characters, and
//! how deeply flow collections (`[…]`, `{…}`, JSON) nest. The YAML scanner we parse with
//! spends time proportional to the open flow levels on every token, so 100 000 levels in
//! 200 KB took 48 s; past [`MAX_DEPTH`] we stop before it starts.

/// Deepest nesting read. serde_json and serde_norway both refuse deeper documents anyway
/// (their recursion limit is 128): this only says so before the quadratic part.
pub const MAX_DEPTH: usize = 128;

/// A problem with the text, at a 1-based line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TextError {
    pub line: usize,
    pub message: String,
}

/// Bytes → text. A UTF-8 byte order mark is dropped (editors on Windows write one); UTF-16
/// and UTF-32 are named, since their bytes are not UTF-8 at all.
pub fn decode(bytes: Vec<u8>) -> Result<String, TextError> {
    let bom = |b: &[u8]| bytes.starts_with(b);
    if bom(&[0xFF, 0xFE]) || bom(&[0xFE, 0xFF]) || bom(&[0, 0, 0xFE, 0xFF]) {
        return Err(TextError {
            line: 1,
            message: "not UTF-8 text: UTF-16 or UTF-32 (byte order mark); save it as UTF-8".into(),
        });
    }
    let skip = if bom(&[0xEF, 0xBB, 0xBF]) { 3 } else { 0 };
    let mut bytes = bytes;
    bytes.drain(..skip);
    String::from_utf8(bytes).map_err(|e| {
        let bytes = e.as_bytes();
        let bad = e.utf8_error().valid_up_to();
        let line = 1 + bytes[..bad].iter().filter(|&&b| b == b'\n').count();
        let line_start = bytes[..bad]
            .iter()
            .rposition(|&b| b == b'\n')
            .map_or(0, |i| i + 1);
        TextError {
            line,
            message: format!("not UTF-8 text (byte column {})", bad - line_start + 1),
        }
    })
}

/// Control characters YAML and JSON both refuse (C0 but tab, LF, CR), then the nesting.
pub fn check(text: &str) -> Result<(), TextError> {
    let mut line = 1;
    let mut line_start = 0;
    for (i, b) in text.bytes().enumerate() {
        match b {
            b'\n' => {
                line += 1;
                line_start = i + 1;
            }
            b'\t' | b'\r' => {}
            0..=0x1F => {
                return Err(TextError {
                    line,
                    message: format!(
                        "control character U+{b:04X} at byte column {} (not allowed in YAML or JSON)",
                        i - line_start + 1
                    ),
                });
            }
            _ => {}
        }
    }
    let mut s = Scanner::default();
    for (i, l) in text.split('\n').enumerate() {
        s.line(l.as_bytes()).map_err(|()| TextError {
            line: i + 1,
            message: format!("nested deeper than {MAX_DEPTH} levels"),
        })?;
    }
    Ok(())
}

/// In flow context: what the scanner expects next.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum Flow {
    /// A node (after `[`, `{`, `,`, `:`, `?`).
    #[default]
    Start,
    /// Inside a plain scalar (which may hold quotes and span lines).
    Plain,
    /// After a complete node (a quoted scalar, an alias, a closed collection).
    After,
}

/// A block scalar (`|`, `>`) whose content lines are being skipped.
#[derive(Debug, Clone, Copy)]
struct BlockScalar {
    /// Column of the block collection it belongs to (-1 at document level).
    parent: i64,
    /// Content indentation, once known (from an indicator or the first non-blank line).
    indent: Option<usize>,
    /// Most spaces on a leading blank line (libyaml counts them towards the indentation).
    leading: usize,
}

/// A lexer of just enough YAML to find where flow collections open and close, following
/// libyaml's rules: quoted scalars (which may hold brackets and span lines), plain scalars
/// (which may hold quotes and continue on more indented lines), comments, block scalars (whose
/// content is text, as far as libyaml's indentation rules say), the columns of the open block
/// collections (which those rules depend on), document markers.
#[derive(Debug, Default)]
struct Scanner {
    depth: usize,
    /// The deepest flow nesting seen (for tests).
    max_depth: usize,
    flow: Flow,
    /// An open quoted scalar: its quote character.
    quote: Option<u8>,
    /// Column where the current node started in block context: a key's column if `:` follows.
    node_col: usize,
    block_scalar: Option<BlockScalar>,
    /// A plain scalar in block context that may continue on the next line.
    plain: bool,
    /// Columns of the open block collections (libyaml's indentation stack).
    indents: Vec<usize>,
}

fn blank(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\r')
}

/// Whether position `i` ends a token: end of line or blank.
fn ends(line: &[u8], i: usize) -> bool {
    line.get(i).is_none_or(|&b| blank(b))
}

fn skip_blanks(line: &[u8], mut i: usize) -> usize {
    while line.get(i).is_some_and(|&b| blank(b)) {
        i += 1;
    }
    i
}

impl Scanner {
    fn top(&self) -> i64 {
        self.indents.last().map_or(-1, |&c| c as i64)
    }

    /// A block token at `col` closes the collections indented past it.
    fn unroll(&mut self, col: usize) {
        while self.top() > col as i64 {
            self.indents.pop();
        }
    }

    /// A key or `-` at `col` opens a collection there, if indented past the current one.
    fn roll(&mut self, col: usize) {
        if col as i64 > self.top() {
            self.indents.push(col);
        }
    }

    /// One line (without its `\n`). `Err` once nesting passes [`MAX_DEPTH`].
    fn line(&mut self, line: &[u8]) -> Result<(), ()> {
        // Document markers: the loader splits documents there, so each starts afresh.
        let bare = trim_end(line);
        if bare == b"---" || bare.starts_with(b"--- ") || bare == b"..." {
            *self = Scanner {
                max_depth: self.max_depth,
                ..Scanner::default()
            };
            if bare.starts_with(b"--- ") {
                return self.scan(line, 4, At::Node(None));
            }
            return Ok(());
        }
        let indent = line.iter().take_while(|&&b| b == b' ').count();
        let is_blank = line.iter().all(|&b| blank(b));
        if let Some(bs) = &mut self.block_scalar {
            if is_blank {
                if bs.indent.is_none() {
                    bs.leading = bs.leading.max(indent);
                }
                return Ok(());
            }
            let floor = usize::try_from(bs.parent + 1).unwrap_or(0).max(1);
            let m = *bs.indent.get_or_insert(indent.max(bs.leading).max(floor));
            if indent >= m {
                return Ok(());
            }
            self.block_scalar = None;
        }
        if self.quote.is_some() || self.depth > 0 {
            // Continues where the last line stopped.
            return self.scan(line, 0, At::Node(None));
        }
        if self.plain {
            if is_blank {
                return Ok(());
            }
            if line.get(indent) != Some(&b'#') && indent as i64 > self.top() {
                // A continuation line: `[`, `"`, `- ` are text here.
                return self.scan(line, indent, At::Plain(indent));
            }
            self.plain = false;
        }
        self.scan(line, indent, At::Node(None))
    }

    /// Scans the rest of a line from `i`. One loop, no recursion: a line may hold any number
    /// of keys, nodes and collections.
    fn scan(&mut self, line: &[u8], mut i: usize, mut at: At) -> Result<(), ()> {
        loop {
            if let Some(q) = self.quote {
                match self.quoted(line, i, q) {
                    Some(end) => {
                        i = end;
                        at = At::After;
                        if self.depth > 0 {
                            self.flow = Flow::After;
                        }
                    }
                    None => return Ok(()),
                }
                continue;
            }
            if self.depth > 0 {
                match self.flow_scan(line, i)? {
                    // Back in block context just past the closing bracket.
                    Some(end) => {
                        i = end;
                        at = At::After;
                        continue;
                    }
                    None => return Ok(()),
                }
            }
            match at {
                At::Node(start) => {
                    i = skip_blanks(line, i);
                    let Some(&c) = line.get(i) else {
                        return Ok(());
                    };
                    self.unroll(i);
                    match c {
                        b'#' => return Ok(()),
                        b'-' | b'?' if ends(line, i + 1) => {
                            self.roll(i);
                            at = At::Node(None);
                            i += 1;
                        }
                        b':' if ends(line, i + 1) => {
                            at = At::Node(None);
                            i += 1;
                        }
                        b'[' | b'{' => {
                            self.node_col = start.unwrap_or(i);
                            self.open()?;
                            i += 1;
                        }
                        b'"' | b'\'' => {
                            self.node_col = start.unwrap_or(i);
                            self.quote = Some(c);
                            i += 1;
                        }
                        b'|' | b'>' => {
                            // `|2`: the content is indented by 2 past the collection's column.
                            let digit = line[i + 1..]
                                .iter()
                                .take_while(|b| b.is_ascii_digit() || **b == b'+' || **b == b'-')
                                .find(|b| b.is_ascii_digit())
                                .map(|d| usize::from(d - b'0'));
                            let parent = self.top();
                            self.block_scalar = Some(BlockScalar {
                                parent,
                                indent: digit.map(|d| usize::try_from(parent).unwrap_or(0) + d),
                                leading: 0,
                            });
                            return Ok(());
                        }
                        b'&' | b'!' | b'*' => {
                            let start = start.unwrap_or(i);
                            while line.get(i).is_some_and(|&b| !blank(b)) {
                                i += 1;
                            }
                            at = if c == b'*' {
                                self.node_col = start;
                                At::After
                            } else {
                                At::Node(Some(start))
                            };
                        }
                        b'%' if i == 0 => return Ok(()),
                        _ => at = At::Plain(start.unwrap_or(i)),
                    }
                }
                At::Plain(start) => {
                    // Up to `: ` (a key: a node follows), ` #` (a comment) or the end of the
                    // line (the scalar may continue on the next).
                    self.plain = false;
                    loop {
                        let Some(&b) = line.get(i) else {
                            self.plain = true;
                            return Ok(());
                        };
                        if b == b':' && ends(line, i + 1) {
                            self.roll(start);
                            at = At::Node(None);
                            i += 1;
                            break;
                        }
                        if b == b'#' && i > 0 && blank(line[i - 1]) {
                            return Ok(());
                        }
                        i += 1;
                    }
                }
                At::After => {
                    i = skip_blanks(line, i);
                    if line.get(i) == Some(&b':') && ends(line, i + 1) {
                        // The node was a key.
                        self.roll(self.node_col);
                        i += 1;
                    }
                    at = At::Node(None);
                }
            }
        }
    }

    fn open(&mut self) -> Result<(), ()> {
        self.depth += 1;
        self.max_depth = self.max_depth.max(self.depth);
        self.flow = Flow::Start;
        if self.depth > MAX_DEPTH {
            return Err(());
        }
        Ok(())
    }

    /// Skips a quoted scalar's text from `i`; where it closed (just past the quote), or `None`
    /// if it goes on to the next line (the quote stays open).
    fn quoted(&mut self, line: &[u8], mut i: usize, q: u8) -> Option<usize> {
        while i < line.len() {
            let b = line[i];
            if q == b'"' && b == b'\\' {
                i += 2;
                continue;
            }
            if b == q {
                if q == b'\'' && line.get(i + 1) == Some(&b'\'') {
                    i += 2;
                    continue;
                }
                self.quote = None;
                return Some(i + 1);
            }
            i += 1;
        }
        None
    }

    /// Flow context from `i`, up to the end of the line (`None`), an opening quote (`None`
    /// with the quote open) or the bracket that closes the outermost collection (`Some`, just
    /// past it).
    fn flow_scan(&mut self, line: &[u8], mut i: usize) -> Result<Option<usize>, ()> {
        while i < line.len() {
            let b = line[i];
            if b == b'#' && (i == 0 || blank(line[i - 1])) {
                if self.flow == Flow::Plain {
                    self.flow = Flow::After;
                }
                return Ok(None);
            }
            match (self.flow, b) {
                (_, b'[' | b'{') => self.open()?,
                (_, b']' | b'}') => {
                    self.depth = self.depth.saturating_sub(1);
                    self.flow = Flow::After;
                    if self.depth == 0 {
                        return Ok(Some(i + 1));
                    }
                }
                (_, b',') => self.flow = Flow::Start,
                (Flow::Plain, b':') => {
                    // `a:b` is one plain scalar; `a: b`, `a:,`, `a:]` end the key.
                    if ends(line, i + 1) || matches!(line.get(i + 1), Some(b',' | b']' | b'}')) {
                        self.flow = Flow::Start;
                    }
                }
                (Flow::Plain, _) => {}
                (_, b':' | b'?') => self.flow = Flow::Start,
                (_, b'"' | b'\'') => {
                    self.quote = Some(b);
                    match self.quoted(line, i + 1, b) {
                        Some(end) => {
                            self.flow = Flow::After;
                            i = end;
                            continue;
                        }
                        None => return Ok(None),
                    }
                }
                (_, b'&' | b'!' | b'*') => {
                    // Anchors, tags, aliases: one token, no brackets inside.
                    while line.get(i + 1).is_some_and(|&c| {
                        !blank(c) && !matches!(c, b',' | b'[' | b']' | b'{' | b'}')
                    }) {
                        i += 1;
                    }
                    if b == b'*' {
                        self.flow = Flow::After;
                    }
                }
                (_, c) if blank(c) => {}
                _ => self.flow = Flow::Plain,
            }
            i += 1;
        }
        Ok(None)
    }
}

/// Where [`Scanner::scan`] is in block context.
#[derive(Debug, Clone, Copy)]
enum At {
    /// Where a node may start (after an anchor or tag that started at the column, if any).
    Node(Option<usize>),
    /// In a plain scalar that started at the column.
    Plain(usize),
    /// After a complete node (quoted scalar, flow collection, alias): `:` makes it a key.
    After,
}

/// The deepest flow nesting the scanner sees in `text` (up to the first past [`MAX_DEPTH`]).
pub fn flow_depth(text: &str) -> usize {
    let mut s = Scanner::default();
    for l in text.split('\n') {
        if s.line(l.as_bytes()).is_err() {
            break;
        }
    }
    s.max_depth
}

fn trim_end(line: &[u8]) -> &[u8] {
    let end = line.iter().rposition(|&b| !blank(b)).map_or(0, |i| i + 1);
    &line[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn depth_ok(text: &str) -> bool {
        check(text).is_ok()
    }

    fn deep(n: usize) -> String {
        format!("{}{}", "[".repeat(n), "]".repeat(n))
    }

    #[test]
    fn flow_nesting_is_bounded_wherever_it_starts() {
        assert!(depth_ok(&deep(MAX_DEPTH)));
        for text in [
            deep(MAX_DEPTH + 1),
            format!("a: {}", deep(MAX_DEPTH + 1)),
            format!("- {}", deep(MAX_DEPTH + 1)),
            format!("- a: &x !!seq {}", deep(MAX_DEPTH + 1)),
            format!("\"k\": {}", deep(MAX_DEPTH + 1)),
            format!("[a, b]: {}", deep(MAX_DEPTH + 1)),
            format!("a: {}", "{a: ".repeat(MAX_DEPTH + 1)),
            format!("a: [\n{}\n]", "[\n".repeat(MAX_DEPTH + 1)),
            // After a block scalar ends, after a multi-line quote ends, in a later document.
            format!("a: |\n  text [\nb: {}", deep(MAX_DEPTH + 1)),
            format!("a: \"x\n  [[[ \"\nb: {}", deep(MAX_DEPTH + 1)),
            format!("a: 1\n---\nb: {}", deep(MAX_DEPTH + 1)),
            // A plain scalar holding quotes: they open nothing.
            format!("a: it's [\nb: {}", deep(MAX_DEPTH + 1)),
            format!("a: [it's, {}]", deep(MAX_DEPTH)),
            format!("a: [x\"y, {}]", deep(MAX_DEPTH)),
            // A continuation line of a plain scalar starting with a quote opens nothing.
            format!("a: long\n  \"text\nb: {}", deep(MAX_DEPTH + 1)),
            // libyaml's indentation: leading blank lines count, so `b:` is not content.
            format!("a: |\n          \n  b: {}", deep(MAX_DEPTH + 1)),
        ] {
            let err = check(&text).expect_err(&text[..text.len().min(40)]);
            assert!(err.message.contains("nested deeper"), "{err:?}");
        }
    }

    #[test]
    fn text_that_only_looks_nested_is_not() {
        let many = "[".repeat(MAX_DEPTH + 1);
        for text in [
            format!("a: |\n  {many}\n  {many}\nb: 1"),
            format!("a: >-\n    {many}\n\n    {many}\n"),
            format!("- key: |2\n    {many}\n  other: 1"),
            format!("a: '{many}'"),
            format!("a: \"{many}\\\"{many}\""),
            format!("a: \"x\n  {many}\n  y\""),
            format!("a: 'it''s {many}'"),
            format!("a: b # {many}"),
            format!("# {many}"),
            format!("a: x{many}"),
            format!("a: long text\n  {many}"),
            format!("[\"{many}\", '{many}', {{\"k\": \"{many}\"}}]"),
            format!("a:{many}"),
            format!("url: http://x/{many}"),
        ] {
            assert!(depth_ok(&text), "{text:?}: {:?}", check(&text));
        }
    }

    #[test]
    fn control_characters_and_utf8_are_placed() {
        let e = check("a: 1\nb: \"x\u{0}\"\n").expect_err("NUL");
        assert_eq!(e.line, 2);
        assert!(e.message.contains("U+0000 at byte column 6"), "{e:?}");
        assert!(check("a:\tb\r\n").is_ok());
        let e = decode(b"a: 1\nb: \xc3x\n".to_vec()).expect_err("bad UTF-8");
        assert_eq!(
            (e.line, e.message.as_str()),
            (2, "not UTF-8 text (byte column 4)")
        );
        assert_eq!(decode(b"\xef\xbb\xbfa: 1".to_vec()).as_deref(), Ok("a: 1"));
        assert!(decode(b"\xff\xfea\x00".to_vec()).is_err());
    }

    /// Generated documents whose flow nesting is known by construction, in every style the
    /// scanner must tell apart; the scanner must find exactly that depth in each one that
    /// serde_norway accepts as YAML.
    mod generated {
        use super::super::flow_depth;
        use proptest::prelude::*;

        #[derive(Debug, Clone)]
        enum Node {
            Scalar(u8),
            /// Items; flow style; on several lines (flow only).
            Seq(Vec<Node>, bool, bool),
            Map(Vec<(u8, Node)>, bool, bool),
        }

        /// Scalars: each text holds what could fool a scanner.
        const FLOW_SCALARS: [&str; 8] = [
            "plain",
            "it's",
            "x\"y",
            "a:b",
            "'q [ { '' x'",
            "\"d ] } \\\" #\"",
            "http://x/[",
            "-1",
        ];
        const KEYS: [&str; 5] = ["k", "\"q k\"", "'s k'", "k[x", "it's"];

        fn depth(n: &Node) -> usize {
            match n {
                Node::Scalar(_) => 0,
                Node::Seq(items, flow, _) => {
                    usize::from(*flow) + items.iter().map(depth).max().unwrap_or(0)
                }
                Node::Map(items, flow, _) => {
                    usize::from(*flow) + items.iter().map(|(_, v)| depth(v)).max().unwrap_or(0)
                }
            }
        }

        /// A scalar in block context: one of the flow ones, a block scalar, a tricky plain.
        fn block_scalar(i: u8, indent: usize) -> String {
            let pad = " ".repeat(indent + 2);
            match i % 11 {
                8 => format!("|\n{pad}[[ \"unclosed\n{pad}  {{ '\n"),
                9 => format!(">-\n\n{pad}]] }} # not a comment\n"),
                10 => "plain [ with \" and ' #comment\n".to_string(),
                _ => format!("{}\n", FLOW_SCALARS[usize::from(i % 8)]),
            }
        }

        fn flow(n: &Node, indent: usize, out: &mut String) {
            let pad = " ".repeat(indent + 2);
            match n {
                Node::Scalar(i) => out.push_str(FLOW_SCALARS[usize::from(i % 8)]),
                Node::Seq(items, _, multi) => {
                    out.push('[');
                    for (j, it) in items.iter().enumerate() {
                        if j > 0 {
                            out.push_str(", ");
                        }
                        if *multi {
                            out.push('\n');
                            out.push_str(&pad);
                        }
                        flow(it, indent, out);
                    }
                    out.push(']');
                }
                Node::Map(items, _, multi) => {
                    out.push('{');
                    for (j, (k, v)) in items.iter().enumerate() {
                        if j > 0 {
                            out.push_str(", ");
                        }
                        if *multi {
                            out.push_str(" # c [\n");
                            out.push_str(&pad);
                        }
                        out.push_str(KEYS[usize::from(k % 5)]);
                        out.push_str(": ");
                        flow(v, indent, out);
                    }
                    out.push('}');
                }
            }
        }

        /// `n` as the value after `key: ` or `- ` at `indent` (the text ends with `\n`).
        fn value(n: &Node, indent: usize, out: &mut String) {
            match n {
                Node::Scalar(i) => out.push_str(&block_scalar(*i, indent)),
                Node::Seq(_, true, _) | Node::Map(_, true, _) => {
                    flow(n, indent, out);
                    out.push('\n');
                }
                _ => {
                    out.push('\n');
                    block(n, indent + 2, out);
                }
            }
        }

        fn block(n: &Node, indent: usize, out: &mut String) {
            let pad = " ".repeat(indent);
            match n {
                Node::Seq(items, false, _) if !items.is_empty() => {
                    for it in items {
                        out.push_str(&pad);
                        out.push_str("- ");
                        value(it, indent, out);
                    }
                }
                Node::Map(items, false, _) if !items.is_empty() => {
                    let mut seen = std::collections::HashSet::new();
                    for (k, v) in items {
                        if !seen.insert(k % 5) {
                            continue;
                        }
                        out.push_str(&pad);
                        out.push_str(KEYS[usize::from(k % 5)]);
                        out.push_str(": ");
                        value(v, indent, out);
                    }
                }
                _ => {
                    out.push_str(&pad);
                    value(n, indent, out);
                }
            }
        }

        fn node() -> impl Strategy<Value = Node> {
            any::<u8>()
                .prop_map(Node::Scalar)
                .prop_recursive(6, 40, 4, |inner| {
                    prop_oneof![
                        (
                            prop::collection::vec(inner.clone(), 0..4),
                            any::<bool>(),
                            any::<bool>()
                        )
                            .prop_map(|(v, f, m)| Node::Seq(v, f, m)),
                        (
                            prop::collection::vec((any::<u8>(), inner), 0..4),
                            any::<bool>(),
                            any::<bool>()
                        )
                            .prop_map(|(v, f, m)| Node::Map(v, f, m)),
                    ]
                })
        }

        /// Flow collections inside a flow collection are flow too, whatever was drawn.
        fn flowify(n: Node, inside: bool) -> Node {
            match n {
                Node::Scalar(_) => n,
                Node::Seq(v, f, m) => {
                    // An empty block collection has no block form.
                    let f = f || inside || v.is_empty();
                    Node::Seq(v.into_iter().map(|x| flowify(x, f)).collect(), f, m)
                }
                Node::Map(v, f, m) => {
                    let mut seen = std::collections::HashSet::new();
                    let v: Vec<_> = v.into_iter().filter(|(k, _)| seen.insert(k % 5)).collect();
                    let f = f || inside || v.is_empty();
                    let v = v.into_iter().map(|(k, x)| (k, flowify(x, f))).collect();
                    Node::Map(v, f, m)
                }
            }
        }

        proptest! {
            #![proptest_config(ProptestConfig { cases: 3000, ..ProptestConfig::default() })]

            #[test]
            fn the_scanner_finds_the_true_flow_depth(n in node()) {
                let n = flowify(n, false);
                let mut text = String::new();
                block(&n, 0, &mut text);
                if serde_norway::from_str::<serde_norway::Value>(&text).is_ok() {
                    prop_assert_eq!(flow_depth(&text), depth(&n), "{}", text);
                }
            }
        }
    }
}
