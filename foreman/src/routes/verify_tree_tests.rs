//! Tests of `verify_tree`.

use super::*;
use crate::inputs::{PackOptions, pack_workspace};

/// A file below `root`, its directories made.
fn put(root: &Path, rel: &str, text: &str) {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
}

/// `root` as Docker's archive of /workspace gives it.
fn archive(root: &Path) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    b.follow_symlinks(false);
    b.append_dir_all("workspace", root).unwrap();
    b.into_inner().unwrap()
}

#[test]
fn the_scan_removes_what_the_patch_leaves_out_and_refuses_shadows() {
    let d = tempfile::tempdir().unwrap();
    let ws = d.path().join("ws");
    for (path, text) in [
        (".gitignore", "build/\n"),
        ("calc.py", "def add(a, b):\n    return a - b\n"),
        ("test_calc.py", "import unittest\n"),
        ("tests/conftest.py", "# fixtures\n"),
        ("pkg/__init__.py", ""),
    ] {
        put(&ws, path, text);
    }
    let tar = d.path().join("t.tar");
    let opts = PackOptions {
        max_bytes: u64::MAX,
        ..Default::default()
    };
    pack_workspace(&ws, &tar, &opts).unwrap();
    let sub = Submitted::open(&tar).unwrap();
    let pinned = [PathBuf::from("test_calc.py")];

    // The real fix: nothing refused, the test run's bytecode and the
    // ignored build removed.
    put(&ws, "calc.py", "def add(a, b):\n    return a + b\n");
    put(&ws, "__pycache__/calc.cpython-311.pyc", "bytecode");
    put(&ws, "build/out/x.o", "o");
    put(&ws, "pkg/types.py", "X = 1\n");
    put(&ws, "prompt.md", "Saheeli's own\n");
    let found = scan(&archive(&ws)[..], &sub, &pinned, u64::MAX).unwrap();
    assert_eq!(found.refused, Vec::<String>::new());
    let removed: Vec<&[u8]> = found.remove.iter().map(Vec::as_slice).collect();
    assert_eq!(removed, [&b"__pycache__"[..], b"build"]);

    // HOSTILE.md N25, a changed conftest.py, a .pth; a test file the
    // agent changed is restored as submitted (`verify_files`), not judged.
    put(&ws, "unittest/__main__.py", "print('OK')\n");
    put(&ws, "unittest/.gitignore", "*\n");
    put(
        &ws,
        "tests/conftest.py",
        "def pytest_runtest_makereport(): ...\n",
    );
    put(&ws, "tests/unittest.py", "");
    put(&ws, "evil.pth", "import os\n");
    put(&ws, "test_calc.py", "print('OK')\n");
    let found = scan(&archive(&ws)[..], &sub, &pinned, u64::MAX).unwrap();
    let named: Vec<&str> = found
        .refused
        .iter()
        .map(|r| r.split('`').nth(1).unwrap())
        .collect();
    assert_eq!(
        named,
        [
            "evil.pth",
            "tests/conftest.py",
            "tests/unittest.py",
            "unittest/__main__.py"
        ],
        "{:?}",
        found.refused
    );
    assert!(found.refused[3].contains("(added): named like Python's module `unittest`"));
    let err = scan(&archive(&ws)[..], &sub, &pinned, 16).unwrap_err();
    assert!(err.to_string().contains("more than 0 MiB"), "{err}");
    let message = refusal(&found.refused);
    assert!(
        message.starts_with("refused before running it"),
        "{message}"
    );
}
