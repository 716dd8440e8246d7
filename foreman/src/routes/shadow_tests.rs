//! Tests of `shadow`.

use super::*;

/// Python searches the top and `tests/` (no `__init__.py`), not `pkg/`.
fn searched(dir: &[u8]) -> bool {
    !dir.starts_with(b"pkg")
}

fn refused(path: &str, change: Change) -> bool {
    matches!(look(path.as_bytes(), change, &searched), Look::Refused(_))
}

#[test]
fn what_shadows_the_verify_command_is_refused() {
    use Change::{Added, Changed};
    // (path, change, refused)
    let table: &[(&str, Change, bool)] = &[
        // HOSTILE.md N25, and the agent's ordinary work beside it.
        ("unittest/__main__.py", Added, true),
        ("unittest/__init__.py", Added, true),
        ("unittest/.gitignore", Added, false),
        ("calc.py", Changed, false),
        ("calc.py", Added, false),
        ("test_calc.py", Added, false),
        // Python's start-up hooks, anywhere.
        ("sitecustomize.py", Added, true),
        ("lib/usercustomize.py", Added, true),
        ("venv/lib/python3.11/site-packages/evil.pth", Added, true),
        ("x.pth", Changed, true),
        // pytest's plugins and configuration.
        ("conftest.py", Added, true),
        ("tests/conftest.py", Changed, true),
        ("pytest.ini", Added, true),
        ("sub/.pytest.ini", Changed, true),
        ("__pycache__/calc.cpython-311.pyc", Changed, true),
        // Modules named like the standard library or a test runner where
        // Python looks first; inside a package they shadow nothing.
        ("json.py", Added, true),
        ("types.pyc", Added, true),
        ("pytest/__init__.py", Added, true),
        ("_pytest.py", Added, true),
        ("tests/unittest.py", Added, true),
        ("tests/random.cpython-311-x86_64-linux-gnu.so", Added, true),
        ("test/__init__.py", Added, true),
        ("pkg/types.py", Added, false),
        ("pkg/json/__init__.py", Added, false),
        ("json.py", Changed, false),
        ("docs/json/notes.md", Added, false),
        ("calendar.txt", Added, false),
        ("mycalendar.py", Added, false),
        // Node.
        ("node_modules/left-pad/index.js", Added, true),
        ("web/node_modules/jest/bin/jest.js", Changed, true),
        ("node_modules", Added, false),
        (".npmrc", Added, true),
        ("app/.yarnrc.yml", Changed, true),
        ("jest.config.js", Added, true),
        ("vitest.config.ts", Changed, true),
        (".mocharc.json", Added, true),
        (".babelrc", Added, true),
        ("babel.config.cjs", Added, true),
        ("src/index.js", Added, false),
        ("package.json", Added, false),
        // Rust.
        ("build.rs", Added, true),
        ("crates/a/build.rs", Changed, true),
        (".cargo/config.toml", Added, true),
        ("sub/.cargo/config", Changed, true),
        ("rust-toolchain.toml", Added, true),
        ("Cargo.toml", Changed, true),
        ("Cargo.toml", Added, false),
        ("src/lib.rs", Changed, false),
        ("src/config.toml", Added, false),
        ("pyproject.toml", Changed, true),
    ];
    for &(path, change, want) in table {
        assert_eq!(refused(path, change), want, "{path} ({change:?})");
    }
    let Look::Refused(why) = look(b"unittest/__main__.py", Added, &searched) else {
        panic!("not refused");
    };
    assert!(why.contains("module `unittest`"), "{why}");
    assert!(why.contains("the workspace's top"), "{why}");
}

#[test]
fn configurations_are_compared_on_what_steers_the_tests() {
    let compare = |path: &str, change| match look(path.as_bytes(), change, &searched) {
        Look::Compare(c) => Some(c),
        _ => None,
    };
    assert_eq!(
        compare("package.json", Change::Changed),
        Some(Config::PackageJson)
    );
    assert_eq!(compare("setup.cfg", Change::Added), Some(Config::PytestIni));
    assert_eq!(compare("tox.ini", Change::Changed), Some(Config::PytestIni));
    assert_eq!(
        compare("pyproject.toml", Change::Added),
        Some(Config::Pyproject)
    );
    let pkg = br#"{"name": "calc", "scripts": {"test": "node test.js"}, "dependencies": {}}"#;
    // (config, submitted, agent's, differs)
    type Row<'a> = (Config, Option<&'a [u8]>, &'a [u8], bool);
    let table: &[Row] = &[
        (
            Config::PackageJson,
            Some(pkg),
            br#"{"name": "calc", "scripts": {"test": "node test.js"}, "dependencies": {"x": "1"}, "version": "2.0.0"}"#,
            false,
        ),
        (
            Config::PackageJson,
            Some(pkg),
            br#"{"name": "calc", "scripts": {"test": "echo ok"}, "dependencies": {}}"#,
            true,
        ),
        (
            Config::PackageJson,
            Some(pkg),
            br#"{"name": "calc", "scripts": {"test": "node test.js"}, "jest": {"testMatch": []}}"#,
            true,
        ),
        (Config::PackageJson, Some(pkg), b"{not json", true),
        (
            Config::PytestIni,
            Some(b"[metadata]\nname = calc\n[tool:pytest]\naddopts = -q\n"),
            b"[metadata]\nname = calc2\n[tool:pytest]\naddopts = -q\n",
            false,
        ),
        (
            Config::PytestIni,
            Some(b"[metadata]\nname = calc\n"),
            b"[metadata]\nname = calc\n[pytest]\naddopts = --co\n",
            true,
        ),
        (
            Config::PytestIni,
            Some(b"[tool:pytest]\naddopts = -q\n"),
            b"[tool:pytest]\naddopts = -q\n  -p evil\n",
            true,
        ),
        (Config::PytestIni, None, b"[flake8]\nmax-line-length = 99\n", false),
        (Config::Pyproject, None, b"[project]\nname = \"calc\"\n", false),
        (
            Config::Pyproject,
            None,
            b"[tool.pytest.ini_options]\naddopts = \"--co\"\n",
            true,
        ),
        (
            Config::Pyproject,
            None,
            b"[tool.\"\\u0070ytest\".ini_options]\naddopts = \"--co\"\n",
            true,
        ),
    ];
    for (i, &(c, old, new, want)) in table.iter().enumerate() {
        assert_eq!(config_differs(c, old, new), want, "row {i}");
    }
}
