use super::*;
use crate::eval::import::fixtures::{git as run_git, swebench_repo};

#[test]
fn diff_headers_give_both_paths() {
    let patch = "diff --git a/src/x.py b/src/x.py\n--- a/src/x.py\n+++ b/src/x.py\n\
                 diff --git a/old name.py b/new name.py\nsimilarity index 90%\n\
                 diff --git a/dir b/x.py b/dir b/x.py\n\
                 diff --git \"a/caf\\303\\251.py\" \"b/caf\\303\\251.py\"\n";
    assert_eq!(
        headers(patch),
        vec![
            ("src/x.py".to_string(), "src/x.py".to_string()),
            ("old name.py".to_string(), "new name.py".to_string()),
            ("dir b/x.py".to_string(), "dir b/x.py".to_string()),
            ("café.py".to_string(), "café.py".to_string()),
        ]
    );
    assert_eq!(
        touched(patch),
        vec![
            "src/x.py",
            "old name.py",
            "new name.py",
            "dir b/x.py",
            "café.py"
        ]
    );
}

#[test]
fn only_plain_relative_paths_are_safe() {
    for ok in ["a.py", "tests/test_a.py", "a/.hidden"] {
        assert!(safe_path(ok), "{ok}");
    }
    for bad in [
        "",
        "/etc/passwd",
        "../x",
        "a/../../x",
        ".git/config",
        "a/.git/hooks/x",
        "./a",
    ] {
        assert!(!safe_path(bad), "{bad}");
    }
}

#[test]
fn a_patch_is_applied_to_the_commits_files_not_the_clone() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = swebench_repo(tmp.path());
    let files = patched(&repo.dir, &repo.base, &repo.test_patch).unwrap();
    let names: Vec<&str> = files.iter().map(|(p, _)| p.as_str()).collect();
    assert_eq!(names, vec!["tests/data.json", "tests/test_calc.py"]);
    let test = String::from_utf8(files[1].1.clone().unwrap()).unwrap();
    assert!(test.contains("def test_add"), "{test}");
    assert_eq!(
        run_git(&repo.dir, &["status", "--porcelain"]),
        "",
        "the clone is untouched"
    );
    let err = patched(&repo.dir, &repo.base, "diff --git a/calc.py b/calc.py\n--- a/calc.py\n+++ b/calc.py\n@@ -1,1 +1,1 @@\n-nothing here\n+x\n").unwrap_err();
    assert!(err.contains("calc.py"), "{err}");
    assert!(resolve(&repo.dir, &repo.base[..10]).is_some_and(|c| c == repo.base));
    assert!(resolve(&repo.dir, "0123456789abcdef").is_none());
}

#[test]
fn a_checkout_is_the_base_tree_as_one_fresh_commit() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = swebench_repo(&tmp.path().join("repos"));
    // Files `export-ignore` would drop from `git archive` are kept.
    std::fs::write(repo.dir.join(".gitattributes"), "tests export-ignore\n").unwrap();
    run_git(&repo.dir, &["add", ".gitattributes"]);
    run_git(&repo.dir, &["commit", "-q", "-m", "attrs"]);
    let head = run_git(&repo.dir, &["rev-parse", "HEAD"])
        .trim()
        .to_string();
    let dest = tmp.path().join("out/repo");
    checkout(&repo.dir, &head, &dest, "base").unwrap();
    assert!(dest.join("tests/test_calc.py").is_file());
    let dest = tmp.path().join("out/base");
    checkout(&repo.dir, &repo.base, &dest, "base").unwrap();
    let calc = std::fs::read_to_string(dest.join("calc.py")).unwrap();
    assert!(
        calc.contains("a - b"),
        "the base commit's bug, not the later fix: {calc}"
    );
    assert_eq!(run_git(&dest, &["rev-list", "--count", "HEAD"]).trim(), "1");
    assert_eq!(
        run_git(&dest, &["status", "--porcelain"]),
        "",
        "everything committed"
    );
    assert!(!run_git(&dest, &["log", "--all", "--format=%s"]).contains("future"));
}
