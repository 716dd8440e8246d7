//! A servo on another host (the Swarm backend): its gateway is
//! `http://host:port`, every request carries the task's token (read from
//! the file `SAHEELI_GATEWAY_TOKEN_FILE` names, a Swarm secret), the launch
//! and the submitted workspace are fetched at start, and the whole
//! workspace goes back as one tar when the servo ends.
//!
//! The token is never logged, and is marked sensitive in the header map.

use std::path::Path;
use std::time::Duration;

use reqwest::header::{HeaderMap, HeaderValue};
use saheeli_protocol::remote::{self, routes};

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

    /// The launch (as `SAHEELI_LAUNCH` would carry it) and the submitted
    /// workspace, unpacked into `root`. Retried a few times: the gateway
    /// may be a moment behind the service's start.
    pub async fn fetch(&self, root: &Path) -> Result<String, String> {
        let launch = self.get_retrying(routes::LAUNCH).await?;
        let launch = launch
            .text()
            .await
            .map_err(|e| format!("reading the launch: {e}"))?;
        let ws = self.get_retrying(routes::WORKSPACE).await?;
        if ws.status() == reqwest::StatusCode::OK {
            let bytes = ws
                .bytes()
                .await
                .map_err(|e| format!("reading the submitted workspace: {e}"))?;
            let mut archive = tar::Archive::new(&bytes[..]);
            archive.set_preserve_permissions(true);
            archive
                .unpack(root)
                .map_err(|e| format!("unpacking the submitted workspace: {e}"))?;
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
    /// links stored as links, never followed).
    pub async fn upload(&self, root: &Path) -> Result<(), String> {
        let root = root.to_path_buf();
        let tar = tokio::task::spawn_blocking(move || -> std::io::Result<Vec<u8>> {
            let mut b = tar::Builder::new(Vec::new());
            b.follow_symlinks(false);
            b.append_dir_all("workspace", &root)?;
            b.into_inner()
        })
        .await
        .map_err(|e| format!("packing the workspace: {e}"))?
        .map_err(|e| format!("packing the workspace: {e}"))?;
        let url = format!("{}{}", self.base, routes::WORKSPACE);
        let mut last = String::new();
        for attempt in 0..4u32 {
            if attempt > 0 {
                tokio::time::sleep(Duration::from_millis(200 << attempt)).await;
            }
            match self.http.put(&url).body(tar.clone()).send().await {
                Ok(r) if r.status().is_success() => return Ok(()),
                Ok(r) if r.status().is_client_error() => {
                    return Err(format!("the gateway refused the upload: {}", r.status()));
                }
                Ok(r) => last = format!("status {}", r.status()),
                Err(e) => last = e.to_string(),
            }
        }
        Err(format!("uploading the workspace failed: {last}"))
    }
}
