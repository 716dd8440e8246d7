//! Whose the agent's files are when they are uploaded into a task's
//! /workspace (issue 49). The archives say the agent's user (1000); for a
//! task with `agent_user: root` they are rewritten on their way in to say
//! root (0:0): root without a capability may change only what it owns.
//! (Docker's own `copyUIDGID` looks the container's user up by name in the
//! host's passwd database, which fails for `0:0`.)
//!
//! The rewrite reads each entry (long names and PAX records as the `tar`
//! crate resolves them) and writes it again with a GNU header of its type,
//! mode, time and size, owned by root; extended attributes are dropped.

use std::io::{self, Read, Write};
use std::path::Path;

use bytes::Bytes;

use crate::task::TaskSpec;

/// Whose the agent's files uploaded into /workspace are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Owner {
    /// As the archive says (the agent's user, 1000).
    Archive,
    /// Root (`agent_user: root`).
    Root,
}

impl Owner {
    pub(crate) fn of(spec: &TaskSpec) -> Owner {
        if spec.root_agent() {
            Owner::Root
        } else {
            Owner::Archive
        }
    }

    /// An archive in memory, owned as this says.
    pub(crate) async fn bytes(self, tar: Bytes) -> anyhow::Result<Bytes> {
        if self == Owner::Archive {
            return Ok(tar);
        }
        let out = tokio::task::spawn_blocking(move || {
            let mut out = Vec::with_capacity(tar.len());
            to_root(&tar[..], &mut out).map(|()| out)
        })
        .await??;
        Ok(out.into())
    }
}

/// An archive file, read as a stream of its entries owned by root: written
/// into a pipe by a blocking thread, whose result `done` gives once the
/// stream was read.
pub(crate) fn root_stream(
    tar: &Path,
) -> io::Result<(tokio::fs::File, tokio::task::JoinHandle<io::Result<()>>)> {
    let src = std::fs::File::open(tar)?;
    let (reader, writer) = io::pipe()?;
    let done = tokio::task::spawn_blocking(move || to_root(io::BufReader::new(src), writer));
    let reader = std::fs::File::from(std::os::fd::OwnedFd::from(reader));
    Ok((tokio::fs::File::from_std(reader), done))
}

/// Copies the archive `src` to `dst`, every entry owned by root (0:0).
pub(crate) fn to_root(src: impl Read, dst: impl Write) -> io::Result<()> {
    let mut archive = tar::Archive::new(src);
    let mut b = tar::Builder::new(dst);
    for entry in archive.entries()? {
        let mut entry = entry?;
        let from = entry.header();
        let kind = from.entry_type();
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(kind);
        h.set_mode(from.mode()?);
        h.set_mtime(from.mtime().unwrap_or(0));
        h.set_uid(0);
        h.set_gid(0);
        h.set_username("root")?;
        h.set_groupname("root")?;
        let path = entry.path()?.into_owned();
        match entry.link_name()? {
            Some(link) if kind.is_symlink() || kind.is_hard_link() => {
                let link = link.into_owned();
                h.set_size(0);
                b.append_link(&mut h, &path, link)?;
            }
            _ => {
                h.set_size(entry.size());
                b.append_data(&mut h, &path, &mut entry)?;
            }
        }
    }
    b.into_inner()?.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn archive() -> Vec<u8> {
        let mut b = tar::Builder::new(Vec::new());
        let mut dir = tar::Header::new_gnu();
        dir.set_entry_type(tar::EntryType::Directory);
        dir.set_mode(0o755);
        dir.set_uid(1000);
        dir.set_gid(1000);
        dir.set_size(0);
        b.append_data(&mut dir, "src", io::empty()).unwrap();
        let long = format!("src/{}.py", "n".repeat(150));
        let mut f = tar::Header::new_gnu();
        f.set_mode(0o644);
        f.set_uid(1000);
        f.set_gid(1000);
        f.set_size(5);
        b.append_data(&mut f, &long, &b"hello"[..]).unwrap();
        let mut l = tar::Header::new_gnu();
        l.set_entry_type(tar::EntryType::Symlink);
        l.set_mode(0o777);
        l.set_uid(1000);
        l.set_size(0);
        b.append_link(&mut l, "link", "src").unwrap();
        b.into_inner().unwrap()
    }

    #[test]
    fn every_entry_becomes_roots_and_keeps_its_name_mode_data_and_link() {
        let mut out = Vec::new();
        to_root(&archive()[..], &mut out).unwrap();
        let mut a = tar::Archive::new(&out[..]);
        let mut seen = Vec::new();
        for e in a.entries().unwrap() {
            let mut e = e.unwrap();
            let h = e.header();
            assert_eq!((h.uid().unwrap(), h.gid().unwrap()), (0, 0));
            assert_eq!(h.username().unwrap(), Some("root"));
            let mode = h.mode().unwrap();
            let path = e.path().unwrap().display().to_string();
            let link = e.link_name().unwrap().map(|l| l.display().to_string());
            let mut data = String::new();
            e.read_to_string(&mut data).unwrap();
            seen.push((path, mode, data, link));
        }
        let long = format!("src/{}.py", "n".repeat(150));
        assert_eq!(
            seen,
            [
                ("src".to_string(), 0o755, String::new(), None),
                (long, 0o644, "hello".into(), None),
                ("link".into(), 0o777, String::new(), Some("src".into())),
            ]
        );
    }

    #[tokio::test]
    async fn a_file_streams_through_the_pipe() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("w.tar");
        std::fs::write(&p, archive()).unwrap();
        let (mut r, done) = root_stream(&p).unwrap();
        let mut out = Vec::new();
        tokio::io::AsyncReadExt::read_to_end(&mut r, &mut out)
            .await
            .unwrap();
        done.await.unwrap().unwrap();
        let mut a = tar::Archive::new(&out[..]);
        assert_eq!(a.entries().unwrap().count(), 3);
        let kept = Owner::Archive.bytes(archive().into()).await.unwrap();
        assert_eq!(&kept[..], &archive()[..]);
    }
}
