//! The audit log: one [`AuditEvent`] per line in
//! `servo-<task_id>-audit.log`, each also mirrored to stdout so that
//! `saheeli task logs --follow` can show it live from the container log.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

use saheeli_protocol::AuditEvent;

pub(crate) struct Audit {
    file: File,
    echo: bool,
    /// Time spent writing lines, for the servo's timings.
    pub spent: Duration,
}

impl Audit {
    pub fn open(path: &Path, echo: bool) -> std::io::Result<Audit> {
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        Ok(Audit {
            file,
            echo,
            spent: Duration::ZERO,
        })
    }

    /// Appends one line with a single write, so lines never interleave.
    pub fn log(&mut self, event: &AuditEvent) {
        let t0 = Instant::now();
        let mut line = serde_json::to_vec(event).expect("audit events serialize");
        line.push(b'\n');
        if let Err(e) = self.file.write_all(&line) {
            tracing::warn!(error = %e, "audit log write failed");
        }
        if self.echo {
            let _ = std::io::stdout().lock().write_all(&line);
        }
        self.spent += t0.elapsed();
    }
}

/// Now, as RFC 3339.
pub(crate) fn now() -> String {
    saheeli_protocol::rfc3339(std::time::SystemTime::now())
}
