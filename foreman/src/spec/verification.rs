//! `verify`, `verify_files`, `verify_retries`, `verify_timeout`, `assess`
//! and `objective`, merged from the front-matter and config.yaml, checked.

use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use anyhow::bail;

/// Most verify commands, bytes in one, `verify_files`, retries and the
/// longest `verify_timeout` a task may ask for.
const MAX_COMMANDS: usize = 32;
const MAX_COMMAND_BYTES: usize = 16 * 1024;
const MAX_FILES: usize = 256;
const MAX_VERIFY_RETRIES: u32 = 20;
const MAX_VERIFY_TIMEOUT: Duration = Duration::from_secs(24 * 3600);
const MAX_OBJECTIVE_BYTES: usize = 64 * 1024;

/// The verification settings of one task, before and after checking.
#[derive(Debug)]
pub(super) struct Verification {
    pub verify: Vec<String>,
    pub files: Vec<PathBuf>,
    pub retries: u32,
    pub timeout: Duration,
    pub assess: bool,
    pub objective: Option<String>,
}

impl Verification {
    /// Checks every setting; `workspace` is the host directory named by
    /// `workspace:` (what `verify_files` are restored from), `replay`
    /// whether the model is a replay (which cannot assess).
    pub fn checked(
        mut self,
        prompt: &Path,
        workspace: Option<&Path>,
        replay: bool,
    ) -> anyhow::Result<Verification> {
        let p = prompt.display();
        if self.verify.len() > MAX_COMMANDS {
            bail!(
                "{p}: `verify` lists {} commands; the most is {MAX_COMMANDS}",
                self.verify.len()
            );
        }
        for c in &self.verify {
            if c.trim().is_empty() {
                bail!("{p}: `verify` has an empty command; write the command, or remove the entry");
            }
            if c.len() > MAX_COMMAND_BYTES || c.contains('\0') {
                bail!(
                    "{p}: a `verify` command is longer than {MAX_COMMAND_BYTES} bytes or holds a NUL; \
                     put a long check in a script in the workspace and name it in `verify_files`"
                );
            }
        }
        if !self.files.is_empty() && self.verify.is_empty() {
            bail!(
                "{p}: `verify_files` is set but `verify` is not; name the command that checks them"
            );
        }
        self.files = self
            .files
            .iter()
            .map(|f| verify_file(prompt, workspace, f))
            .collect::<anyhow::Result<_>>()?;
        if self.files.len() > MAX_FILES {
            bail!(
                "{p}: `verify_files` lists more than {MAX_FILES} paths; name their directories instead"
            );
        }
        if self.retries > MAX_VERIFY_RETRIES {
            bail!(
                "{p}: `verify_retries` {} is out of range; use 0 to {MAX_VERIFY_RETRIES}",
                self.retries
            );
        }
        if self.timeout > MAX_VERIFY_TIMEOUT {
            bail!("{p}: `verify_timeout` is longer than the most allowed, 24h");
        }
        if self.assess && replay {
            bail!(
                "{p}: `assess: true` needs an LLM to judge, and a `replay:` model has none; \
                 use a real model, or remove `assess`"
            );
        }
        if let Some(o) = &self.objective {
            if !self.assess {
                bail!(
                    "{p}: `objective` is only read by the assessor; add `assess: true`, or remove it"
                );
            }
            if o.trim().is_empty() || o.len() > MAX_OBJECTIVE_BYTES {
                bail!("{p}: `objective` must be 1 byte to 64 KiB of text");
            }
        }
        Ok(self)
    }
}

/// One `verify_files` path: relative, inside the workspace (no `..`, no
/// root), and present in the workspace it is restored from. Returned
/// without `.` components or a trailing slash.
fn verify_file(prompt: &Path, workspace: Option<&Path>, f: &Path) -> anyhow::Result<PathBuf> {
    let p = prompt.display();
    let shown = f.display();
    let Some(ws) = workspace else {
        bail!(
            "{p}: `verify_files` `{shown}` is restored from the submitted workspace, and the task \
             has none; add `workspace:` (the directory holding the checks)"
        );
    };
    let mut clean = PathBuf::new();
    for c in f.components() {
        match c {
            Component::Normal(n) => clean.push(n),
            Component::CurDir => {}
            _ => bail!(
                "{p}: `verify_files` `{shown}` must be a path inside the workspace, relative to \
                 it, without `..` (e.g. `tests/` or `pytest.ini`)"
            ),
        }
    }
    if clean.as_os_str().is_empty() {
        bail!("{p}: `verify_files` `{shown}` names the whole workspace; name the checks in it");
    }
    if clean.components().next() == Some(Component::Normal(".saheeli".as_ref())) {
        bail!("{p}: `verify_files` `{shown}` is inside `.saheeli/`, Saheeli's own directory");
    }
    // Never followed: a link is restored as the link it is.
    if std::fs::symlink_metadata(ws.join(&clean)).is_err() {
        bail!(
            "{p}: `verify_files` `{shown}` is not in the workspace `{}`; name a file or \
             directory that is there",
            ws.display()
        );
    }
    Ok(clean)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(files: &[&str]) -> Verification {
        Verification {
            verify: vec!["sh test.sh".into()],
            files: files.iter().map(PathBuf::from).collect(),
            retries: 2,
            timeout: Duration::from_secs(600),
            assess: false,
            objective: None,
        }
    }

    #[test]
    fn verify_files_stay_inside_the_workspace() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir(d.path().join("tests")).unwrap();
        std::fs::write(d.path().join("tests/t.sh"), "").unwrap();
        let ws = Some(d.path());
        let ok = v(&["./tests/", "tests/t.sh"])
            .checked(Path::new("p.md"), ws, false)
            .unwrap();
        assert_eq!(
            ok.files,
            vec![PathBuf::from("tests"), PathBuf::from("tests/t.sh")]
        );
        for bad in [
            "../x",
            "/etc/passwd",
            "tests/../../x",
            ".",
            ".saheeli/task.json",
            "missing",
        ] {
            let e = v(&[bad])
                .checked(Path::new("p.md"), ws, false)
                .unwrap_err()
                .to_string();
            assert!(e.starts_with("p.md: `verify_files`"), "{bad}: {e}");
        }
        let e = v(&["tests"])
            .checked(Path::new("p.md"), None, false)
            .unwrap_err();
        assert!(e.to_string().contains("add `workspace:`"), "{e}");
    }

    #[test]
    fn settings_are_bounded_and_consistent() {
        let p = Path::new("p.md");
        let mut x = v(&[]);
        x.verify = vec![" ".into()];
        assert!(
            x.checked(p, None, false)
                .unwrap_err()
                .to_string()
                .contains("empty command")
        );
        let mut x = v(&[]);
        x.retries = 21;
        assert!(
            x.checked(p, None, false)
                .unwrap_err()
                .to_string()
                .contains("`verify_retries`")
        );
        let mut x = v(&[]);
        x.assess = true;
        assert!(
            x.checked(p, None, true)
                .unwrap_err()
                .to_string()
                .contains("replay")
        );
        let mut x = v(&[]);
        x.objective = Some("o".into());
        assert!(
            x.checked(p, None, false)
                .unwrap_err()
                .to_string()
                .contains("assess: true")
        );
        let mut x = v(&[]);
        x.verify.clear();
        x.files = vec!["t".into()];
        assert!(
            x.checked(p, None, false)
                .unwrap_err()
                .to_string()
                .contains("`verify` is not")
        );
    }
}
