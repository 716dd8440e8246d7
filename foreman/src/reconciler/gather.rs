//! Bringing a finished workspace home: straight from the volume's host
//! directory when possible, else through the Docker archive API.

use std::path::PathBuf;

use anyhow::Context;
use bollard::Docker;
use saheeli_protocol::TaskId;
use tracing::warn;

use crate::collect;
use crate::docker;

/// Copies the task's volume from its directory on this host, when there is
/// one we can read; None means "use the archive API" (also after an error,
/// which is logged).
pub(super) async fn copy_local(
    d: &Docker,
    id: TaskId,
    dest: PathBuf,
    secrets: Vec<(String, String)>,
    max_bytes: u64,
) -> Option<anyhow::Result<collect::Collected>> {
    let src = docker::local_volume_dir(d, id).await?;
    let copied =
        tokio::task::spawn_blocking(move || collect::copy_volume(&src, &dest, &secrets, max_bytes))
            .await
            .ok()?;
    match copied {
        Ok(c) => Some(Ok(c)),
        Err(e) => {
            warn!(task_id = %id, error = %format!("{e:#}"), "local copy failed; using the archive API");
            None
        }
    }
}

/// Streams the container's /workspace into `dest` without holding it in
/// memory: an async pump gathers the HTTP chunks into 256 KiB pieces (so the
/// extracting thread is woken per piece, not per 8 KiB frame) and a blocking
/// thread unpacks them as they come.
pub(super) async fn collect_workspace(
    d: &Docker,
    container: &str,
    dest: PathBuf,
    secrets: Vec<(String, String)>,
    max_bytes: u64,
) -> anyhow::Result<collect::Collected> {
    use futures_util::StreamExt;
    const PIECE: usize = 256 * 1024;
    let (tx, rx) = tokio::sync::mpsc::channel::<std::io::Result<bytes::Bytes>>(8);
    let mut stream = Box::pin(docker::download_workspace(d, container));
    let pump = async move {
        let mut piece = bytes::BytesMut::with_capacity(PIECE * 2);
        while let Some(item) = stream.next().await {
            match item {
                Ok(chunk) => {
                    piece.extend_from_slice(&chunk);
                    if piece.len() >= PIECE && tx.send(Ok(piece.split().freeze())).await.is_err() {
                        return; // the extractor stopped (size cap or error)
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
    let extract = tokio::task::spawn_blocking(move || {
        collect::extract(collect::ChannelReader::new(rx), &dest, &secrets, max_bytes)
    });
    let ((), extracted) = tokio::join!(pump, extract);
    extracted.context("collector thread panicked")?
}
