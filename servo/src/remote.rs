//! A servo on another host (the Swarm backend): its gateway is
//! `http://host:port`, every request carries the task's token (read from
//! the file `SAHEELI_GATEWAY_TOKEN_FILE` names, a Swarm secret), the launch
//! and the submitted workspace are fetched at start, and the whole
//! workspace goes back as one tar when the servo ends, streamed both ways
//! (`pipe`), and tried again for a while when no foreman takes it.
//!
//! The token is never logged, and is marked sensitive in the header map.
//! The tar itself, packed and unpacked, is `pack`'s.

use std::path::Path;
use std::time::Duration;

use reqwest::header::{HeaderMap, HeaderValue};
use saheeli_protocol::remote::{self, routes};

use std::process::Stdio;

mod pack;

pub(crate) use pack::{
    agent_helper, append_tree, is_root, pack_main, servo_owned, unpack_main, unpack_streaming,
};
use pack::{merge, pack};

use crate::pipe;
use crate::privsep::Mode;

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

/// The first network interface but loopback in `/proc/net/dev`'s text,
/// if there is one.
fn network_interface(proc_net_dev: &str) -> Option<String> {
    proc_net_dev
        .lines()
        .skip(2)
        .filter_map(|l| l.split_once(':').map(|(name, _)| name.trim()))
        .find(|name| !name.is_empty() && *name != "lo")
        .map(str::to_string)
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
        let builder = reqwest::Client::builder()
            .default_headers(auth_headers()?)
            .connect_timeout(Duration::from_secs(10))
            .timeout(Duration::from_secs(600));
        let (builder, base) = if let Some(socket) = gateway.strip_prefix("unix:") {
            // `swarm.network: none`: the node's relay, and no network at all.
            let interfaces = std::fs::read_to_string("/proc/net/dev")
                .map_err(|e| format!("reading /proc/net/dev (the job's network): {e}"))?;
            if let Some(interface) = network_interface(&interfaces) {
                return Err(format!(
                    "this job was promised no network (`swarm.network: none`) but has the \
                     interface `{interface}`: its node's Docker engine gives containers \
                     without a network its default bridge; set `\"bridge\": \"none\"` in that \
                     engine's daemon.json, or use an overlay as `swarm.network`"
                ));
            }
            (
                builder.unix_socket(socket.to_string()),
                "http://gateway".to_string(),
            )
        } else if gateway.starts_with("http://") {
            (builder, gateway.trim_end_matches('/').to_string())
        } else {
            return Err(format!(
                "{} is set but SAHEELI_GATEWAY `{gateway}` is neither `http://host:port` nor `unix:/path`",
                remote::TOKEN_FILE_ENV
            ));
        };
        let http = builder
            .build()
            .map_err(|e| format!("building the HTTP client: {e}"))?;
        Ok(Some(Remote { http, base }))
    }

    /// The launch (as `SAHEELI_LAUNCH` would carry it) and the task's
    /// workspace (the submitted one, or the one it parked with), unpacked
    /// into `root` as it streams in. Retried a few times: the gateway may be
    /// a moment behind the service's start.
    pub async fn fetch(&self, root: &Path, mode: Mode) -> Result<String, String> {
        let launch = self.get_retrying(routes::LAUNCH).await?;
        let launch = launch
            .text()
            .await
            .map_err(|e| format!("reading the launch: {e}"))?;
        let ws = self.get_retrying(routes::WORKSPACE).await?;
        if ws.status() == reqwest::StatusCode::OK {
            unpack_streaming(ws, root, mode, false).await?;
        }
        Ok(launch)
    }

    /// A warm job's task (issue 53), claimed through its hub as a warm
    /// servo's is through its socket (`warm::claimed_at`).
    pub async fn claimed(&self, root: &Path, mode: Mode) -> Result<String, String> {
        let (launch, _) = crate::warm::claimed_at(&self.http, &self.base, root, mode).await?;
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
    pub async fn upload(&self, root: &Path, parked: bool, mode: Mode) -> Result<(), String> {
        let patience = Duration::from_secs(remote::UPLOAD_PATIENCE_S);
        let began = tokio::time::Instant::now();
        let mut delay = Duration::from_millis(250);
        loop {
            let last = match self.put_workspace(root, parked, mode).await {
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
    async fn put_workspace(&self, root: &Path, parked: bool, mode: Mode) -> Result<(), Try> {
        let url = format!("{}{}", self.base, routes::WORKSPACE);
        if mode == Mode::Separated {
            return self.put_packed_by_agent(&url, root, parked).await;
        }
        let (tx, rx) = pipe::pipe();
        let root = root.to_path_buf();
        let packer = tokio::task::spawn_blocking(move || {
            let failed = tx.clone();
            let packed = pack(&root, pipe::ChannelWriter::new(tx));
            if let Err(e) = &packed {
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
        judge(sent, packed)
    }

    /// The upload of a separated servo: the workspace is the agent's (some
    /// of its files may be readable by the agent only), so `servo pack`
    /// reads it as the agent's user, leaving out the servo's own files; the
    /// servo passes the entries it writes on (refusing any that name the
    /// servo's files or lie outside `workspace/`), then adds its own
    /// session, audit log and `.saheeli/`, read as the servo. What the
    /// foreman receives is as untrusted as any upload.
    async fn put_packed_by_agent(&self, url: &str, root: &Path, parked: bool) -> Result<(), Try> {
        let mut cmd = agent_helper("pack", root);
        cmd.stdin(Stdio::null()).stdout(Stdio::piped());
        let mut child = crate::privsep::spawn(Mode::Separated, &mut cmd)
            .map_err(|e| Try::Final(format!("starting the workspace packer: {e}")))?;
        let out = child.stdout.take().expect("piped stdout");
        let out = out
            .into_owned_fd()
            .map_err(|e| Try::Final(format!("the workspace packer's output: {e}")))?;
        let (tx, rx) = pipe::pipe();
        let dir = root.to_path_buf();
        let merger = tokio::task::spawn_blocking(move || {
            let failed = tx.clone();
            let agents = std::io::BufReader::new(std::fs::File::from(out));
            let merged = merge(agents, &dir, pipe::ChannelWriter::new(tx));
            if let Err(e) = &merged {
                let _ = failed.blocking_send(Err(std::io::Error::new(e.kind(), e.to_string())));
            }
            merged
        });
        let body = reqwest::Body::wrap_stream(pipe::stream(rx));
        let mut req = self.http.put(url).body(body);
        if parked {
            req = req.header(remote::PARKED_HEADER, "1");
        }
        let sent = req.send().await;
        let merged = merger
            .await
            .map_err(|e| Try::Final(format!("packing the workspace: {e}")))?;
        let status = child.wait().await;
        let packed = merged.and(match status {
            Ok(s) if s.success() => Ok(()),
            Ok(s) => Err(std::io::Error::other(format!("the packer exited with {s}"))),
            Err(e) => Err(e),
        });
        judge(sent, packed)
    }
}

/// What became of one upload: sent and answered, or worth trying again.
fn judge(
    sent: Result<reqwest::Response, reqwest::Error>,
    packed: std::io::Result<()>,
) -> Result<(), Try> {
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

#[cfg(test)]
mod tests {
    use super::pack::{pack_agents, servo_owned, unpack_filtered};
    use super::*;

    #[test]
    fn only_loopback_is_no_network() {
        let head = "Inter-|   Receive |  Transmit\n face |bytes    packets\n";
        assert_eq!(
            network_interface(&format!("{head}    lo:       0       0    0\n")),
            None
        );
        assert_eq!(
            network_interface(&format!(
                "{head}    lo:       0       0    0\n  eth0:     200       2    0\n"
            )),
            Some("eth0".to_string())
        );
    }

    #[test]
    fn the_servo_owns_its_session_audit_log_and_saheeli_dir_only() {
        for own in [
            "servo-x-session.json",
            "./servo-x-audit.log",
            ".saheeli/task.json",
            ".saheeli",
        ] {
            assert!(servo_owned(Path::new(own)), "{own}");
        }
        for agents in [
            "sub/servo-x-session.json",
            "servo-x-session.json.bak",
            "complete.json",
            "src/main.rs",
            "",
        ] {
            assert!(!servo_owned(Path::new(agents)), "{agents}");
        }
    }

    /// A tar of `entries` (path, content; `None` a directory) as `servo
    /// pack` would write it, with no checks on the paths.
    fn raw_tar(entries: &[(&str, Option<&str>)]) -> Vec<u8> {
        let mut b = tar::Builder::new(Vec::new());
        for (path, content) in entries {
            let mut h = tar::Header::new_gnu();
            let data = content.unwrap_or("").as_bytes();
            h.set_entry_type(if content.is_some() {
                tar::EntryType::Regular
            } else {
                tar::EntryType::Directory
            });
            h.set_size(data.len() as u64);
            h.set_mode(0o644);
            // Raw bytes: `set_path` would refuse `..`.
            let name = &mut h.as_old_mut().name;
            name[..path.len()].copy_from_slice(path.as_bytes());
            h.set_cksum();
            b.append(&h, data).unwrap();
        }
        b.into_inner().unwrap()
    }

    #[test]
    fn the_upload_takes_the_servo_files_from_the_servo_never_from_the_agents_tar() {
        let ws = tempfile::tempdir().unwrap();
        std::fs::write(ws.path().join("servo-t-session.json"), "sealed").unwrap();
        std::fs::create_dir(ws.path().join(".saheeli")).unwrap();
        std::fs::write(ws.path().join(".saheeli/task.json"), "{}").unwrap();
        let agents = raw_tar(&[
            ("workspace/", None),
            ("workspace/hello.txt", Some("hi")),
            ("workspace/servo-t-session.json", Some("forged")),
            ("workspace/.saheeli/task.json", Some("forged")),
            ("elsewhere/x", Some("outside")),
        ]);
        let mut out = Vec::new();
        merge(agents.as_slice(), ws.path(), &mut out).unwrap();
        let mut seen = Vec::new();
        for e in tar::Archive::new(out.as_slice()).entries().unwrap() {
            let mut e = e.unwrap();
            let mut body = String::new();
            std::io::Read::read_to_string(&mut e, &mut body).unwrap();
            seen.push((e.path().unwrap().display().to_string(), body));
        }
        let files: Vec<_> = seen.iter().filter(|(_, b)| !b.is_empty()).collect();
        assert_eq!(
            files,
            [
                &("workspace/hello.txt".to_string(), "hi".to_string()),
                &("workspace/.saheeli/task.json".to_string(), "{}".to_string()),
                &(
                    "workspace/servo-t-session.json".to_string(),
                    "sealed".to_string()
                ),
            ]
        );
    }

    #[test]
    fn the_agents_pack_leaves_the_servo_files_out() {
        let ws = tempfile::tempdir().unwrap();
        std::fs::write(ws.path().join("servo-t-audit.log"), "log").unwrap();
        std::fs::create_dir_all(ws.path().join(".saheeli/x")).unwrap();
        std::fs::create_dir(ws.path().join("src")).unwrap();
        std::fs::write(ws.path().join("src/a.rs"), "fn main() {}").unwrap();
        std::os::unix::fs::symlink("/etc/shadow", ws.path().join("link")).unwrap();
        // Neither opened nor able to fail the archive.
        let fifo =
            std::ffi::CString::new(ws.path().join("src/fifo").as_os_str().as_encoded_bytes())
                .unwrap();
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        let _socket = std::os::unix::net::UnixListener::bind(ws.path().join("sock")).unwrap();
        let mut out = Vec::new();
        pack_agents(ws.path(), &mut out).unwrap();
        let mut paths: Vec<String> = tar::Archive::new(out.as_slice())
            .entries()
            .unwrap()
            .map(|e| e.unwrap().path().unwrap().display().to_string())
            .collect();
        paths.sort();
        assert_eq!(
            paths,
            [
                "workspace",
                "workspace/link",
                "workspace/src",
                "workspace/src/a.rs"
            ]
        );
    }

    /// An unpacker reads its stream to the end, past the archive's end
    /// marker: the servo writing to it never finds it gone (a broken pipe
    /// there failed a task when the last block came late).
    #[test]
    fn an_unpacker_reads_past_the_archives_end() {
        let mut tar = tar::Builder::new(Vec::new());
        let mut header = tar::Header::new_gnu();
        header.set_size(5);
        header.set_mode(0o644);
        tar.append_data(&mut header, "a.txt", &b"hello"[..])
            .unwrap();
        let mut bytes = tar.into_inner().unwrap();
        bytes.extend_from_slice(&[0u8; 9216]); // a record's padding
        let ws = tempfile::tempdir().unwrap();
        let mut stream = std::io::Cursor::new(bytes);
        unpack_filtered(&mut stream, ws.path(), |_| true).unwrap();
        assert_eq!(stream.position() as usize, stream.get_ref().len());
        assert_eq!(
            std::fs::read_to_string(ws.path().join("a.txt")).unwrap(),
            "hello"
        );
    }

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
