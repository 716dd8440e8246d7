//! In-process instruments: what only the process doing the work sees
//! (Docker call latency, the gateway's retries and refusals, collection).
//!
//! One set per process, like Prometheus clients' default registry: the
//! Docker backend, the gateway and the collector record into [`live`]
//! with one cheap call each and know nothing of how it is exposed. Every
//! label value comes from an enum here or from config.yaml's providers,
//! so the label sets are bounded. They start empty in each process.

use std::sync::LazyLock;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};
use strum::IntoEnumIterator;

/// The Docker calls Saheeli times. Waiting for a container to exit is not
/// one (it lasts as long as the task); streaming a workspace out is timed
/// as collection.
#[derive(Clone, Copy, Debug, PartialEq, Eq, strum::IntoStaticStr, strum::EnumIter)]
#[strum(serialize_all = "snake_case")]
pub(crate) enum DockerOp {
    InspectImage,
    CreateVolume,
    InspectVolume,
    RemoveVolume,
    CreateContainer,
    Upload,
    Start,
    Inspect,
    Stop,
    Kill,
    /// The cgroup freezer (issue 51: a servo frozen while it waits).
    Pause,
    Unpause,
    RemoveContainer,
    List,
    /// An image's servo copied out to this host, once per image id (a
    /// container made of the image, its archive read, the container removed).
    CopyServo,
}

/// Why the gateway tried an LLM call again.
#[derive(Clone, Copy, Debug, PartialEq, Eq, strum::IntoStaticStr, strum::EnumIter)]
#[strum(serialize_all = "snake_case")]
pub(crate) enum RetryCause {
    /// HTTP 429.
    RateLimited,
    /// HTTP 408.
    Timeout,
    /// HTTP 5xx (and Anthropic's 529).
    ServerError,
    /// No answer: unreachable, or the body was cut off.
    Connection,
}

impl RetryCause {
    /// The cause of a retried try: its HTTP status, if it got one.
    pub fn of(status: Option<u16>) -> RetryCause {
        match status {
            None => RetryCause::Connection,
            Some(429) => RetryCause::RateLimited,
            Some(408) => RetryCause::Timeout,
            Some(_) => RetryCause::ServerError,
        }
    }
}

/// Why the gateway answered a servo's call without a completion.
#[derive(Clone, Copy, Debug, PartialEq, Eq, strum::IntoStaticStr, strum::EnumIter)]
#[strum(serialize_all = "snake_case")]
pub(crate) enum Refusal {
    /// The servo's request was not a chat completion the gateway serves.
    InvalidRequest,
    /// A path the gateway does not serve.
    NotFound,
    /// The task's token or cost budget is spent.
    Budget,
    /// The provider refused the key (401/403).
    Auth,
    /// The provider refused the request (another 4xx).
    BadRequest,
    /// Retries ran out.
    Unavailable,
    /// The provider's answer could not be used.
    Malformed,
    /// The request did not fit the model's window (the servo compacts).
    ContextLength,
}

/// How a workspace came home.
#[derive(Clone, Copy, Debug, PartialEq, Eq, strum::IntoStaticStr, strum::EnumIter)]
#[strum(serialize_all = "snake_case")]
pub(crate) enum CollectPath {
    /// Copied from the volume's directory on this host.
    Local,
    /// Streamed through Docker's archive API.
    Archive,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OperationLabels {
    operation: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ProviderLabels {
    provider: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RetryLabels {
    provider: String,
    cause: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CauseLabels {
    cause: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabels {
    result: &'static str,
}

/// How a launch was served when a pool is configured (issue 28).
#[derive(Clone, Copy, Debug, PartialEq, Eq, strum::IntoStaticStr, strum::EnumIter)]
#[strum(serialize_all = "snake_case")]
pub(crate) enum Claim {
    /// By an idle warm servo.
    Warm,
    /// By a new container: no class is the task's, or its class had none idle.
    Cold,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PathLabels {
    path: &'static str,
}

type Histograms<L> = Family<L, Histogram, fn() -> Histogram>;

/// Docker API calls: 5 ms to a minute.
const DOCKER_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];
/// One LLM call through the gateway, retries included.
const LLM_BUCKETS: &[f64] = &[
    0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0,
];
/// A warm servo's claim to the release of its launch.
const CLAIM_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
];
/// Bringing a workspace home.
const COLLECT_BUCKETS: &[f64] = &[
    0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0,
];

fn docker_histogram() -> Histogram {
    Histogram::new(DOCKER_BUCKETS.iter().copied())
}
fn llm_histogram() -> Histogram {
    Histogram::new(LLM_BUCKETS.iter().copied())
}
fn collect_histogram() -> Histogram {
    Histogram::new(COLLECT_BUCKETS.iter().copied())
}

/// This process's instruments (cheap to record into from any thread).
#[derive(Debug)]
pub(crate) struct Live {
    docker_seconds: Histograms<OperationLabels>,
    docker_errors: Family<OperationLabels, Counter>,
    llm_seconds: Histograms<ProviderLabels>,
    retries: Family<RetryLabels, Counter>,
    refusals: Family<CauseLabels, Counter>,
    collect_seconds: Histograms<PathLabels>,
    collect_bytes: Family<PathLabels, Counter>,
    collect_errors: Family<PathLabels, Counter>,
    launch_failures: Family<CauseLabels, Counter>,
    pool_claims: Family<ResultLabels, Counter>,
    pool_claim_seconds: Histogram,
    pool_died_idle: Counter,
    rate_waits: Family<ProviderLabels, Counter>,
    rate_waiting: Family<ProviderLabels, Gauge>,
    rate_wait_seconds: Family<ProviderLabels, Counter<f64, AtomicU64>>,
}

static LIVE: LazyLock<Live> = LazyLock::new(Live::new);

/// The process's instruments.
pub(crate) fn live() -> &'static Live {
    &LIVE
}

impl Live {
    fn new() -> Live {
        let live = Live {
            docker_seconds: Family::new_with_constructor(docker_histogram),
            docker_errors: Family::default(),
            llm_seconds: Family::new_with_constructor(llm_histogram),
            retries: Family::default(),
            refusals: Family::default(),
            collect_seconds: Family::new_with_constructor(collect_histogram),
            collect_bytes: Family::default(),
            collect_errors: Family::default(),
            launch_failures: Family::default(),
            pool_claims: Family::default(),
            pool_claim_seconds: Histogram::new(CLAIM_BUCKETS.iter().copied()),
            pool_died_idle: Counter::default(),
            rate_waits: Family::default(),
            rate_waiting: Family::default(),
            rate_wait_seconds: Family::default(),
        };
        for result in Claim::iter() {
            let _ = live.pool_claims.get_or_create(&ResultLabels {
                result: result.into(),
            });
        }
        // Every known series exists from the start, at zero: a rate over
        // it is 0 rather than absent.
        for op in DockerOp::iter() {
            let l = OperationLabels {
                operation: op.into(),
            };
            let _ = live.docker_seconds.get_or_create(&l);
            let _ = live.docker_errors.get_or_create(&l);
        }
        for cause in Refusal::iter() {
            let _ = live.refusals.get_or_create(&CauseLabels {
                cause: cause.into(),
            });
        }
        for fault in crate::fault::DaemonFault::iter() {
            let _ = live.launch_failures.get_or_create(&CauseLabels {
                cause: fault.into(),
            });
        }
        for path in CollectPath::iter() {
            let l = PathLabels { path: path.into() };
            let _ = live.collect_seconds.get_or_create(&l);
            let _ = live.collect_bytes.get_or_create(&l);
            let _ = live.collect_errors.get_or_create(&l);
        }
        live
    }

    /// Creates the series of the providers config.yaml names, at zero.
    pub fn know_providers<'a>(&self, names: impl IntoIterator<Item = &'a str>) {
        for name in names {
            let provider = name.to_string();
            let _ = self.llm_seconds.get_or_create(&ProviderLabels {
                provider: provider.clone(),
            });
            let l = ProviderLabels {
                provider: provider.clone(),
            };
            let _ = self.rate_waits.get_or_create(&l);
            let _ = self.rate_waiting.get_or_create(&l);
            let _ = self.rate_wait_seconds.get_or_create(&l);
            for cause in RetryCause::iter() {
                let _ = self.retries.get_or_create(&RetryLabels {
                    provider: provider.clone(),
                    cause: cause.into(),
                });
            }
        }
    }

    /// One Docker call: how long it took and whether it failed.
    pub fn docker(&self, op: DockerOp, took: Duration, ok: bool) {
        let l = OperationLabels {
            operation: op.into(),
        };
        self.docker_seconds
            .get_or_create(&l)
            .observe(took.as_secs_f64());
        if !ok {
            self.docker_errors.get_or_create(&l).inc();
        }
    }

    /// One LLM call through the gateway to `provider` (a name from config).
    pub fn llm_call(&self, provider: &str, took: Duration) {
        self.llm_seconds
            .get_or_create(&ProviderLabels {
                provider: provider.to_string(),
            })
            .observe(took.as_secs_f64());
    }

    /// The gateway is about to try a call to `provider` again.
    pub fn retry(&self, provider: &str, cause: RetryCause) {
        self.retries
            .get_or_create(&RetryLabels {
                provider: provider.to_string(),
                cause: cause.into(),
            })
            .inc();
    }

    /// A call to `provider` starts waiting for its turn in the provider's
    /// rate limit (`Some`), or stops (`None`).
    pub fn rate_limit_wait(&self, provider: &str, wait: Option<std::time::Duration>) {
        let l = ProviderLabels {
            provider: provider.to_string(),
        };
        if wait.is_some() {
            self.rate_waits.get_or_create(&l).inc();
            self.rate_waiting.get_or_create(&l).inc();
        } else {
            self.rate_waiting.get_or_create(&l).dec();
        }
    }

    /// A call to `provider` waited this long for its turn.
    pub fn rate_limit_waited(&self, provider: &str, took: Duration) {
        self.rate_wait_seconds
            .get_or_create(&ProviderLabels {
                provider: provider.to_string(),
            })
            .inc_by(took.as_secs_f64());
    }

    /// The gateway answered a call without a completion.
    pub fn refusal(&self, cause: Refusal) {
        self.refusals
            .get_or_create(&CauseLabels {
                cause: cause.into(),
            })
            .inc();
    }

    /// One collection: its time, and its bytes (None: it failed).
    pub fn collection(&self, path: CollectPath, took: Duration, bytes: Option<u64>) {
        let l = PathLabels { path: path.into() };
        self.collect_seconds
            .get_or_create(&l)
            .observe(took.as_secs_f64());
        match bytes {
            Some(b) => {
                self.collect_bytes.get_or_create(&l).inc_by(b);
            }
            None => {
                self.collect_errors.get_or_create(&l).inc();
            }
        }
    }

    /// A launch failed for the Docker daemon's sake (`cause`: a
    /// [`crate::fault::DaemonFault`]); the task went back to the queue.
    pub fn launch_failed(&self, cause: &'static str) {
        self.launch_failures
            .get_or_create(&CauseLabels { cause })
            .inc();
    }

    /// A launch with a pool configured: served warm or cold.
    pub fn pool_claim(&self, result: Claim) {
        self.pool_claims
            .get_or_create(&ResultLabels {
                result: result.into(),
            })
            .inc();
    }

    /// A warm servo died while idle (the pool refills after a back-off).
    pub fn pool_died_idle(&self) {
        self.pool_died_idle.inc();
    }

    /// A warm claim: from the claim to the launch released to its servo.
    pub fn pool_claim_took(&self, took: Duration) {
        self.pool_claim_seconds.observe(took.as_secs_f64());
    }

    /// Adds every instrument to `reg` (they stay shared: a registry is
    /// built per scrape).
    pub(super) fn register(&self, reg: &mut Registry) {
        reg.register(
            "docker_operation_duration_seconds",
            "Docker API calls by operation, in this process",
            self.docker_seconds.clone(),
        );
        reg.register(
            "docker_operation_errors",
            "Docker API calls that failed, by operation, in this process",
            self.docker_errors.clone(),
        );
        reg.register(
            "llm_call_duration_seconds",
            "LLM calls through the gateway by provider, retries included, in this process",
            self.llm_seconds.clone(),
        );
        reg.register(
            "gateway_retries",
            "LLM calls the gateway tried again, by provider and cause, in this process",
            self.retries.clone(),
        );
        reg.register(
            "gateway_refusals",
            "Calls the gateway answered without a completion, by cause, in this process",
            self.refusals.clone(),
        );
        reg.register(
            "collection_duration_seconds",
            "Workspaces brought home, by path (local copy or Docker archive), in this process",
            self.collect_seconds.clone(),
        );
        reg.register_with_unit(
            "collection",
            "Bytes of workspaces brought home, by path, in this process",
            Unit::Bytes,
            self.collect_bytes.clone(),
        );
        reg.register(
            "launch_failures",
            "Launches that failed for the Docker daemon's sake, by cause (unreachable, \
             server_error, timeout), in this process; each task went back to the queue",
            self.launch_failures.clone(),
        );
        reg.register(
            "pool_claims",
            "Launches with a pool configured, by result: warm (an idle servo) or cold \
             (a new container), in this process",
            self.pool_claims.clone(),
        );
        reg.register(
            "pool_claim_duration_seconds",
            "Warm claims, from the claim to the task's launch released to its servo, in this process",
            self.pool_claim_seconds.clone(),
        );
        reg.register(
            "pool_servos_died_idle",
            "Warm servos that died while idle (their start failed: a cached set-up that would \
             not unpack, say), in this process; their class refills after a back-off",
            self.pool_died_idle.clone(),
        );
        reg.register(
            "gateway_rate_limit_waits",
            "LLM calls that waited for their turn in the provider's rate limit (the budget \
             all tasks share), by provider, in this process",
            self.rate_waits.clone(),
        );
        reg.register(
            "gateway_rate_limit_waiting",
            "LLM calls waiting now for their turn in the provider's rate limit, by provider",
            self.rate_waiting.clone(),
        );
        reg.register_with_unit(
            "gateway_rate_limit_wait",
            "Time LLM calls spent waiting for their turn in the provider's rate limit, by \
             provider, in this process",
            Unit::Seconds,
            self.rate_wait_seconds.clone(),
        );
        reg.register(
            "collection_errors",
            "Collections that failed, by path, in this process",
            self.collect_errors.clone(),
        );
    }
}
