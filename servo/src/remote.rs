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

use std::process::Stdio;

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
    pub async fn fetch(&self, root: &Path, mode: Mode) -> Result<String, String> {
        let launch = self.get_retrying(routes::LAUNCH).await?;
        let launch = launch
            .text()
            .await
            .map_err(|e| format!("reading the launch: {e}"))?;
        let ws = self.get_retrying(routes::WORKSPACE).await?;
        if ws.status() == reqwest::StatusCode::OK {
            unpack_streaming(ws, root, mode).await?;
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

/// The agent's tar (`agents`, from `servo pack`) passed on entry by entry,
/// then the servo's own files from `root`, as one tar into `w`.
fn merge(agents: impl std::io::Read, root: &Path, w: impl std::io::Write) -> std::io::Result<()> {
    let mut out = tar::Builder::new(w);
    out.follow_symlinks(false);
    let mut archive = tar::Archive::new(agents);
    for entry in archive.entries()? {
        let mut entry = entry?;
        let path = entry.path()?.into_owned();
        let Ok(rel) = path.strip_prefix("workspace") else {
            continue;
        };
        if servo_owned(rel) {
            continue;
        }
        let mut header = entry.header().clone();
        match header.entry_type() {
            tar::EntryType::Symlink | tar::EntryType::Link => {
                let Some(target) = entry.link_name()?.map(|t| t.into_owned()) else {
                    continue;
                };
                out.append_link(&mut header, &path, target)?;
            }
            tar::EntryType::Regular | tar::EntryType::Directory => {
                out.append_data(&mut header, &path, &mut entry)?;
            }
            // Devices, FIFOs and the rest: nothing a workspace needs back.
            _ => {}
        }
    }
    for name in own_files(root)? {
        let (path, inside) = (root.join(&name), Path::new("workspace").join(&name));
        out.append_path_with_name(&path, &inside)?;
        if std::fs::symlink_metadata(&path)?.is_dir() {
            append_tree(&mut out, &path, &inside, &|_| true)?;
        }
    }
    out.into_inner()?.flush()
}

/// The servo's own entries at the top of `root` (see [`servo_owned`]).
fn own_files(root: &Path) -> std::io::Result<Vec<std::path::PathBuf>> {
    let mut own = Vec::new();
    for entry in std::fs::read_dir(root)? {
        let name = std::path::PathBuf::from(entry?.file_name());
        if servo_owned(&name) {
            own.push(name);
        }
    }
    own.sort();
    Ok(own)
}

/// `servo pack` or `servo unpack` on `root`, with nothing of the servo's
/// environment (the token file's name, the launch).
fn agent_helper(verb: &str, root: &Path) -> tokio::process::Command {
    let exe = std::env::current_exe().unwrap_or_else(|_| "/usr/local/bin/servo".into());
    let mut cmd = tokio::process::Command::new(exe);
    cmd.arg(verb)
        .arg(root)
        .current_dir(root)
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .stderr(Stdio::inherit())
        .kill_on_drop(true);
    cmd
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

/// The workspace as a tar into `w`: entries under `workspace/`, links
/// stored as links.
fn pack(root: &Path, w: impl std::io::Write) -> std::io::Result<()> {
    pack_kept(root, w, |_| true)
}

/// The workspace but the servo's own files as a tar into `w`: entries
/// under `workspace/`, links stored as links.
fn pack_agents(root: &Path, w: impl std::io::Write) -> std::io::Result<()> {
    pack_kept(root, w, |name| !servo_owned(name))
}

/// The workspace's top-level entries that `keep` keeps, and everything
/// below them, as a tar into `w` (see [`append_tree`]).
fn pack_kept(
    root: &Path,
    w: impl std::io::Write,
    keep: impl Fn(&Path) -> bool,
) -> std::io::Result<()> {
    let mut b = tar::Builder::new(w);
    b.follow_symlinks(false);
    b.append_path_with_name(root, "workspace")?;
    append_tree(&mut b, root, Path::new("workspace"), &keep)?;
    b.into_inner()?.flush()
}

/// Appends the entries of `dir` that `keep` keeps (by name) under `name`,
/// walking the tree itself: directories, regular files, and links stored
/// as links. FIFOs, sockets and devices are left out, never opened (the
/// tar crate's own walk fails the whole archive on a socket and names a
/// FIFO by its host path).
fn append_tree<W: std::io::Write>(
    b: &mut tar::Builder<W>,
    dir: &Path,
    name: &Path,
    keep: &dyn Fn(&Path) -> bool,
) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        if !keep(Path::new(&entry.file_name())) {
            continue;
        }
        let (path, inside) = (entry.path(), name.join(entry.file_name()));
        let kind = entry.file_type()?;
        if kind.is_dir() {
            b.append_path_with_name(&path, &inside)?;
            append_tree(b, &path, &inside, &|_| true)?;
        } else if kind.is_file() || kind.is_symlink() {
            b.append_path_with_name(&path, &inside)?;
        }
    }
    Ok(())
}

/// Whether a workspace path (relative, as in the fetched tar) is the
/// servo's own: its session and audit log at the top, and `.saheeli/`.
/// A separated servo writes these itself; the agent's unpacker skips them.
fn servo_owned(path: &Path) -> bool {
    let mut parts = path
        .components()
        .filter(|c| !matches!(c, std::path::Component::CurDir));
    let Some(first) = parts.next() else {
        return false;
    };
    let first = first.as_os_str().to_string_lossy();
    if first == ".saheeli" {
        return true;
    }
    parts.next().is_none()
        && first.starts_with("servo-")
        && (first.ends_with("-session.json") || first.ends_with("-audit.log"))
}

/// `servo pack DIR`: the workspace as a tar on stdout (links as links),
/// without the servo's own files (the servo adds those), run as the
/// agent's user by a separated servo.
pub(crate) fn pack_main(dir: Option<String>) -> std::process::ExitCode {
    let Some(dir) = dir else {
        eprintln!("servo pack: which directory?");
        return std::process::ExitCode::from(2);
    };
    let out = std::io::BufWriter::new(std::io::stdout().lock());
    match pack_agents(Path::new(&dir), out) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("servo pack: {e}");
            std::process::ExitCode::from(1)
        }
    }
}

/// `servo unpack DIR`: a fetched workspace from stdin, as the agent's user
/// (its files are the agent's), leaving out what is the servo's own.
pub(crate) fn unpack_main(dir: Option<String>) -> std::process::ExitCode {
    let Some(dir) = dir else {
        eprintln!("servo unpack: which directory?");
        return std::process::ExitCode::from(2);
    };
    let stdin = std::io::BufReader::new(std::io::stdin().lock());
    // Not the workspace's own directory entry either: it is the servo's.
    let is_root = |p: &Path| {
        !p.components()
            .any(|c| matches!(c, std::path::Component::Normal(_)))
    };
    match unpack_filtered(stdin, Path::new(&dir), |p| !servo_owned(p) && !is_root(p)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("servo unpack: {e}");
            std::process::ExitCode::from(1)
        }
    }
}

/// Unpacks the entries of `tar` that `keep` keeps into `root`.
fn unpack_filtered(
    tar: impl std::io::Read,
    root: &Path,
    keep: impl Fn(&Path) -> bool,
) -> std::io::Result<()> {
    let mut archive = tar::Archive::new(tar);
    archive.set_preserve_permissions(true);
    for entry in archive.entries()? {
        let mut entry = entry?;
        let path = entry.path()?.into_owned();
        if keep(&path) {
            entry.unpack_in(root)?;
        }
    }
    Ok(())
}

pub(crate) async fn unpack_streaming(
    response: reqwest::Response,
    root: &Path,
    mode: Mode,
) -> Result<(), String> {
    use futures_util::StreamExt;
    use tokio::io::AsyncWriteExt;
    let (tx, rx) = pipe::pipe();
    let dir = root.to_path_buf();
    // The servo's own files (a parked session, its audit log) it writes
    // itself; with separation, all the rest goes to the agent's unpacker.
    let separated = mode == Mode::Separated;
    let unpacker = tokio::task::spawn_blocking(move || {
        unpack_filtered(pipe::ChannelReader::new(rx), &dir, |p| {
            !separated || (servo_owned(p) && !p.starts_with(".saheeli"))
        })
    });
    let mut agent = if separated {
        let mut cmd = agent_helper("unpack", root);
        cmd.stdin(Stdio::piped()).stdout(Stdio::null());
        let mut child = crate::privsep::spawn(Mode::Separated, &mut cmd)
            .map_err(|e| format!("starting the workspace unpacker: {e}"))?;
        let stdin = child.stdin.take().expect("piped stdin");
        Some((child, stdin))
    } else {
        None
    };
    let mut body = response.bytes_stream();
    let mut failed = None;
    while let Some(piece) = body.next().await {
        let piece = match piece {
            Ok(p) => p,
            Err(e) => {
                failed = Some(format!("fetching the workspace: {e}"));
                let _ = tx.send(Err(std::io::Error::other(e))).await;
                break;
            }
        };
        if let Some((_, stdin)) = agent.as_mut()
            && let Err(e) = stdin.write_all(&piece).await
        {
            failed = Some(format!("the agent's unpacker stopped reading: {e}"));
            break;
        }
        if tx.send(Ok(piece)).await.is_err() {
            break;
        }
    }
    drop(tx);
    let own = unpacker
        .await
        .map_err(|e| format!("unpacking the workspace: {e}"))?
        .map_err(|e| format!("unpacking the workspace: {e}"));
    if let Some((mut child, stdin)) = agent {
        drop(stdin);
        match child.wait().await {
            Ok(s) if s.success() => {}
            Ok(s) => failed = failed.or(Some(format!("the agent's unpacker exited with {s}"))),
            Err(e) => failed = failed.or(Some(format!("waiting for the agent's unpacker: {e}"))),
        }
    }
    own?;
    failed.map_or(Ok(()), Err)
}

#[cfg(test)]
mod tests {
    use super::*;

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
