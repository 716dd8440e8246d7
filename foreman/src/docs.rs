//! The book's generated reference pages, checked up to date: the command
//! line (`docs/reference/cli.md`, from the clap tree) and the settings
//! (`docs/reference/settings.md`, from `crate::settings`). A change to
//! either without the page fails `docs_are_current`; `UPDATE_DOCS=1`
//! rewrites the pages instead.

use std::fmt::Write;
use std::path::{Path, PathBuf};

use clap::CommandFactory;

use crate::cli::Cli;

/// Every command path below `cmd` (`["task", "submit"]`), depth first, in
/// clap's order; `help` is left out.
pub(crate) fn command_paths(cmd: &clap::Command) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        if sub.get_name() == "help" {
            continue;
        }
        let path = vec![sub.get_name().to_string()];
        out.push(path.clone());
        for mut deeper in command_paths(sub) {
            let mut p = path.clone();
            p.append(&mut deeper);
            out.push(p);
        }
    }
    out
}

/// The CLI reference: each command's `--help`, as the binary prints it.
pub(crate) fn cli_markdown() -> String {
    let mut root = Cli::command();
    root.build();
    let mut out = String::from(
        "# Command line\n\n\
         <!-- Generated from the clap tree (foreman/src/cli.rs) by the test \
         `docs_are_current`; do not edit. Regenerate: UPDATE_DOCS=1 cargo nextest run \
         -p saheeli-foreman -E 'test(/docs_are_current/)' -->\n\n\
         Every command and its options, exactly as `--help` prints them. Exit codes: \
         0 ok, 1 a task failed or is incomplete, 2 bad input or a failure of Saheeli \
         itself.\n\n",
    );
    let help = root.render_help().to_string();
    let _ = writeln!(out, "## saheeli\n\n```text\n{}\n```\n", help.trim_end());
    for path in command_paths(&root) {
        let mut cmd = &mut root;
        for name in &path {
            cmd = cmd.find_subcommand_mut(name).expect("a subcommand");
        }
        let help = cmd.render_help().to_string();
        let _ = writeln!(
            out,
            "## saheeli {}\n\n```text\n{}\n```\n",
            path.join(" "),
            help.trim_end()
        );
    }
    out
}

fn docs_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs")
}

#[test]
fn docs_are_current() {
    let pages = [
        ("reference/cli.md", cli_markdown()),
        (
            "reference/settings.md",
            crate::settings::reference::markdown(),
        ),
        (
            "reference/engines.md",
            crate::backend::capabilities::page_markdown(),
        ),
    ];
    let update = std::env::var_os("UPDATE_DOCS").is_some();
    let mut stale = Vec::new();
    for (page, text) in pages {
        let path = docs_dir().join(page);
        let now = std::fs::read_to_string(&path).unwrap_or_default();
        if now == text {
            continue;
        }
        if update {
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, text).unwrap();
        } else {
            stale.push(page);
        }
    }
    assert!(
        stale.is_empty(),
        "docs/{} out of date: run UPDATE_DOCS=1 cargo nextest run -p saheeli-foreman \
         -E 'test(/docs_are_current/)' and commit the pages",
        stale.join(", docs/")
    );
}

#[test]
fn every_command_is_reached() {
    let paths = command_paths(&Cli::command());
    let joined: Vec<String> = paths.iter().map(|p| p.join(" ")).collect();
    for want in [
        "task submit",
        "task answer",
        "task attach",
        "eval compare",
        "run",
    ] {
        assert!(
            joined.iter().any(|j| j == want),
            "{want} missing: {joined:?}"
        );
    }
}

/// mdBook's anchor for a heading: lower case, letters, digits, `-` and
/// `_` kept, spaces as `-`, everything else dropped.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// The local links of a Markdown text (outside code), as written.
fn local_links(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut fence = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fence = !fence;
            continue;
        }
        if fence {
            continue;
        }
        // Inline code may hold `](`; drop it first.
        let plain: String = line.split('`').step_by(2).collect::<Vec<_>>().join("");
        let mut rest = plain.as_str();
        while let Some(at) = rest.find("](") {
            rest = &rest[at + 2..];
            let Some(end) = rest.find(')') else { break };
            let target = rest[..end].trim();
            if !target.contains("://") && !target.starts_with("mailto:") && !target.is_empty() {
                out.push(target.to_string());
            }
            rest = &rest[end..];
        }
    }
    out
}

/// The anchors of a page's headings.
fn anchors(text: &str) -> Vec<String> {
    let mut fence = false;
    let mut out = Vec::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fence = !fence;
        } else if !fence && line.starts_with('#') {
            out.push(slug(line.trim_start_matches('#')));
        }
    }
    out
}

/// Every Markdown file of the book, and the README and CONTRIBUTING that
/// link into it.
fn book_files() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "md") {
                out.push(p);
            }
        }
    }
    let mut files = Vec::new();
    walk(&docs_dir(), &mut files);
    let root = docs_dir().join("..");
    files.push(root.join("README.md"));
    files.push(root.join("CONTRIBUTING.md"));
    files
}

#[test]
fn book_links_resolve() {
    let mut broken = Vec::new();
    for file in book_files() {
        let text = std::fs::read_to_string(&file).unwrap();
        for link in local_links(&text) {
            let (path, anchor) = match link.split_once('#') {
                Some((p, a)) => (p, Some(a)),
                None => (link.as_str(), None),
            };
            let target = if path.is_empty() {
                file.clone()
            } else {
                file.parent().unwrap().join(path)
            };
            let ok = match std::fs::read_to_string(&target) {
                Ok(t) => anchor.is_none_or(|a| anchors(&t).iter().any(|h| h == a)),
                Err(_) => target.is_dir() && anchor.is_none(),
            };
            if !ok {
                broken.push(format!("{}: {link}", file.display()));
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn links_and_anchors_are_read_as_mdbook_does() {
    assert_eq!(
        slug(" What the load model predicts"),
        "what-the-load-model-predicts"
    );
    assert_eq!(
        slug("Verify and `assess`: checks"),
        "verify-and-assess-checks"
    );
    let text = "[a](x.md) `[b](no.md)` [c](https://e.org)\n```\n[d](no.md)\n```\n[e](#top)\n";
    assert_eq!(local_links(text), ["x.md", "#top"]);
}

#[test]
fn every_page_of_the_summary_exists() {
    let summary = std::fs::read_to_string(docs_dir().join("SUMMARY.md")).unwrap();
    let pages = local_links(&summary);
    assert!(pages.len() >= 20, "{pages:?}");
    for p in pages {
        assert!(
            docs_dir().join(&p).is_file(),
            "SUMMARY.md lists `{p}`, which does not exist"
        );
    }
}
