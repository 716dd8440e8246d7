//! `.saheeli/changes.patch`: the collected workspace against the submitted
//! one, every changed path in git's format, in git's order. Empty when
//! nothing changed. It always applies to the submitted workspace with
//! `git apply`: binary files are git binary patches, and what cannot or
//! should not be in it is left out and named in comment lines at its top
//! (`# left out of this patch: PATH (WHY)`, which `git apply` skips):
//! paths the agent added that the submitted workspace's `.gitignore` files
//! (nested ones too, as git reads them; never one the agent wrote or
//! changed) or `ignored::DEFAULT_IGNORED` name (bytecode, tool caches),
//! and files over [`MAX_DIFF_FILE`]. A change to a submitted path is never
//! left out as ignored (git carries a change to a tracked file). A verify
//! attempt checks the same tree (`routes::verify_tree`).

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;

use anyhow::Context;

use super::diffstat::{LEFT_OUT, Why};
use super::ignored::Ignored;
use super::patch::{Change, Kind, MAX_DIFF_FILE, quote, write_change};
use super::tree::{Entry, Files, Tree, dir_tree, tar_tree};
use super::write::{PATCH, replace_file};

/// Writes `.saheeli/changes.patch` in the collected `results`: its
/// workspace against `submitted` (the tar `pack` made; None for a task
/// without `workspace:`, which started from an empty tree). Blocking.
pub(crate) fn write_changes(results: &Path, submitted: Option<&Path>) -> anyhow::Result<()> {
    let tar = submitted
        .map(|p| File::open(p).with_context(|| format!("opening `{}`", p.display())))
        .transpose()?;
    let old = match &tar {
        Some(f) => tar_tree(f).context("reading the submitted workspace")?,
        None => Tree::new(),
    };
    let new = dir_tree(results)
        .with_context(|| format!("reading the collected workspace `{}`", results.display()))?;
    let files = Files { tar: tar.as_ref() };
    let ignored = Ignored::of(&files, &old);
    replace_file(results, PATCH, |w| {
        write_patch(w, &files, &old, &new, &ignored)
    })
}

/// What becomes of one path that differs.
enum Plan {
    Write { same_bytes: bool },
    LeftOut(Why),
}

/// Every path of either tree, in order, with what changed; first the
/// paths left out.
fn write_patch(
    w: &mut BufWriter<File>,
    files: &Files<'_>,
    old: &Tree,
    new: &Tree,
    ignored: &Ignored,
) -> io::Result<()> {
    let mut paths: Vec<&Vec<u8>> = old.keys().chain(new.keys()).collect();
    paths.sort();
    paths.dedup();
    let mut plans = Vec::with_capacity(paths.len());
    for path in paths {
        let (o, n) = (old.get(path), new.get(path));
        let same_bytes = match (o, n) {
            (Some(o), Some(n)) => files.same_bytes(o, n)?,
            _ => false,
        };
        if same_bytes && o.zip(n).is_some_and(|(o, n)| o.kind == n.kind) {
            continue;
        }
        let large =
            |e: Option<&Entry>| e.is_some_and(|e| e.kind != Kind::Link && e.size > MAX_DIFF_FILE);
        // Only what the agent added: a submitted path is tracked.
        let plan = if o.is_none() && ignored.ignores(path) {
            Plan::LeftOut(Why::Ignored)
        } else if large(o) || large(n) {
            Plan::LeftOut(Why::TooLarge)
        } else {
            Plan::Write { same_bytes }
        };
        plans.push((path, plan));
    }
    for (path, plan) in &plans {
        if let Plan::LeftOut(why) = plan {
            writeln!(w, "{LEFT_OUT}{} ({})", quote(b"", path), why.as_str())?;
        }
    }
    for (path, plan) in plans {
        if let Plan::Write { same_bytes } = plan {
            write_path(w, files, path, old.get(path), new.get(path), same_bytes)?;
        }
    }
    w.flush()
}

/// One path's change (nothing when it is the same on both sides).
fn write_path(
    w: &mut impl Write,
    files: &Files<'_>,
    path: &[u8],
    old: Option<&Entry>,
    new: Option<&Entry>,
    same_bytes: bool,
) -> io::Result<()> {
    let is_link = |e: &Entry| e.kind == Kind::Link;
    match (old, new) {
        (None, None) => Ok(()),
        (None, Some(n)) => write_change(w, path, &Change::Added(&files.side(n)?)),
        (Some(o), None) => write_change(w, path, &Change::Deleted(&files.side(o)?)),
        // A file became a link or a link a file: git deletes and adds.
        (Some(o), Some(n)) if is_link(o) != is_link(n) => {
            write_change(w, path, &Change::Deleted(&files.side(o)?))?;
            write_change(w, path, &Change::Added(&files.side(n)?))
        }
        (Some(o), Some(n)) => {
            if same_bytes && o.kind == n.kind {
                return Ok(());
            }
            let (old, new) = (files.side(o)?, files.side(n)?);
            write_change(
                w,
                path,
                &Change::Modified {
                    old: &old,
                    new: &new,
                    same_bytes,
                },
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::{PermissionsExt, symlink};
    use std::process::Command;

    use super::*;
    use crate::inputs::{PackOptions, pack_workspace};

    /// A file below `root`, its directories made.
    fn put(root: &Path, rel: &str, bytes: &[u8]) {
        let p = root.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, bytes).unwrap();
    }

    /// Every file and link below `root` but `.git`: (path, kind, bytes or target).
    fn listing(root: &Path) -> Vec<(String, String, Vec<u8>)> {
        let mut out = vec![];
        for e in walkdir::WalkDir::new(root).min_depth(1).sort_by_file_name() {
            let e = e.unwrap();
            let rel = e.path().strip_prefix(root).unwrap().display().to_string();
            let meta = e.path().symlink_metadata().unwrap();
            if rel.starts_with(".git") || meta.is_dir() {
                continue;
            }
            if meta.is_symlink() {
                let t = std::fs::read_link(e.path()).unwrap();
                out.push((rel, "link".into(), t.into_os_string().into_encoded_bytes()));
            } else {
                let exec = meta.permissions().mode() & 0o100 != 0;
                let kind = if exec { "exec" } else { "file" };
                out.push((rel, kind.into(), std::fs::read(e.path()).unwrap()));
            }
        }
        out
    }

    fn git(dir: &Path, args: &[&str]) -> std::process::Output {
        Command::new("git")
            .args(args)
            .current_dir(dir)
            .output()
            .expect("git runs")
    }

    /// The submitted workspace, packed as `submit` packs it; its copy is
    /// the collected one, changed in every way git knows.
    fn workspaces(d: &Path) -> (std::path::PathBuf, std::path::PathBuf, std::path::PathBuf) {
        let (sub, col) = (d.join("submitted"), d.join("collected"));
        for root in [&sub, &col] {
            put(root, ".gitignore", b"scratch/\n");
            put(root, "keep.txt", b"same\n");
            put(root, "edit.py", b"a\nb\nc\nd\ne\nf\ng\nh\n");
            put(root, "gone.txt", b"bye\n");
            put(root, "no-newline.txt", b"one\ntwo");
            put(root, "mode.sh", b"echo\n");
            put(root, "to-link", b"was a file\n");
            put(root, "big.log", &vec![b'x'; 2 << 20]);
            put(root, "bin.dat", &[0, 1, 2]);
            put(root, "gone.bin", &[0, 9]);
        }
        let tar = d.join("inputs/t.tar");
        let opts = PackOptions {
            max_bytes: u64::MAX,
            ..Default::default()
        };
        pack_workspace(&sub, &tar, &opts).unwrap();
        put(&col, "edit.py", b"a\nB\nc\nd\ne\nf\ng\nH\n");
        std::fs::remove_file(col.join("gone.txt")).unwrap();
        put(&col, "no-newline.txt", b"one\nthree");
        put(&col, "new dir/sub/é new.txt", b"fresh\nno end");
        put(&col, "empty", b"");
        put(&col, "bin.dat", &[0, 1, 3]);
        put(&col, "new.bin", &[0xff, 0, 7]);
        std::fs::remove_file(col.join("gone.bin")).unwrap();
        // What a test run leaves, and what the workspace's .gitignore names.
        put(&col, "__pycache__/m.cpython-311.pyc", &[0x0d, 0x0d, 0, 1]);
        put(&col, "scratch/out.txt", b"x\n");
        put(&col, "huge.bin", &vec![0u8; (MAX_DIFF_FILE + 1) as usize]);
        let mode = std::fs::Permissions::from_mode(0o755);
        std::fs::set_permissions(col.join("mode.sh"), mode).unwrap();
        std::fs::remove_file(col.join("to-link")).unwrap();
        symlink("keep.txt", col.join("to-link")).unwrap();
        symlink("/etc/passwd", col.join("outside")).unwrap();
        // Saheeli's own files are not the agent's work.
        put(&col, ".saheeli/task.json", b"{}");
        put(&col, "prompt.md", b"Do it.\n");
        put(&col, "complete.json", b"{}");
        put(&col, "servo-1-audit.log", b"{}\n");
        (sub, col, tar)
    }

    #[test]
    fn the_patch_applies_with_git_and_reproduces_the_collected_files() {
        let d = tempfile::tempdir().unwrap();
        let (sub, col, tar) = workspaces(d.path());
        write_changes(&col, Some(&tar)).unwrap();
        let patch = std::fs::read_to_string(col.join(PATCH)).unwrap();
        assert!(
            !patch.contains("a/keep.txt") && !patch.contains("prompt.md"),
            "{patch}"
        );
        assert!(
            !patch.contains("big.log"),
            "unchanged large files are not noted"
        );
        assert!(patch.contains("new file mode 120000"), "{patch}");
        // Issue 24: binary files were a note git refuses ("Binary files …
        // differ"), so the whole patch did not apply; ignored bytecode was
        // in it. Now binary files are git binary patches, and what is left
        // out is named at the top.
        assert!(patch.contains("GIT binary patch\nliteral 3\n"), "{patch}");
        assert!(!patch.contains("Binary files"), "{patch}");
        assert!(
            patch.starts_with(
                "# left out of this patch: __pycache__/m.cpython-311.pyc (ignored)\n\
                 # left out of this patch: huge.bin (over 1 MiB)\n\
                 # left out of this patch: scratch/out.txt (ignored)\n\
                 diff --git "
            ),
            "{patch}"
        );
        assert!(git(&sub, &["init", "-q"]).status.success());
        let patch_file = col.join(PATCH);
        let out = git(&sub, &["apply", patch_file.to_str().unwrap()]);
        assert!(
            out.status.success(),
            "git apply: {}\n{patch}",
            String::from_utf8_lossy(&out.stderr)
        );
        let own = [
            ".saheeli",
            "prompt.md",
            "complete.json",
            "servo-1-audit.log",
        ];
        let left_out = ["__pycache__", "scratch/out.txt", "huge.bin"];
        let mut want = listing(&col);
        want.retain(|(p, _, _)| !own.iter().chain(&left_out).any(|o| p.starts_with(o)));
        let got = listing(&sub);
        assert_eq!(got, want);
        assert_eq!(std::fs::read(sub.join("bin.dat")).unwrap(), [0, 1, 3]);
        assert_eq!(std::fs::read(sub.join("new.bin")).unwrap(), [0xff, 0, 7]);
        assert!(!sub.join("gone.bin").exists());
    }

    #[test]
    fn nothing_changed_is_an_empty_patch_and_no_workspace_is_an_empty_tree() {
        let d = tempfile::tempdir().unwrap();
        let ws = d.path().join("ws");
        put(&ws, "a.txt", b"a\n");
        symlink("a.txt", ws.join("l")).unwrap();
        let tar = d.path().join("t.tar");
        let opts = PackOptions {
            max_bytes: u64::MAX,
            ..Default::default()
        };
        pack_workspace(&ws, &tar, &opts).unwrap();
        put(&ws, "complete.json", b"{}");
        write_changes(&ws, Some(&tar)).unwrap();
        assert_eq!(std::fs::read(ws.join(PATCH)).unwrap(), b"");

        write_changes(&ws, None).unwrap();
        let patch = std::fs::read_to_string(ws.join(PATCH)).unwrap();
        assert!(patch.starts_with("diff --git a/a.txt b/a.txt\nnew file mode 100644\n"));
        assert!(patch.contains("diff --git a/l b/l\nnew file mode 120000\n"));
    }

    #[test]
    fn binary_changes_are_carried_and_oversized_ones_named() {
        let d = tempfile::tempdir().unwrap();
        let ws = d.path().join("ws");
        put(&ws, "img.png", &[0x89, b'P', b'N', b'G', 0, 1, 2]);
        put(&ws, "latin1.txt", b"caf\xe9\n");
        put(&ws, "huge.txt", &vec![b'y'; (MAX_DIFF_FILE + 1) as usize]);
        // A link named .gitignore is not followed.
        symlink("/etc/passwd", ws.join(".gitignore")).unwrap();
        write_changes(&ws, None).unwrap();
        let patch = std::fs::read_to_string(ws.join(PATCH)).unwrap();
        assert!(
            patch.starts_with("# left out of this patch: huge.txt (over 1 MiB)\n"),
            "{patch}"
        );
        for name in ["img.png", "latin1.txt"] {
            assert!(
                patch.contains(&format!("diff --git a/{name} b/{name}\n")),
                "{name}: {patch}"
            );
        }
        assert_eq!(patch.matches("GIT binary patch\n").count(), 2, "{patch}");
        assert!(!patch.contains("yyyy"));
        // It applies to an empty tree and gives back the same bytes.
        let empty = d.path().join("empty");
        std::fs::create_dir_all(&empty).unwrap();
        assert!(git(&empty, &["init", "-q"]).status.success());
        let out = git(&empty, &["apply", ws.join(PATCH).to_str().unwrap()]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        for name in ["img.png", "latin1.txt"] {
            assert_eq!(
                std::fs::read(empty.join(name)).unwrap(),
                std::fs::read(ws.join(name)).unwrap()
            );
        }
    }

    /// The submitted workspace `files` packed to `tar` (ignored files
    /// are not packed, as `submit` does), then copied to `col`.
    fn submitted(d: &Path, files: &[(&str, &str)]) -> (std::path::PathBuf, std::path::PathBuf) {
        let (sub, col) = (d.join("sub"), d.join("col"));
        for (path, text) in files {
            put(&sub, path, text.as_bytes());
            put(&col, path, text.as_bytes());
        }
        let tar = d.join("t.tar");
        let opts = PackOptions {
            max_bytes: u64::MAX,
            ..Default::default()
        };
        pack_workspace(&sub, &tar, &opts).unwrap();
        (col, tar)
    }

    #[test]
    fn gitignores_the_agent_wrote_or_changed_hide_nothing() {
        // HOSTILE.md N25: a planted `unittest/` beside a `.gitignore` of
        // `*` was five "left out" lines; N26: `calc.py` appended to
        // `.gitignore` after editing it left its change out.
        let d = tempfile::tempdir().unwrap();
        let (col, tar) = submitted(
            d.path(),
            &[
                (".gitignore", "*.log\n"),
                ("calc.py", "def add(a, b):\n    return a - b\n"),
                ("sub/keep.txt", "k\n"),
            ],
        );
        put(&col, "calc.py", b"def add(a, b):\n    return a + b\n");
        put(&col, ".gitignore", b"*.log\ncalc.py\nunittest/\nsub/\n");
        put(&col, "unittest/.gitignore", b"*\n");
        put(&col, "unittest/__main__.py", b"print('OK')\n");
        put(&col, "sub/keep.txt", b"changed\n");
        put(&col, "debug.log", b"the submitted rules still apply\n");
        // A link to a host file and a FIFO the agent made: never read.
        let host = d.path().join("host-rules");
        std::fs::write(&host, "*\n").unwrap();
        symlink(&host, col.join("sub/.gitignore")).unwrap();
        write_changes(&col, Some(&tar)).unwrap();
        let patch = std::fs::read_to_string(col.join(PATCH)).unwrap();
        assert!(
            patch.starts_with("# left out of this patch: debug.log (ignored)\ndiff --git "),
            "{patch}"
        );
        assert_eq!(patch.matches("# left out").count(), 1, "{patch}");
        for carried in [
            ".gitignore",
            "calc.py",
            "sub/.gitignore",
            "sub/keep.txt",
            "unittest/.gitignore",
            "unittest/__main__.py",
        ] {
            assert!(
                patch.contains(&format!("diff --git a/{carried} b/{carried}\n")),
                "{carried}: {patch}"
            );
        }
        assert!(patch.contains("+    return a + b\n"), "{patch}");
    }

    #[test]
    fn nested_gitignores_apply_below_their_directory_as_git_reads_them() {
        let d = tempfile::tempdir().unwrap();
        // The rules are the submitted ones (`sub/build/.gitignore` is in an
        // ignored directory: not packed, so it says nothing).
        let rules = [
            (".gitignore", "*.tmp\n"),
            ("sub/.gitignore", "*.log\nbuild/\n!keep.tmp\n"),
            ("sub/deeper/.gitignore", "!y.log\n"),
        ];
        let (col, tar) = submitted(d.path(), &rules);
        let files = [
            (".saheeli/task.json", "{}"),
            (".gitignore", "*.tmp\n"),
            ("a.log", "top\n"),
            ("sub/.gitignore", "*.log\nbuild/\n!keep.tmp\n"),
            ("sub/x.log", "x\n"),
            ("sub/build/out.txt", "o\n"),
            ("sub/keep.tmp", "k\n"),
            ("sub/drop.tmp", "d\n"),
            ("sub/deeper/y.log", "y\n"),
            ("sub/deeper/.gitignore", "!y.log\n"),
            ("sub/build/.gitignore", "!out.txt\n"),
            ("other/build/z.txt", "z\n"),
        ];
        for (path, text) in files {
            put(&col, path, text.as_bytes());
        }
        write_changes(&col, Some(&tar)).unwrap();
        let patch = std::fs::read_to_string(col.join(PATCH)).unwrap();
        let left_out: Vec<&str> = patch
            .lines()
            .filter_map(|l| l.strip_prefix("# left out of this patch: "))
            .filter_map(|l| l.strip_suffix(" (ignored)"))
            .collect();
        // The nested `!y.log` re-includes; nothing re-includes a file in
        // an ignored directory (sub/build/).
        let expected = [
            "sub/build/.gitignore",
            "sub/build/out.txt",
            "sub/drop.tmp",
            "sub/x.log",
        ];
        assert_eq!(left_out, expected, "{patch}");
        for kept in [
            "a.log",
            "sub/keep.tmp",
            "sub/deeper/y.log",
            "other/build/z.txt",
        ] {
            assert!(patch.contains(&format!("b/{kept}\n")), "{kept}: {patch}");
        }
        // As git itself reads the same files.
        assert!(git(&col, &["init", "-q"]).status.success());
        for path in expected
            .iter()
            .chain(&["a.log", "sub/keep.tmp", "sub/deeper/y.log"])
        {
            let ignored = git(&col, &["check-ignore", "-q", path]).status.success();
            assert_eq!(ignored, expected.contains(path), "git on {path}");
        }
    }
}
