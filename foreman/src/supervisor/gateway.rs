//! One task's gateway, put together from its three rooms: its door
//! (`door`: a unix socket, a warm servo's socket or a route of the hub),
//! its LLM side (`llm::GatewayState`: budget, meter, ledger) and its task
//! routes (`routes`); opened, adopted after a foreman restart, stopped.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::Context;
use axum::Router;
use axum::routing::post;
use saheeli_protocol::TaskId;
use tracing::{info, warn};

use crate::door::{self, Hub, RemoteTask, Served, Sockets, UploadFrom, WarmSocket, WarmTask};
use crate::egress;
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
    /// The egress proxies being served (issue 50): the agent phase's for
    /// the task's life, the set-up phase's until the launch returns.
    egress: Vec<egress::Served>,
    /// The verify route's link (a task that verifies): its spare verify
    /// container.
    verify: Option<Arc<routes::VerifyLink>>,
}

/// How the servo reaches its gateway.
enum Transport {
    /// A unix socket in a directory mounted into the container.
    Socket(Served),
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
    Socket { sockets: Sockets },
    /// The shared TCP listener, by token; what the servo fetches and where
    /// its upload goes.
    Remote { hub: Hub, task: RemoteTask },
    /// A warm servo's socket the pool bound before the task was claimed
    /// (or, adopting, bound again in the directory its container has
    /// mounted); what the servo fetches once released.
    Warm { socket: WarmSocket, task: WarmTask },
}

impl Gateway {
    /// Opens the gateway of one launch, new or adopted, on any of the
    /// three ways: one path, the door the only difference. An adopted
    /// servo's meter is seeded before its door opens, so its first call
    /// meets the budget already spent.
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
        let ledger = upstream.ledger.clone();
        let egress_of = EgressOf {
            plan: task_routes.spec.egress.clone(),
            setup: !task_routes.spec.setup.is_empty() && adopted.is_none(),
            store: task_routes.store.clone(),
            providers: upstream.providers.hosts(),
        };
        let (meter, state, built) = Self::app(
            task_id,
            upstream,
            &model,
            budget,
            task_routes,
            adopted.is_some(),
        );
        if let Some(spent) = adopted {
            seed_adopted(&meter, &ledger, task_id, spent).await?;
        }
        let routes::Built {
            router: app,
            approver,
            verify,
        } = built;
        let transport = match way {
            Way::Socket { sockets } => {
                Transport::Socket(sockets.serve(task_id, app, adopted.is_some())?)
            }
            Way::Remote { hub, task } => {
                let slot = task.slot;
                hub.register(task_id, app, task);
                if let Some(slot) = slot.filter(|_| adopted.is_some()) {
                    // A warm job whose foreman recorded the claim and
                    // stopped: it may still be waiting for its launch.
                    hub.release_warm(slot);
                }
                Transport::Remote { hub, task_id }
            }
            Way::Warm { socket, task } => {
                let session_key = session_key(&state.upstream, task_id, &task)?;
                socket.install(app, door::warm::Claimed { task, session_key });
                if adopted.is_some() {
                    // Its foreman recorded the claim and stopped: the
                    // servo may still be waiting for its launch.
                    socket.release();
                }
                Transport::Warm { socket }
            }
        };
        let mut gateway = Gateway {
            meter,
            state,
            transport,
            ledger,
            task_id,
            egress: Vec::new(),
            verify,
        };
        if let Some(dir) = gateway.dir().map(Path::to_path_buf) {
            gateway.egress = egress_of.serve(task_id, &dir, approver)?;
        }
        Ok(gateway)
    }

    /// The set-up phase is over (the launch returned): its proxy stops
    /// and its socket goes, before the agent's container starts.
    pub fn end_setup(&mut self) {
        self.egress
            .retain(|s| s.phase != saheeli_protocol::egress::Phase::Setup);
    }

    /// One task's routes: the same handlers whatever the transport.
    fn app(
        task_id: TaskId,
        upstream: Arc<Upstream>,
        model: &str,
        budget: Budget,
        task_routes: routes::Plan,
        adopt: bool,
    ) -> (Arc<Meter>, Arc<GatewayState>, routes::Built) {
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
            logprobs: spec.logprobs,
            cache_key: spec.cache_key(task_id),
            meter: meter.clone(),
            replay,
            live: live.clone(),
            chat_items: Default::default(),
            writes: Default::default(),
            inbox: Default::default(),
            held: Default::default(),
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
        let mut built = routes::app(state.clone(), task_routes);
        built.router = llm.merge(followers).merge(built.router);
        (meter, state, built)
    }

    /// The host directory to mount on /run/saheeli (none for a remote servo).
    pub fn dir(&self) -> Option<&Path> {
        match &self.transport {
            Transport::Socket(served) => Some(&served.dir),
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
            Transport::Socket(_) | Transport::Warm { .. } => None,
        }
    }

    /// The task's LLM side (the report's synthesis call goes through it).
    pub fn llm(&self) -> &GatewayState {
        &self.state
    }

    pub fn meter(&self) -> &Meter {
        &self.meter
    }

    /// The task's servo container is made: a task that verifies has its
    /// first verify container made now, while the servo starts and the
    /// agent works (`routes::verify_spare`).
    pub fn servo_created(&self) {
        if let Some(link) = &self.verify {
            routes::verify_spare::prewarm(link, self.task_id, 1);
        }
    }

    /// Stops serving but leaves the socket directory: the task was taken
    /// over, and the new holder serves its own socket there (the container
    /// has the directory mounted, so it must stay the same directory).
    pub async fn abandon(self) {
        if let Some(link) = &self.verify {
            routes::verify_spare::drain(link, self.task_id).await;
        }
        self.state.live.close();
        match self.transport {
            Transport::Socket(Served { stop, server, .. }) => {
                stop.cancel();
                let _ = tokio::time::timeout(Duration::from_secs(5), server).await;
            }
            Transport::Remote { hub, task_id } => hub.unregister(task_id),
            Transport::Warm { socket } => socket.close(false).await,
        }
    }

    /// Stops serving and removes the socket directory.
    pub async fn stop(self) {
        if let Some(link) = &self.verify {
            routes::verify_spare::drain(link, self.task_id).await;
        }
        self.state.live.close();
        match self.transport {
            Transport::Socket(Served { dir, stop, server }) => {
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
        // row must not stay `in_flight` (issue 27). A call answered has
        // its row settled first (`writes`).
        self.state.writes.close();
        self.state.writes.wait().await;
        let (ledger, task_id) = (self.ledger, self.task_id);
        match tokio::task::spawn_blocking(move || ledger.settle_all_cut(task_id)).await {
            Ok(Ok(0)) => {}
            Ok(Ok(n)) => info!(%task_id, calls = n, "calls cut off settled at their reservation"),
            Ok(Err(e)) => warn!(%task_id, error = %e, "calls in flight not settled"),
            Err(e) => warn!(%task_id, error = %e, "call ledger thread failed"),
        }
    }
}

/// What a warm servo fetches with its task to seal its session with.
fn session_key(upstream: &Upstream, task_id: TaskId, task: &WarmTask) -> anyhow::Result<String> {
    let key = saheeli_protocol::human::SessionKey {
        key: upstream.session_secret.for_task(task_id),
        resume_key: task
            .resume_from
            .map(|f| upstream.session_secret.for_task(f)),
    };
    Ok(serde_json::to_string(&key)?)
}

/// An adopted servo's meter goes on from the call ledger (calls a dead
/// foreman left in flight counted once, at their reservation), or from
/// `spent` (input, output, cost) when the ledger knows no call.
async fn seed_adopted(
    meter: &Meter,
    ledger: &Arc<Ledger>,
    task_id: TaskId,
    spent: (u64, u64, f64),
) -> anyhow::Result<()> {
    let ledger = ledger.clone();
    let from_ledger = tokio::task::spawn_blocking(move || ledger.adopt(task_id))
        .await
        .context("ledger thread panicked")??;
    match from_ledger {
        Some(s) => {
            if s.lost > 0 {
                warn!(task_id = %task_id, lost = s.lost, "calls cut off by a foreman's death counted at their reservation");
            }
            meter.seed(s.input_tokens, s.output_tokens, s.cost_usd);
            meter.seed_cached(s.cache_read_tokens, s.cache_write_tokens);
            meter.calls.store(s.calls, Ordering::Relaxed);
        }
        None => meter.seed(spent.0, spent.1, spent.2),
    }
    Ok(())
}

/// What a task's egress proxies are made of.
struct EgressOf {
    plan: crate::task::EgressPlan,
    /// Whether its set-up runs now (not again for an adopted servo).
    setup: bool,
    store: Arc<std::sync::Mutex<crate::store::Store>>,
    providers: Vec<String>,
}

impl EgressOf {
    /// Serves the set-up phase's proxy (while it runs), the agent phase's
    /// and the verify phase's (each verify container's bridge reaches it),
    /// each when its phase may reach anything. Only the agent phase asks
    /// a person: set-up and verify run unattended.
    fn serve(
        self,
        task: TaskId,
        dir: &Path,
        approver: Arc<routes::egress_ask::DeskApprover>,
    ) -> anyhow::Result<Vec<egress::Served>> {
        use saheeli_protocol::egress::{Approval, Phase};
        let mut served = Vec::new();
        for phase in Phase::ALL {
            let rules = self.plan.rules(phase).to_vec();
            let (approval, asks) = match phase {
                Phase::Agent => (self.plan.approval, self.plan.approval == Approval::Ask),
                _ => (Approval::Deny, false),
            };
            let wanted = match phase {
                Phase::Setup => self.setup && !rules.is_empty(),
                Phase::Agent => self.plan.serves(phase),
                Phase::Verify => !rules.is_empty(),
            };
            if !wanted {
                continue;
            }
            let ledger = egress::Ledger {
                task,
                store: self.store.clone(),
            };
            let approver = asks.then(|| approver.clone() as Arc<dyn egress::Approver>);
            let proxy = egress::Proxy::new(
                task,
                phase,
                rules,
                approval,
                self.providers.clone(),
                ledger,
                approver,
            );
            served.push(egress::serve(dir, proxy)?);
        }
        Ok(served)
    }
}
