//! One task's gateway, put together from its three rooms: its door
//! (`door`: a unix socket, a warm servo's socket or a route of the hub),
//! its LLM side (`llm::GatewayState`: budget, meter, ledger) and its task
//! routes (`routes`); opened, adopted after a foreman restart, stopped.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::Context;
use axum::Router;
use axum::routing::post;
use saheeli_protocol::TaskId;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::door::{self, Hub, RemoteTask, UploadFrom, WarmSocket, WarmTask, socket};
use crate::llm::ledger::Ledger;
use crate::llm::live::{self, LiveBus};
use crate::llm::task::not_found;
use crate::llm::vendor::passthrough;
use crate::llm::{Budget, GatewayState, Meter, Upstream, pricing};
use crate::routes;

/// A running gateway for one task.
pub(crate) struct Gateway {
    meter: Arc<Meter>,
    /// Its state: the live followers, let go first when it stops
    /// (`live`); the report's synthesis call (`synthesis`).
    pub(crate) state: Arc<GatewayState>,
    transport: Transport,
    /// To settle the calls still in flight when it stops (issue 27).
    ledger: Arc<Ledger>,
    task_id: TaskId,
}

/// How the servo reaches its gateway.
enum Transport {
    /// A unix socket in a directory mounted into the container.
    Socket {
        dir: PathBuf,
        stop: CancellationToken,
        server: tokio::task::JoinHandle<()>,
    },
    /// A route of the shared TCP listener, selected by the task's token.
    Remote { hub: Hub, task_id: TaskId },
    /// A warm servo's socket, claimed for this task (issue 28).
    Warm { socket: WarmSocket },
}

/// What a task's gateway is opened with: the task, its model and budget,
/// its routes, how its servo reaches it, and for an adopted servo what it
/// has spent so far.
pub(crate) struct GatewayPlan {
    pub task_id: TaskId,
    pub upstream: Arc<Upstream>,
    pub model: String,
    pub budget: Budget,
    /// What the task's routes are built from.
    pub routes: routes::Plan,
    pub way: Way,
    /// A running servo whose foreman stopped: its budget goes on from the
    /// call ledger, or from this (input, output, cost) when the ledger
    /// knows no call.
    pub adopted: Option<(u64, u64, f64)>,
}

/// How the servo reaches its gateway.
pub(crate) enum Way {
    /// `<run_dir>/<task_id>/gateway.sock`, mounted into its container.
    Socket { run_dir: PathBuf },
    /// The shared TCP listener, by token; what the servo fetches and where
    /// its upload goes.
    Remote { hub: Hub, task: RemoteTask },
    /// A warm servo's socket the pool bound before the task was claimed
    /// (or, adopting, bound again in the directory its container has
    /// mounted); what the servo fetches once released.
    Warm { socket: WarmSocket, task: WarmTask },
}

impl Gateway {
    /// Opens the gateway of one launch, new or adopted, on either way.
    pub async fn open(plan: GatewayPlan) -> anyhow::Result<Gateway> {
        let GatewayPlan {
            task_id,
            upstream,
            model,
            budget,
            routes: task_routes,
            way,
            adopted,
        } = plan;
        match (way, adopted) {
            (Way::Socket { run_dir }, None) => {
                Self::start(&run_dir, task_id, upstream, &model, budget, task_routes).await
            }
            (Way::Socket { run_dir }, Some(spent)) => {
                Self::adopt(
                    &run_dir,
                    task_id,
                    upstream,
                    &model,
                    budget,
                    spent,
                    task_routes,
                )
                .await
            }
            (Way::Remote { hub, task }, None) => {
                Ok(
                    Self::start_remote(&hub, task_id, upstream, &model, budget, task_routes, task)
                        .await,
                )
            }
            (Way::Remote { hub, task }, Some(spent)) => {
                Self::adopt_remote(
                    &hub,
                    task_id,
                    upstream,
                    &model,
                    budget,
                    spent,
                    task_routes,
                    task,
                )
                .await
            }
            (Way::Warm { socket, task }, adopted) => {
                let ledger = upstream.ledger.clone();
                let key = saheeli_protocol::human::SessionKey {
                    key: upstream.session_secret.for_task(task_id),
                    resume_key: task
                        .resume_from
                        .map(|f| upstream.session_secret.for_task(f)),
                };
                let session_key = serde_json::to_string(&key)?;
                let (meter, state, app) = Self::app(
                    task_id,
                    upstream,
                    &model,
                    budget,
                    task_routes,
                    adopted.is_some(),
                );
                socket.install(app, door::warm::Claimed { task, session_key });
                let g = Gateway {
                    meter,
                    state,
                    transport: Transport::Warm {
                        socket: socket.clone(),
                    },
                    ledger,
                    task_id,
                };
                if let Some(spent) = adopted {
                    g.seed_adopted(spent).await?;
                    // Its foreman recorded the claim and stopped: the
                    // servo may still be waiting for its launch.
                    socket.release();
                }
                Ok(g)
            }
        }
    }

    /// An adopted warm servo's meter goes on from the ledger, or `spent`.
    async fn seed_adopted(&self, spent: (u64, u64, f64)) -> anyhow::Result<()> {
        let (ledger, task_id) = (self.ledger.clone(), self.task_id);
        let from_ledger = tokio::task::spawn_blocking(move || ledger.adopt(task_id))
            .await
            .context("ledger thread panicked")??;
        match from_ledger {
            Some(s) => {
                self.meter.seed(s.input_tokens, s.output_tokens, s.cost_usd);
                self.meter
                    .seed_cached(s.cache_read_tokens, s.cache_write_tokens);
                self.meter.calls.store(s.calls, Ordering::Relaxed);
            }
            None => self.meter.seed(spent.0, spent.1, spent.2),
        }
        Ok(())
    }

    /// Serves `<run_dir>/<task_id>/gateway.sock` for a new task using `model`.
    async fn start(
        run_dir: &Path,
        task_id: TaskId,
        upstream: Arc<Upstream>,
        model: &str,
        budget: Budget,
        task_routes: routes::Plan,
    ) -> anyhow::Result<Gateway> {
        Self::serve(
            run_dir,
            task_id,
            upstream,
            model,
            budget,
            task_routes,
            false,
        )
        .await
    }

    /// Serves a running servo whose foreman stopped, in the directory its
    /// container has mounted. Its meter starts from the ledger (calls the
    /// dead foreman left in flight counted once, at their reservation), or
    /// from `spent` (input, output, cost) when the ledger knows no call.
    async fn adopt(
        run_dir: &Path,
        task_id: TaskId,
        upstream: Arc<Upstream>,
        model: &str,
        budget: Budget,
        spent: (u64, u64, f64),
        task_routes: routes::Plan,
    ) -> anyhow::Result<Gateway> {
        let ledger = upstream.ledger.clone();
        let from_ledger = tokio::task::spawn_blocking(move || ledger.adopt(task_id))
            .await
            .context("ledger thread panicked")??;
        let g = Self::serve(run_dir, task_id, upstream, model, budget, task_routes, true).await?;
        match from_ledger {
            Some(s) => {
                if s.lost > 0 {
                    warn!(task_id = %task_id, lost = s.lost, "calls cut off by a foreman's death counted at their reservation");
                }
                g.meter.seed(s.input_tokens, s.output_tokens, s.cost_usd);
                g.meter
                    .seed_cached(s.cache_read_tokens, s.cache_write_tokens);
                g.meter.calls.store(s.calls, Ordering::Relaxed);
            }
            None => g.meter.seed(spent.0, spent.1, spent.2),
        }
        Ok(g)
    }

    async fn serve(
        run_dir: &Path,
        task_id: TaskId,
        upstream: Arc<Upstream>,
        model: &str,
        budget: Budget,
        task_routes: routes::Plan,
        adopt: bool,
    ) -> anyhow::Result<Gateway> {
        let upstream_cap = upstream.gateway_connections;
        let ledger = upstream.ledger.clone();
        let (meter, state, app) = Self::app(task_id, upstream, model, budget, task_routes, adopt);
        let dir = socket::task_dir(run_dir, &task_id.to_string(), adopt)?;
        let listener = match door::bind(&dir) {
            Ok(l) => l,
            Err(e) => {
                // A fresh directory is ours to remove (an adopted one is
                // the running container's mount): no failed launch leaves
                // its directory behind.
                if !adopt && let Err(rm) = std::fs::remove_dir_all(&dir) {
                    warn!(task_id = %task_id, dir = %dir.display(), error = %rm, "removing the gateway directory of a failed launch");
                }
                return Err(e);
            }
        };
        let stop = CancellationToken::new();
        let doors = crate::listen::Doors {
            name: "gateway",
            task_id: Some(task_id),
            max_connections: upstream_cap,
            header_timeout: door::HEADER_TIMEOUT,
        };
        let server = tokio::spawn(crate::listen::serve(listener, app, doors, stop.clone()));
        Ok(Gateway {
            meter,
            state,
            transport: Transport::Socket { dir, stop, server },
            ledger,
            task_id,
        })
    }

    /// Serves a remote servo (Swarm) through `hub`: its requests carry
    /// `token`; `remote` is what it fetches and where its upload goes.
    async fn start_remote(
        hub: &Hub,
        task_id: TaskId,
        upstream: Arc<Upstream>,
        model: &str,
        budget: Budget,
        task_routes: routes::Plan,
        remote: RemoteTask,
    ) -> Gateway {
        let ledger = upstream.ledger.clone();
        let (meter, state, app) = Self::app(task_id, upstream, model, budget, task_routes, false);
        hub.register(task_id, app, remote);
        Gateway {
            meter,
            state,
            transport: Transport::Remote {
                hub: hub.clone(),
                task_id,
            },
            ledger,
            task_id,
        }
    }

    /// Serves again a remote servo whose foreman stopped: its meter
    /// starts from the ledger (or `spent`), as `adopt`'s.
    #[allow(clippy::too_many_arguments)]
    async fn adopt_remote(
        hub: &Hub,
        task_id: TaskId,
        upstream: Arc<Upstream>,
        model: &str,
        budget: Budget,
        spent: (u64, u64, f64),
        task_routes: routes::Plan,
        remote: RemoteTask,
    ) -> anyhow::Result<Gateway> {
        let ledger = upstream.ledger.clone();
        let from_ledger = tokio::task::spawn_blocking(move || ledger.adopt(task_id))
            .await
            .context("ledger thread panicked")??;
        let g =
            Self::start_remote(hub, task_id, upstream, model, budget, task_routes, remote).await;
        match from_ledger {
            Some(s) => {
                g.meter.seed(s.input_tokens, s.output_tokens, s.cost_usd);
                g.meter
                    .seed_cached(s.cache_read_tokens, s.cache_write_tokens);
                g.meter.calls.store(s.calls, Ordering::Relaxed);
            }
            None => g.meter.seed(spent.0, spent.1, spent.2),
        }
        Ok(g)
    }

    /// One task's routes: the same handlers whatever the transport.
    fn app(
        task_id: TaskId,
        upstream: Arc<Upstream>,
        model: &str,
        budget: Budget,
        task_routes: routes::Plan,
        adopt: bool,
    ) -> (Arc<Meter>, Arc<GatewayState>, Router) {
        let route = upstream.providers.route(model);
        info!(task_id = %task_id, provider = %route.provider.name, model = %route.model, adopt, "gateway listening");
        let meter = Arc::new(Meter::default());
        let spec = &task_routes.spec;
        if spec.delegate.is_some() {
            // What its children hold (an adopted parent's): not its to spend.
            let carved = task_routes
                .store
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .carved(task_id);
            if let Ok(c) = carved {
                meter.set_carved(c.tokens, c.cost);
            }
        }
        let rates = route
            .price
            .map(|p| pricing::rates(p, route.provider.kind, &route.model, budget.cache));
        let live = Arc::new(LiveBus::default());
        // A third-party agent's `replay:` script answers its calls.
        let replay = spec
            .replay
            .clone()
            .filter(|_| spec.agent.api().is_some())
            .map(Arc::new);
        let state = Arc::new(GatewayState {
            task_id,
            upstream,
            route,
            rates,
            budget,
            meter: meter.clone(),
            replay,
            live: live.clone(),
        });
        let llm = Router::new()
            .route("/v1/chat/completions", post(passthrough::chat_completions))
            .route("/v1/messages", post(passthrough::messages))
            .route("/v1/messages/count_tokens", post(passthrough::count_tokens))
            .route("/v1/responses", post(passthrough::responses))
            .fallback(not_found)
            .with_state(state.clone());
        let followers = Router::new()
            .route(
                saheeli_protocol::live::routes::LIVE,
                axum::routing::get(live::follow),
            )
            .with_state(live.clone());
        let app = llm
            .merge(followers)
            .merge(routes::app(state.clone(), task_routes));
        (meter, state, app)
    }

    /// The host directory to mount on /run/saheeli (none for a remote servo).
    pub fn dir(&self) -> Option<&Path> {
        match &self.transport {
            Transport::Socket { dir, .. } => Some(dir),
            Transport::Warm { socket } => Some(socket.dir()),
            Transport::Remote { .. } => None,
        }
    }

    /// Where a remote servo uploads its workspace (None on a socket).
    pub fn upload_from(&self) -> Option<UploadFrom> {
        match &self.transport {
            Transport::Remote { hub, task_id } => Some(UploadFrom {
                hub: hub.clone(),
                task_id: *task_id,
            }),
            Transport::Socket { .. } | Transport::Warm { .. } => None,
        }
    }

    /// The task's LLM side (the report's synthesis call goes through it).
    pub fn llm(&self) -> &GatewayState {
        &self.state
    }

    pub fn meter(&self) -> &Meter {
        &self.meter
    }

    /// Stops serving but leaves the socket directory: the task was taken
    /// over, and the new holder serves its own socket there (the container
    /// has the directory mounted, so it must stay the same directory).
    pub async fn abandon(self) {
        self.state.live.close();
        match self.transport {
            Transport::Socket { stop, server, .. } => {
                stop.cancel();
                let _ = tokio::time::timeout(Duration::from_secs(5), server).await;
            }
            Transport::Remote { hub, task_id } => hub.unregister(task_id),
            Transport::Warm { socket } => socket.close(false).await,
        }
    }

    /// Stops serving and removes the socket directory.
    pub async fn stop(self) {
        self.state.live.close();
        match self.transport {
            Transport::Socket { dir, stop, server } => {
                stop.cancel();
                let _ = tokio::time::timeout(Duration::from_secs(5), server).await;
                if let Err(e) = std::fs::remove_dir_all(&dir)
                    && e.kind() != std::io::ErrorKind::NotFound
                {
                    warn!(dir = %dir.display(), error = %e, "removing a gateway directory");
                }
            }
            Transport::Remote { hub, task_id } => hub.unregister(task_id),
            Transport::Warm { socket } => socket.close(true).await,
        }
        // A call cut off with its task is settled at its reservation: its
        // row must not stay `in_flight` (issue 27).
        let (ledger, task_id) = (self.ledger, self.task_id);
        match tokio::task::spawn_blocking(move || ledger.settle_all_cut(task_id)).await {
            Ok(Ok(0)) => {}
            Ok(Ok(n)) => info!(%task_id, calls = n, "calls cut off settled at their reservation"),
            Ok(Err(e)) => warn!(%task_id, error = %e, "calls in flight not settled"),
            Err(e) => warn!(%task_id, error = %e, "call ledger thread failed"),
        }
    }
}
