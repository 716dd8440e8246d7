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

/// `ws` packed as submitted into `tar`, opened.
fn submitted(ws: &Path, tar: &Path) -> Submitted {
    let opts = PackOptions {
        max_bytes: u64::MAX,
        ..Default::default()
    };
    pack_workspace(ws, tar, &opts).unwrap();
    Submitted::open(tar).unwrap()
}

/// The scan of `ws` read in place and through its archive: the same.
fn scan_both(ws: &Path, sub: &Submitted, pinned: &[PathBuf], max: u64) -> anyhow::Result<Scan> {
    let archived = scan(&archive(ws)[..], sub, pinned, max);
    let hosted = host::scan_host(ws, sub, pinned, max);
    match (archived, hosted) {
        (Ok(a), Ok(h)) => {
            assert_eq!(a, h, "the archive's scan and the host's differ");
            Ok(a)
        }
        (Err(a), Err(h)) => {
            assert_eq!(a.to_string(), h.to_string());
            Err(a)
        }
        (a, h) => panic!("the archive's scan gave {a:?}, the host's {h:?}"),
    }
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
    let sub = submitted(&ws, &d.path().join("t.tar"));
    let pinned = [PathBuf::from("test_calc.py")];

    // The real fix: nothing refused, the test run's bytecode and the
    // ignored build removed.
    put(&ws, "calc.py", "def add(a, b):\n    return a + b\n");
    put(&ws, "__pycache__/calc.cpython-311.pyc", "bytecode");
    put(&ws, "build/out/x.o", "o");
    put(&ws, "pkg/types.py", "X = 1\n");
    put(&ws, "prompt.md", "Saheeli's own\n");
    let found = scan_both(&ws, &sub, &pinned, u64::MAX).unwrap();
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
    let found = scan_both(&ws, &sub, &pinned, u64::MAX).unwrap();
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
    let err = scan_both(&ws, &sub, &pinned, 16).unwrap_err();
    assert!(err.to_string().contains("more than 0 MiB"), "{err}");
    let message = refusal(&found.refused);
    assert!(
        message.starts_with("refused before running it"),
        "{message}"
    );
}

#[test]
fn the_host_scan_counts_a_hard_linked_file_once_and_never_follows_a_link() {
    let d = tempfile::tempdir().unwrap();
    let ws = d.path().join("ws");
    put(&ws, "calc.py", "x = 1\n");
    let sub = submitted(&ws, &d.path().join("t.tar"));
    // A 1 MiB file with 8 links counts 1 MiB, as Docker's archive does
    // (a link's entry after the first carries no bytes).
    std::fs::write(ws.join("big.bin"), vec![7u8; 1 << 20]).unwrap();
    for i in 0..7 {
        std::fs::hard_link(ws.join("big.bin"), ws.join(format!("big{i}.bin"))).unwrap();
    }
    host::scan_host(&ws, &sub, &[], (1 << 20) + 4096).unwrap();
    let err = host::scan_host(&ws, &sub, &[], (1 << 20) - 1).unwrap_err();
    assert!(err.to_string().contains("more than 0 MiB"), "{err}");
    for i in 0..7 {
        std::fs::remove_file(ws.join(format!("big{i}.bin"))).unwrap();
    }
    // A link to a directory outside, named like a shadowing module, and a
    // FIFO named like a configuration: judged by name, never entered or
    // opened.
    let outside = d.path().join("outside");
    put(&outside, "secret/conftest.py", "boom\n");
    std::os::unix::fs::symlink(&outside, ws.join("unittest")).unwrap();
    std::os::unix::fs::symlink(outside.join("secret/conftest.py"), ws.join("conftest.py")).unwrap();
    let fifo = ws.join("setup.cfg");
    assert!(
        std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    let found = scan_both(&ws, &sub, &[], u64::MAX).unwrap();
    assert!(
        found.refused.iter().any(|r| r.starts_with("`conftest.py`")),
        "{:?}",
        found.refused
    );
}
