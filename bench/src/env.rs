//! What every measurement shares: the Docker connection, the `saheeli`
//! binary, the sizes of this run (full or `--quick`), the events recorder,
//! and a registry of the raw containers and volumes the bench itself
//! creates, so that everything is removed by id at the end, even after an
//! error.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::Mutex;

use bollard::Docker;
use bollard::query_parameters::{RemoveContainerOptionsBuilder, RemoveVolumeOptions};

use crate::events::Events;

/// Sizes of one run: the full benchmark or `--quick`.
pub struct Sizes {
    /// Sequential raw cycles (and hardened ones).
    pub floor_n: usize,
    /// Containers (raw) and tasks (Saheeli) in the concurrency-8 burst.
    pub burst: usize,
    /// Repetitions of each burst (raw, hardened, Saheeli interleaved).
    pub burst_reps: usize,
    pub dispatch_n: usize,
    pub step_runs: usize,
    pub collect_files: usize,
    pub collect_runs: usize,
    pub queued: usize,
    /// RSS samples, one every 500 ms.
    pub rss_samples: usize,
    pub status_rows: usize,
    /// Tasks at once in `wide`, the LLM calls each makes, and how long the
    /// fake LLM takes to answer each.
    pub wide: usize,
    pub wide_calls: usize,
    pub wide_delay_ms: u64,
    /// One-step tasks through one foreman, and its concurrency.
    pub thousand: usize,
    pub thousand_concurrency: usize,
    /// At least this long of raw container churn before the thousand's
    /// floor (see `thousand::floor_before`).
    pub thousand_warm_up: std::time::Duration,
    /// One-step tasks per setting of the admission sweep (and `auto`).
    pub admission_n: usize,
    /// Warm servos in `pool`'s burst and cost (issue 28).
    pub pool_burst: usize,
    /// `egress` (issue 50): the file downloaded (MB), how many times, and
    /// how many small requests are timed.
    pub egress_mb: usize,
    pub egress_runs: usize,
    pub egress_requests: usize,
}

impl Sizes {
    pub fn full() -> Sizes {
        Sizes {
            floor_n: 20,
            burst: 200,
            burst_reps: 2,
            dispatch_n: 20,
            step_runs: 5,
            collect_files: 10_000,
            collect_runs: 3,
            queued: 10_000,
            rss_samples: 12,
            status_rows: 100_000,
            wide: 500,
            wide_calls: 5,
            wide_delay_ms: 2000,
            thousand: 1000,
            thousand_concurrency: 32,
            thousand_warm_up: std::time::Duration::from_secs(6 * 60),
            admission_n: 200,
            pool_burst: 64,
            egress_mb: 64,
            egress_runs: 5,
            egress_requests: 100,
        }
    }

    pub fn quick() -> Sizes {
        Sizes {
            floor_n: 3,
            burst: 10,
            burst_reps: 1,
            dispatch_n: 3,
            step_runs: 1,
            collect_files: 1_000,
            collect_runs: 1,
            queued: 1_000,
            rss_samples: 4,
            status_rows: 5_000,
            wide: 20,
            wide_calls: 3,
            wide_delay_ms: 500,
            thousand: 30,
            thousand_concurrency: 8,
            thousand_warm_up: std::time::Duration::ZERO,
            admission_n: 12,
            pool_burst: 8,
            egress_mb: 8,
            egress_runs: 2,
            egress_requests: 10,
        }
    }
}

pub struct Env {
    pub docker: Docker,
    pub saheeli: PathBuf,
    /// The servo image tasks run in.
    pub image: String,
    /// The base image the raw floor runs `true` in.
    pub base: String,
    pub sizes: Sizes,
    pub events: Events,
    /// Where the projects' gateway sockets would go (removed at the end).
    pub run_dir: PathBuf,
    created: Mutex<Created>,
}

#[derive(Default)]
struct Created {
    containers: HashSet<String>,
    volumes: HashSet<String>,
}

/// The label on the bench's own raw containers; its value is our pid.
pub const BENCH_LABEL: &str = "saheeli.bench";

pub fn bench_label_value() -> String {
    std::process::id().to_string()
}

/// A line on stderr, with the seconds since the bench started.
pub fn progress(msg: &str) {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    let t = START.get_or_init(std::time::Instant::now).elapsed();
    eprintln!("bench [{:>4.0}s]: {msg}", t.as_secs_f64());
}

impl Env {
    pub fn new(
        docker: Docker,
        saheeli: PathBuf,
        image: String,
        base: String,
        sizes: Sizes,
        events: Events,
    ) -> Env {
        Env {
            docker,
            saheeli,
            image,
            base,
            sizes,
            events,
            run_dir: PathBuf::from(format!("/tmp/saheeli-bench-run-{}", std::process::id())),
            created: Mutex::default(),
        }
    }

    pub fn created_container(&self, id: &str) {
        self.created.lock().unwrap().containers.insert(id.into());
    }

    pub fn removed_container(&self, id: &str) {
        self.created.lock().unwrap().containers.remove(id);
    }

    pub fn created_volume(&self, name: &str) {
        self.created.lock().unwrap().volumes.insert(name.into());
    }

    pub fn removed_volume(&self, name: &str) {
        self.created.lock().unwrap().volumes.remove(name);
    }

    /// Removes, by id, every raw container and volume the bench created
    /// and has not removed yet (after an error, say), and the run dir.
    pub async fn clean(&self) {
        let (containers, volumes) = {
            let c = self.created.lock().unwrap();
            (c.containers.clone(), c.volumes.clone())
        };
        for id in containers {
            let rm = RemoveContainerOptionsBuilder::default()
                .force(true)
                .v(true)
                .build();
            let _ = self.docker.remove_container(&id, Some(rm)).await;
            self.removed_container(&id);
        }
        for name in volumes {
            let _ = self
                .docker
                .remove_volume(&name, None::<RemoveVolumeOptions>)
                .await;
            self.removed_volume(&name);
        }
        let _ = std::fs::remove_dir_all(&self.run_dir);
    }
}
