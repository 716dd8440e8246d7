//! The set-up cache's streams (issue 50): a container's archive fed to a
//! blocking reader, the one file of a cache image's archive handed on to
//! an upload, and the delta tar wrapped as that one file, all without a
//! copy on disk beyond the delta itself.

use std::path::Path;

use anyhow::Context;
use bollard::Docker;
use bollard::query_parameters::DownloadFromContainerOptionsBuilder;
use bytes::Bytes;
use futures_util::StreamExt;

/// Where the tar sits in a cache image.
pub(super) const TAR_PATH: &str = "/.saheeli/setup/workspace.tar";

pub(super) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// The archive of `path` in `container`, in 256 KiB pieces for a
/// blocking reader, and the future that feeds them (run it beside the
/// reader; it ends when the reader drops its end).
pub(super) fn pump(
    d: &Docker,
    container: &str,
    path: &str,
) -> (
    tokio::sync::mpsc::Receiver<std::io::Result<Bytes>>,
    impl std::future::Future<Output = ()> + use<>,
) {
    const PIECE: usize = 256 * 1024;
    let (tx, rx) = tokio::sync::mpsc::channel::<std::io::Result<Bytes>>(8);
    let opts = DownloadFromContainerOptionsBuilder::default()
        .path(path)
        .build();
    let mut stream = Box::pin(
        d.download_from_container(container, Some(opts))
            .map(|r| r.map_err(std::io::Error::other)),
    );
    let feed = async move {
        let mut piece = bytes::BytesMut::with_capacity(PIECE * 2);
        while let Some(item) = stream.next().await {
            match item {
                Ok(chunk) => {
                    piece.extend_from_slice(&chunk);
                    if piece.len() >= PIECE && tx.send(Ok(piece.split().freeze())).await.is_err() {
                        return;
                    }
                }
                Err(e) => {
                    let _ = tx.send(Err(e)).await;
                    return;
                }
            }
        }
        if !piece.is_empty() {
            let _ = tx.send(Ok(piece.freeze())).await;
        }
    };
    (rx, feed)
}

/// Sends the content of the first file in the archive `rx` to `tx`.
pub(super) fn inner_tar(
    rx: tokio::sync::mpsc::Receiver<std::io::Result<Bytes>>,
    tx: tokio::sync::mpsc::Sender<std::io::Result<Bytes>>,
) -> anyhow::Result<()> {
    use std::io::Read;
    let mut archive = tar::Archive::new(crate::collect::ChannelReader::new(rx));
    for entry in archive.entries().context("reading the cached set-up")? {
        let mut entry = entry.context("reading the cached set-up")?;
        if entry.header().entry_type() != tar::EntryType::Regular {
            continue;
        }
        let mut buf = vec![0; 256 * 1024];
        loop {
            let n = entry.read(&mut buf).context("reading the cached set-up")?;
            if n == 0 {
                return Ok(());
            }
            if tx
                .blocking_send(Ok(Bytes::copy_from_slice(&buf[..n])))
                .is_err()
            {
                anyhow::bail!("the upload of the cached set-up stopped");
            }
        }
    }
    anyhow::bail!("the cached set-up's image holds no `{TAR_PATH}`")
}

/// A tar holding the file `part` (`size` bytes) at `TAR_PATH`, streamed.
pub(super) async fn wrapped(
    part: &Path,
    size: u64,
) -> anyhow::Result<impl futures_util::Stream<Item = std::io::Result<Bytes>> + use<>> {
    let mut head = Vec::new();
    for dir in [".saheeli/", ".saheeli/setup/"] {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Directory);
        h.set_path(dir)?;
        h.set_mode(0o755);
        h.set_size(0);
        h.set_cksum();
        head.extend_from_slice(h.as_bytes());
    }
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(tar::EntryType::Regular);
    h.set_path(TAR_PATH.trim_start_matches('/'))?;
    h.set_mode(0o644);
    h.set_size(size);
    h.set_cksum();
    head.extend_from_slice(h.as_bytes());
    let pad = (512 - (size % 512) as usize) % 512;
    let tail = vec![0u8; pad + 1024];
    let file = tokio::fs::File::open(part)
        .await
        .with_context(|| format!("opening `{}`", part.display()))?;
    let body = tokio_util::io::ReaderStream::with_capacity(file, 256 * 1024);
    Ok(futures_util::stream::iter([Ok(Bytes::from(head))])
        .chain(body)
        .chain(futures_util::stream::iter([Ok(Bytes::from(tail))])))
}

/// The host's copy of a cached set-up's tar, streamed; None when there is
/// none (an entry kept before copies were, or by a foreman of another
/// host) or it is not a plain file (a link is never followed).
pub(super) fn host_copy(
    path: &Path,
) -> Option<impl futures_util::Stream<Item = std::io::Result<Bytes>> + use<>> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .ok()?;
    if !file.metadata().ok()?.is_file() {
        return None;
    }
    let file = tokio::fs::File::from_std(file);
    Some(tokio_util::io::ReaderStream::with_capacity(
        file,
        256 * 1024,
    ))
}
