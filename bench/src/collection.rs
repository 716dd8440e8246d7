//! Collection of a big workspace (10k files of 10 kB: 100 MB) against
//! `docker cp` of the same data from a stopped container.
//!
//! The method, and why: the foreman times its own collection (download of
//! /workspace through the API, checked extraction into a `.partial`
//! directory, any redaction pass, the rename into `results/<id>`) and
//! writes it in the task's last event ("… in N ms into …"); that number is
//! the real code on the real path, so it is the figure. It is checked from
//! outside by the container's `die` → `destroy` events (collection plus the
//! OOM check and the container's removal), which must not be smaller.
//! `docker cp` copies the same path from an equivalent stopped container:
//! the servo image with a task's options and user (uid 1000), whose
//! /workspace volume was filled the same way, to the same filesystem. The
//! equivalence matters: the daemon archives files owned by a uid with no
//! name in the image's /etc/passwd several times slower than root's, so a
//! root-owned reference would time a different daemon path. Shown beside:
//! the API download alone (drained, nothing written), a download extracted
//! by the bench's own minimal collector (`extract`), and the download of
//! the same files owned by root in the base image.
//!
//! A second figure sets a (dummy) API key in the foreman's environment, so
//! collection also scans every file for it, as it does in real use.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use bollard::models::{ContainerCreateBody, HostConfig, Mount, MountType};
use bollard::query_parameters::DownloadFromContainerOptionsBuilder;
use futures_util::StreamExt;
use serde_json::json;

use crate::env::{BENCH_LABEL, Env, bench_label_value, progress};
use crate::events::ms_between;
use crate::floor;
use crate::project::Project;
use crate::stats::{Figure, median};

const FILE_BYTES: usize = 10_000;

fn fill_command(files: usize) -> String {
    format!(
        "python3 -c \"import os; os.makedirs('data', exist_ok=True); b = os.urandom({FILE_BYTES}); \
         [open('data/f%d' % i, 'wb').write(b) for i in range({files})]\""
    )
}

/// What one collection by the foreman took.
struct Collected {
    own_ms: f64,
    outside_ms: f64,
}

/// Runs the fill task once; reads the foreman's and Docker's timings.
async fn collect_once(
    env: &Env,
    p: &Project,
    prompt: &str,
    files: usize,
) -> anyhow::Result<Collected> {
    let (_, task) = p.timed_run(prompt)?;
    let id = task["id"].as_str().context("no id")?.to_string();
    let detail: String = p.db()?.query_row(
        "SELECT detail FROM events WHERE task_id = ?1 ORDER BY id DESC LIMIT 1",
        [&id],
        |r| r.get(0),
    )?;
    let num_before = |marker: &str| -> Option<f64> {
        detail
            .split(marker)
            .next()?
            .rsplit(' ')
            .next()?
            .parse()
            .ok()
    };
    let own_ms =
        num_before(" ms into ").with_context(|| format!("no collection time in `{detail}`"))?;
    let bytes = num_before(" bytes in ").unwrap_or(0.0);
    if bytes < (files * FILE_BYTES) as f64 {
        bail!(
            "only {bytes} bytes collected, expected {}: `{detail}`",
            files * FILE_BYTES
        );
    }
    let mut outside_ms = f64::NAN;
    for _ in 0..100 {
        let t = env.events.times(&id);
        if let (Some(d), Some(x)) = (t.die, t.destroy) {
            outside_ms = ms_between(d, x);
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    if let Some(dir) = task["results"].as_str() {
        let _ = std::fs::remove_dir_all(dir);
    }
    Ok(Collected { own_ms, outside_ms })
}

/// One way of running the foreman for the collection figures.
struct Variant {
    name: String,
    /// Extra config.yaml lines.
    config: &'static str,
    /// An API key in the foreman's environment (adds the redaction pass).
    key: bool,
    runs: usize,
}

pub async fn collection(env: &Env) -> anyhow::Result<Vec<Figure>> {
    let files = env.sizes.collect_files;
    let mb = files * FILE_BYTES / 1_000_000;
    progress(&format!(
        "collection: {mb} MB in {files} files, references (docker cp, API download)"
    ));
    let refs = references(env, files).await?;
    let runs = env.sizes.collect_runs;
    let variants = [
        Variant {
            name: format!("collection: {mb} MB in {files} files"),
            config: "",
            key: false,
            runs,
        },
        Variant {
            name: format!("collection (archive API): {mb} MB"),
            config: "collection: archive\n",
            key: false,
            runs,
        },
        Variant {
            name: format!("collection, API key set: {mb} MB"),
            config: "",
            key: true,
            runs: runs.min(2),
        },
    ];
    let cp_ms = median(&refs.cp);
    let dl_ms = median(&refs.download);
    let x_ms = median(&refs.extract);
    let root_ms = median(&refs.download_root);
    let mut figures = Vec::new();
    for v in variants {
        progress(&format!("collection: {}", v.name));
        let mut p = Project::with_config(env, 8, v.config)?;
        if v.key {
            p.env
                .push(("OPENAI_API_KEY".into(), "sk-saheeli-bench-not-a-key".into()));
        }
        let result = async {
            let prompt = p.replay_prompt(
                "fill",
                &[
                    (
                        "execute_shell",
                        json!({"command": fill_command(files), "timeout_s": 600}),
                    ),
                    ("task_complete", json!({"message": "ok"})),
                ],
            )?;
            let mut out = vec![];
            for _ in 0..v.runs {
                out.push(collect_once(env, &p, &prompt, files).await?);
            }
            anyhow::Ok(out)
        }
        .await;
        p.cleanup(env).await;
        let runs = match result {
            Ok(r) => r,
            // A foreman from before `collection:` existed has only the API.
            Err(e) if !v.config.is_empty() && format!("{e:#}").contains("unknown field") => {
                progress(&format!("collection: skipped `{}`: {e:#}", v.config.trim()));
                continue;
            }
            Err(e) => return Err(e),
        };
        let own: Vec<f64> = runs.iter().map(|c| c.own_ms).collect();
        let outside: Vec<f64> = runs.iter().map(|c| c.outside_ms).collect();
        let mut f = Figure::new(&v.name, "ms", &own)
            .against("docker cp", cp_ms, 1.0)
            .detail("die→destroy (Docker events)", median(&outside))
            .note(format!(
                "the foreman's own timing; checked from outside: container die→destroy {:.0} ms",
                median(&outside)
            ));
        if v.key {
            f = f.note("the foreman also scans every collected file for the key's value");
        }
        if figures.is_empty() {
            // The references, once.
            f = f
                .note(if refs.volume_dir_readable {
                    "default config (`collection: auto`): the volume's directory is readable here, so the foreman copies from it"
                } else {
                    "default config (`collection: auto`): volume directories are not readable here, so the foreman uses the archive API"
                })
                .detail("API download alone, nothing written", dl_ms)
                .detail("API download + extraction by the bench", x_ms)
                .detail("API download alone, files owned by root in the base image", root_ms)
                .note(format!(
                    "references, same data in a stopped task-like container: docker cp {cp_ms:.0} ms; \
                     API download alone (nothing written) {dl_ms:.0} ms; with the bench's minimal extraction {x_ms:.0} ms"
                ))
                .note(format!(
                    "API download alone of the same files owned by root in the base image: {root_ms:.0} ms \
                     (uid 1000 has no name in the image's /etc/passwd)"
                ));
        }
        figures.push(f);
    }
    Ok(figures)
}

/// Milliseconds of each run of the references.
struct References {
    /// `docker cp` to a new directory.
    cp: Vec<f64>,
    /// The API download, drained without writing.
    download: Vec<f64>,
    /// The API download extracted by the bench (`extract`).
    extract: Vec<f64>,
    /// The API download of the same files owned by root in the base image.
    download_root: Vec<f64>,
    /// Whether we can read a volume's directory (the foreman's `auto`
    /// collection then copies from it instead of using the archive API).
    volume_dir_readable: bool,
}

/// A stopped container whose /workspace volume holds the test data:
/// like a task's (servo image, hardened, uid 1000) or, with `root`, a
/// plain base-image container run as root. Returns (container, volume).
async fn filled(env: &Env, files: usize, root: bool) -> anyhow::Result<(String, String)> {
    let volume = format!("saheeli-bench-{}", uuid::Uuid::now_v7());
    let fill = vec![
        "bash".to_string(),
        "-c".into(),
        format!("cd /workspace && {}", fill_command(files)),
    ];
    let body = if root {
        ContainerCreateBody {
            image: Some(env.base.clone()),
            cmd: Some(fill),
            labels: Some(HashMap::from([(
                BENCH_LABEL.to_string(),
                bench_label_value(),
            )])),
            network_disabled: Some(true),
            host_config: Some(HostConfig {
                network_mode: Some("none".into()),
                mounts: Some(vec![Mount {
                    target: Some("/workspace".into()),
                    source: Some(volume.clone()),
                    typ: Some(MountType::VOLUME),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        }
    } else {
        floor::hardened_body(env, &volume, fill)
    };
    floor::create_volume(env, &volume).await?;
    let c = env.docker.create_container(None, body).await?;
    env.created_container(&c.id);
    env.docker.start_container(&c.id, None).await?;
    floor::wait(env, &c.id).await?;
    Ok((c.id, volume))
}

/// Drains the API download of `container`'s /workspace; ms.
async fn download(env: &Env, container: &str, files: usize) -> anyhow::Result<f64> {
    let t0 = Instant::now();
    let opts = DownloadFromContainerOptionsBuilder::default()
        .path("/workspace")
        .build();
    let mut tar = env.docker.download_from_container(container, Some(opts));
    let mut bytes = 0;
    while let Some(chunk) = tar.next().await {
        bytes += chunk.context("downloading /workspace")?.len();
    }
    if bytes < files * FILE_BYTES {
        bail!("the reference workspace holds only {bytes} bytes");
    }
    Ok(t0.elapsed().as_secs_f64() * 1000.0)
}

/// The references, on the same data in stopped containers.
async fn references(env: &Env, files: usize) -> anyhow::Result<References> {
    let mut refs = References {
        cp: vec![],
        download: vec![],
        extract: vec![],
        download_root: vec![],
        volume_dir_readable: false,
    };
    let (c, volume) = filled(env, files, false).await?;
    refs.volume_dir_readable = env
        .docker
        .inspect_volume(&volume)
        .await
        .is_ok_and(|v| std::fs::read_dir(v.mountpoint).is_ok());
    let result = async {
        for _ in 0..env.sizes.collect_runs.max(3) {
            let dest = tempfile::Builder::new()
                .prefix("saheeli-bench-cp-")
                .tempdir()?;
            let t0 = Instant::now();
            let st = std::process::Command::new("docker")
                .args(["cp", &format!("{c}:/workspace")])
                .arg(dest.path().join("ws"))
                .status()
                .context("running `docker cp`")?;
            if !st.success() {
                bail!("`docker cp` failed ({st})");
            }
            refs.cp.push(t0.elapsed().as_secs_f64() * 1000.0);
        }
        for _ in 0..env.sizes.collect_runs.min(2) {
            refs.download.push(download(env, &c, files).await?);
            let dest = tempfile::Builder::new()
                .prefix("saheeli-bench-x-")
                .tempdir()?;
            let t0 = Instant::now();
            crate::extract::collect(&env.docker, &c, &dest.path().join("ws")).await?;
            refs.extract.push(t0.elapsed().as_secs_f64() * 1000.0);
        }
        anyhow::Ok(())
    }
    .await;
    floor::remove(env, &c).await?;
    floor::remove_volume(env, &volume).await?;
    result?;
    let (c, volume) = filled(env, files, true).await?;
    let result = async {
        for _ in 0..env.sizes.collect_runs.min(2) {
            refs.download_root.push(download(env, &c, files).await?);
        }
        anyhow::Ok(())
    }
    .await;
    floor::remove(env, &c).await?;
    floor::remove_volume(env, &volume).await?;
    result?;
    Ok(refs)
}
