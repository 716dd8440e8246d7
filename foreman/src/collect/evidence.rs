//! The servo's own evidence in a workspace (hostile case N31): its audit
//! log, its session and `complete.json`, at the workspace's root. They are
//! collected before anything of the agent's and never count against
//! `max_results_size`, so no file the agent leaves (a 70 MB `big.bin` that
//! sorts first) can push them out; each is bounded by its own cap instead.
//! What the cap cut is named in `RESULTS_TRUNCATED.txt`.

use std::ffi::OsStr;
use std::path::Path;

use saheeli_protocol::{TaskId, paths};

/// Most bytes of one evidence file collected (what the audit log and the
/// session are read up to).
pub(super) const EVIDENCE_MAX: u64 = super::MAX_AUDIT_LOG;

/// How many cut paths the marker names; the rest are counted.
const MAX_NAMED: usize = 100;

/// The evidence files' names at the workspace's root, for the task whose
/// results directory is `dest` (named by its id); none when it is not.
pub(super) fn names(dest: &Path) -> Vec<String> {
    let id = dest
        .file_name()
        .and_then(OsStr::to_str)
        .and_then(|n| n.parse::<TaskId>().ok());
    match id {
        Some(id) => vec![
            "complete.json".into(),
            paths::audit_log(&id),
            paths::session(&id),
            paths::session_journal(&id),
        ],
        None => Vec::new(),
    }
}

/// Whether `name` (at the root) is one of `evidence`.
pub(super) fn is_evidence(evidence: &[String], name: &OsStr) -> bool {
    evidence.iter().any(|e| OsStr::new(e) == name)
}

/// `names` with the evidence first, the rest in their order.
pub(super) fn evidence_first<T>(evidence: &[String], names: &mut [(Vec<u8>, T)]) {
    names.sort_by_key(|(n, _)| {
        !is_evidence(
            evidence,
            std::os::unix::ffi::OsStrExt::from_bytes(n.as_slice()),
        )
    });
}

/// What the size cap cut: the first [`MAX_NAMED`] paths, and how many in all.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Cut {
    pub named: Vec<String>,
    pub total: u64,
}

impl Cut {
    pub fn add(&mut self, path: String) {
        self.total += 1;
        if self.named.len() < MAX_NAMED {
            self.named.push(path);
        }
    }

    /// The marker's lines naming what was cut.
    pub fn lines(&self) -> String {
        let mut s = String::new();
        if self.total == 0 {
            return s;
        }
        s.push_str("Not collected:\n");
        for n in &self.named {
            s.push_str(&format!("- {}\n", crate::output::printable(n)));
        }
        let more = self.total - self.named.len() as u64;
        if more > 0 {
            s.push_str(&format!("- and {more} more\n"));
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_evidence_sorts_first_and_the_cut_is_named() {
        let id = TaskId::new();
        let ev = names(&Path::new("/r").join(id.to_string()));
        assert_eq!(ev.len(), 4);
        assert!(names(Path::new("/r/not-an-id")).is_empty());
        let mut entries: Vec<(Vec<u8>, ())> = ["a", "big.bin", &ev[1], "complete.json", "z"]
            .iter()
            .map(|n| (n.as_bytes().to_vec(), ()))
            .collect();
        evidence_first(&ev, &mut entries);
        let order: Vec<String> = entries
            .iter()
            .map(|(n, _)| String::from_utf8(n.clone()).unwrap())
            .collect();
        assert_eq!(order, [&ev[1], "complete.json", "a", "big.bin", "z"]);
        let mut cut = Cut::default();
        for i in 0..(MAX_NAMED + 2) {
            cut.add(format!("f{i}"));
        }
        let lines = cut.lines();
        assert!(lines.starts_with("Not collected:\n- f0\n"), "{lines}");
        assert!(lines.ends_with("- and 2 more\n"), "{lines}");
    }

    /// Hostile case N31 on both paths (the swarm's and the archive API's
    /// tar stream, and the local volume): a file over the cap that sorts
    /// first cuts itself, never the servo's files, wherever they come.
    #[test]
    fn the_servo_files_are_collected_past_a_big_file_that_sorts_first() {
        use std::fs;
        use tar::EntryType::Regular;
        let id = TaskId::new();
        let (audit, session) = (paths::audit_log(&id), paths::session(&id));
        let big = vec![b'x'; 7000];
        for archive_path in [true, false] {
            let d = tempfile::tempdir().unwrap();
            let dest = d.path().join("results").join(id.to_string());
            let c = if archive_path {
                // In a stream the evidence may come anywhere: last here.
                let (a, s) = (format!("workspace/{audit}"), format!("workspace/{session}"));
                let tar = super::super::tests::archive(&[
                    ("workspace/big.bin", Regular, &big, None),
                    ("workspace/small.txt", Regular, b"small", None),
                    (
                        "workspace/complete.json",
                        Regular,
                        b"{\"message\":\"ok\"}",
                        None,
                    ),
                    ("workspace/sub/late.txt", Regular, b"late", None),
                    (&a, Regular, b"{\"audit\":1}\n", None),
                    (&s, Regular, b"{\"session\":1}", None),
                ]);
                super::super::extract(&tar[..], &dest, &[], 5000).unwrap()
            } else {
                let vol = d.path().join("vol");
                fs::create_dir_all(vol.join("sub")).unwrap();
                fs::write(vol.join("big.bin"), &big).unwrap();
                fs::write(vol.join("small.txt"), "small").unwrap();
                fs::write(vol.join("complete.json"), "{\"message\":\"ok\"}").unwrap();
                fs::write(vol.join("sub/late.txt"), "late").unwrap();
                fs::write(vol.join(&audit), "{\"audit\":1}\n").unwrap();
                fs::write(vol.join(&session), "{\"session\":1}").unwrap();
                super::super::copy_volume(&vol, &dest, &[], 5000).unwrap()
            };
            assert!(c.truncated, "{archive_path}: {c:?}");
            for (name, text) in [
                ("complete.json", "{\"message\":\"ok\"}"),
                (audit.as_str(), "{\"audit\":1}\n"),
                (session.as_str(), "{\"session\":1}"),
            ] {
                assert_eq!(
                    fs::read_to_string(dest.join(name)).ok().as_deref(),
                    Some(text),
                    "{archive_path}: {name}"
                );
            }
            assert!(!dest.join("big.bin").exists(), "{archive_path}");
            let marker = fs::read_to_string(dest.join(super::super::TRUNCATED_MARKER)).unwrap();
            assert!(marker.contains("- big.bin\n"), "{archive_path}: {marker}");
            // What came after the cut is named too.
            let after = if archive_path {
                "- sub/late.txt\n"
            } else {
                "- sub/\n"
            };
            assert!(marker.contains(after), "{archive_path}: {marker}");
        }
    }
}
