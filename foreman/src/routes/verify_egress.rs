//! The egress ledger handed to a verify attempt (issue 50): what the
//! task's proxies were asked for, as JSON at `/logs/verifier/egress.json`
//! in the verify container, so a grader can check what the agent reached;
//! and to the assessor, as a section of its prompt.

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

/// The most connections the assessor's prompt lists (the newest).
const MAX_ASSESSED: usize = 50;

/// The assessor's section on the network: every connection asked for
/// (the newest [`MAX_ASSESSED`]), allowed or refused. Hosts are names or
/// addresses the proxy parsed: nothing else of the container's is quoted.
pub(crate) fn section(entries: &[crate::store::EgressEntry]) -> String {
    let mut s = String::from("\n# The network the task reached (egress)\n\n");
    if entries.is_empty() {
        s.push_str("No connection was asked for.\n");
        return s;
    }
    let skip = entries.len().saturating_sub(MAX_ASSESSED);
    if skip > 0 {
        s.push_str(&format!(
            "{} connections; the newest {MAX_ASSESSED}:\n",
            entries.len()
        ));
    }
    for e in &entries[skip..] {
        s.push_str(&format!(
            "- {} phase, {}:{}: {} ({} bytes sent, {} received)\n",
            e.phase.as_str(),
            e.host,
            e.port,
            e.verdict.as_str(),
            e.bytes_up,
            e.bytes_down
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use saheeli_protocol::egress::Phase;

    use super::*;
    use crate::store::{EgressEntry, EgressVerdict};

    #[test]
    fn the_assessor_reads_each_connection_newest_last() {
        let e = |host: &str, verdict| EgressEntry {
            phase: Phase::Agent,
            host: host.into(),
            port: 443,
            verdict,
            reason: Some("never quoted".into()),
            address: None,
            bytes_up: 10,
            bytes_down: 20,
            started_at: 0,
            ms: 1,
        };
        let s = section(&[
            e("pypi.org", EgressVerdict::Allowed),
            e("example.com", EgressVerdict::Refused),
        ]);
        assert!(
            s.contains("- agent phase, pypi.org:443: allowed (10 bytes sent, 20 received)"),
            "{s}"
        );
        assert!(s.contains("example.com:443: refused"), "{s}");
        assert!(!s.contains("never quoted"));
        let many: Vec<_> = (0..60)
            .map(|i| e(&format!("h{i}.example"), EgressVerdict::Allowed))
            .collect();
        let s = section(&many);
        assert!(
            s.contains("60 connections; the newest 50")
                && s.contains("h59.example")
                && !s.contains("h9.example:"),
            "{s}"
        );
        assert!(section(&[]).contains("No connection was asked for."));
    }
}
