//! `task results --dest`: copying a results directory elsewhere. The tree
//! is the agent's: it is read by directory handles that follow no link,
//! and written the same way (`collect::Dir`), so a link in it, or one left
//! at the destination by an earlier copy, is never written through. Links
//! are copied as links only when asked (`--links`); they name what the
//! agent chose, host paths included. Holes in sparse files stay holes.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use anyhow::Context;
use rustix::fs::FileType;

use crate::collect::{self, Dir};

/// What a copy did.
#[derive(Debug, Default)]
pub(super) struct Copied {
    pub files: u64,
    /// Links copied as links (`--links`).
    pub links: u64,
    /// Links left out (no `--links`), by their path in the results.
    pub links_skipped: Vec<PathBuf>,
    /// Entries neither file, directory nor link (never in a collection).
    pub other_skipped: u64,
}

/// Copies the results directory `from` into `to` (made when absent;
/// whatever is in the way of an entry is replaced).
pub(super) fn copy_results(from: &Path, to: &Path, links: bool) -> anyhow::Result<Copied> {
    let src = Dir::open(from).with_context(|| format!("opening results `{}`", from.display()))?;
    let (parent, name) = match (to.parent(), to.file_name()) {
        (Some(p), Some(n)) => (p, n),
        _ => anyhow::bail!("`{}` cannot be copied into", to.display()),
    };
    // The destination's parent is the user's (it may be a link of theirs).
    std::fs::create_dir_all(parent).with_context(|| format!("creating `{}`", parent.display()))?;
    let dst = rustix::fs::open(
        parent,
        rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )
    .with_context(|| format!("opening `{}`", parent.display()))?;
    let dst = Dir::from_fd(dst, parent.to_path_buf());
    let dst = replace_with_dir(&dst, name)?;
    let mut out = Copied::default();
    copy_dir(&src, &dst, Path::new(""), links, &mut out, 0)?;
    Ok(out)
}

/// The directory `name` of `dir`: a real one kept, anything else replaced.
fn replace_with_dir(dir: &Dir, name: &OsStr) -> anyhow::Result<Dir> {
    let shown = dir.shown().join(name);
    if !matches!(dir.kind(name)?, Some(FileType::Directory) | None) {
        dir.remove(name)
            .with_context(|| format!("removing `{}`", shown.display()))?;
    }
    dir.make_dir(name, 0o755)
        .with_context(|| format!("creating `{}`", shown.display()))
}

fn copy_dir(
    src: &Dir,
    dst: &Dir,
    rel: &Path,
    links: bool,
    out: &mut Copied,
    depth: usize,
) -> anyhow::Result<()> {
    if depth > 4096 {
        anyhow::bail!("`{}` is nested too deep to copy", src.shown().display());
    }
    let entries = src
        .entries()
        .with_context(|| format!("listing `{}`", src.shown().display()))?;
    for (name, kind) in entries {
        let shown = dst.shown().join(&name);
        let from = || src.shown().join(&name);
        match kind {
            FileType::Directory => {
                let sub = src
                    .sub(&name)
                    .with_context(|| format!("opening `{}`", from().display()))?;
                let to = replace_with_dir(dst, &name)?;
                copy_dir(&sub, &to, &rel.join(&name), links, out, depth + 1)?;
            }
            FileType::RegularFile => {
                use std::os::unix::fs::PermissionsExt;
                let file = src
                    .open_file(&name)
                    .with_context(|| format!("reading `{}`", from().display()))?;
                let meta = file.metadata()?;
                dst.remove(&name)
                    .with_context(|| format!("removing `{}`", shown.display()))?;
                let w = dst
                    .create_file(&name, meta.permissions().mode() & 0o777)
                    .with_context(|| format!("creating `{}`", shown.display()))?;
                collect::copy_file(&file, meta.len(), &w, u64::MAX)
                    .with_context(|| format!("copying to `{}`", shown.display()))?;
                out.files += 1;
            }
            FileType::Symlink => {
                dst.remove(&name)
                    .with_context(|| format!("removing `{}`", shown.display()))?;
                if links {
                    let target = src
                        .read_link(&name)
                        .with_context(|| format!("reading link `{}`", from().display()))?;
                    dst.symlink(&target, &name)
                        .with_context(|| format!("creating link `{}`", shown.display()))?;
                    out.links += 1;
                } else {
                    out.links_skipped.push(rel.join(&name));
                }
            }
            _ => out.other_skipped += 1,
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use std::os::unix::fs::symlink;

    #[test]
    fn links_are_copied_only_when_asked_and_never_written_through() {
        let d = tempfile::tempdir().unwrap();
        let from = d.path().join("results");
        fs::create_dir_all(from.join("sub")).unwrap();
        fs::write(from.join("sub/a.txt"), "a").unwrap();
        fs::write(from.join("victim-name"), "from results").unwrap();
        symlink("/etc/passwd", from.join("passwd-link")).unwrap();
        symlink("/etc", from.join("sub/etc-link")).unwrap();
        let victim = d.path().join("victim");
        fs::write(&victim, "keep").unwrap();
        let to = d.path().join("copy/t");
        // An earlier copy (or someone) left links where files now go.
        fs::create_dir_all(&to).unwrap();
        symlink(&victim, to.join("victim-name")).unwrap();
        symlink(d.path(), to.join("sub")).unwrap();
        let c = copy_results(&from, &to, false).unwrap();
        assert_eq!(c.files, 2);
        assert_eq!(
            c.links_skipped,
            [PathBuf::from("passwd-link"), PathBuf::from("sub/etc-link")]
        );
        assert!(to.join("passwd-link").symlink_metadata().is_err());
        assert!(!to.join("sub").is_symlink());
        assert_eq!(fs::read_to_string(to.join("sub/a.txt")).unwrap(), "a");
        assert_eq!(
            fs::read_to_string(to.join("victim-name")).unwrap(),
            "from results"
        );
        assert_eq!(fs::read_to_string(&victim).unwrap(), "keep");
        assert!(!d.path().join("a.txt").exists());
        let c = copy_results(&from, &to, true).unwrap();
        assert_eq!((c.links, c.links_skipped.len()), (2, 0));
        assert_eq!(
            fs::read_link(to.join("passwd-link")).unwrap(),
            Path::new("/etc/passwd")
        );
        // The results root itself must not be a link.
        let linked = d.path().join("linked");
        symlink(&from, &linked).unwrap();
        assert!(copy_results(&linked, &d.path().join("copy/u"), false).is_err());
    }
}
