//! The set-up's secrets (`setup_env:`, issue 50): named values read from
//! the `.env` beside config.yaml, and only from there (a variable the
//! foreman's own environment carries is not a set-up secret). Values never
//! appear in an error.

use std::collections::BTreeMap;

use anyhow::{Context, bail};

use super::Config;
use super::load::line_of;

impl Config {
    /// The `.env` values of `names`, in order; a name the file does not
    /// set (or a missing file) is an error naming it.
    pub fn dotenv_values(&self, names: &[String]) -> anyhow::Result<BTreeMap<String, String>> {
        if names.is_empty() {
            return Ok(BTreeMap::new());
        }
        let path = self.base_dir.join(".env");
        let mut all = self.dotenv_all()?;
        names
            .iter()
            .map(|n| match all.remove(n) {
                Some(v) => Ok((n.clone(), v)),
                None => bail!(
                    "`setup_env` names `{n}`, which `{}` does not set; add `{n}=...` to that file",
                    path.display()
                ),
            })
            .collect()
    }

    /// Every value of the `.env` beside config.yaml (none when it is
    /// missing): a git push's credentials (issue 52) and the set-up's.
    pub fn dotenv_all(&self) -> anyhow::Result<BTreeMap<String, String>> {
        let path = self.base_dir.join(".env");
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(e) => return Err(e).with_context(|| format!("reading `{}`", path.display())),
        };
        let mut all = BTreeMap::new();
        for item in dotenvy::from_read_iter(text.as_bytes()) {
            match item {
                Ok((k, v)) => {
                    all.insert(k, v);
                }
                Err(dotenvy::Error::LineParse(bad, _)) => bail!(
                    "{}:{}: not a `KEY=value` line; fix or remove it",
                    path.display(),
                    line_of(&text, &bad)
                ),
                Err(e) => {
                    return Err(anyhow::Error::new(e))
                        .with_context(|| format!("reading `{}`", path.display()));
                }
            }
        }
        Ok(all)
    }
}
