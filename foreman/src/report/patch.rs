//! One path's change as `git diff --full-index` writes it, so `git apply`
//! takes the patch: a `diff --git` header, mode lines, an `index` line with
//! the git blob ids (what lets `git apply -3` merge), then a unified diff
//! of text (`similar` computes it), or a git binary patch (`binary`) for
//! content that is not UTF-8 text. Content over [`MAX_DIFF_FILE`] is not
//! read; `changes` leaves such paths out of the patch and names them.

use std::io::{self, Write};
use std::time::Duration;

/// Files larger than this are not diffed: the patch notes them as binary.
pub(crate) const MAX_DIFF_FILE: u64 = 1 << 20;

/// How long one file's diff may search for the smallest edit (a longer
/// search gives a larger, still correct, diff).
const DIFF_TIMEOUT: Duration = Duration::from_secs(5);

/// What git records of a path: a file (executable or not) or a link.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    File { exec: bool },
    Link,
}

impl Kind {
    fn mode(self) -> &'static str {
        match self {
            Kind::File { exec: false } => "100644",
            Kind::File { exec: true } => "100755",
            Kind::Link => "120000",
        }
    }
}

/// A file's content as the patch sees it (a link's content is its target).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Content {
    Text(String),
    /// Not UTF-8, or holds a NUL byte.
    Binary(Vec<u8>),
    /// Over [`MAX_DIFF_FILE`]: its size; not read.
    TooLarge(u64),
}

impl Content {
    /// Text when `bytes` are UTF-8 without a NUL (git's test for binary
    /// looks for a NUL), else binary.
    pub fn from_bytes(bytes: Vec<u8>) -> Content {
        if memchr::memchr(0, &bytes).is_some() {
            return Content::Binary(bytes);
        }
        match String::from_utf8(bytes) {
            Ok(s) => Content::Text(s),
            Err(e) => Content::Binary(e.into_bytes()),
        }
    }
}

/// One side of a change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Side {
    pub kind: Kind,
    pub content: Content,
    /// The git blob id of the bytes ([`BlobId`]).
    pub oid: String,
}

/// The id git gives a blob: the SHA-1 of `blob <size>\0` and the bytes.
pub(crate) struct BlobId(sha1_smol::Sha1);

impl BlobId {
    pub fn new(size: u64) -> BlobId {
        BlobId(sha1_smol::Sha1::from(format!("blob {size}\0")))
    }

    pub fn update(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }

    pub fn hex(&self) -> String {
        self.0.digest().to_string()
    }

    /// The id of `bytes`.
    pub fn of(bytes: &[u8]) -> String {
        let mut id = BlobId::new(bytes.len() as u64);
        id.update(bytes);
        id.hex()
    }
}

/// The id git writes for "no file".
const NO_BLOB: &str = "0000000000000000000000000000000000000000";

/// What happened to one path. A file that became a link (or the other way)
/// is a deletion and an addition, as git writes it.
#[derive(Debug)]
pub(crate) enum Change<'a> {
    Added(&'a Side),
    Deleted(&'a Side),
    /// Same kind of entry; the bytes or the mode differ.
    Modified {
        old: &'a Side,
        new: &'a Side,
        same_bytes: bool,
    },
}

/// Writes one change of `path` (its bytes as stored, relative to the
/// workspace) in git's format.
pub(crate) fn write_change(w: &mut impl Write, path: &[u8], change: &Change<'_>) -> io::Result<()> {
    let a = quote(b"a/", path);
    let b = quote(b"b/", path);
    writeln!(w, "diff --git {a} {b}")?;
    let (old, new, same_bytes) = match change {
        Change::Added(new) => {
            writeln!(w, "new file mode {}", new.kind.mode())?;
            writeln!(w, "index {NO_BLOB}..{}", new.oid)?;
            (None, Some(*new), false)
        }
        Change::Deleted(old) => {
            writeln!(w, "deleted file mode {}", old.kind.mode())?;
            writeln!(w, "index {}..{NO_BLOB}", old.oid)?;
            (Some(*old), None, false)
        }
        Change::Modified {
            old,
            new,
            same_bytes,
        } => {
            if old.kind != new.kind {
                writeln!(w, "old mode {}", old.kind.mode())?;
                writeln!(w, "new mode {}", new.kind.mode())?;
                if !same_bytes {
                    writeln!(w, "index {}..{}", old.oid, new.oid)?;
                }
            } else if !same_bytes {
                writeln!(w, "index {}..{} {}", old.oid, new.oid, new.kind.mode())?;
            }
            (Some(*old), Some(*new), *same_bytes)
        }
    };
    if same_bytes {
        return Ok(());
    }
    let from = if old.is_some() { a } else { "/dev/null".into() };
    let to = if new.is_some() { b } else { "/dev/null".into() };
    match (text_of(old), text_of(new)) {
        (Some(o), Some(n)) => write_text(w, &from, &to, o, n),
        _ => match (bytes_of(old), bytes_of(new)) {
            (Some(o), Some(n)) => super::binary::write_binary(w, o, n),
            // Not read (too large): `changes` leaves such paths out.
            _ => writeln!(w, "Binary files {from} and {to} differ"),
        },
    }
}

/// A side's bytes (None inside: no file); None when they were not read.
fn bytes_of(side: Option<&Side>) -> Option<Option<&[u8]>> {
    match side.map(|s| &s.content) {
        None => Some(None),
        Some(Content::Text(t)) => Some(Some(t.as_bytes())),
        Some(Content::Binary(b)) => Some(Some(b)),
        Some(Content::TooLarge(_)) => None,
    }
}

/// A side's text ("" when absent), None when it is not text.
fn text_of(side: Option<&Side>) -> Option<&str> {
    match side.map(|s| &s.content) {
        None => Some(""),
        Some(Content::Text(t)) => Some(t.as_str()),
        Some(_) => None,
    }
}

/// A unified diff of two texts with `---`/`+++` headers (nothing when both
/// are empty: an empty file added or deleted has only its header).
fn write_text(w: &mut impl Write, from: &str, to: &str, old: &str, new: &str) -> io::Result<()> {
    let diff = similar::TextDiff::configure()
        .newline_terminated(true)
        .timeout(DIFF_TIMEOUT)
        .diff_lines(old, new);
    diff.unified_diff()
        .context_radius(3)
        .header(from, to)
        .to_writer(w)
}

/// `prefix` + `path` as git writes a name: as is when plain, else in double
/// quotes with C escapes (control characters, `"`, `\` and bytes over
/// 0x7f, as git's default `core.quotePath` does).
pub(crate) fn quote(prefix: &[u8], path: &[u8]) -> String {
    let needs = |c: u8| c < 0x20 || c == b'"' || c == b'\\' || c >= 0x7f;
    let name: Vec<u8> = [prefix, path].concat();
    if !name.iter().any(|&c| needs(c)) {
        return String::from_utf8(name).expect("plain ASCII");
    }
    let mut out = String::from("\"");
    for c in name {
        match c {
            b'\x07' => out.push_str("\\a"),
            b'\x08' => out.push_str("\\b"),
            b'\t' => out.push_str("\\t"),
            b'\n' => out.push_str("\\n"),
            b'\x0b' => out.push_str("\\v"),
            b'\x0c' => out.push_str("\\f"),
            b'\r' => out.push_str("\\r"),
            b'"' => out.push_str("\\\""),
            b'\\' => out.push_str("\\\\"),
            c if needs(c) => out.push_str(&format!("\\{c:03o}")),
            c => out.push(c as char),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn side(kind: Kind, content: Content) -> Side {
        let oid = match &content {
            Content::Text(t) => BlobId::of(t.as_bytes()),
            Content::Binary(b) => BlobId::of(b),
            Content::TooLarge(_) => "f".repeat(40),
        };
        Side { kind, content, oid }
    }

    fn file(text: &str) -> Side {
        side(Kind::File { exec: false }, Content::Text(text.into()))
    }

    fn render(path: &str, change: Change<'_>) -> String {
        let mut out = Vec::new();
        write_change(&mut out, path.as_bytes(), &change).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn blob_ids_are_gits() {
        // `git hash-object` of an empty file and of "a\n".
        assert_eq!(BlobId::of(b""), "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391");
        assert_eq!(
            BlobId::of(b"a\n"),
            "78981922613b2afb6025042ff6bd878ac1994e85"
        );
    }

    #[test]
    fn a_modified_file_is_a_unified_diff_with_git_headers() {
        let (old, new) = (file("a\nb\nc\n"), file("a\nB\nc\n"));
        let text = render(
            "src/x.txt",
            Change::Modified {
                old: &old,
                new: &new,
                same_bytes: false,
            },
        );
        assert_eq!(
            text,
            format!(
                "diff --git a/src/x.txt b/src/x.txt\nindex {}..{} 100644\n--- a/src/x.txt\n\
                 +++ b/src/x.txt\n@@ -1,3 +1,3 @@\n a\n-b\n+B\n c\n",
                old.oid, new.oid
            )
        );
    }

    #[test]
    fn added_and_deleted_files_name_dev_null_and_their_mode() {
        let new = side(Kind::File { exec: true }, Content::Text("run\n".into()));
        assert_eq!(
            render("run.sh", Change::Added(&new)),
            format!(
                "diff --git a/run.sh b/run.sh\nnew file mode 100755\nindex {NO_BLOB}..{}\n\
                 --- /dev/null\n+++ b/run.sh\n@@ -0,0 +1 @@\n+run\n",
                new.oid
            )
        );
        let old = file("x\ny\n");
        assert_eq!(
            render("gone", Change::Deleted(&old)),
            format!(
                "diff --git a/gone b/gone\ndeleted file mode 100644\nindex {}..{NO_BLOB}\n\
                 --- a/gone\n+++ /dev/null\n@@ -1,2 +0,0 @@\n-x\n-y\n",
                old.oid
            )
        );
        // An empty file is its header alone, as git writes it.
        assert_eq!(
            render("empty", Change::Added(&file(""))),
            format!(
                "diff --git a/empty b/empty\nnew file mode 100644\n\
                 index {NO_BLOB}..e69de29bb2d1d6434b8b29ae775ad8c2e48c5391\n"
            )
        );
    }

    #[test]
    fn a_missing_final_newline_is_marked() {
        let (old, new) = (file("a\nb"), file("a\nc"));
        let text = render(
            "f",
            Change::Modified {
                old: &old,
                new: &new,
                same_bytes: false,
            },
        );
        assert!(
            text.ends_with("-b\n\\ No newline at end of file\n+c\n\\ No newline at end of file\n"),
            "{text}"
        );
    }

    #[test]
    fn a_mode_change_alone_has_no_hunk() {
        let old = file("x\n");
        let new = side(Kind::File { exec: true }, Content::Text("x\n".into()));
        assert_eq!(
            render(
                "f",
                Change::Modified {
                    old: &old,
                    new: &new,
                    same_bytes: true
                }
            ),
            "diff --git a/f b/f\nold mode 100644\nnew mode 100755\n"
        );
    }

    #[test]
    fn binary_files_are_git_binary_patches_oversized_ones_noted_links_their_target() {
        let bin = side(
            Kind::File { exec: false },
            Content::from_bytes(vec![0x89, b'P', 0, 1]),
        );
        let added = render("img.png", Change::Added(&bin));
        assert!(
            added.starts_with(&format!(
                "diff --git a/img.png b/img.png\nnew file mode 100644\nindex {NO_BLOB}..{}\n\
                 GIT binary patch\nliteral 4\n",
                bin.oid
            )),
            "{added}"
        );
        assert!(
            added.ends_with("\nliteral 0\n") || added.contains("\n\nliteral 0\n"),
            "{added}"
        );
        let (old, big) = (
            file("small\n"),
            side(
                Kind::File { exec: false },
                Content::TooLarge(MAX_DIFF_FILE + 1),
            ),
        );
        assert!(
            render(
                "data",
                Change::Modified {
                    old: &old,
                    new: &big,
                    same_bytes: false
                }
            )
            .ends_with("Binary files a/data and b/data differ\n")
        );
        let link = side(Kind::Link, Content::Text("/etc/passwd".into()));
        assert_eq!(
            render("l", Change::Added(&link)),
            format!(
                "diff --git a/l b/l\nnew file mode 120000\nindex {NO_BLOB}..{}\n--- /dev/null\n\
                 +++ b/l\n@@ -0,0 +1 @@\n+/etc/passwd\n\\ No newline at end of file\n",
                link.oid
            )
        );
    }

    #[test]
    fn names_are_quoted_as_git_quotes_them() {
        assert_eq!(quote(b"a/", b"plain name.txt"), "a/plain name.txt");
        assert_eq!(
            quote(b"b/", "é\t\"q\\".as_bytes()),
            r#""b/\303\251\t\"q\\""#
        );
        assert_eq!(quote(b"a/", b"\xff\n"), r#""a/\377\n""#);
    }
}
