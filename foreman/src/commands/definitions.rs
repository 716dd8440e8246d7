//! `saheeli definitions status` (issue 52): the definitions read from
//! Git as the database holds them (any process of the database sees what
//! the serving foreman applied or rejected).

use std::process::ExitCode;

use crate::cli::DefinitionsCommand;
use crate::config::Config;

pub(crate) async fn definitions(cfg: &Config, cmd: DefinitionsCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        DefinitionsCommand::Status { json } => {
            let status = if cfg.database().exists() {
                let store = super::open_existing_store(cfg)?;
                crate::definitions::status(&store)?
            } else {
                crate::definitions::Status::default()
            };
            if json {
                outln!("{}", serde_json::to_string_pretty(&status)?);
            } else {
                out!("{}", crate::output::clean(&status.text()));
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}
