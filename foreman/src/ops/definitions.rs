//! Submitting against the definitions in use (issue 52): a template by
//! name, resolved from the set the store holds and recorded on the task
//! with its commit; and the configuration every submit checks a prompt
//! against, whose agent types and pools are the set's once one applies.

use std::path::PathBuf;

use super::error::Error;
use super::submit::{Submit, spec_for_text};
use crate::config::Config;
use crate::spec::TaskSpec;
use crate::store::Store;
use crate::task::FromDefinitions;

/// `cfg` with the agent types and pools of the definitions in use, if
/// any set is applied to `store`'s database.
pub(crate) fn with_definitions(cfg: &Config, store: &Store) -> Result<Config, Error> {
    match crate::definitions::current(store).map_err(Error::Internal)? {
        Some((_, set)) => Ok(crate::definitions::overlay(cfg, &set)),
        None => Ok(cfg.clone()),
    }
}

/// A submit of template `name`: the configuration it is checked
/// against, the file it is taken to be, and its spec (recording the
/// template and commit). A name the set in use lacks is refused, naming
/// the commit.
pub(crate) fn template_spec(
    cfg: &Config,
    store: &Store,
    name: &str,
    args: &Submit,
) -> Result<(Config, PathBuf, TaskSpec), Error> {
    let t = crate::definitions::template(store, name).map_err(Error::Refused)?;
    let cfg = crate::definitions::overlay(cfg, &t.set);
    let path = crate::definitions::template_path(&cfg, name);
    let mut spec = spec_for_text(&cfg, &path, &t.text, args)?;
    spec.definitions = Some(FromDefinitions {
        template: t.name,
        commit: t.commit,
    });
    Ok((cfg, path, spec))
}
