//! `saheeli serve`, and what it shares with `run`: signals and the
//! reconciler's context.

use std::process::ExitCode;
use std::sync::{Arc, Mutex};

use tokio_util::sync::CancellationToken;

use crate::backend::docker;
use crate::cli::ServeArgs;
use crate::config::Config;
use crate::llm::Upstream;
use crate::reconciler::{self, ServeOptions};
use crate::state::TaskState;
use crate::supervisor::Ctx;

use super::{open_store, prepare_results_dir};

/// Raises this process's open-files limit to its hard limit. Each running
/// task holds a few descriptors (its gateway's listener and connections,
/// the Docker stream watching it, its workspace image while mounted): the
/// usual soft limit of 1024 would stop a foreman short of a few hundred
/// tasks, with errors far from the cause.
fn raise_open_files_limit() {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit only read and write `lim`.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 || lim.rlim_cur >= lim.rlim_max {
            return;
        }
        let soft = lim.rlim_cur;
        lim.rlim_cur = lim.rlim_max;
        if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) == 0 {
            tracing::debug!(from = soft, to = lim.rlim_max, "open files limit raised");
        }
    }
}

/// Ctrl-C or SIGTERM once: drain; twice: stop running containers too.
pub(super) fn signals() -> (CancellationToken, CancellationToken) {
    let drain = CancellationToken::new();
    let stop = CancellationToken::new();
    let (d, s) = (drain.clone(), stop.clone());
    tokio::spawn(async move {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("installing a SIGTERM handler");
        for n in 0.. {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
            if n == 0 {
                tracing::warn!(
                    "draining: no new tasks start; interrupt again to stop running ones"
                );
                d.cancel();
            } else {
                s.cancel();
                break;
            }
        }
    });
    (drain, stop)
}

pub(super) async fn context(cfg: &Config) -> anyhow::Result<Arc<Ctx>> {
    raise_open_files_limit();
    // A planted run directory stops `serve` before any task.
    let sockets = crate::door::Sockets::from_config(cfg)?;
    let mut upstream = Upstream::from_config(cfg)?;
    // Local servers' windows (llama-server, vLLM, Ollama), for compaction.
    upstream.probe_servers().await;
    let upstream = Arc::new(upstream);
    let secrets = upstream.providers.secrets();
    if let Some(why) = crate::backend::capabilities::config_refusal(cfg) {
        anyhow::bail!("{}: {why}", cfg.describe_source());
    }
    let engine = match &cfg.file.swarm {
        Some(swarm) if cfg.file.backend == crate::config::BackendKind::Swarm => {
            if let Some(problem) = cfg.file.swarm_image_problem() {
                anyhow::bail!("{}: {problem}", cfg.describe_source());
            }
            let manager_addr = crate::backend::swarm::Endpoint::manager(cfg, swarm)?;
            let manager = manager_addr.connect().await?;
            if swarm.manager.starts_with("unix://") {
                tracing::warn!(
                    manager = %swarm.manager,
                    "`swarm.manager` is a unix socket: no node's engine can be reached from it, so `verify`, OOM detection, live logs and removing Docker 20.10's leftovers on the nodes will not work; use the manager's `tcp://` address"
                );
            }
            let hub = crate::door::Hub::default();
            // Lives as long as this process: servos call it until they end.
            hub.listen(&swarm.gateway_listen, CancellationToken::new())
                .await?;
            let key = crate::backend::swarm::token_key(&cfg.state_dir())?;
            let parts = crate::backend::swarm::SwarmParts {
                manager,
                manager_addr,
                network: swarm.network.clone(),
                gateway_url: format!("http://{}", swarm.gateway_listen),
                hub,
                key,
            };
            let engine = crate::backend::swarm::Swarm::new(parts, cfg.clone(), secrets);
            crate::backend::Engine::Swarm(engine)
        }
        _ => {
            match cfg.file.limits.disk_enforcement {
                crate::config::DiskEnforcement::Loop => crate::backend::disk::preflight()?,
                crate::config::DiskEnforcement::Off => tracing::warn!(
                    "`limits.disk_enforcement: off`: workspaces have no size limit; an agent can fill this host's disk"
                ),
            }
            let docker = docker::connect().await?;
            let engine = crate::backend::local::Local::new(docker, cfg.clone(), secrets);
            crate::backend::Engine::Local(engine)
        }
    };
    let lease = crate::store::Lease::new(cfg.file.lease);
    // The warm pool's servos are labelled as this foreman's.
    let engine = match engine {
        crate::backend::Engine::Local(l) => {
            crate::backend::Engine::Local(l.with_pool(&lease.owner))
        }
        crate::backend::Engine::Swarm(s) => {
            crate::backend::Engine::Swarm(s.with_pool(&lease.owner))
        }
        #[cfg(test)]
        fake @ crate::backend::Engine::Fake(_) => fake,
    };
    let store = open_store(cfg)?;
    prepare_results_dir(cfg)?;
    super::common::prepare_state_dir(cfg)?;
    let metrics = crate::metrics::Metrics::new(
        cfg.database(),
        upstream.providers.clone(),
        crate::metrics::Source::Foreman,
    )
    .with_pools(cfg.file.pools.clone())
    .with_pools_of(crate::definitions::pools_in_use);
    Ok(Arc::new(Ctx {
        cfg: cfg.clone(),
        lease,
        engine,
        store: Arc::new(Mutex::new(store)),
        bus: crate::events::Bus::new(1024),
        upstream,
        sockets,
        desk_store: Arc::new(Mutex::new(open_store(cfg)?)),
        metrics,
        admission: Mutex::new(crate::admission::Admission::new(
            cfg.file.concurrency,
            crate::admission::Tuning::default(),
        )),
    }))
}

pub(crate) async fn serve(cfg: &Config, args: ServeArgs) -> anyhow::Result<ExitCode> {
    let mut cfg = cfg.clone();
    if let Some(c) = args.concurrency {
        cfg.file.concurrency = c;
    }
    if let Some(d) = &args.definitions {
        let poll = cfg.file.definitions.as_ref().map(|d| d.poll);
        cfg.file.definitions =
            Some(crate::config::DefinitionsConfig::from_arg(d, poll).map_err(anyhow::Error::msg)?);
    }
    // Checked before anything starts: a refused address names its setting.
    let http = crate::web::HttpSettings::from_config(&cfg, args.http.as_deref())?;
    let definitions = definitions(&cfg).await?;
    let ctx = context(&cfg).await?;
    // The image is here (or, on a swarm, pulled on every node ahead).
    ctx.engine.check_image().await?;
    // The dashboard runs beside the loop, never in it, and stops after it.
    let web_stop = CancellationToken::new();
    let web = match http {
        Some(settings) => {
            Some(crate::web::start(settings, &ctx, definitions.clone(), web_stop.clone()).await?)
        }
        None => None,
    };
    let watching = definitions.map(|d| tokio::spawn(d.watch(web_stop.clone())));
    let (drain, stop) = signals();
    tracing::info!(
        config = %cfg.source.as_deref().map(|p| p.display().to_string()).unwrap_or_else(|| "built-in defaults".into()),
        concurrency = %cfg.file.concurrency,
        providers = %ctx.upstream.providers.summary(),
        drain = args.drain,
        open_files = crate::listen::open_files_limit(),
        fd_reserve = crate::listen::FD_RESERVE,
        gateway_connections = ctx.sockets.connections,
        dashboard_connections = cfg.file.http.max_connections,
        "serving"
    );
    let summary = reconciler::run(
        ctx,
        ServeOptions {
            drain: args.drain,
            only: None,
        },
        drain,
        stop,
    )
    .await;
    web_stop.cancel();
    if let Some(web) = web {
        let _ = web.await;
    }
    if let Some(w) = watching {
        let _ = w.await;
    }
    let summary = summary?;
    let complete = summary
        .finished
        .iter()
        .filter(|(_, s)| *s == TaskState::Complete)
        .count();
    eprintln!(
        "served {} tasks, {} complete",
        summary.finished.len(),
        complete
    );
    Ok(if summary.all_complete() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// The definitions repository `definitions:` names (issue 52), read once
/// before serving: a repository that cannot be read stops `serve` here
/// unless a set applied before (it keeps serving); a first commit that is
/// refused leaves no set (status says why).
async fn definitions(cfg: &Config) -> anyhow::Result<Option<Arc<crate::definitions::Syncer>>> {
    let Some(d) = &cfg.file.definitions else {
        return Ok(None);
    };
    let source = crate::definitions::Source::of(cfg, d)?;
    if !cfg.file.agent_types.is_empty() || !cfg.file.pools.is_empty() {
        tracing::warn!(
            "config.yaml's `agent_types` and `pools` give way to the definitions repository's \
             once a commit of it applies"
        );
    }
    super::common::prepare_state_dir(cfg)?;
    let syncer = Arc::new(crate::definitions::Syncer::new(
        cfg.clone(),
        source,
        open_store(cfg)?,
    ));
    let first = syncer.sync().await;
    crate::definitions::log(&first);
    if let Err(e) = first {
        // With a set applied before, it keeps serving (the log says why
        // the repository was not read); with none, nothing would.
        if open_store(cfg)?.definitions_current()?.is_none() {
            return Err(e);
        }
    }
    Ok(Some(syncer))
}
