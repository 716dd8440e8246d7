//! `saheeli build-servo --agent NAME|all` (issue 25): an agent image, the
//! servo image with one agent CLI installed from pinned wheels.
//!
//! `agents/NAME/requirements.txt` pins every wheel with its sha256. The
//! wheels are downloaded on the host (`pip download --require-hashes`,
//! cached in `.agents/NAME/` beside the Dockerfile, fetched again only when
//! the requirements change) and sent in the build context with
//! `agents/Dockerfile`; the build itself runs with no network.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, bail};
use saheeli_protocol::{Agent, AgentName};
use sha2::Digest;

use crate::backend::docker;
use crate::cli::BuildServoArgs;
use crate::config::Config;

/// The third-party agents: every one with an image of its own.
fn third_party() -> Vec<AgentName> {
    AgentName::ALL
        .into_iter()
        .filter(|n| n.api().is_some())
        .collect()
}

/// The agents `which` names (`all`: every third-party one).
fn chosen(which: &str) -> anyhow::Result<Vec<AgentName>> {
    if which == "all" {
        return Ok(third_party());
    }
    match AgentName::parse(which) {
        Some(AgentName::Saheeli) => {
            bail!(
                "`--agent saheeli` is the servo image itself; run `saheeli build-servo` without `--agent`"
            )
        }
        Some(AgentName::Oracle) => {
            bail!(
                "`--agent oracle` runs a task's `solution:` in the servo image; it needs no image \
                 of its own: run `saheeli build-servo` without `--agent`"
            )
        }
        Some(n) => Ok(vec![n]),
        None => bail!(
            "unknown agent `{which}` in `--agent`; expected one of {}, or `all`",
            third_party()
                .iter()
                .map(|n| n.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

pub(crate) async fn build_agents(
    cfg: &Config,
    args: &BuildServoArgs,
    dir: &Path,
    which: &str,
) -> anyhow::Result<()> {
    let names = chosen(which)?;
    if names.len() > 1 && args.tag.is_some() {
        bail!(
            "`--tag` names one image; with `--agent all` the tags come from `agents:` in config.yaml"
        );
    }
    // With `--push`, built on the swarm's manager from the servo image
    // pushed there (`image:`), then pushed as the servo image is.
    let (d, swarm) = super::build::engine_for(cfg, args).await?;
    docker::require_image(&d, &cfg.file.image)
        .await
        .with_context(|| {
            format!(
                "the agent images start from the servo image `{}`",
                cfg.file.image
            )
        })?;
    for name in names {
        let tag = match (&args.tag, swarm) {
            (Some(t), _) => t.clone(),
            // `agents:` may name the pushed reference (by digest): the
            // build is tagged as it would be on this host.
            (None, Some(_)) => crate::spec::default_image(name),
            (None, None) => crate::spec::image_for(cfg, &Agent::Named(name)),
        };
        let wheels = fetch_wheels(dir, name)?;
        let context = context_tar(dir, name, &wheels)?;
        eprintln!(
            "building {tag} ({name}: {} wheels, {:.0} MB of context)",
            wheels.len(),
            context.len() as f64 / 1e6
        );
        let id = super::build::build_shown(
            &d,
            context,
            &tag,
            &cfg.file.base_image,
            &[("SERVO", cfg.file.image.as_str())],
            args.no_cache,
        )
        .await
        .with_context(|| format!("building the `{name}` agent image"))?;
        match swarm {
            Some(s) => {
                let repo = format!("saheeli-servo-{name}");
                let pushed = crate::backend::swarm::push(&d, &id, &s.registry, &repo).await?;
                eprintln!("pushed; set `agents: {{ {name}: {pushed} }}` in config.yaml");
                outln!("{pushed}");
            }
            None => outln!("{tag}"),
        }
    }
    Ok(())
}

/// `agents/NAME/requirements.txt` beside the Dockerfile.
fn requirements(dir: &Path, name: AgentName) -> anyhow::Result<PathBuf> {
    let req = dir
        .join("agents")
        .join(name.as_str())
        .join("requirements.txt");
    if !req.is_file() {
        bail!(
            "no pinned requirements for agent `{name}` at `{}`; run from the Saheeli repository \
             or pass `--context DIR`",
            req.display()
        );
    }
    Ok(req)
}

/// The wheels for `name`, downloaded with their hashes checked unless the
/// cache already holds the set for these exact requirements.
fn fetch_wheels(dir: &Path, name: AgentName) -> anyhow::Result<Vec<PathBuf>> {
    let req = requirements(dir, name)?;
    let text = std::fs::read(&req).with_context(|| format!("reading `{}`", req.display()))?;
    let digest = format!("{:x}", sha2::Sha256::digest(&text));
    let cache = dir.join(".agents").join(name.as_str());
    let marker = cache.join(".fetched");
    if std::fs::read_to_string(&marker).ok().as_deref() != Some(digest.as_str()) {
        std::fs::create_dir_all(&cache)
            .with_context(|| format!("creating `{}`", cache.display()))?;
        eprintln!(
            "downloading the pinned wheels of `{name}` into `{}`",
            cache.display()
        );
        let status = Command::new("python3")
            .args([
                "-m",
                "pip",
                "download",
                "--quiet",
                "--disable-pip-version-check",
            ])
            .args(["--require-hashes", "--no-deps", "--only-binary=:all:"])
            .arg("-r")
            .arg(&req)
            .arg("-d")
            .arg(&cache)
            .status()
            .context("running `python3 -m pip download` (is pip installed?)")?;
        if !status.success() {
            bail!(
                "`pip download` of `{}` failed ({status}); scripts/setup.sh fetches the wheels too",
                req.display()
            );
        }
        std::fs::write(&marker, &digest)?;
    }
    let mut wheels: Vec<PathBuf> = std::fs::read_dir(&cache)?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "whl"))
        .collect();
    wheels.sort();
    if !wheels.iter().any(|w| {
        w.file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with("pip-"))
    }) {
        bail!(
            "`{}` pins no `pip` wheel, which the offline install runs from",
            req.display()
        );
    }
    Ok(wheels)
}

/// agents/Dockerfile, the requirements and the wheels.
fn context_tar(dir: &Path, name: AgentName, wheels: &[PathBuf]) -> anyhow::Result<Vec<u8>> {
    let mut b = tar::Builder::new(Vec::new());
    b.mode(tar::HeaderMode::Deterministic);
    let dockerfile = dir.join("agents/Dockerfile");
    b.append_path_with_name(&dockerfile, "Dockerfile")
        .with_context(|| format!("reading `{}`", dockerfile.display()))?;
    b.append_path_with_name(requirements(dir, name)?, "requirements.txt")?;
    for w in wheels {
        let file = w.file_name().expect("a wheel has a name");
        b.append_path_with_name(w, Path::new("wheels").join(file))
            .with_context(|| format!("reading `{}`", w.display()))?;
    }
    Ok(b.into_inner()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agent_names_are_checked() {
        assert_eq!(
            chosen("mini-swe-agent").unwrap(),
            vec![AgentName::MiniSweAgent]
        );
        assert_eq!(chosen("all").unwrap().len(), 4);
        assert!(!chosen("all").unwrap().contains(&AgentName::Saheeli));
        let e = chosen("claude").unwrap_err().to_string();
        assert!(
            e.contains("unknown agent `claude`") && e.contains("claude-code"),
            "{e}"
        );
        assert!(
            chosen("saheeli")
                .unwrap_err()
                .to_string()
                .contains("without `--agent`")
        );
    }
}
