//! The workspace as a tar, both ways: packed for the upload (with
//! separation the agent's files by the agent's own `servo pack`, the
//! servo's own files by the servo, merged), and unpacked at start (the
//! servo's own files by the servo, the rest by `servo unpack`).

use std::path::Path;
use std::process::Stdio;

use crate::pipe;
use crate::privsep::Mode;

/// The agent's tar (`agents`, from `servo pack`) passed on entry by entry,
/// then the servo's own files from `root`, as one tar into `w`.
pub(super) fn merge(
    agents: impl std::io::Read,
    root: &Path,
    w: impl std::io::Write,
) -> std::io::Result<()> {
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
pub(super) fn own_files(root: &Path) -> std::io::Result<Vec<std::path::PathBuf>> {
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
pub(crate) fn agent_helper(verb: &str, root: &Path) -> tokio::process::Command {
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

/// The workspace as a tar into `w`: entries under `workspace/`, links
/// stored as links.
pub(super) fn pack(root: &Path, w: impl std::io::Write) -> std::io::Result<()> {
    pack_kept(root, w, |_| true)
}

/// The workspace but the servo's own files as a tar into `w`: entries
/// under `workspace/`, links stored as links.
pub(super) fn pack_agents(root: &Path, w: impl std::io::Write) -> std::io::Result<()> {
    pack_kept(root, w, |name| !servo_owned(name))
}

/// The workspace's top-level entries that `keep` keeps, and everything
/// below them, as a tar into `w` (see [`append_tree`]).
pub(super) fn pack_kept(
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
pub(crate) fn append_tree<W: std::io::Write>(
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
pub(crate) fn servo_owned(path: &Path) -> bool {
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
        && (first.ends_with("-session.json")
            || first.ends_with("-session.journal")
            || first.ends_with("-audit.log"))
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

/// `servo unpack DIR [--keep-existing]`: a fetched workspace from stdin,
/// as the agent's user (its files are the agent's), leaving out what is
/// the servo's own. `--keep-existing`: what the workspace holds already
/// (a cached set-up a warm servo unpacked first) stays.
pub(crate) fn unpack_main(mut argv: impl Iterator<Item = String>) -> std::process::ExitCode {
    let Some(dir) = argv.next() else {
        eprintln!("servo unpack: which directory?");
        return std::process::ExitCode::from(2);
    };
    let keep_existing = match argv.next().as_deref() {
        None => false,
        Some(KEEP_EXISTING) => true,
        Some(other) => {
            eprintln!("servo unpack: unknown argument `{other}`");
            return std::process::ExitCode::from(2);
        }
    };
    let stdin = std::io::BufReader::new(std::io::stdin().lock());
    // Not the workspace's own directory entry either: it is the servo's.
    let agents = |p: &Path| !servo_owned(p) && !is_root(p);
    let unpacked = if keep_existing {
        let (caps, keep) = (crate::unpack::Caps::NONE, crate::unpack::Existing::Keep);
        crate::unpack::unpack(stdin, Path::new(&dir), caps, keep, agents).map(drop)
    } else {
        unpack_filtered(stdin, Path::new(&dir), agents)
    };
    match unpacked {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("servo unpack: {e}");
            std::process::ExitCode::from(1)
        }
    }
}

/// `servo unpack`'s flag: what the workspace holds already stays.
pub(crate) const KEEP_EXISTING: &str = "--keep-existing";

/// Whether a workspace path is the workspace itself.
pub(crate) fn is_root(p: &Path) -> bool {
    !p.components()
        .any(|c| matches!(c, std::path::Component::Normal(_)))
}

/// Unpacks the entries of `tar` that `keep` keeps into `root`, then reads
/// what follows the archive's end to the end of the stream: the writer
/// (the servo, feeding two readers) may still be sending the end's second
/// zero block or a record's padding, and must never see its reader gone.
pub(super) fn unpack_filtered(
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
    std::io::copy(&mut archive.into_inner(), &mut std::io::sink())?;
    Ok(())
}

/// Unpacks the fetched workspace `response` into `root`: the servo's own
/// files by the servo, the rest (with separation) by the agent's
/// unpacker; `keep_existing`: what the workspace holds already stays.
pub(crate) async fn unpack_streaming(
    response: reqwest::Response,
    root: &Path,
    mode: Mode,
    keep_existing: bool,
) -> Result<(), String> {
    use futures_util::StreamExt;
    use tokio::io::AsyncWriteExt;
    let (tx, rx) = pipe::pipe();
    let dir = root.to_path_buf();
    // The servo's own files (a parked session, its audit log) it writes
    // itself; with separation, all the rest goes to the agent's unpacker.
    let separated = mode == Mode::Separated;
    let unpacker = tokio::task::spawn_blocking(move || {
        let tar = pipe::ChannelReader::new(rx);
        if !separated && keep_existing {
            let (caps, keep) = (crate::unpack::Caps::NONE, crate::unpack::Existing::Keep);
            return crate::unpack::unpack(tar, &dir, caps, keep, |_| true).map(drop);
        }
        unpack_filtered(tar, &dir, |p| {
            !separated || (servo_owned(p) && !p.starts_with(".saheeli"))
        })
    });
    let mut agent = if separated {
        let mut cmd = agent_helper("unpack", root);
        if keep_existing {
            cmd.arg(KEEP_EXISTING);
        }
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
    let mut stopped_reading = None;
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
            // Its exit status says whether that is a failure.
            stopped_reading = Some(e);
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
            // It read the whole stream (it drains it to the end): a
            // broken pipe could only have been a byte past its end.
            Ok(s) if s.success() => {}
            Ok(s) => {
                let why = stopped_reading
                    .map_or(String::new(), |e| format!(" (it stopped reading: {e})"));
                failed = failed.or(Some(format!("the agent's unpacker exited with {s}{why}")));
            }
            Err(e) => failed = failed.or(Some(format!("waiting for the agent's unpacker: {e}"))),
        }
    }
    own?;
    failed.map_or(Ok(()), Err)
}
