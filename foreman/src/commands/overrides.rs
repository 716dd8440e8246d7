//! `saheeli task override ID --state complete|incomplete --reason TEXT`:
//! a person's verdict on an ended task, recorded with who and when.

use std::process::ExitCode;

use anyhow::bail;

use crate::cli::{OverrideArgs, OverrideState};
use crate::config::Config;
use crate::output::{self, TaskView};
use crate::state::TaskState;

use crate::ops::open_existing_store;
use crate::ops::os_user;

/// Longest `--reason` kept (it is shown in tables and the detail view).
const MAX_REASON: usize = 1000;

pub(crate) async fn override_outcome(cfg: &Config, args: OverrideArgs) -> anyhow::Result<ExitCode> {
    let reason = args.reason.trim();
    if reason.is_empty() || reason.chars().count() > MAX_REASON {
        bail!("`--reason` must be 1 to {MAX_REASON} characters: say why the outcome changes");
    }
    let to = match args.state {
        OverrideState::Complete => TaskState::Complete,
        OverrideState::Incomplete => TaskState::Incomplete,
    };
    let mut store = open_existing_store(cfg)?;
    let id = store.require(&args.id)?.id;
    let by = os_user();
    store.override_outcome(id, to, reason, &by)?;
    let t = store.require(&id.to_string())?;
    if args.json {
        outln!(
            "{}",
            serde_json::to_string_pretty(&TaskView::new(&t, None))?
        );
    } else if let Some(o) = &t.overridden {
        outln!("{}", output::override_line(o, t.state));
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_current_user_has_a_name() {
        // SAFETY: as in os_user.
        let uid = unsafe { libc::getuid() };
        let name = crate::ops::user_name(uid).expect("the test's user is in passwd");
        let id = std::process::Command::new("id")
            .arg("-un")
            .output()
            .unwrap();
        assert_eq!(name, String::from_utf8_lossy(&id.stdout).trim());
        assert!(os_user().starts_with(&name), "{}", os_user());
    }
}
