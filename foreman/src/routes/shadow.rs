//! Which changes of the agent make a verify command run something other
//! than the work it checks (HOSTILE.md N25: `unittest/__main__.py` printing
//! "OK" made `python3 -m unittest` pass with `calc.py` untouched). Pure:
//! `verify_tree` asks about each path the agent added or changed (after
//! what the patch leaves out is removed, and outside `verify_files`), and a
//! hit refuses the attempt before anything runs, naming the path and why.
//!
//! Refused, whether added or changed:
//!
//! - Python: `sitecustomize.py`, `usercustomize.py`, `*.pth` (run at the
//!   interpreter's start), `conftest.py`, `pytest.ini`, `.pytest.ini`
//!   (pytest's plugins and configuration), compiled `*.pyc`.
//! - Node: anything in a `node_modules/` directory (what `require` and
//!   `import` resolve before the installed package), `.npmrc`, `.yarnrc`,
//!   `.yarnrc.yml`, `.pnpmfile.cjs`, and the test runners' and
//!   transpilers' configuration (`jest.config.*`, `vitest.config.*`,
//!   `vite.config.*`, `.mocharc*`, `ava.config.*`, `babel.config.*`,
//!   `.babelrc*`).
//! - Rust: `build.rs` (run before the tests are compiled), `.cargo/config`
//!   and `.cargo/config.toml` (a `runner` replaces the test binary),
//!   `rust-toolchain` and `rust-toolchain.toml`.
//!
//! Refused when added: a Python module or package named like one of the
//! standard library or a test runner ([`PYTHON_MODULES`]) in a directory
//! Python may search first: the workspace's top (the working directory of
//! `python3 -m` and `-c`) or any directory without an `__init__.py` (a
//! script's own directory, pytest's `rootdir` insertion). Inside a package
//! a `types.py` is `pkg.types` and shadows nothing.
//!
//! Refused when changed (a new one is the agent's project): `Cargo.toml`
//! and `pyproject.toml` (the test harness: `[[test]] harness`,
//! `autotests`, `[tool.pytest.ini_options]`; a new dependency cannot be
//! fetched by the fresh verify container anyway, unless the task has a
//! network), and `package.json` but for its dependencies and descriptive
//! fields. Refused when added or changed: the `[pytest]` or
//! `[tool:pytest]` section of `tox.ini` or `setup.cfg`, and an added
//! `pyproject.toml` that names pytest.

use super::python_modules::PYTHON_MODULES;

/// How a path differs from the submitted workspace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Change {
    Added,
    Changed,
}

/// What a path means for a verify attempt.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Look {
    Fine,
    /// The attempt is refused: why, said of the path.
    Refused(String),
    /// Refused when the part of this configuration that steers the tests
    /// differs from the submitted one ([`config_differs`]).
    Compare(Config),
}

/// A configuration file whose test-steering part is compared.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Config {
    /// `tox.ini`, `setup.cfg`: the `[pytest]` and `[tool:pytest]` sections.
    PytestIni,
    /// An added `pyproject.toml`: anything naming pytest (or a key
    /// escape, which could spell it).
    Pyproject,
    /// `package.json` but its dependencies and descriptive fields.
    PackageJson,
}

/// Why a changed [`Config`] is refused.
pub(crate) fn config_why(c: Config) -> &'static str {
    match c {
        Config::PytestIni => {
            "its `[pytest]` or `[tool:pytest]` section configures pytest (plugins, options, \
             which tests run) and differs from the submitted one"
        }
        Config::Pyproject => "it configures pytest (`[tool.pytest.ini_options]`)",
        Config::PackageJson => {
            "its `scripts` or test configuration decide what `npm test` runs and differ \
             from the submitted ones (only dependencies and descriptive fields may change)"
        }
    }
}

/// What `path` (relative, `/`-separated), added or changed by the agent,
/// means for verify. `searched(dir)` says whether Python may search
/// directory `dir` (relative, "" the top) for top-level modules: the caller
/// knows the tree.
pub(crate) fn look(path: &[u8], change: Change, searched: &dyn Fn(&[u8]) -> bool) -> Look {
    let parts: Vec<&[u8]> = path.split(|&c| c == b'/').collect();
    let name = parts.last().copied().unwrap_or_default();
    if let Some(why) = refused_anyway(&parts, name) {
        return Look::Refused(why.to_string());
    }
    match (name, change) {
        (b"Cargo.toml", Change::Changed) => {
            return Look::Refused(
                "`Cargo.toml` decides which tests build and how they run (`[[test]] harness`, \
                 `autotests`, `[patch]`); a change to it is not verified"
                    .into(),
            );
        }
        (b"pyproject.toml", Change::Changed) => {
            return Look::Refused(
                "`pyproject.toml` can configure pytest (`[tool.pytest.ini_options]`); a change \
                 to it is not verified"
                    .into(),
            );
        }
        (b"pyproject.toml", Change::Added) => return Look::Compare(Config::Pyproject),
        (b"package.json", Change::Changed) => return Look::Compare(Config::PackageJson),
        (b"tox.ini" | b"setup.cfg", _) => return Look::Compare(Config::PytestIni),
        _ => {}
    }
    if change == Change::Added
        && let Some(why) = python_shadow(&parts, searched)
    {
        return Look::Refused(why);
    }
    Look::Fine
}

/// Refused whether added or changed: what runs before or instead of the
/// tests.
fn refused_anyway(parts: &[&[u8]], name: &[u8]) -> Option<&'static str> {
    let starts = |p: &str| name.starts_with(p.as_bytes());
    let dir = parts.len().checked_sub(2).map(|i| parts[i]);
    Some(match name {
        b"sitecustomize.py" | b"usercustomize.py" => "Python runs it at start-up, before any test",
        _ if name.ends_with(b".pth") => "Python's `site` runs its lines at start-up",
        b"conftest.py" => "a pytest plugin: its hooks can change what runs and what passes",
        b"pytest.ini" | b".pytest.ini" => "pytest's configuration (plugins, options, which tests)",
        _ if name.ends_with(b".pyc") => {
            "compiled Python the interpreter may load instead of its source"
        }
        _ if parts.iter().rev().skip(1).any(|p| *p == b"node_modules") => {
            "a Node package where `require` and `import` look before the installed one"
        }
        b".npmrc" | b".yarnrc" | b".yarnrc.yml" | b".pnpmfile.cjs" => {
            "package-manager configuration (the shell, hooks and options `npm test` runs with)"
        }
        _ if starts("jest.config.")
            || starts("vitest.config.")
            || starts("vite.config.")
            || starts(".mocharc")
            || starts("ava.config.")
            || starts("babel.config.")
            || starts(".babelrc") =>
        {
            "a Node test runner's or transpiler's configuration"
        }
        b"build.rs" => "a Cargo build script: it runs before the tests are compiled",
        b"config" | b"config.toml" if dir == Some(b".cargo") => {
            "Cargo's configuration (a `runner` replaces the test binary)"
        }
        b"rust-toolchain" | b"rust-toolchain.toml" => {
            "it picks the Rust toolchain the tests build with"
        }
        _ => return None,
    })
}

/// An added module or package named like one Python imports, in a
/// directory Python may search first.
fn python_shadow(parts: &[&[u8]], searched: &dyn Fn(&[u8]) -> bool) -> Option<String> {
    let last = parts.len() - 1;
    // A package shadows through the Python files in it.
    module_name(parts[last], true)?;
    for i in 0..=last {
        let Some(module) = module_name(parts[i], i == last) else {
            continue;
        };
        let dir = parts[..i].join(&b'/');
        if PYTHON_MODULES.binary_search(&module).is_ok() && searched(&dir) {
            let at = if dir.is_empty() {
                "the workspace's top".to_string()
            } else {
                format!("`{}/`", String::from_utf8_lossy(&dir))
            };
            return Some(format!(
                "named like Python's module `{module}`, which `import {module}` and `python3 -m \
                 {module}` would take from {at} instead"
            ));
        }
    }
    None
}

/// The module a path component names: a directory's own name, or a
/// file's stem when Python imports it (`.py`, `.pyc`, `.pyw`, `.so`).
fn module_name(part: &[u8], file: bool) -> Option<&str> {
    let part = std::str::from_utf8(part).ok()?;
    if !file {
        return Some(part);
    }
    let (stem, ext) = part.split_once('.')?;
    let imported = matches!(ext, "py" | "pyc" | "pyw" | "so") || ext.ends_with(".so");
    imported.then_some(stem)
}

/// Whether the test-steering part of configuration `c` differs between
/// the submitted bytes (`old`, None when it was not submitted) and the
/// agent's (`new`).
pub(crate) fn config_differs(c: Config, old: Option<&[u8]>, new: &[u8]) -> bool {
    let part = |bytes: &[u8]| match c {
        Config::PytestIni => pytest_sections(bytes),
        Config::Pyproject => {
            let text = String::from_utf8_lossy(bytes);
            let steers = ["pytest", "\\u", "\\U"].iter().any(|s| text.contains(s));
            if steers {
                text.into_owned()
            } else {
                String::new()
            }
        }
        Config::PackageJson => package_json_part(bytes),
    };
    let old = old.map(part).unwrap_or_default();
    old != part(new)
}

/// The lines of an INI file's `[pytest]` and `[tool:pytest]` sections, as
/// pytest's `iniconfig` reads them (a header starts its line; an indented
/// line continues a value).
fn pytest_sections(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let mut keep = false;
    let mut out = String::new();
    for line in text.lines() {
        if line.starts_with('[') {
            let header = line.split(']').next().unwrap_or("").trim_start_matches('[');
            keep = matches!(header.trim(), "pytest" | "tool:pytest");
        }
        if keep {
            out.push_str(line.trim_end());
            out.push('\n');
        }
    }
    out
}

/// `package.json` without what cannot change what runs: dependencies and
/// descriptive fields. Not JSON: the whole text (any change differs).
fn package_json_part(bytes: &[u8]) -> String {
    const FREE: &[&str] = &[
        "dependencies",
        "devDependencies",
        "peerDependencies",
        "optionalDependencies",
        "version",
        "description",
        "keywords",
        "author",
        "contributors",
        "license",
        "homepage",
        "repository",
        "bugs",
    ];
    match serde_json::from_slice::<serde_json::Value>(bytes) {
        Ok(serde_json::Value::Object(mut map)) => {
            map.retain(|k, _| !FREE.contains(&k.as_str()));
            serde_json::Value::Object(map).to_string()
        }
        _ => String::from_utf8_lossy(bytes).into_owned(),
    }
}

#[cfg(test)]
#[path = "shadow_tests.rs"]
mod tests;
