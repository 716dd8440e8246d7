//! A task's own image (issue 49): `image:` names one, `environment:`
//! builds one from a directory with a Dockerfile. Neither has a servo, so
//! the foreman builds a thin layer on top of it with the servo image's
//! servo and what every servo container expects (the two users, a sticky
//! /workspace, the mount points) — the same layer `build-servo` puts on
//! the base image. Both builds are cached by what goes into them: the
//! environment by its context's bytes, the layer by the ids of the task's
//! image and the servo image and the working directory.
//!
//! `workdir:` (`/app`): what the task's image holds there is moved to
//! `/.saheeli/seed` and the path becomes a link to /workspace, so the
//! agent works where the task expects it and everything it makes is
//! collected. The seed is copied into each fresh workspace, owned by the
//! agent: by the servo as it starts (`SAHEELI_SEED`, the servo's `seed`),
//! or for a root agent uploaded before the start ([`read_seed`]).

use std::io::Read;
use std::path::{Component, Path};

use anyhow::{Context, bail};
use bollard::Docker;
use bollard::query_parameters::DownloadFromContainerOptionsBuilder;
use bytes::Bytes;
use futures_util::StreamExt;
use saheeli_protocol::setup::{MAX_SEED_BYTES, SEED_DIR};
use sha2::{Digest, Sha256};

use super::{BuildProgress, DockerOp, build_image, timed};

/// The largest environment context read.
const MAX_CONTEXT_BYTES: u64 = 1 << 30;

/// Bumped when [`LAYER`] changes: every layer is rebuilt.
const LAYER_VERSION: &str = "1";

/// The layer over a task's image. `BASE` is the task's image, `SERVO` the
/// servo image, `WORKDIR` the task's `workdir:` (or empty).
const LAYER: &str = r#"ARG SERVO
ARG BASE
FROM ${SERVO} AS servo
FROM ${BASE}
USER 0:0
RUN (grep -q '^[^:]*:[^:]*:1000:' /etc/passwd || echo 'agent:x:1000:1000:agent:/tmp:/usr/sbin/nologin' >> /etc/passwd) \
 && (grep -q '^[^:]*:[^:]*:1000:' /etc/group || echo 'agent:x:1000:' >> /etc/group) \
 && (grep -q '^[^:]*:[^:]*:999:' /etc/passwd || echo 'saheeli:x:999:999:saheeli servo:/nonexistent:/usr/sbin/nologin' >> /etc/passwd) \
 && (grep -q '^[^:]*:[^:]*:999:' /etc/group || echo 'saheeli:x:999:' >> /etc/group) \
 && (find / -xdev -type f -perm /6000 -exec chmod ug-s {} + 2>/dev/null || true) \
 && mkdir -p /workspace /run/saheeli /logs/verifier /logs/agent /tests /solution /.saheeli /usr/sbin \
 && chown 999:1000 /workspace && chmod 1775 /workspace && chmod 1777 /logs/verifier /logs/agent \
 && touch /usr/sbin/docker-init
ARG WORKDIR
RUN if [ -n "$WORKDIR" ] && [ "$WORKDIR" != /workspace ]; then \
      if [ -d "$WORKDIR" ] && [ ! -L "$WORKDIR" ]; then mv "$WORKDIR" /.saheeli/seed && chown -R 1000:1000 /.saheeli/seed; fi; \
      rm -f "$WORKDIR"; mkdir -p "$(dirname "$WORKDIR")" && ln -s /workspace "$WORKDIR"; \
    fi
COPY --from=servo /usr/local/bin/servo /usr/local/bin/servo
USER 1000:1000
WORKDIR /workspace
ENV HOME=/tmp
ENTRYPOINT ["/usr/local/bin/servo"]
CMD []
"#;

/// What a task's image is made from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum TaskBase<'a> {
    /// An image Docker has (`image:`).
    Named(&'a str),
    /// A build context (`environment: { dockerfile: DIR }`), with
    /// config.yaml's `images.map` for its `FROM` lines.
    Built {
        dir: &'a Path,
        map: &'a std::collections::BTreeMap<String, String>,
    },
}

/// The image a task with its own image runs: built now if it is not
/// there yet. `servo` is the servo image; `workdir` the task's `workdir:`.
pub(crate) async fn task_image(
    docker: &Docker,
    base: &TaskBase<'_>,
    servo: &str,
    workdir: Option<&str>,
) -> anyhow::Result<String> {
    let base = match base {
        TaskBase::Named(name) => (*name).to_string(),
        TaskBase::Built { dir, map } => environment_image(docker, dir, map).await?,
    };
    let base_id = image_id(docker, &base).await.map_err(|_| {
        anyhow::anyhow!(
            "image `{base}` is not in Docker here (no registry is used); build or load it \
             (`docker load`, `docker build`), or give the task `environment: {{ dockerfile: DIR }}`"
        )
    })?;
    let servo_id = image_id(docker, servo).await.map_err(|_| {
        anyhow::anyhow!("servo image `{servo}` not found; build it with `saheeli build-servo`")
    })?;
    let workdir = workdir.unwrap_or("");
    let key = hex16(&[LAYER_VERSION, &base_id, &servo_id, workdir, LAYER]);
    let tag = format!("saheeli-task:{key}");
    if image_id(docker, &tag).await.is_ok() {
        return Ok(tag);
    }
    let context = single_file_tar("Dockerfile", LAYER.as_bytes())?;
    build_image(
        docker,
        context.into(),
        &tag,
        &base_id,
        &[("SERVO", servo_id.as_str()), ("WORKDIR", workdir)],
        false,
        |_: BuildProgress| {},
    )
    .await
    .with_context(|| format!("adding the servo to the task's image `{base}`"))?;
    Ok(tag)
}

/// The image built from `dir` (its Dockerfile and everything beside it),
/// tagged by the context's digest: built once per content.
async fn environment_image(
    docker: &Docker,
    dir: &Path,
    map: &std::collections::BTreeMap<String, String>,
) -> anyhow::Result<String> {
    let (dir, map) = (dir.to_path_buf(), map.clone());
    let (context, digest, froms) =
        tokio::task::spawn_blocking(move || environment_context(&dir, &map)).await??;
    let tag = format!("saheeli-env:{digest}");
    if image_id(docker, &tag).await.is_ok() {
        return Ok(tag);
    }
    for from in &froms {
        if image_id(docker, from).await.is_err() {
            bail!(
                "the Dockerfile's `FROM {from}` is not in Docker here and no registry is used; \
                 load or build it, or map it to a local image in config.yaml \
                 (`images: {{ map: {{ \"{from}\": saheeli-base:bookworm }} }}`)"
            );
        }
    }
    let base = froms.first().cloned().unwrap_or_default();
    build_image(
        docker,
        context.into(),
        &tag,
        &base,
        &[],
        false,
        |_: BuildProgress| {},
    )
    .await
    .context("building the task's environment")?;
    Ok(tag)
}

/// The build context of `dir` as a tar (its Dockerfile's `FROM` lines
/// mapped through `map`), its digest, and the images its stages start
/// from. Links are archived as links, never followed.
fn environment_context(
    dir: &Path,
    map: &std::collections::BTreeMap<String, String>,
) -> anyhow::Result<(Vec<u8>, String, Vec<String>)> {
    let dockerfile = dir.join("Dockerfile");
    let text = std::fs::read_to_string(&dockerfile)
        .with_context(|| format!("reading `{}`", dockerfile.display()))?;
    let (text, froms) = map_froms(&text, map);
    let mut b = tar::Builder::new(Vec::new());
    b.follow_symlinks(false);
    let mut total = 0u64;
    add_dir(&mut b, dir, Path::new(""), &mut total)?;
    let mut h = tar::Header::new_gnu();
    h.set_size(text.len() as u64);
    h.set_mode(0o644);
    h.set_cksum();
    b.append_data(&mut h, "Dockerfile", text.as_bytes())?;
    let tar = b.into_inner()?;
    let digest = format!("{:x}", Sha256::digest(&tar));
    Ok((tar, digest[..16].to_string(), froms))
}

fn add_dir(
    b: &mut tar::Builder<Vec<u8>>,
    root: &Path,
    rel: &Path,
    total: &mut u64,
) -> anyhow::Result<()> {
    let dir = root.join(rel);
    let mut entries: Vec<_> = std::fs::read_dir(&dir)
        .with_context(|| format!("reading `{}`", dir.display()))?
        .collect::<Result<_, _>>()?;
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        let name = rel.join(e.file_name());
        if name == Path::new("Dockerfile") {
            continue;
        }
        let meta = std::fs::symlink_metadata(e.path())?;
        *total += meta.len();
        if *total > MAX_CONTEXT_BYTES {
            bail!(
                "the environment `{}` holds more than {} MiB; keep the build context small",
                root.display(),
                MAX_CONTEXT_BYTES >> 20
            );
        }
        if meta.is_dir() {
            b.append_dir(&name, e.path())?;
            add_dir(b, root, &name, total)?;
        } else if meta.is_file() || meta.file_type().is_symlink() {
            b.append_path_with_name(e.path(), &name)
                .with_context(|| format!("archiving `{}`", e.path().display()))?;
        }
    }
    Ok(())
}

/// The Dockerfile with each `FROM IMAGE` that `map` names replaced, and
/// the images its stages start from (not the names of earlier stages).
pub(crate) fn map_froms(
    text: &str,
    map: &std::collections::BTreeMap<String, String>,
) -> (String, Vec<String>) {
    let mut stages = Vec::new();
    let mut froms = Vec::new();
    let mut out = String::with_capacity(text.len());
    for line in text.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        if words
            .first()
            .is_some_and(|w| w.eq_ignore_ascii_case("FROM"))
        {
            let image = words
                .iter()
                .skip(1)
                .find(|w| !w.starts_with("--"))
                .copied()
                .unwrap_or("");
            let alias = words
                .iter()
                .position(|w| w.eq_ignore_ascii_case("AS"))
                .and_then(|i| words.get(i + 1));
            let image = map.get(image).map(String::as_str).unwrap_or(image);
            let mut rebuilt = String::from("FROM ");
            for w in words.iter().skip(1).filter(|w| w.starts_with("--")) {
                rebuilt.push_str(w);
                rebuilt.push(' ');
            }
            rebuilt.push_str(image);
            if let Some(a) = alias {
                rebuilt.push_str(" AS ");
                rebuilt.push_str(a);
            }
            if !stages
                .iter()
                .any(|s: &String| s.eq_ignore_ascii_case(image))
                && !image.is_empty()
                && !image.eq_ignore_ascii_case("scratch")
            {
                froms.push(image.to_string());
            }
            if let Some(a) = alias {
                stages.push(a.to_string());
            }
            out.push_str(&rebuilt);
        } else {
            out.push_str(line);
        }
        out.push('\n');
    }
    (out, froms)
}

/// What the task's image kept at `workdir:` ([`SEED_DIR`]), as a tar for
/// /workspace, read from a created (not started) container of it; None
/// when it kept nothing.
pub(crate) async fn read_seed(docker: &Docker, container: &str) -> anyhow::Result<Option<Bytes>> {
    let opts = DownloadFromContainerOptionsBuilder::default()
        .path(SEED_DIR)
        .build();
    let mut stream = docker.download_from_container(container, Some(opts));
    let mut tar = Vec::new();
    while let Some(chunk) = stream.next().await {
        let chunk = match chunk {
            Ok(c) => c,
            Err(bollard::errors::Error::DockerResponseServerError {
                status_code: 404, ..
            }) => return Ok(None),
            Err(e) => return Err(e).context("reading the image's working directory"),
        };
        tar.extend_from_slice(&chunk);
        if tar.len() as u64 > MAX_SEED_BYTES {
            bail!(
                "the task image's working directory holds more than {} MiB",
                MAX_SEED_BYTES >> 20
            );
        }
    }
    let inner = tokio::task::spawn_blocking(move || strip_first(&tar)).await??;
    Ok(Some(Bytes::from(inner)))
}

/// The archive with each entry's first path component (the directory's
/// own name) removed; the directory's own entry dropped.
fn strip_first(tar: &[u8]) -> anyhow::Result<Vec<u8>> {
    let mut archive = tar::Archive::new(tar);
    let mut b = tar::Builder::new(Vec::new());
    for entry in archive.entries().context("reading the seed archive")? {
        let mut entry = entry.context("reading the seed archive")?;
        let path = entry.path()?.into_owned();
        let rest: std::path::PathBuf = path
            .components()
            .skip(1)
            .filter(|c| matches!(c, Component::Normal(_)))
            .collect();
        if rest.as_os_str().is_empty() {
            continue;
        }
        let mut header = entry.header().clone();
        let mut data = Vec::new();
        entry.read_to_end(&mut data)?;
        if let Some(link) = entry.link_name()? {
            let link = link.into_owned();
            b.append_link(&mut header, &rest, link)?;
        } else {
            b.append_data(&mut header, &rest, data.as_slice())?;
        }
    }
    Ok(b.into_inner()?)
}

fn single_file_tar(name: &str, bytes: &[u8]) -> anyhow::Result<Vec<u8>> {
    let mut b = tar::Builder::new(Vec::new());
    let mut h = tar::Header::new_gnu();
    h.set_size(bytes.len() as u64);
    h.set_mode(0o644);
    h.set_cksum();
    b.append_data(&mut h, name, bytes)?;
    Ok(b.into_inner()?)
}

async fn image_id(docker: &Docker, image: &str) -> anyhow::Result<String> {
    timed(DockerOp::InspectImage, async {
        docker
            .inspect_image(image)
            .await
            .with_context(|| format!("inspecting image `{image}`"))?
            .id
            .with_context(|| format!("image `{image}` has no id"))
    })
    .await
}

fn hex16(parts: &[&str]) -> String {
    let mut h = Sha256::new();
    for p in parts {
        h.update(p.as_bytes());
        h.update([0]);
    }
    format!("{:x}", h.finalize())[..16].to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn from_lines_are_mapped_and_stages_are_not_images() {
        let map = BTreeMap::from([("python:3.13-slim".to_string(), "py:local".to_string())]);
        let (text, froms) = map_froms(
            "FROM --platform=linux/amd64 python:3.13-slim AS build\nRUN x\nfrom build\nFROM scratch\nWORKDIR /app\n",
            &map,
        );
        assert_eq!(
            text,
            "FROM --platform=linux/amd64 py:local AS build\nRUN x\nFROM build\nFROM scratch\nWORKDIR /app\n"
        );
        assert_eq!(froms, vec!["py:local".to_string()]);
    }

    #[test]
    fn the_seed_loses_its_directory_name() {
        let mut b = tar::Builder::new(Vec::new());
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Directory);
        h.set_size(0);
        h.set_mode(0o755);
        h.set_cksum();
        b.append_data(&mut h, "seed/", &[][..]).unwrap();
        let mut h = tar::Header::new_gnu();
        h.set_size(2);
        h.set_mode(0o644);
        h.set_cksum();
        b.append_data(&mut h, "seed/a/b.txt", &b"hi"[..]).unwrap();
        let out = strip_first(&b.into_inner().unwrap()).unwrap();
        let mut a = tar::Archive::new(out.as_slice());
        let names: Vec<String> = a
            .entries()
            .unwrap()
            .map(|e| e.unwrap().path().unwrap().display().to_string())
            .collect();
        assert_eq!(names, vec!["a/b.txt".to_string()]);
    }
}
