//! Reading a prompt file: its text (UTF-8), its front-matter with the
//! template's parameters resolved and `--param` applied, its workspace.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use saheeli_protocol::front_matter::{FrontMatter, PromptFile};

use super::{
    MissingParameters, ParamValue, apply_params, check_declarations, check_placeholders,
    render_all, resolve, split_params,
};

/// Why a prompt does not make a task: the one cause a caller acts on
/// (required parameters to ask for on a terminal) apart from the rest.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SpecError {
    /// Required parameters nobody gave a value.
    #[error(transparent)]
    Missing(#[from] MissingParameters),
    /// Anything else; the message names the file, line or field.
    #[error(transparent)]
    Invalid(#[from] anyhow::Error),
}

impl SpecError {
    /// The error as the CLI prints it (`error: …`, exit 2).
    pub(crate) fn into_anyhow(self) -> anyhow::Error {
        match self {
            SpecError::Missing(m) => m.into(),
            SpecError::Invalid(e) => e,
        }
    }
}

/// A prompt's front-matter and body with its template's parameters
/// resolved and placeholders replaced, `--param` overrides applied.
pub(super) fn template(
    path: &Path,
    dir: &Path,
    text: &str,
    params: &[String],
    asked: &[(String, String)],
) -> Result<(FrontMatter, String, Vec<ParamValue>), SpecError> {
    let prompt =
        PromptFile::parse(path, text).map_err(|e| anyhow::Error::from(hint_quotes(text, e)))?;
    let mut fm = prompt.front_matter;
    let mut body = prompt.body;
    check_declarations(path, text, &fm, dir)?;
    if fm.parameters.is_empty() {
        return Ok((apply_params(path, fm, params)?, body, Vec::new()));
    }
    check_placeholders(path, text, &fm)?;
    let (given, overrides) = split_params(&fm, params);
    let values = resolve(path, dir, &fm.parameters, &given, asked)?;
    fm = apply_params(path, fm, &overrides)?;
    render_all(path, &mut fm, &mut body, &values)?;
    Ok((fm, body, values))
}

/// A YAML value that starts with `{{` reads as a mapping: say to quote it.
pub(super) fn hint_quotes(
    text: &str,
    mut e: saheeli_protocol::FrontMatterError,
) -> saheeli_protocol::FrontMatterError {
    let line = e.line.and_then(|l| text.lines().nth(l.saturating_sub(1)));
    if e.message.contains("invalid type: map") && line.is_some_and(|l| l.contains("{{")) {
        e.message
            .push_str("; a value that starts with `{{` must be quoted: `title: \"{{ name }} …\"`");
    }
    e
}

/// A prompt file's front-matter as written (before `--param`), for
/// `--dry-run` to tell which keys it sets.
pub(crate) fn front_matter(path: &Path) -> anyhow::Result<FrontMatter> {
    Ok(PromptFile::parse(path, &read_text(path)?)?.front_matter)
}

/// A prompt file's text: UTF-8, or an error saying where it is not.
pub(super) fn read_text(path: &Path) -> anyhow::Result<String> {
    let bytes =
        std::fs::read(path).with_context(|| format!("reading prompt `{}`", path.display()))?;
    String::from_utf8(bytes).map_err(|e| {
        anyhow::anyhow!(
            "{}: not valid UTF-8 (byte {}); save the prompt as UTF-8",
            path.display(),
            e.utf8_error().valid_up_to()
        )
    })
}

/// `workspace:`, relative to the prompt's directory; it must be one.
pub(super) fn workspace_dir(path: &Path, dir: &Path, ws: PathBuf) -> anyhow::Result<PathBuf> {
    let ws = dir.join(ws);
    if !ws.is_dir() {
        bail!(
            "{}: `workspace` `{}` is not a directory",
            path.display(),
            ws.display()
        );
    }
    Ok(std::path::absolute(&ws)?)
}
