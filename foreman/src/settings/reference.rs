//! The settings reference page (`docs/reference/settings.md`), written
//! from the table so the docs cannot drift from the code.

use std::fmt::Write;

use super::{Setting, all};

/// `|` would end a table cell.
fn cell(s: &str) -> String {
    s.replace('|', "\\|")
}

fn code_or_dash(s: &str) -> String {
    if s.is_empty() {
        "—".into()
    } else {
        format!("`{}`", cell(s))
    }
}

fn row(out: &mut String, s: &Setting, key: &str) {
    let env = s.env_var().map(|v| format!("`{v}`")).unwrap_or("—".into());
    let _ = writeln!(
        out,
        "| `{key}` | {} | {} | {env} | {} |",
        cell(s.ty),
        code_or_dash(s.default),
        cell(s.doc)
    );
}

/// The page, as Markdown.
pub(crate) fn markdown() -> String {
    let mut out = String::from(
        "# Settings: front-matter and config.yaml\n\n\
         <!-- Generated from foreman/src/settings/ by the test `docs_are_current`; \
         do not edit. Regenerate: UPDATE_DOCS=1 cargo nextest run -p saheeli-foreman \
         -E 'test(/docs_are_current/)' -->\n\n\
         Every setting is defined once, in the foreman's settings table; this page, \
         the parsers, `--param`, the environment overrides and `--dry-run` all read it.\n\n\
         A value comes from the last of these layers that sets it:\n\n\
         1. the built-in default;\n\
         2. `config.yaml` (or the file `--config` / `SAHEELI_CONFIG` names);\n\
         3. the environment: `SAHEELI_<KEY>`, read as YAML like a config value \
         (`SAHEELI_MAX_STEPS=80`, `SAHEELI_RETRY_ON='[timeout]'`; empty counts as unset; \
         `.env` is for keys and is not read for settings);\n\
         4. the prompt's front-matter;\n\
         5. `--param KEY=VALUE` on `run` and `task submit` (the keys marked below).\n\n\
         `saheeli run FILE --dry-run` shows each effective value and the layer it came from.\n\n",
    );
    out.push_str("## Per task: front-matter\n\n");
    out.push_str(
        "Every key is optional. The config.yaml column names the default behind it \
         (a `task:` key unless written otherwise).\n\n",
    );
    out.push_str(
        "| key | type | default | config.yaml | environment | `--param` | what it does |\n",
    );
    out.push_str("|---|---|---|---|---|---|---|\n");
    for s in all().filter(|s| s.in_front_matter.is_some()) {
        let env = s.env_var().map(|v| format!("`{v}`")).unwrap_or("—".into());
        let _ = writeln!(
            out,
            "| `{}` | {} | {} | {} | {env} | {} | {} |",
            s.key,
            cell(s.ty),
            code_or_dash(s.default),
            s.config.map(|c| format!("`{c}`")).unwrap_or("—".into()),
            if s.param { "yes" } else { "—" },
            cell(s.doc)
        );
    }
    out.push_str("\n## config.yaml only\n\n");
    out.push_str(
        "Settings a prompt cannot change. Nested keys are written below their \
         section (`llm:` then `  max_attempts: 6`).\n\n",
    );
    out.push_str("| config.yaml | type | default | environment | what it does |\n");
    out.push_str("|---|---|---|---|---|\n");
    for s in all().filter(|s| s.in_front_matter.is_none()) {
        row(&mut out, s, s.config.unwrap_or(s.key));
    }
    out
}
