//! The servo's task routes on its gateway, beside the LLM proxy: the
//! human desk (`desk`: questions, replies, messages, pauses, the session
//! key), a template's steps (`steps`), checking `task_complete` (`verify`,
//! `assess`; `verify_tree`, `shadow`, `python_modules`: the workspace made
//! what `changes.patch` delivers, and what shadows the commands refused),
//! the granted MCP capabilities (`capability`), child tasks (`children`,
//! `child_spec`: `spawn_task`, `wait_tasks`, issue 30), the report's
//! synthesis call (`synthesis`, issue 29) and a servo's word that it could
//! not restore its agent's own session (`agent_session`, issue 51).
//! Nothing of a request is trusted: the agent's shell reaches the socket
//! too.
//!
//! Each route file exports its routes and builds its own link from the
//! task's spec (`Link::of`); each is served with what every route shares
//! ([`Ctx`]: the task's LLM side, the desk's store, the lease, the bus,
//! the waiting flag) and its link ([`ctx::On`]). [`app`] puts them
//! together; the loop's context knows none of their settings.

pub(crate) mod agent_session;
pub(crate) mod assess;
pub(crate) mod capability;
pub(crate) mod child_spec;
pub(crate) mod children;
pub(crate) mod ctx;
pub(crate) mod desk;
pub(crate) mod egress_ask;
pub(crate) mod python_modules;
pub(crate) mod shadow;
pub(crate) mod snapshot;
pub(crate) mod steps;
pub(crate) mod synthesis;
pub(crate) mod verify;
pub(crate) mod verify_checks;
pub(crate) mod verify_egress;
pub(crate) mod verify_hidden;
pub(crate) mod verify_link;
pub(crate) mod verify_spare;
pub(crate) mod verify_tree;

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

use axum::Router;

use crate::backend::TaskEngine;
use crate::config::Config;
use crate::llm::GatewayState;
use crate::spec::TaskSpec;
use crate::store::{Lease, Store};

pub(crate) use children::DelegateLink;
pub(crate) use ctx::Ctx;
pub(crate) use ctx::WaitFlag;
pub(crate) use verify_link::VerifyLink;

/// What a task's routes are built from: the pieces every route shares and
/// the task's spec, from which each route builds its own link.
pub(crate) struct Plan {
    /// The desk's own store connection, and the lease fencing its writes.
    pub store: Arc<Mutex<Store>>,
    pub lease: Lease,
    pub bus: crate::events::Bus,
    /// The flag the supervisor and the serve loop read (`WaitFlag`).
    pub waiting: Arc<AtomicBool>,
    pub spec: TaskSpec,
    /// Where the task's container is found at verify time.
    pub engine: TaskEngine,
    pub cfg: Config,
    /// Its children's priority (`delegate:`).
    pub priority: i64,
}

/// A task's routes, and what its gateway keeps of them.
pub(crate) struct Built {
    pub router: Router,
    /// The desk's asker for the egress proxies (`egress_approval: ask`).
    pub approver: Arc<egress_ask::DeskApprover>,
    /// The verify route's link, when the task verifies: its spare verify
    /// container is made once the servo runs, and removed at the end.
    pub verify: Option<Arc<VerifyLink>>,
}

/// Every route of a task on its LLM side `llm`, each with its own link
/// from the spec: the desk, the steps, verify, capabilities, children.
pub(crate) fn app(llm: Arc<GatewayState>, plan: Plan) -> Built {
    let id = llm.task_id;
    let ctx = Arc::new(Ctx {
        llm,
        store: plan.store,
        lease: plan.lease,
        bus: plan.bus,
        waiting: WaitFlag::new(plan.waiting),
    });
    let spec = &plan.spec;
    // The built-in loop's calls look at the inbox with them.
    if spec.agent.is_builtin() {
        let _ = ctx
            .llm
            .inbox
            .set(Arc::new(desk::DeskInbox::new(&ctx, spec)));
    }
    let approver = Arc::new(egress_ask::DeskApprover {
        ctx: ctx.clone(),
        policy: desk::DeskPolicy::of(spec),
    });
    let snapshots = snapshot::Link::of(spec, &plan.cfg, plan.engine.clone());
    let verify = VerifyLink::of(spec, id, plan.engine, &plan.cfg.state_dir());
    let delegate = spec.delegate.map(|_| {
        Arc::new(DelegateLink {
            cfg: plan.cfg.clone(),
            spec: spec.clone(),
            priority: plan.priority,
        })
    });
    let router = Router::new()
        .merge(desk::routes(&ctx, spec))
        .merge(steps::routes(&ctx, steps::Link::of(spec, verify.clone())))
        .merge(verify::routes(&ctx, verify.clone()))
        .merge(capability::routes(&ctx, spec))
        .merge(children::routes(&ctx, delegate))
        .merge(snapshot::routes(&ctx, snapshots))
        .merge(agent_session::routes(&ctx, spec));
    Built {
        router,
        approver,
        verify,
    }
}
