//! The servo image: is it there, and building it (classic builder, no pull).

use std::collections::HashMap;

use anyhow::Context;
use bollard::Docker;
use bollard::errors::Error as DockerError;
use bollard::query_parameters::{BuildImageOptionsBuilder, RemoveImageOptionsBuilder};
use bytes::Bytes;
use futures_util::StreamExt;

use super::{DockerOp, timed};

/// Fails with advice when the servo image is missing.
pub(crate) async fn require_image(docker: &Docker, image: &str) -> anyhow::Result<()> {
    timed(DockerOp::InspectImage, async {
        match docker.inspect_image(image).await {
            Ok(_) => Ok(()),
            Err(DockerError::DockerResponseServerError {
                status_code: 404, ..
            }) => Err(ImageMissing(image.to_string()).into()),
            Err(e) => Err(e).with_context(|| format!("inspecting image `{image}`")),
        }
    })
    .await
}

/// The servo image is not there: no retry can help until it is built.
#[derive(Debug, thiserror::Error)]
#[error("image `{0}` not found; build it with `saheeli build-servo`")]
pub(crate) struct ImageMissing(pub String);

/// Progress of an image build, for the caller to display.
pub(crate) enum BuildProgress {
    Line(String),
}

/// Builds an image from a context tar with the classic builder; never pulls.
/// Returns the new image id. The image it replaces under `tag`, if any and
/// now dangling, is removed.
pub(crate) async fn build_image(
    docker: &Docker,
    context: Bytes,
    tag: &str,
    base_image: &str,
    extra_args: &[(&str, &str)],
    no_cache: bool,
    mut progress: impl FnMut(BuildProgress),
) -> anyhow::Result<String> {
    require_image(docker, base_image).await.map_err(|_| {
        anyhow::anyhow!(
            "base image `{base_image}` not found; make it with `scripts/setup.sh base` \
             (no registry is used)"
        )
    })?;
    let previous = docker.inspect_image(tag).await.ok().and_then(|i| i.id);
    let mut buildargs = HashMap::from([("BASE".to_string(), base_image.to_string())]);
    buildargs.extend(
        extra_args
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string())),
    );
    let opts = BuildImageOptionsBuilder::default()
        .dockerfile("Dockerfile")
        .t(tag)
        .rm(true)
        .forcerm(true)
        .nocache(no_cache)
        .networkmode("none")
        .buildargs(&buildargs)
        .build();
    let mut stream = docker.build_image(opts, None, Some(bollard::body_full(context)));
    let mut image_id = None;
    while let Some(item) = stream.next().await {
        let info = item.map_err(|e| match e {
            DockerError::DockerStreamError { error } => {
                anyhow::anyhow!("image build failed: {error}")
            }
            e => anyhow::Error::new(e).context("building the servo image"),
        })?;
        if let Some(detail) = info.error_detail {
            anyhow::bail!("image build failed: {}", detail.message.unwrap_or_default());
        }
        if let Some(s) = info.stream {
            for line in s.lines().map(str::trim_end).filter(|l| !l.is_empty()) {
                progress(BuildProgress::Line(line.to_string()));
            }
        }
        if let Some(aux) = info.aux
            && let Some(id) = aux.id
        {
            image_id = Some(id);
        }
    }
    let new_id = match image_id {
        Some(id) => id,
        None => docker
            .inspect_image(tag)
            .await
            .context("inspecting the built image")?
            .id
            .unwrap_or_default(),
    };
    if let Some(old) = previous
        && old != new_id
        && untagged(docker, &old).await
    {
        let opts = RemoveImageOptionsBuilder::default().noprune(false).build();
        // Only the image this tag left behind, when no other tag names it
        // (another tag may share it: identical builds get the same id);
        // failure (a container uses it) is harmless.
        let _ = docker.remove_image(&old, Some(opts), None).await;
    }
    Ok(new_id)
}

/// Whether no tag names image `id` any more (removing it by id would
/// otherwise delete what another tag points to).
async fn untagged(docker: &Docker, id: &str) -> bool {
    match docker.inspect_image(id).await {
        Ok(i) => i.repo_tags.unwrap_or_default().is_empty(),
        Err(_) => false,
    }
}

/// The repositories of the task images the foreman builds and keeps as
/// a cache (issue 49): a task's environment, and its servo layer.
pub(crate) const TASK_IMAGE_REPOS: [&str; 2] = ["saheeli-env", "saheeli-task"];

/// A cached task image no container uses.
pub(crate) struct UnusedImage {
    pub tag: String,
    pub bytes: u64,
}

/// The tags of cached task images (`TASK_IMAGE_REPOS`) whose image no
/// container, running or not, was made of: nothing needs them until a
/// task asks for one, which builds it again.
pub(crate) async fn unused_task_images(d: &Docker) -> anyhow::Result<Vec<UnusedImage>> {
    use bollard::query_parameters::{ListContainersOptionsBuilder, ListImagesOptionsBuilder};
    let containers = d
        .list_containers(Some(
            ListContainersOptionsBuilder::default().all(true).build(),
        ))
        .await
        .context("listing containers")?;
    let used: std::collections::HashSet<String> =
        containers.into_iter().filter_map(|c| c.image_id).collect();
    let images = d
        .list_images(Some(ListImagesOptionsBuilder::default().build()))
        .await
        .context("listing images")?;
    let mut out = Vec::new();
    for image in images.into_iter().filter(|i| !used.contains(&i.id)) {
        for tag in &image.repo_tags {
            let repo = tag.split_once(':').map_or(tag.as_str(), |(r, _)| r);
            if TASK_IMAGE_REPOS.contains(&repo) {
                out.push(UnusedImage {
                    tag: tag.clone(),
                    bytes: u64::try_from(image.size).unwrap_or(0),
                });
            }
        }
    }
    out.sort_by(|a, b| a.tag.cmp(&b.tag));
    Ok(out)
}

/// Removes the tag `tag` (its image when no other tag names it and no
/// image is made from it); a tag already gone is no error.
pub(crate) async fn remove_tag(d: &Docker, tag: &str) -> anyhow::Result<()> {
    let opts = RemoveImageOptionsBuilder::default().build();
    match d.remove_image(tag, Some(opts), None).await {
        Ok(_)
        | Err(DockerError::DockerResponseServerError {
            status_code: 404, ..
        }) => Ok(()),
        Err(e) => Err(e).with_context(|| format!("removing image `{tag}`")),
    }
}
