//! The egress ledger handed to a verify attempt (issue 50): what the
//! task's proxies were asked for, as JSON at `/logs/verifier/egress.json`
//! in the verify container, so a grader can check what the agent reached.

use bollard::Docker;

use super::ctx::Ctx;
use super::verify_link::VerifyLink;
use crate::backend::docker;

/// The most of the egress ledger a verify container is given (the
/// newest entries kept): it travels as one exec argument.
const MAX_LEDGER: usize = 64 * 1024;

/// The task's egress ledger as JSON for its verify container (issue 50),
/// when it has a proxy.
pub(crate) async fn ledger(gw: &Ctx, link: &VerifyLink) -> Option<Vec<u8>> {
    if !link.egress {
        return None;
    }
    let id = gw.task_id;
    let mut entries = gw.db(move |s, _| s.egress_of(id)).await.ok()?;
    loop {
        let json = serde_json::to_vec(&entries).ok()?;
        if json.len() <= MAX_LEDGER || entries.is_empty() {
            return Some(json);
        }
        let drop = (entries.len() / 4).max(1);
        entries.drain(..drop);
    }
}

/// Writes the egress ledger to `/logs/verifier/egress.json` in the
/// verify container (its tmpfs), so a grader sees what the task reached.
pub(crate) async fn give(d: &Docker, container: &str, json: &[u8]) -> anyhow::Result<()> {
    use base64::Engine;
    let b64 = base64::engine::general_purpose::STANDARD.encode(json);
    let argv = vec![
        "sh".to_string(),
        "-c".to_string(),
        "printf %s \"$1\" | base64 -d > /logs/verifier/egress.json".to_string(),
        "sh".to_string(),
        b64,
    ];
    let r = docker::exec_quiet(d, container, argv).await?;
    anyhow::ensure!(
        r.exit_code == Some(0),
        "writing it exited {:?}: {}",
        r.exit_code,
        r.output.trim()
    );
    Ok(())
}
