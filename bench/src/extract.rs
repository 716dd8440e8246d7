//! A reference collector in the bench: the container's /workspace
//! downloaded through the API and extracted with the tar crate, with the
//! same checks the foreman makes (paths confined, only regular files,
//! directories and symlinks, into a `.partial` directory renamed into
//! place), but none of its plumbing (no channel between an async pump and
//! an extracting thread, no per-file bookkeeping). When this is as fast as
//! `docker cp` and the foreman is not, the difference is the foreman's.

use std::io::{self, Read};
use std::path::{Component, Path, PathBuf};

use anyhow::Context;
use bollard::query_parameters::DownloadFromContainerOptionsBuilder;
use futures_util::StreamExt;

/// Downloads `container`'s /workspace into `dest`; returns bytes written.
pub async fn collect(
    docker: &bollard::Docker,
    container: &str,
    dest: &Path,
) -> anyhow::Result<u64> {
    let (tx, rx) = std::sync::mpsc::sync_channel::<bytes::Bytes>(16);
    let opts = DownloadFromContainerOptionsBuilder::default()
        .path("/workspace")
        .build();
    let mut stream = docker.download_from_container(container, Some(opts));
    let dest = dest.to_path_buf();
    let extract = tokio::task::spawn_blocking(move || {
        unpack(
            Pieces {
                rx,
                cur: bytes::Bytes::new(),
            },
            &dest,
        )
    });
    while let Some(chunk) = stream.next().await {
        if tx.send(chunk.context("downloading /workspace")?).is_err() {
            break;
        }
    }
    drop(tx);
    extract.await.context("extracting thread panicked")?
}

struct Pieces {
    rx: std::sync::mpsc::Receiver<bytes::Bytes>,
    cur: bytes::Bytes,
}

impl Read for Pieces {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while self.cur.is_empty() {
            match self.rx.recv() {
                Ok(b) => self.cur = b,
                Err(_) => return Ok(0),
            }
        }
        let n = buf.len().min(self.cur.len());
        buf[..n].copy_from_slice(&self.cur[..n]);
        bytes::Buf::advance(&mut self.cur, n);
        Ok(n)
    }
}

fn confined(p: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for (i, c) in p.components().enumerate() {
        match c {
            Component::Normal(n) if i > 0 => out.push(n),
            Component::Normal(_) | Component::CurDir => {}
            _ => return None,
        }
    }
    Some(out)
}

fn unpack(reader: impl Read, dest: &Path) -> anyhow::Result<u64> {
    let partial = dest.with_extension("partial");
    std::fs::create_dir_all(&partial)?;
    let mut archive = tar::Archive::new(io::BufReader::with_capacity(1 << 20, reader));
    let mut bytes = 0;
    for entry in archive.entries()? {
        let mut entry = entry?;
        let Some(rel) = confined(&entry.path()?) else {
            continue;
        };
        if rel.as_os_str().is_empty() {
            continue;
        }
        let target = partial.join(rel);
        match entry.header().entry_type() {
            tar::EntryType::Directory => std::fs::create_dir_all(&target)?,
            tar::EntryType::Regular => {
                let mut f = std::fs::File::create(&target)?;
                bytes += io::copy(&mut entry, &mut f)?;
            }
            _ => {}
        }
    }
    std::fs::rename(&partial, dest)?;
    Ok(bytes)
}
