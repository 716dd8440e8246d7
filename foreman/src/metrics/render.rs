//! The exposition: a registry built per scrape from the database's counts
//! and this process's instruments, encoded as OpenMetrics text.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use anyhow::Context;
use prometheus_client::metrics::info::Info;
use prometheus_client::registry::Registry;

use super::labels::Models;
use super::live::live;
use super::tally::Tally;
use crate::admission::pools;
use crate::config::{PoolCap, Providers};
use crate::store::{Store, now_ms};

/// The content type of [`Metrics::render`]'s text, for `GET /metrics`.
pub(crate) const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// An admission row older than this is a foreman that stopped (rows are
/// rewritten every few seconds while serving).
pub(crate) const ADMISSION_FRESH_MS: i64 = 10_000;

/// Who renders: what the in-process instruments hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq, strum::IntoStaticStr)]
#[strum(serialize_all = "snake_case")]
pub(crate) enum Source {
    /// A serving foreman: its instruments saw its work.
    Foreman,
    /// `saheeli metrics`: only the database; the instruments are empty.
    Database,
}

/// The metrics of one database, as a serving foreman or `saheeli metrics`
/// exposes them. Cloning gives another handle on the same sums.
#[derive(Clone)]
pub(crate) struct Metrics {
    database: PathBuf,
    source: Source,
    /// config.yaml's `pools:` (issue 52).
    pools: Arc<Vec<PoolCap>>,
    /// The pools in use instead, when this gives some: the definitions'
    /// (issue 52), read by a function the caller gives (metrics sits below
    /// `definitions`).
    pools_of: Option<PoolsOf>,
    state: Arc<Mutex<State>>,
}

/// The pools in use according to the database, if it says.
pub(crate) type PoolsOf = fn(&Store) -> anyhow::Result<Option<Vec<PoolCap>>>;

struct State {
    /// Its own connection, opened at the first scrape.
    store: Option<Store>,
    tally: Tally,
}

impl Metrics {
    /// Metrics of `database`, with models labelled by `providers`' routes.
    pub fn new(database: PathBuf, providers: Providers, source: Source) -> Metrics {
        live().know_providers(providers.names());
        Metrics {
            database,
            source,
            pools: Arc::default(),
            pools_of: None,
            state: Arc::new(Mutex::new(State {
                store: None,
                tally: Tally::new(Models::new(providers)),
            })),
        }
    }

    /// With config.yaml's `pools:`, whose gauges it shows.
    pub fn with_pools(mut self, pools: Vec<PoolCap>) -> Metrics {
        self.pools = Arc::new(pools);
        self
    }

    /// With the pools the database says are in use, over config.yaml's.
    pub fn with_pools_of(mut self, f: PoolsOf) -> Metrics {
        self.pools_of = Some(f);
        self
    }

    /// The exposition, in OpenMetrics text ([`CONTENT_TYPE`]). Reads the
    /// database (what is new since the last call, and the gauges): call it
    /// off the async threads, or use [`Metrics::scrape`].
    pub fn render(&self) -> anyhow::Result<String> {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let State { store, tally } = &mut *state;
        let store = match store {
            Some(s) => s,
            None => store.insert(Store::open(&self.database).with_context(|| {
                format!("opening database `{}` for metrics", self.database.display())
            })?),
        };
        let read = store
            .scrape(tally.trail_after, tally.calls_after, tally)
            .with_context(|| format!("reading metrics from `{}`", self.database.display()))?;
        tally.trail_after = read.trail_end;
        tally.calls_after = read.calls_end;
        let admission = store
            .admission_since(now_ms() - ADMISSION_FRESH_MS)
            .with_context(|| format!("reading admission from `{}`", self.database.display()))?;
        // The pools of the definitions in use (issue 52), else config.yaml's.
        let caps = match self.pools_of.map(|f| f(store)).transpose()?.flatten() {
            Some(p) => Arc::new(p),
            None => self.pools.clone(),
        };
        let pools = if caps.is_empty() {
            Vec::new()
        } else {
            pools::usage(&caps, &store.pool_groups()?)
        };

        let mut reg = Registry::with_prefix("saheeli");
        reg.register(
            "exposition",
            self.about(),
            Info::new(vec![("source", self.source_label())]),
        );
        tally.register(&mut reg, &read, now_ms());
        super::admission::register(&mut reg, admission.as_ref());
        super::pools::register(&mut reg, &pools);
        live().register(&mut reg);
        super::egress::egress().register(&mut reg);
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &reg)
            .context("encoding the metrics")?;
        Ok(out)
    }

    /// [`Metrics::render`] on a blocking thread.
    pub async fn scrape(&self) -> anyhow::Result<String> {
        let m = self.clone();
        tokio::task::spawn_blocking(move || m.render())
            .await
            .context("metrics thread panicked")?
    }

    fn source_label(&self) -> &'static str {
        self.source.into()
    }

    /// The first comment line: where the values come from.
    fn about(&self) -> &'static str {
        match self.source {
            Source::Foreman => {
                "Where these values come from: tasks, transitions and usage from the \
                 database; latencies, retries, refusals and collection from this foreman \
                 since it started"
            }
            Source::Database => {
                "Where these values come from: `saheeli metrics` reads only the database, \
                 so the in-process histograms and counters (Docker, gateway, LLM call \
                 latency, collection) are empty here; scrape a serving foreman for them"
            }
        }
    }
}
