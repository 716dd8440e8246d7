//! The children section of a parent's `report.md` (issue 30): each child
//! with how it ended, linked to its own results (a child's results are
//! collected under its own id).

use std::fmt::Write as _;
use std::io::{Read, Write};
use std::path::Path;

use crate::output::printable;
use crate::store::ChildRow;

use super::REPORT;
use super::write::replace_file;

/// Adds the section to the `report.md` just written in `results`.
pub(crate) fn append_children(results: &Path, children: &[ChildRow]) -> anyhow::Result<()> {
    if children.is_empty() {
        return Ok(());
    }
    let mut text = String::new();
    if let Some(f) = crate::collect::open_regular(&results.join(REPORT))? {
        f.take(4 << 20).read_to_string(&mut text)?;
    }
    let section = section(results, children);
    replace_file(results, REPORT, |w| {
        w.write_all(text.trim_end().as_bytes())?;
        w.write_all(section.as_bytes())
    })
}

fn section(results: &Path, children: &[ChildRow]) -> String {
    let mut s = String::from(
        "\n\n## Children\n\n| task | title | outcome | tokens | cost |\n|---|---|---|---|---|\n",
    );
    for c in children {
        let l = &c.last;
        let own = l
            .results_path
            .as_deref()
            .map(Path::new)
            .map(|p| link(results, p))
            .unwrap_or_default();
        let id = if own.is_empty() {
            format!("`{}`", c.id)
        } else {
            format!("[`{}`]({own}/report.md)", c.id)
        };
        let reason = l
            .reason
            .as_deref()
            .filter(|r| *r != l.state.as_str())
            .map(|r| format!(" ({r})"))
            .unwrap_or_default();
        let _ = writeln!(
            s,
            "| {id} | {} | {}{reason} | {} | ${:.4} |",
            printable(&l.title).replace('|', "\\|"),
            l.state,
            c.tokens,
            c.cost
        );
    }
    s
}

/// `child` as a link from `parent`'s results: relative when both are in
/// one results directory.
fn link(parent: &Path, child: &Path) -> String {
    match (parent.parent(), child.parent(), child.file_name()) {
        (Some(a), Some(b), Some(name)) if a == b => format!("../{}", name.to_string_lossy()),
        _ => child.display().to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_are_relative_between_siblings() {
        assert_eq!(link(Path::new("/r/a"), Path::new("/r/b")), "../b");
        assert_eq!(link(Path::new("/r/a"), Path::new("/s/b")), "/s/b");
    }
}
