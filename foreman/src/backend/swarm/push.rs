//! `saheeli build-servo --push`: the built image tagged
//! `<registry>/saheeli-servo:<content digest>` (an agent's image,
//! `build-servo --agent NAME --push`: `<registry>/saheeli-servo-NAME:…`)
//! and pushed, so that every node pulls the same bits; tasks name it by
//! the registry's digest.

use anyhow::Context;
use bollard::Docker;
use bollard::query_parameters::{PushImageOptions, TagImageOptions};
use futures_util::StreamExt;

/// Tags image `id` as repository `name` in `registry` and pushes it;
/// returns the reference by digest (`<registry>/<name>@sha256:…`).
pub(crate) async fn push(
    d: &Docker,
    id: &str,
    registry: &str,
    name: &str,
) -> anyhow::Result<String> {
    let repo = format!("{registry}/{name}");
    let content = id.trim_start_matches("sha256:").to_string();
    d.tag_image(
        id,
        Some(TagImageOptions {
            repo: Some(repo.clone()),
            tag: Some(content.clone()),
        }),
    )
    .await
    .with_context(|| format!("tagging the image `{id}` as `{repo}:{content}`"))?;
    let mut stream = Box::pin(d.push_image(
        &repo,
        Some(PushImageOptions {
            tag: Some(content.clone()),
            ..Default::default()
        }),
        None,
    ));
    let mut digest = None;
    while let Some(item) = stream.next().await {
        let info = item.with_context(|| format!("pushing `{repo}:{content}` to `{registry}`"))?;
        if let Some(e) = info.error_detail.and_then(|e| e.message) {
            anyhow::bail!("pushing `{repo}:{content}` to `{registry}`: {e}");
        }
        if let Some(status) = info.status
            && let Some(d) = digest_in(&status)
        {
            digest = Some(d);
        }
    }
    let digest = digest.with_context(|| {
        format!("the registry `{registry}` did not report a digest for `{repo}:{content}`")
    })?;
    Ok(format!("{repo}@{digest}"))
}

/// The digest in a push's last status line (`<tag>: digest: sha256:… size: N`).
fn digest_in(status: &str) -> Option<String> {
    let rest = status.split("digest: ").nth(1)?;
    let d = rest.split_whitespace().next()?;
    (d.starts_with("sha256:") && d.len() == 71).then(|| d.to_string())
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_digest_is_read_from_the_push_status() {
        let d = format!("sha256:{}", "a".repeat(64));
        assert_eq!(
            super::digest_in(&format!("abc: digest: {d} size: 1234")),
            Some(d)
        );
        assert_eq!(super::digest_in("Pushed"), None);
        assert_eq!(super::digest_in("x: digest: sha256:short size: 1"), None);
    }
}
