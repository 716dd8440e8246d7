//! `saheeli task override ID --state complete|incomplete --reason TEXT`:
//! a person's verdict on an ended task, recorded with who and when.

use std::process::ExitCode;

use anyhow::bail;

use crate::cli::{OverrideArgs, OverrideState};
use crate::config::Config;
use crate::output::{self, TaskView};
use crate::state::TaskState;

use super::open_existing_store;

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

/// Who is overriding: the name of the real user id (`getpwuid_r`, not
/// `$USER`, which any caller can set), with the invoking user when root
/// runs it through sudo (`SUDO_USER`: only root can be lying there).
pub(super) fn os_user() -> String {
    // SAFETY: getuid has no preconditions and cannot fail.
    let uid = unsafe { libc::getuid() };
    let name = user_name(uid).unwrap_or_else(|| format!("uid {uid}"));
    match std::env::var("SUDO_USER") {
        Ok(sudoer) if uid == 0 && !sudoer.is_empty() && sudoer != name => {
            format!("{name} (sudo by {sudoer})")
        }
        _ => name,
    }
}

/// The passwd name of `uid`, if it has one.
fn user_name(uid: libc::uid_t) -> Option<String> {
    let mut buf = vec![0u8; 4096];
    // SAFETY: a zeroed passwd is a valid out-parameter (plain data and
    // null pointers); getpwuid_r writes only into it and into `buf`, whose
    // length it is given, and `result` points into them only on success.
    unsafe {
        let mut pwd: libc::passwd = std::mem::zeroed();
        let mut result: *mut libc::passwd = std::ptr::null_mut();
        let rc = libc::getpwuid_r(
            uid,
            &mut pwd,
            buf.as_mut_ptr().cast(),
            buf.len(),
            &mut result,
        );
        if rc != 0 || result.is_null() || pwd.pw_name.is_null() {
            return None;
        }
        let name = std::ffi::CStr::from_ptr(pwd.pw_name).to_string_lossy();
        Some(name.into_owned()).filter(|n| !n.is_empty())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_current_user_has_a_name() {
        // SAFETY: as in os_user.
        let uid = unsafe { libc::getuid() };
        let name = user_name(uid).expect("the test's user is in passwd");
        let id = std::process::Command::new("id")
            .arg("-un")
            .output()
            .unwrap();
        assert_eq!(name, String::from_utf8_lossy(&id.stdout).trim());
        assert!(os_user().starts_with(&name), "{}", os_user());
    }
}
