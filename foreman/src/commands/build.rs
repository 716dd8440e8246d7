//! `saheeli build-servo`: compile the servo, pack a build context
//! (Dockerfile + binary) and build the image through the Docker API.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, bail};

use crate::backend::docker::{self, BuildProgress};
use crate::cli::BuildServoArgs;
use crate::config::Config;

/// Where the Dockerfile is: `--context`, else beside config.yaml, else `.`.
pub(super) fn context_dir(cfg: &Config, args: &BuildServoArgs) -> anyhow::Result<PathBuf> {
    let dir = match &args.context {
        Some(d) => d.clone(),
        None if cfg.base_dir.join("Dockerfile").is_file() => cfg.base_dir.clone(),
        None => std::env::current_dir()?,
    };
    if !dir.join("Dockerfile").is_file() {
        bail!(
            "no Dockerfile in `{}`; run from the Saheeli repository or pass `--context DIR`",
            dir.display()
        );
    }
    Ok(dir)
}

/// The servo binary: `--servo-bin`, else a static release build in the
/// repository (scripts/servo-bin.sh).
fn servo_binary(dir: &Path, args: &BuildServoArgs) -> anyhow::Result<PathBuf> {
    if let Some(bin) = &args.servo_bin {
        if !bin.is_file() {
            bail!("`--servo-bin {}` is not a file", bin.display());
        }
        return Ok(bin.clone());
    }
    if !dir.join("Cargo.toml").is_file() {
        bail!(
            "`{}` is not the Saheeli repository (no Cargo.toml); pass `--servo-bin PATH`",
            dir.display()
        );
    }
    // scripts/servo-bin.sh is the one definition of how the servo is built
    // (static, for the image's triple; the reasons are there): it prints
    // the binary's path, relative to the repository unless
    // CARGO_TARGET_DIR is absolute.
    let script = dir.join("scripts/servo-bin.sh");
    eprintln!("building the servo binary ({}, static)", script.display());
    let out = Command::new("bash")
        .arg(&script)
        .arg("--quiet")
        .current_dir(dir)
        .stderr(std::process::Stdio::inherit())
        .output()
        .with_context(|| format!("running `{}`", script.display()))?;
    if !out.status.success() {
        bail!(
            "building the servo failed (`{}`: {})",
            script.display(),
            out.status
        );
    }
    let printed = String::from_utf8_lossy(&out.stdout);
    let bin = dir.join(printed.trim());
    if !bin.is_file() {
        bail!(
            "`{}` succeeded but the servo it printed, `{}`, is missing",
            script.display(),
            bin.display()
        );
    }
    Ok(bin)
}

/// Dockerfile, the servo binary as `servo`, and an empty `workspace/`.
fn context_tar(dockerfile: &Path, servo: &Path) -> anyhow::Result<Vec<u8>> {
    let mut b = tar::Builder::new(Vec::new());
    b.mode(tar::HeaderMode::Deterministic);
    b.append_path_with_name(dockerfile, "Dockerfile")
        .with_context(|| format!("reading `{}`", dockerfile.display()))?;
    let mut f =
        std::fs::File::open(servo).with_context(|| format!("reading `{}`", servo.display()))?;
    let mut h = tar::Header::new_gnu();
    h.set_size(f.metadata()?.len());
    h.set_mode(0o755);
    b.append_data(&mut h, "servo", &mut f)?;
    let mut d = tar::Header::new_gnu();
    d.set_entry_type(tar::EntryType::Directory);
    d.set_mode(0o755);
    d.set_size(0);
    b.append_data(&mut d, "workspace/", std::io::empty())?;
    Ok(b.into_inner()?)
}

pub(crate) async fn build_servo(cfg: &Config, args: &BuildServoArgs) -> anyhow::Result<()> {
    let dir = context_dir(cfg, args)?;
    if let Some(which) = &args.agent {
        return super::build_agent::build_agents(cfg, args, &dir, which).await;
    }
    let tag = args.tag.clone().unwrap_or_else(|| cfg.file.image.clone());
    let servo = servo_binary(&dir, args)?;
    let context = context_tar(&dir.join("Dockerfile"), &servo)?;
    // Pushed images are built where the swarm is (its manager trusts the
    // registry), so that the push needs no other engine's configuration.
    let (d, swarm) = engine_for(cfg, args).await?;
    let id = build_shown(&d, context, &tag, &cfg.file.base_image, &[], args.no_cache).await?;
    match swarm {
        Some(s) => {
            let pushed = crate::backend::swarm::push(&d, &id, &s.registry, "saheeli-servo").await?;
            eprintln!("pushed; set `image: {pushed}` in config.yaml");
            outln!("{pushed}");
        }
        None => outln!("{tag}"),
    }
    Ok(())
}

/// The engine an image is built on: the swarm's manager with `--push`
/// (it trusts the registry, so the push needs no other engine's
/// configuration), else this host's Docker.
pub(super) async fn engine_for<'a>(
    cfg: &'a Config,
    args: &BuildServoArgs,
) -> anyhow::Result<(bollard::Docker, Option<&'a crate::config::SwarmConfig>)> {
    let swarm = match (&cfg.file.swarm, args.push) {
        (Some(s), true) => Some(s),
        (None, true) => {
            bail!("`--push` needs a `swarm:` section in config.yaml with `manager` and `registry`")
        }
        (_, false) => None,
    };
    let d = match swarm {
        Some(s) => {
            crate::backend::swarm::Endpoint::manager(cfg, s)?
                .connect()
                .await?
        }
        None => docker::connect().await?,
    };
    Ok((d, swarm))
}

/// Builds `tag` from `context`, showing Docker's progress (a spinner on a
/// terminal, else its lines) and what was built; returns the image id.
pub(super) async fn build_shown(
    d: &bollard::Docker,
    context: Vec<u8>,
    tag: &str,
    base: &str,
    build_args: &[(&str, &str)],
    no_cache: bool,
) -> anyhow::Result<String> {
    let bar = std::io::stderr().is_terminal().then(|| {
        let pb = indicatif::ProgressBar::new_spinner();
        pb.enable_steady_tick(std::time::Duration::from_millis(120));
        pb.set_message(format!("building {tag}"));
        pb
    });
    let started = std::time::Instant::now();
    let result = docker::build_image(
        d,
        context.into(),
        tag,
        base,
        build_args,
        no_cache,
        |p| match p {
            BuildProgress::Line(line) => match &bar {
                Some(pb) => pb.set_message(line),
                None => eprintln!("{line}"),
            },
        },
    )
    .await;
    if let Some(pb) = bar {
        pb.finish_and_clear();
    }
    let id = result?;
    eprintln!(
        "built {tag} ({}) in {:.1}s",
        &id.trim_start_matches("sha256:")[..12.min(id.len())],
        started.elapsed().as_secs_f64()
    );
    Ok(id)
}
