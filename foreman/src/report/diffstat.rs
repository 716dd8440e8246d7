//! Files changed, read back from a patch in git's format (what `git diff
//! --stat` shows): each path with its lines added and removed.

/// How one file changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Status {
    Added,
    Deleted,
    Modified,
    /// Changed, but not in the patch.
    LeftOut(Why),
}

/// Why a changed path is not in the patch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Why {
    /// The workspace's `.gitignore` or the default list names it.
    Ignored,
    /// Over `MAX_DIFF_FILE`.
    TooLarge,
}

impl Why {
    pub fn as_str(self) -> &'static str {
        match self {
            Why::Ignored => "ignored",
            Why::TooLarge => "over 1 MiB",
        }
    }
}

/// How a patch names a path it left out, at its top (`git apply` skips
/// lines before the first `diff --git`): this, the path, ` (WHY)`.
pub(crate) const LEFT_OUT: &str = "# left out of this patch: ";

/// One file of a diffstat.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct FileStat {
    /// As the patch names it (git-quoted when it holds unusual bytes).
    pub path: String,
    pub status: Status,
    pub added: u64,
    pub removed: u64,
    /// Noted as binary (or too large), not diffed.
    pub binary: bool,
}

/// Where in a file's section the reader is.
#[derive(Debug, Default, PartialEq)]
enum At {
    #[default]
    Header,
    Hunk,
}

/// A diffstat read line by line (a patch may be too large to hold).
#[derive(Debug, Default)]
pub(crate) struct Diffstat {
    pub files: Vec<FileStat>,
    at: At,
}

impl Diffstat {
    /// Takes the next line of the patch (without its newline).
    pub fn push(&mut self, line: &str) {
        if self
            .files
            .iter()
            .all(|f| matches!(f.status, Status::LeftOut(_)))
            && let Some(rest) = line.strip_prefix(LEFT_OUT)
            && let Some((path, why)) = rest.rsplit_once(" (")
        {
            let why = match why.trim_end_matches(')') {
                "ignored" => Why::Ignored,
                _ => Why::TooLarge,
            };
            self.files.push(FileStat {
                path: path.to_string(),
                status: Status::LeftOut(why),
                added: 0,
                removed: 0,
                binary: false,
            });
            return;
        }
        if let Some(names) = line.strip_prefix("diff --git ") {
            self.files.push(FileStat {
                path: name_of(names),
                status: Status::Modified,
                added: 0,
                removed: 0,
                binary: false,
            });
            self.at = At::Header;
            return;
        }
        let Some(f) = self.files.last_mut() else {
            return;
        };
        if self.at == At::Header {
            if line.starts_with("new file mode ") {
                f.status = Status::Added;
            } else if line.starts_with("deleted file mode ") {
                f.status = Status::Deleted;
            } else if line.starts_with("Binary files ") || line == "GIT binary patch" {
                f.binary = true;
            } else if line.starts_with("@@ ") {
                self.at = At::Hunk;
            }
            return;
        }
        match line.as_bytes().first() {
            Some(b'+') => f.added += 1,
            Some(b'-') => f.removed += 1,
            _ => {}
        }
    }
}

/// The diffstat of a whole patch, from its lines.
#[cfg(test)]
pub(crate) fn diffstat<'a>(lines: impl IntoIterator<Item = &'a str>) -> Vec<FileStat> {
    let mut stat = Diffstat::default();
    for line in lines {
        stat.push(line);
    }
    stat.files
}

/// The path of `a/P b/P` (both names are the same in Saheeli's patches),
/// quotes kept when git quoted it.
fn name_of(names: &str) -> String {
    let half = &names[..names.len().saturating_sub(1) / 2];
    match half.strip_prefix("\"a/") {
        Some(rest) => format!("\"{rest}"),
        None => half.strip_prefix("a/").unwrap_or(half).to_string(),
    }
}

/// `+3 -1` or `binary`, for a diffstat line.
pub(crate) fn counts(f: &FileStat) -> String {
    if matches!(f.status, Status::LeftOut(_)) {
        "-".into()
    } else if f.binary {
        "binary".into()
    } else {
        format!("+{} -{}", f.added, f.removed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_lines_per_file_and_knows_new_deleted_and_binary() {
        let patch = "\
diff --git a/src/x y.txt b/src/x y.txt
--- a/src/x y.txt
+++ b/src/x y.txt
@@ -1,3 +1,3 @@
 a
-b
+B
--- not a header inside a hunk
+++ nor this
 c
diff --git a/new b/new
new file mode 100644
--- /dev/null
+++ b/new
@@ -0,0 +1 @@
+only
\\ No newline at end of file
diff --git a/old b/old
deleted file mode 100755
diff --git \"a/\\303\\251.bin\" \"b/\\303\\251.bin\"
new file mode 100644
Binary files /dev/null and \"b/\\303\\251.bin\" differ
";
        let stat = diffstat(patch.lines());
        let row = |p: &str, s, a, r, b| FileStat {
            path: p.into(),
            status: s,
            added: a,
            removed: r,
            binary: b,
        };
        assert_eq!(
            stat,
            vec![
                row("src/x y.txt", Status::Modified, 2, 2, false),
                row("new", Status::Added, 1, 0, false),
                row("old", Status::Deleted, 0, 0, false),
                row("\"\\303\\251.bin\"", Status::Added, 0, 0, true),
            ]
        );
        assert_eq!(counts(&stat[0]), "+2 -2");
        assert_eq!(counts(&stat[3]), "binary");
    }

    #[test]
    fn left_out_paths_are_read_from_the_top() {
        let patch = "\
# left out of this patch: __pycache__/a.pyc (ignored)
# left out of this patch: \"big (1).bin\" (over 1 MiB)
diff --git a/x.bin b/x.bin
new file mode 100644
index 0000000000000000000000000000000000000000..1111111111111111111111111111111111111111
GIT binary patch
literal 3
HcmZQzWMTjS00RI3

literal 0
HcmV?d00001

";
        let stat = diffstat(patch.lines());
        assert_eq!(stat.len(), 3, "{stat:?}");
        assert_eq!(stat[0].path, "__pycache__/a.pyc");
        assert_eq!(stat[0].status, Status::LeftOut(Why::Ignored));
        assert_eq!(stat[1].path, "\"big (1).bin\"");
        assert_eq!(stat[1].status, Status::LeftOut(Why::TooLarge));
        assert_eq!(counts(&stat[1]), "-");
        assert_eq!(stat[2].status, Status::Added);
        assert_eq!(counts(&stat[2]), "binary");
    }

    #[test]
    fn an_empty_patch_has_no_files() {
        assert!(diffstat("".lines()).is_empty());
    }
}
