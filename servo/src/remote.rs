//! A servo on another host (the Swarm backend): its gateway is
//! `http://host:port`, every request carries the task's token (read from
//! the file `SAHEELI_GATEWAY_TOKEN_FILE` names, a Swarm secret), the launch
//! and the submitted workspace are fetched at start, and the whole
//! workspace goes back as one tar when the servo ends, streamed both ways
//! (`pipe`), and tried again for a while when no foreman takes it.
//!
//! The token is never logged, and is marked sensitive in the header map.

use std::path::Path;
use std::time::Duration;

use reqwest::header::{HeaderMap, HeaderValue};
use saheeli_protocol::remote::{self, routes};

use crate::pipe;

/// The `Authorization` header for every gateway request, when this servo
/// is remote (`SAHEELI_GATEWAY_TOKEN_FILE` set).
pub(crate) fn auth_headers() -> Result<HeaderMap, String> {
    let mut headers = HeaderMap::new();
    let Ok(file) = std::env::var(remote::TOKEN_FILE_ENV) else {
        return Ok(headers);
    };
    let token = std::fs::read_to_string(&file)
        .map_err(|e| format!("reading the gateway token file `{file}`: {e}"))?;
    let token = token.trim();
    if token.is_empty() || token.len() > remote::MAX_TOKEN_BYTES {
        return Err(format!(
            "the gateway token file `{file}` is empty or too long"
        ));
    }
    let mut value = HeaderValue::from_str(&format!("Bearer {token}"))
        .map_err(|_| format!("the gateway token in `{file}` is not a valid header value"))?;
    value.set_sensitive(true);
    headers.insert(reqwest::header::AUTHORIZATION, value);
    let id = std::env::var(remote::TASK_ID_ENV)
        .map_err(|_| format!("{} is not set", remote::TASK_ID_ENV))?;
    let id = HeaderValue::from_str(&id)
        .map_err(|_| format!("{} is not a valid header value", remote::TASK_ID_ENV))?;
    headers.insert(remote::TASK_HEADER, id);
    Ok(headers)
}

/// The remote gateway of this servo, or None for a local (socket) one.
pub(crate) struct Remote {
    http: reqwest::Client,
    base: String,
}

impl Remote {
    pub fn from_env(gateway: &str) -> Result<Option<Remote>, String> {
        if std::env::var_os(remote::TOKEN_FILE_ENV).is_none() {
            return Ok(None);
        }
        if !gateway.starts_with("http://") {
            return Err(format!(
                "{} is set but SAHEELI_GATEWAY `{gateway}` is not `http://host:port`",
                remote::TOKEN_FILE_ENV
            ));
        }
        let http = reqwest::Client::builder()
            .default_headers(auth_headers()?)
            .connect_timeout(Duration::from_secs(10))
            .timeout(Duration::from_secs(600))
            .build()
            .map_err(|e| format!("building the HTTP client: {e}"))?;
        Ok(Some(Remote {
            http,
            base: gateway.trim_end_matches('/').to_string(),
        }))
    }

    /// The launch (as `SAHEELI_LAUNCH` would carry it) and the task's
    /// workspace (the submitted one, or the one it parked with), unpacked
    /// into `root` as it streams in. Retried a few times: the gateway may be
    /// a moment behind the service's start.
    pub async fn fetch(&self, root: &Path) -> Result<String, String> {
        let launch = self.get_retrying(routes::LAUNCH).await?;
        let launch = launch
            .text()
            .await
            .map_err(|e| format!("reading the launch: {e}"))?;
        let ws = self.get_retrying(routes::WORKSPACE).await?;
        if ws.status() == reqwest::StatusCode::OK {
            unpack_streaming(ws, root).await?;
        }
        Ok(launch)
    }

    async fn get_retrying(&self, route: &str) -> Result<reqwest::Response, String> {
        let url = format!("{}{route}", self.base);
        let mut last = String::new();
        for attempt in 0..8u32 {
            if attempt > 0 {
                tokio::time::sleep(Duration::from_millis(250 << attempt.min(4))).await;
            }
            match self.http.get(&url).send().await {
                Ok(r) if r.status().is_success() => return Ok(r),
                Ok(r) if r.status().is_client_error() => {
                    return Err(format!("the gateway refused GET {route}: {}", r.status()));
                }
                Ok(r) => last = format!("status {}", r.status()),
                Err(e) => last = e.to_string(),
            }
        }
        Err(format!("GET {route} failed: {last}"))
    }

    /// Sends the whole workspace as a tar (entries under `workspace/`,
    /// links stored as links, never followed), streamed as it is packed,
    /// and packed again for each try. `parked`: the servo saved its session
    /// to wait for a human (the foreman keeps this upload for its next
    /// start). Tried again with backoff for [`UPLOAD_PATIENCE_S`] while the
    /// gateway cannot take it (unreachable, 5xx, or a foreman that does not
    /// know this task yet: 403/404), so that a foreman adopting the job
    /// later still gets it; a refusal of the upload itself (400, 409) is
    /// final.
    ///
    /// [`UPLOAD_PATIENCE_S`]: remote::UPLOAD_PATIENCE_S
    pub async fn upload(&self, root: &Path, parked: bool) -> Result<(), String> {
        let patience = Duration::from_secs(remote::UPLOAD_PATIENCE_S);
        let began = tokio::time::Instant::now();
        let mut delay = Duration::from_millis(250);
        loop {
            let last = match self.put_workspace(root, parked).await {
                Ok(()) => return Ok(()),
                Err(Try::Final(e)) => return Err(e),
                Err(Try::Again(e)) => e,
            };
            if began.elapsed() + delay > patience {
                return Err(format!(
                    "uploading the workspace failed for {}s, giving up: {last}",
                    patience.as_secs()
                ));
            }
            eprintln!(
                "servo: uploading the workspace failed ({last}); trying again in {} ms",
                delay.as_millis()
            );
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(MAX_UPLOAD_DELAY);
        }
    }

    /// One try: a packer thread feeding the request body.
    async fn put_workspace(&self, root: &Path, parked: bool) -> Result<(), Try> {
        let url = format!("{}{}", self.base, routes::WORKSPACE);
        let (tx, rx) = pipe::pipe();
        let root = root.to_path_buf();
        let packer = tokio::task::spawn_blocking(move || {
            let failed = tx.clone();
            let packed = pack(&root, pipe::ChannelWriter::new(tx));
            if let Err(e) = &packed {
                // The body ends with the error: the request fails, not a
                // short archive that looks whole.
                let _ = failed.blocking_send(Err(std::io::Error::new(e.kind(), e.to_string())));
            }
            packed
        });
        let mut req = self
            .http
            .put(&url)
            .body(reqwest::Body::wrap_stream(pipe::stream(rx)));
        if parked {
            req = req.header(remote::PARKED_HEADER, "1");
        }
        let sent = req.send().await;
        let packed = packer
            .await
            .map_err(|e| Try::Final(format!("packing the workspace: {e}")))?;
        match sent {
            Ok(r) if r.status().is_success() => Ok(()),
            Ok(r) if worth_again(r.status()) => Err(Try::Again(format!("status {}", r.status()))),
            Ok(r) => Err(Try::Final(format!(
                "the gateway refused the upload: {}",
                r.status()
            ))),
            Err(e) => match packed {
                Err(p) if p.kind() != std::io::ErrorKind::BrokenPipe => {
                    Err(Try::Final(format!("packing the workspace: {p}")))
                }
                _ => Err(Try::Again(error_chain(&e))),
            },
        }
    }
}

/// The longest wait between two upload tries.
const MAX_UPLOAD_DELAY: Duration = Duration::from_secs(5);

/// How one upload try failed.
enum Try {
    /// Worth another try later (the gateway may come back).
    Again(String),
    /// Never worth another (the upload itself was refused).
    Final(String),
}

/// Whether an upload answered `status` may succeed later: a gateway in
/// trouble (5xx, 408, 429), or one that does not know this task yet (a
/// foreman that has not adopted it: 403, 404). 400 (a bad archive) and 409
/// (already uploaded) are final, as is any other refusal.
fn worth_again(status: reqwest::StatusCode) -> bool {
    status.is_server_error() || matches!(status.as_u16(), 403 | 404 | 408 | 429)
}

/// An error with its causes (reqwest's own message is only the first).
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut source = e.source();
    while let Some(c) = source {
        s.push_str(": ");
        s.push_str(&c.to_string());
        source = c.source();
    }
    s
}

/// The workspace as a tar into `w`: entries under `workspace/`, links
/// stored as links.
fn pack(root: &Path, w: pipe::ChannelWriter) -> std::io::Result<()> {
    use std::io::Write;
    let mut b = tar::Builder::new(w);
    b.follow_symlinks(false);
    b.append_dir_all("workspace", root)?;
    b.into_inner()?.flush()
}

/// Unpacks a tar response into `root` as it arrives.
async fn unpack_streaming(response: reqwest::Response, root: &Path) -> Result<(), String> {
    use futures_util::StreamExt;
    let (tx, rx) = pipe::pipe();
    let root = root.to_path_buf();
    let unpacker = tokio::task::spawn_blocking(move || {
        let mut archive = tar::Archive::new(pipe::ChannelReader::new(rx));
        archive.set_preserve_permissions(true);
        archive.unpack(&root)
    });
    let mut body = response.bytes_stream();
    while let Some(piece) = body.next().await {
        let piece = piece.map_err(std::io::Error::other);
        let failed = piece.is_err();
        if tx.send(piece).await.is_err() || failed {
            break;
        }
    }
    drop(tx);
    unpacker
        .await
        .map_err(|e| format!("unpacking the workspace: {e}"))?
        .map_err(|e| format!("unpacking the workspace: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_upload_is_tried_again_only_when_a_gateway_may_take_it_later() {
        use reqwest::StatusCode as S;
        for again in [500, 502, 503, 403, 404, 408, 429] {
            assert!(worth_again(S::from_u16(again).unwrap()), "{again}");
        }
        for last in [400, 401, 409, 413, 422] {
            assert!(!worth_again(S::from_u16(last).unwrap()), "{last}");
        }
    }
}
