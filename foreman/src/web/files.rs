//! An ended task's results, read-only: `report.md`, the patch, a listing
//! and any file. Everything below a results directory was made by the
//! agent, so it is walked with `*at` calls below directory handles: every
//! directory opened `O_NOFOLLOW | O_DIRECTORY`, the file `O_NOFOLLOW |
//! O_NONBLOCK` and checked to be regular on its handle, and read under a
//! cap. Files are served as plain text (or as a download when not UTF-8)
//! with a sandboxing content policy: nothing in them runs in the browser.

use std::io::Read;
use std::os::fd::OwnedFd;
use std::path::PathBuf;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use rustix::fs::{FileType, Mode, OFlags};
use serde::Serialize;

use crate::report::{PATCH, REPORT};
use crate::store::TaskRow;

use super::error::ApiError;
use super::server::Shared;

/// The most of one file served.
const MAX_FILE: u64 = 8 << 20;
/// The most entries a listing shows, and how deep it goes.
const MAX_ENTRIES: usize = 5000;
const MAX_DEPTH: usize = 32;

type ApiResult<T> = Result<T, ApiError>;

fn dir_flags() -> OFlags {
    OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC
}

/// The results directory of an ended task (409 while it runs, 404 when
/// nothing was collected).
async fn results_dir(web: &Shared, id: String) -> ApiResult<(TaskRow, PathBuf)> {
    let t = web.db(move |s| s.require(&id)).await?;
    if !t.state.is_terminal() {
        return Err(ApiError::wrong_state(format!(
            "task `{}` is {}: its results are collected when it ends",
            t.id, t.state
        )));
    }
    match t.results_path.clone() {
        Some(dir) => Ok((t, PathBuf::from(dir))),
        None => Err(ApiError::not_found(format!(
            "task `{}` ended {} before a workspace was collected; it has no results",
            t.id, t.state
        ))),
    }
}

/// The parts of a relative path, each a plain name.
fn parts(rel: &str) -> ApiResult<Vec<&str>> {
    let parts: Vec<&str> = rel.split('/').filter(|p| !p.is_empty()).collect();
    if parts.is_empty()
        || parts
            .iter()
            .any(|p| *p == "." || *p == ".." || p.contains('\0'))
    {
        return Err(ApiError::bad_input(format!(
            "`{rel}` is not a path inside the results"
        )));
    }
    Ok(parts)
}

/// Opens `rel` below `root`, never through a link. Blocking.
fn open_below(root: &std::path::Path, rel: &str) -> ApiResult<std::fs::File> {
    let parts = parts(rel)?;
    let refused = |e: rustix::io::Errno| {
        if e == rustix::io::Errno::NOENT || e == rustix::io::Errno::NOTDIR {
            ApiError::not_found(format!("no file `{rel}` in the results"))
        } else if e == rustix::io::Errno::LOOP {
            ApiError::bad_input(format!(
                "`{rel}` goes through a link made in the workspace; links are not followed"
            ))
        } else {
            ApiError::bad_input(format!("`{rel}` cannot be read: {e}"))
        }
    };
    let mut dir: OwnedFd = rustix::fs::open(root, dir_flags(), Mode::empty()).map_err(refused)?;
    let (last, dirs) = parts.split_last().expect("not empty");
    for d in dirs {
        dir = match rustix::fs::openat(&dir, *d, dir_flags(), Mode::empty()) {
            Ok(fd) => fd,
            // `O_DIRECTORY` reports a link as "not a directory": say which.
            Err(e) => {
                let link = rustix::fs::statat(&dir, *d, rustix::fs::AtFlags::SYMLINK_NOFOLLOW)
                    .is_ok_and(|st| FileType::from_raw_mode(st.st_mode) == FileType::Symlink);
                return Err(refused(if link { rustix::io::Errno::LOOP } else { e }));
            }
        };
    }
    let fd = rustix::fs::openat(
        &dir,
        *last,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(refused)?;
    let st = rustix::fs::fstat(&fd).map_err(refused)?;
    if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
        return Err(ApiError::bad_input(format!(
            "`{rel}` is not a regular file"
        )));
    }
    Ok(std::fs::File::from(fd))
}

/// A file's bytes as a response: text, or a download.
fn file_response(name: &str, file: std::fs::File) -> ApiResult<Response> {
    let mut bytes = Vec::new();
    file.take(MAX_FILE + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| ApiError::internal(format!("reading `{name}`: {e}")))?;
    let cut = bytes.len() as u64 > MAX_FILE;
    bytes.truncate(MAX_FILE as usize);
    let text = std::str::from_utf8(&bytes).is_ok();
    let mut res = bytes.into_response();
    let h = res.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(if text {
            "text/plain; charset=utf-8"
        } else {
            "application/octet-stream"
        }),
    );
    if !text {
        h.insert(
            header::CONTENT_DISPOSITION,
            HeaderValue::from_static("attachment"),
        );
    }
    if cut {
        h.insert("x-saheeli-truncated", HeaderValue::from(MAX_FILE));
    }
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static("sandbox; default-src 'none'"),
    );
    Ok(res)
}

async fn serve_file(web: Shared, id: String, rel: String) -> ApiResult<Response> {
    let (_, dir) = results_dir(&web, id).await?;
    tokio::task::spawn_blocking(move || file_response(&rel, open_below(&dir, &rel)?))
        .await
        .map_err(|e| ApiError::internal(format!("file thread panicked: {e}")))?
}

/// `GET /api/tasks/{id}/report`: report.md (`task report`).
pub(super) async fn report(
    State(web): State<Shared>,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    serve_file(web, id, REPORT.into()).await
}

/// `GET /api/tasks/{id}/patch`: `.saheeli/changes.patch` (`task diff`).
pub(super) async fn patch(
    State(web): State<Shared>,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    serve_file(web, id, PATCH.into()).await
}

/// `GET /api/tasks/{id}/files/{*path}`: one file of the results.
pub(super) async fn file(
    State(web): State<Shared>,
    Path((id, rel)): Path<(String, String)>,
) -> ApiResult<Response> {
    serve_file(web, id, rel).await
}

/// One entry of a listing.
#[derive(Debug, Serialize, PartialEq)]
pub(super) struct Entry {
    path: String,
    /// `file`, `dir`, `link` (not followed) or `other` (a FIFO, a socket).
    kind: &'static str,
    size: u64,
}

/// `GET /api/tasks/{id}/files`: every entry of the results, links shown
/// as links.
pub(super) async fn list(
    State(web): State<Shared>,
    Path(id): Path<String>,
) -> ApiResult<Json<serde_json::Value>> {
    let (_, dir) = results_dir(&web, id).await?;
    let (entries, cut) = tokio::task::spawn_blocking(move || walk(&dir))
        .await
        .map_err(|e| ApiError::internal(format!("listing thread panicked: {e}")))??;
    Ok(Json(
        serde_json::json!({"entries": entries, "truncated": cut}),
    ))
}

/// Lists the tree below `root` (capped); whether the cap cut it.
fn walk(root: &std::path::Path) -> ApiResult<(Vec<Entry>, bool)> {
    let fd = rustix::fs::open(root, dir_flags(), Mode::empty())
        .map_err(|e| ApiError::internal(format!("opening `{}`: {e}", root.display())))?;
    let mut out = Vec::new();
    let cut = walk_dir(&fd, "", 0, &mut out);
    Ok((out, cut))
}

fn walk_dir(fd: &OwnedFd, prefix: &str, depth: usize, out: &mut Vec<Entry>) -> bool {
    let Ok(listing) = rustix::fs::Dir::read_from(fd) else {
        return false;
    };
    let mut names: Vec<String> = listing
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n != "." && n != "..")
        .collect();
    names.sort();
    for name in names {
        if out.len() >= MAX_ENTRIES {
            return true;
        }
        let path = format!("{prefix}{name}");
        let Ok(st) = rustix::fs::statat(fd, name.as_str(), rustix::fs::AtFlags::SYMLINK_NOFOLLOW)
        else {
            continue;
        };
        let kind = match FileType::from_raw_mode(st.st_mode) {
            FileType::RegularFile => "file",
            FileType::Directory => "dir",
            FileType::Symlink => "link",
            _ => "other",
        };
        out.push(Entry {
            path: path.clone(),
            kind,
            size: if kind == "file" { st.st_size as u64 } else { 0 },
        });
        if kind == "dir"
            && depth < MAX_DEPTH
            && let Ok(sub) = rustix::fs::openat(fd, name.as_str(), dir_flags(), Mode::empty())
            && walk_dir(&sub, &format!("{path}/"), depth + 1, out)
        {
            return true;
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    #[test]
    fn links_are_listed_never_followed() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir(root.join("src")).unwrap();
        std::fs::write(root.join("src/a.txt"), "hello").unwrap();
        symlink("/etc", root.join("etc")).unwrap();
        symlink("/etc/passwd", root.join("src/passwd")).unwrap();
        let (entries, cut) = walk(root).unwrap();
        assert!(!cut);
        let shown: Vec<(&str, &str)> = entries.iter().map(|e| (e.path.as_str(), e.kind)).collect();
        assert_eq!(
            shown,
            [
                ("etc", "link"),
                ("src", "dir"),
                ("src/a.txt", "file"),
                ("src/passwd", "link")
            ]
        );
        let mut s = String::new();
        open_below(root, "src/a.txt")
            .unwrap()
            .read_to_string(&mut s)
            .unwrap();
        assert_eq!(s, "hello");
        for bad in ["etc/passwd", "src/passwd"] {
            let e = open_below(root, bad).unwrap_err();
            assert_eq!(e.kind, "bad_input", "{bad}: {}", e.message);
        }
        assert_eq!(open_below(root, "../x").unwrap_err().kind, "bad_input");
        assert_eq!(open_below(root, "nope.txt").unwrap_err().kind, "not_found");
        assert_eq!(open_below(root, "src").unwrap_err().kind, "bad_input");
    }
}
