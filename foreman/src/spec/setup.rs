//! `setup:`, `maintenance:` and `setup_env:` (issues 49 and 50), checked at
//! submit: the commands' bounds, the key files (workspace-relative, read
//! now from the submitted workspace into one digest), the secrets' names
//! (each set in the `.env` beside config.yaml), and the engine.

use std::io::Read;
use std::path::{Component, Path};

use anyhow::{Context, bail};
use saheeli_protocol::front_matter::{Commands, FrontMatter};
use sha2::{Digest, Sha256};

use crate::config::Config;
use crate::task::SetupPlan;

/// The most commands a `setup:` or `maintenance:` lists.
const MAX_COMMANDS: usize = 32;
/// The most key files, and the most bytes read of each.
const MAX_KEY_FILES: usize = 64;
const MAX_KEY_FILE_BYTES: u64 = 256 << 20;
const MAX_SECRETS: usize = 32;

/// A task's set-up, checked: its commands and the rest.
#[derive(Debug, Default)]
pub(super) struct SetupKeys {
    pub run: Vec<String>,
    pub plan: SetupPlan,
}

/// Checks the set-up keys of `fm`; `workspace` is the submitted workspace
/// (absolute), if any.
pub(super) fn checked(
    cfg: &Config,
    prompt: &Path,
    fm: &FrontMatter,
    workspace: Option<&Path>,
) -> anyhow::Result<SetupKeys> {
    let p = prompt.display();
    let Some(setup) = &fm.setup else {
        for (set, key) in [
            (fm.maintenance.is_some(), "maintenance"),
            (fm.setup_env.is_some(), "setup_env"),
        ] {
            if set {
                bail!("{p}: `{key}` belongs to a set-up; add `setup:` or remove `{key}`");
            }
        }
        return Ok(SetupKeys::default());
    };
    check_commands(prompt, "setup", &setup.run)?;
    let maintenance = fm.maintenance.clone().unwrap_or_default();
    check_commands(prompt, "maintenance", &maintenance)?;
    if setup.key_files.len() > MAX_KEY_FILES {
        bail!(
            "{p}: `setup.key_files` lists {} files; the most is {MAX_KEY_FILES}",
            setup.key_files.len()
        );
    }
    let mut key_files = Vec::new();
    for f in &setup.key_files {
        key_files.push(check_key_file(prompt, f)?);
    }
    let env = fm.setup_env.clone().unwrap_or_default();
    check_names(prompt, &env)?;
    // A provider's or a capability's key stays with the gateway.
    let keys = crate::config::Providers::from_config(cfg).secrets();
    if let Some(n) = env.iter().find(|n| keys.iter().any(|(k, _)| k == *n)) {
        bail!(
            "{p}: `setup_env` names `{n}`, a provider's or capability's key; keys stay with the \
             gateway: give the set-up a variable of its own"
        );
    }
    // Present now, or refused naming the missing one; the values are read
    // again at launch and kept nowhere.
    cfg.dotenv_values(&env)
        .with_context(|| format!("{p}: `setup_env`"))?;
    let files_digest = if key_files.is_empty() {
        None
    } else {
        Some(files_digest(prompt, workspace, &key_files)?)
    };
    Ok(SetupKeys {
        run: setup.run.0.clone(),
        plan: SetupPlan {
            key_files,
            files_digest,
            maintenance: maintenance.0,
            env,
        },
    })
}

fn check_commands(prompt: &Path, key: &str, c: &Commands) -> anyhow::Result<()> {
    let p = prompt.display();
    if c.0.len() > MAX_COMMANDS {
        bail!(
            "{p}: `{key}` lists {} commands; the most is {MAX_COMMANDS}",
            c.0.len()
        );
    }
    for cmd in &c.0 {
        if cmd.trim().is_empty() || cmd.len() > 16 * 1024 || cmd.contains('\0') {
            bail!(
                "{p}: a `{key}` command is empty, longer than 16 KiB or holds a NUL; \
                 put a long set-up in a script in the workspace"
            );
        }
    }
    Ok(())
}

/// A key file: relative to the workspace, without `..`.
fn check_key_file(prompt: &Path, f: &Path) -> anyhow::Result<String> {
    let text = f.to_string_lossy();
    let clean = !f.as_os_str().is_empty()
        && f.components()
            .all(|c| matches!(c, Component::Normal(_) | Component::CurDir))
        && !text.contains('\0')
        && text.len() <= 1024;
    if !clean {
        bail!(
            "{}: `setup.key_files` `{text}` must be a path relative to the workspace, without \
             `..` (e.g. `requirements.txt`)",
            prompt.display()
        );
    }
    let normal: Vec<_> = f
        .components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n.to_string_lossy().into_owned()),
            _ => None,
        })
        .collect();
    if normal.is_empty() {
        bail!(
            "{}: `setup.key_files` `{text}` names the workspace itself; name a file in it",
            prompt.display()
        );
    }
    Ok(normal.join("/"))
}

fn check_names(prompt: &Path, names: &[String]) -> anyhow::Result<()> {
    if names.len() > MAX_SECRETS {
        bail!(
            "{}: `setup_env` lists {} names; the most is {MAX_SECRETS}",
            prompt.display(),
            names.len()
        );
    }
    for n in names {
        let ok = !n.is_empty()
            && n.len() <= 128
            && !n.starts_with(|c: char| c.is_ascii_digit())
            && n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !ok {
            bail!(
                "{}: `setup_env` `{n}` is not a variable name (letters, digits and `_`)",
                prompt.display()
            );
        }
    }
    Ok(())
}

/// sha256 over each key file's path and content (or its absence) in the
/// submitted workspace. A link is hashed as its target's text, never
/// followed. Without a workspace every file is absent (what the image
/// holds at `workdir` is keyed by the image).
fn files_digest(
    prompt: &Path,
    workspace: Option<&Path>,
    files: &[String],
) -> anyhow::Result<String> {
    let mut h = Sha256::new();
    for f in files {
        h.update((f.len() as u64).to_le_bytes());
        h.update(f.as_bytes());
        let Some(ws) = workspace else {
            h.update(b"absent");
            continue;
        };
        let path = ws.join(f);
        match std::fs::symlink_metadata(&path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => h.update(b"absent"),
            Err(e) => {
                return Err(e).with_context(|| {
                    format!("{}: reading `setup.key_files` `{f}`", prompt.display())
                });
            }
            Ok(m) if m.file_type().is_symlink() => {
                let target = std::fs::read_link(&path)?;
                h.update(b"link");
                h.update(target.as_os_str().as_encoded_bytes());
            }
            Ok(m) if m.is_file() => {
                if m.len() > MAX_KEY_FILE_BYTES {
                    bail!(
                        "{}: `setup.key_files` `{f}` is larger than 256 MiB; key the set-up on a \
                         smaller file (a lock file)",
                        prompt.display()
                    );
                }
                h.update(b"file");
                h.update(m.len().to_le_bytes());
                let mut file = std::fs::File::open(&path)?.take(MAX_KEY_FILE_BYTES);
                let mut buf = vec![0; 64 * 1024];
                loop {
                    let n = file.read(&mut buf)?;
                    if n == 0 {
                        break;
                    }
                    h.update(&buf[..n]);
                }
            }
            Ok(_) => bail!(
                "{}: `setup.key_files` `{f}` is not a file; name files (a directory's content \
                 is not read)",
                prompt.display()
            ),
        }
    }
    Ok(hex(&h.finalize()))
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_file_is_relative_and_clean() {
        let p = Path::new("p.md");
        assert_eq!(
            check_key_file(p, Path::new("requirements.txt")).unwrap(),
            "requirements.txt"
        );
        assert_eq!(
            check_key_file(p, Path::new("./web/package-lock.json")).unwrap(),
            "web/package-lock.json"
        );
        for bad in ["/etc/passwd", "../x", "a/../../b", ".", ""] {
            let e = check_key_file(p, Path::new(bad)).unwrap_err().to_string();
            assert!(e.contains("`setup.key_files`"), "{bad}: {e}");
        }
    }

    #[test]
    fn a_secret_name_is_a_variable_name() {
        let p = Path::new("p.md");
        assert!(check_names(p, &["PIP_TOKEN".into(), "_x1".into()]).is_ok());
        for bad in ["", "1A", "A-B", "A=B", "A B"] {
            assert!(check_names(p, &[bad.to_string()]).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_digest_follows_content_and_never_a_link() {
        let ws = tempfile::tempdir().unwrap();
        let p = Path::new("p.md");
        let files = vec!["requirements.txt".to_string()];
        let absent = files_digest(p, Some(ws.path()), &files).unwrap();
        assert_eq!(absent, files_digest(p, None, &files).unwrap());
        std::fs::write(ws.path().join("requirements.txt"), "a==1\n").unwrap();
        let one = files_digest(p, Some(ws.path()), &files).unwrap();
        assert_ne!(one, absent);
        assert_eq!(one, files_digest(p, Some(ws.path()), &files).unwrap());
        std::fs::write(ws.path().join("requirements.txt"), "a==2\n").unwrap();
        assert_ne!(one, files_digest(p, Some(ws.path()), &files).unwrap());
        // A link to a file outside is hashed by its target's name.
        std::fs::remove_file(ws.path().join("requirements.txt")).unwrap();
        std::os::unix::fs::symlink("/etc/hostname", ws.path().join("requirements.txt")).unwrap();
        let link = files_digest(p, Some(ws.path()), &files).unwrap();
        assert_ne!(link, absent);
        std::fs::create_dir(ws.path().join("d")).unwrap();
        assert!(files_digest(p, Some(ws.path()), &["d".into()]).is_err());
    }
}
