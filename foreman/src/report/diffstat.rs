//! Files changed, read back from a patch in git's format (what `git diff
//! --stat` shows): each path with its lines added and removed.

/// How one file changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Status {
    Added,
    Deleted,
    Modified,
}

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
            } else if line.starts_with("Binary files ") {
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
    if f.binary {
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
    fn an_empty_patch_has_no_files() {
        assert!(diffstat("".lines()).is_empty());
    }
}
