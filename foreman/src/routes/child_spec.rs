//! A child task's spec from a parent's `spawn_task` (issue 30), and its
//! workspace from the files the parent's servo sent. Everything in the
//! request came from the parent's model or its shell, so it is hostile:
//!
//! - `prompt` text is the child's body only, never parsed for
//!   front-matter; the child gets config.yaml's defaults and the parent's
//!   model (or `model`), not the parent's grants.
//! - `template` names a prompt file beside the parent's (on the host,
//!   written by a person): relative, without `..`, no link on the way, a
//!   regular file under a size cap. `params` fill only the parameters it
//!   declares, never a setting; the child never names a host directory
//!   as its workspace (`workspace:` of the template is left out).
//! - `workspace` files: relative paths of plain components, counts and
//!   sizes capped, written into a fresh private directory and packed as
//!   any submitted workspace is (keys refused).

use std::io::Read;
use std::path::{Component, Path, PathBuf};

use anyhow::{Context, bail};
use saheeli_protocol::TaskId;
use saheeli_protocol::delegate::{File, MAX_FILE_BYTES, MAX_FILES, MAX_FILES_BYTES, Spawn};

use crate::config::Config;
use crate::spec::TaskSpec;

/// Longest `prompt` text, and template file, read.
const MAX_PROMPT: usize = 64 * 1024;

/// The child's spec (its budget is carved later, in the store).
pub(crate) fn child_spec(cfg: &Config, parent: &TaskSpec, req: &Spawn) -> anyhow::Result<TaskSpec> {
    let dir = prompt_dir(parent)?;
    if let Some(script) = req.model.as_deref().and_then(|m| m.strip_prefix("replay:")) {
        confined(&dir, script).context("`model`")?;
    }
    let model = req.model.clone().unwrap_or_else(|| parent.model.clone());
    let quoted = serde_json::to_string(&model).expect("strings serialize");
    let mut spec = match (&req.prompt, &req.template) {
        (Some(prompt), None) => {
            if let Some(key) = req.params.keys().next() {
                bail!(
                    "`params.{}`: `params` fill a template's parameters; give them with \
                     `template`, not `prompt`",
                    crate::output::clean(&key.chars().take(100).collect::<String>())
                );
            }
            if prompt.trim().is_empty() || prompt.len() > MAX_PROMPT {
                bail!("`prompt` must be 1 to {} KiB of text", MAX_PROMPT / 1024);
            }
            // The model's text is the body, after front-matter of ours:
            // nothing in it is read as a setting.
            let text = format!("---\nmodel: {quoted}\n---\n{prompt}");
            TaskSpec::from_text(cfg, &dir.join("spawned.md"), &text, &[])?
        }
        (None, Some(template)) => {
            let path = confined(&dir, template)?;
            let text = read_template(&path)?;
            let fm = saheeli_protocol::PromptFile::parse(&path, &text)?.front_matter;
            only_declared(template, &fm.parameters, &req.params)?;
            let own = fm.model;
            let text = match (own, &req.model) {
                (Some(_), Some(_)) => {
                    bail!("template `{template}` names its own model; leave `model` out")
                }
                (Some(_), None) => text,
                // No model of its own: the parent's (or the one asked for).
                (None, _) => with_model(&text, &quoted),
            };
            let params: Vec<String> = req.params.iter().map(|(k, v)| format!("{k}={v}")).collect();
            TaskSpec::from_text(cfg, &path, &text, &params)?
        }
        _ => {
            bail!("give either `prompt` (text) or `template` (a prompt file), not both or neither")
        }
    };
    if let Some(why) = crate::backend::capabilities::refusal(cfg.file.backend, &spec) {
        bail!("the child task: {why}");
    }
    spec.no_human |= parent.no_human;
    Ok(spec)
}

/// `params` name only parameters the template declares (case N18): a
/// setting (`budget_per_attempt`, `retries`, `retry_from`, `timeout`,
/// `verify`, `workspace`, …) is the template's, written by a person, and
/// the child's budget is spawn_task's `max_tokens` and `max_cost`.
fn only_declared(
    template: &str,
    declared: &[saheeli_protocol::template::Parameter],
    params: &std::collections::BTreeMap<String, String>,
) -> anyhow::Result<()> {
    let Some(key) = params
        .keys()
        .find(|k| !declared.iter().any(|p| &p.name == *k))
    else {
        return Ok(());
    };
    let key = crate::output::clean(&key.chars().take(100).collect::<String>());
    let names: Vec<&str> = declared.iter().map(|p| p.name.as_str()).collect();
    let theirs = if names.is_empty() {
        "it declares no parameters".to_string()
    } else {
        format!("its parameters are {}", names.join(", "))
    };
    let budget = if ["max_tokens", "max_cost"].contains(&key.as_str()) {
        format!(" (give `{key}` to spawn_task itself: it is carved out of this task's budget)")
    } else {
        String::new()
    };
    bail!(
        "`params.{key}`: template `{template}` declares no parameter `{key}`; {theirs}. \
         `params` fill only a template's parameters, never its settings{budget}"
    )
}

/// A prompt file's text with `model: quoted` first in its front-matter.
fn with_model(text: &str, quoted: &str) -> String {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let first = text.split_inclusive('\n').next().unwrap_or("");
    if first.trim_end() == "---" {
        format!("---\nmodel: {quoted}\n{}", &text[first.len()..])
    } else {
        format!("---\nmodel: {quoted}\n---\n{text}")
    }
}

/// The parent's prompt file's directory, where templates are found.
fn prompt_dir(parent: &TaskSpec) -> anyhow::Result<PathBuf> {
    let p = Path::new(&parent.prompt_path);
    let dir = p
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    dir.canonicalize()
        .with_context(|| format!("the parent's prompt directory `{}`", dir.display()))
}

/// `raw` under `dir`: relative, plain components, no link on the way.
fn confined(dir: &Path, raw: &str) -> anyhow::Result<PathBuf> {
    let mut at = dir.to_path_buf();
    let rel = Path::new(raw);
    if rel.as_os_str().is_empty() || raw.len() > 1024 {
        bail!("template `{raw}`: name a prompt file beside the parent's");
    }
    for c in rel.components() {
        let Component::Normal(n) = c else {
            bail!("template `{raw}` must be relative to the parent's prompt file, without `..`");
        };
        at.push(n);
        let meta = at
            .symlink_metadata()
            .with_context(|| format!("template `{raw}`"))?;
        if meta.file_type().is_symlink() {
            bail!("template `{raw}` goes through a symbolic link; links are not followed");
        }
    }
    Ok(at)
}

fn read_template(path: &Path) -> anyhow::Result<String> {
    use std::os::unix::fs::OpenOptionsExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .with_context(|| format!("opening template `{}`", path.display()))?;
    if !f.metadata()?.is_file() {
        bail!("template `{}` is not a regular file", path.display());
    }
    let mut bytes = Vec::new();
    f.take(MAX_PROMPT as u64 + 1).read_to_end(&mut bytes)?;
    if bytes.len() > MAX_PROMPT {
        bail!(
            "template `{}` is larger than {} KiB",
            path.display(),
            MAX_PROMPT / 1024
        );
    }
    String::from_utf8(bytes).with_context(|| format!("template `{}` is not UTF-8", path.display()))
}

/// Packs `files` as task `id`'s submitted workspace; returns the tar
/// (None: no files). Blocking.
pub(crate) fn child_workspace(
    cfg: &Config,
    id: TaskId,
    files: &[File],
) -> anyhow::Result<Option<PathBuf>> {
    if files.is_empty() {
        return Ok(None);
    }
    check_files(files)?;
    let tar = crate::inputs::new_workspace_tar(&cfg.state_dir(), id)?;
    let staging = Staging(tar.with_extension("spawn"));
    {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&staging.0)
            .with_context(|| format!("making `{}`", staging.0.display()))?;
    }
    for f in files {
        let dest = staging.0.join(&f.path);
        if let Some(dir) = dest.parent() {
            std::fs::create_dir_all(dir).with_context(|| format!("workspace file `{}`", f.path))?;
        }
        std::fs::write(&dest, &f.content)
            .with_context(|| format!("workspace file `{}`", f.path))?;
    }
    // Saheeli's own private directory: only the whole host and homes are
    // refused.
    let bounds = crate::inputs::Bounds {
        named_by: staging.0.clone(),
        under: None,
    };
    let tar = crate::inputs::pack(cfg, &staging.0, &bounds, id, true)?;
    Ok(Some(tar))
}

/// A child's files before they are packed, removed whatever happens.
struct Staging(PathBuf);

impl Drop for Staging {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The files' paths and sizes within the caps.
fn check_files(files: &[File]) -> anyhow::Result<()> {
    if files.len() > MAX_FILES {
        bail!("{} workspace files; at most {MAX_FILES}", files.len());
    }
    let mut total = 0;
    for f in files {
        let p = Path::new(&f.path);
        let plain = p.components().all(|c| matches!(c, Component::Normal(_)));
        if f.path.is_empty() || f.path.len() > 1024 || !plain {
            bail!(
                "workspace file `{}`: paths must be relative, without `..`",
                crate::output::clean(&f.path.chars().take(100).collect::<String>())
            );
        }
        if p.components()
            .next()
            .is_some_and(|c| c.as_os_str() == ".saheeli")
        {
            bail!("workspace file `{}`: `.saheeli/` is Saheeli's own", f.path);
        }
        if f.content.len() > MAX_FILE_BYTES {
            bail!(
                "workspace file `{}` is larger than {} KiB",
                f.path,
                MAX_FILE_BYTES / 1024
            );
        }
        total += f.content.len();
    }
    if total > MAX_FILES_BYTES {
        bail!("workspace files pass {} KiB in all", MAX_FILES_BYTES / 1024);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(path: &str) -> File {
        File {
            path: path.into(),
            content: "x".into(),
        }
    }

    #[test]
    fn hostile_workspace_paths_are_refused() {
        for bad in ["../x", "/etc/passwd", "a/../../b", ".saheeli/task.json", ""] {
            assert!(check_files(&[file(bad)]).is_err(), "{bad}");
        }
        assert!(check_files(&[file("src/a.rs"), file("b.txt")]).is_ok());
        let many: Vec<File> = (0..=MAX_FILES).map(|i| file(&format!("f{i}"))).collect();
        assert!(check_files(&many).is_err());
    }

    #[test]
    fn params_fill_only_declared_parameters() {
        let declared: [saheeli_protocol::template::Parameter; 1] =
            [serde_json::from_value(serde_json::json!({"name": "lang"})).unwrap()];
        let params = |k: &str| [(k.to_string(), "x".to_string())].into_iter().collect();
        assert!(only_declared("w.md", &declared, &params("lang")).is_ok());
        for key in [
            "budget_per_attempt",
            "retries",
            "workspace",
            "verify",
            "max_tokens",
        ] {
            let e = only_declared("w.md", &declared, &params(key)).unwrap_err();
            let e = format!("{e:#}");
            assert!(
                e.contains(&format!(
                    "`params.{key}`: template `w.md` declares no parameter"
                )),
                "{e}"
            );
            assert!(e.contains("its parameters are lang"), "{e}");
        }
        let e = only_declared("w.md", &[], &params("max_tokens")).unwrap_err();
        assert!(
            format!("{e}").contains("give `max_tokens` to spawn_task itself"),
            "{e}"
        );
    }

    #[test]
    fn a_template_without_a_model_gets_one() {
        assert_eq!(
            with_model("---\ntitle: w\n---\nbody", "\"m\""),
            "---\nmodel: \"m\"\ntitle: w\n---\nbody"
        );
        assert_eq!(with_model("body", "\"m\""), "---\nmodel: \"m\"\n---\nbody");
    }

    #[test]
    fn templates_stay_beside_the_parent_and_links_are_not_followed() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().canonicalize().unwrap();
        std::fs::create_dir(dir.join("sub")).unwrap();
        std::fs::write(dir.join("sub/w.md"), "hi").unwrap();
        std::os::unix::fs::symlink("/etc", dir.join("etc")).unwrap();
        assert_eq!(confined(&dir, "sub/w.md").unwrap(), dir.join("sub/w.md"));
        for bad in ["../w.md", "/etc/passwd", "etc/passwd", "sub/../../x"] {
            assert!(confined(&dir, bad).is_err(), "{bad}");
        }
    }
}
