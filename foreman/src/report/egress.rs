//! The egress section of `report.md` and `egress.json` beside it (issue
//! 50): every connection the task's proxies were asked for — phase, host,
//! port, verdict, bytes each way, time — so a reader (or a grader) sees
//! what the task reached and what it was refused.

use std::fmt::Write as _;
use std::io::{Read, Write};
use std::path::Path;

use crate::output::printable;
use crate::store::EgressEntry;

use super::REPORT;
use super::write::replace_file;

/// The ledger file in a task's results.
pub(crate) const EGRESS_JSON: &str = "egress.json";

/// Rows the report's table shows (all are in `egress.json`).
const MAX_ROWS: usize = 200;

/// Adds the section to the `report.md` just written in `results`, and
/// writes `egress.json`. Nothing when the task had no proxy.
pub(crate) fn append_egress(
    results: &Path,
    entries: &[EgressEntry],
    had_proxy: bool,
) -> anyhow::Result<()> {
    if !had_proxy && entries.is_empty() {
        return Ok(());
    }
    replace_file(results, EGRESS_JSON, |w| {
        serde_json::to_writer_pretty(&mut *w, entries)?;
        w.write_all(b"\n")
    })?;
    let mut text = String::new();
    if let Some(f) = crate::collect::open_regular(&results.join(REPORT))? {
        f.take(4 << 20).read_to_string(&mut text)?;
    }
    let section = section(entries);
    replace_file(results, REPORT, |w| {
        w.write_all(text.trim_end().as_bytes())?;
        w.write_all(section.as_bytes())
    })
}

pub(crate) fn section(entries: &[EgressEntry]) -> String {
    let mut s = String::from("\n\n## Egress\n\n");
    if entries.is_empty() {
        s.push_str("No connection was asked for.\n");
        return s;
    }
    let refused = entries
        .iter()
        .filter(|e| e.verdict == crate::store::EgressVerdict::Refused)
        .count();
    let (up, down) = entries
        .iter()
        .fold((0u64, 0u64), |(u, d), e| (u + e.bytes_up, d + e.bytes_down));
    let _ = writeln!(
        s,
        "{} connections asked for, {refused} refused; {} sent, {} received \
         (every one in `{EGRESS_JSON}`).\n",
        entries.len(),
        crate::text::bytes(up),
        crate::text::bytes(down)
    );
    s.push_str("| phase | host | port | verdict | sent | received | ms | why |\n");
    s.push_str("|---|---|---|---|---|---|---|---|\n");
    for e in entries.iter().take(MAX_ROWS) {
        let why = e
            .reason
            .as_deref()
            .map(|r| printable(r).replace('|', "\\|"))
            .unwrap_or_default();
        let _ = writeln!(
            s,
            "| {} | `{}` | {} | {} | {} | {} | {} | {why} |",
            e.phase.as_str(),
            printable(&e.host).replace(['|', '`'], "?"),
            e.port,
            e.verdict.as_str(),
            crate::text::bytes(e.bytes_up),
            crate::text::bytes(e.bytes_down),
            e.ms
        );
    }
    if entries.len() > MAX_ROWS {
        let _ = writeln!(s, "\n… and {} more.", entries.len() - MAX_ROWS);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::EgressVerdict;
    use saheeli_protocol::egress::Phase;

    #[test]
    fn the_table_escapes_what_the_container_sent() {
        let e = EgressEntry {
            phase: Phase::Agent,
            host: "evil|`host".into(),
            port: 443,
            verdict: EgressVerdict::Refused,
            reason: Some("not | listed".into()),
            address: None,
            bytes_up: 2048,
            bytes_down: 3 << 20,
            started_at: 0,
            ms: 5,
        };
        let s = section(&[e]);
        assert!(
            s.contains(
                "| agent | `evil??host` | 443 | refused | 2.0 KiB | 3.0 MiB | 5 | not \\| listed |"
            ),
            "{s}"
        );
        assert!(s.contains("1 connections asked for, 1 refused"), "{s}");
        assert!(section(&[]).contains("No connection was asked for."));
    }
}
