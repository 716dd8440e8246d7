//! The Docker events stream, recorded for the whole run: when each
//! container was created, started, died and destroyed, with the daemon's
//! nanosecond timestamps. Task containers are keyed by their `saheeli.task`
//! label, the bench's own raw containers by container id.
//!
//! These timestamps come from the daemon, not from when the bench happened
//! to read the event, so they measure Docker's view of a container's life
//! with no client-side delay.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bollard::Docker;
use bollard::query_parameters::EventsOptionsBuilder;
use futures_util::StreamExt;

use crate::env::{BENCH_LABEL, bench_label_value};

/// A container's life as Docker saw it.
#[derive(Clone, Copy, Debug, Default)]
pub struct Times {
    pub create: Option<SystemTime>,
    pub start: Option<SystemTime>,
    pub die: Option<SystemTime>,
    pub destroy: Option<SystemTime>,
}

#[derive(Clone, Copy, Debug)]
pub enum Kind {
    Start,
    Destroy,
}

type Seen = Arc<Mutex<HashMap<String, Times>>>;

pub struct Events {
    seen: Seen,
    listeners: Vec<tokio::task::JoinHandle<()>>,
}

impl Events {
    /// Subscribes to container events of Saheeli tasks and of this bench.
    pub async fn start(docker: &Docker) -> Events {
        let seen: Seen = Arc::default();
        let bench = format!("{BENCH_LABEL}={}", bench_label_value());
        let listeners = vec![
            listen(
                docker,
                "saheeli.task".into(),
                Some("saheeli.task"),
                seen.clone(),
            ),
            listen(docker, bench, None, seen.clone()),
        ];
        // The subscription is made when the spawned stream is first polled.
        tokio::time::sleep(Duration::from_millis(300)).await;
        Events { seen, listeners }
    }

    pub fn times(&self, key: &str) -> Times {
        self.seen
            .lock()
            .unwrap()
            .get(key)
            .copied()
            .unwrap_or_default()
    }

    /// Waits (polling every 2 ms) until `key` has had event `kind`.
    pub async fn wait_for(&self, key: &str, kind: Kind, limit: Duration) -> Option<SystemTime> {
        let deadline = Instant::now() + limit;
        loop {
            let t = self.times(key);
            let at = match kind {
                Kind::Start => t.start,
                Kind::Destroy => t.destroy,
            };
            if at.is_some() || Instant::now() > deadline {
                return at;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
}

impl Drop for Events {
    fn drop(&mut self) {
        for l in &self.listeners {
            l.abort();
        }
    }
}

fn listen(
    docker: &Docker,
    label: String,
    key_label: Option<&'static str>,
    seen: Seen,
) -> tokio::task::JoinHandle<()> {
    let docker = docker.clone();
    tokio::spawn(async move {
        let filters = HashMap::from([("type", vec!["container"]), ("label", vec![label.as_str()])]);
        let opts = EventsOptionsBuilder::default().filters(&filters).build();
        let mut stream = docker.events(Some(opts));
        while let Some(Ok(ev)) = stream.next().await {
            let Some(actor) = ev.actor else { continue };
            let key = match key_label {
                Some(l) => actor.attributes.as_ref().and_then(|a| a.get(l)).cloned(),
                None => actor.id,
            };
            let (Some(key), Some(nanos), Some(action)) = (key, ev.time_nano, ev.action) else {
                continue;
            };
            let at = UNIX_EPOCH + Duration::from_nanos(nanos.max(0) as u64);
            let mut seen = seen.lock().unwrap();
            let t = seen.entry(key).or_default();
            match action.as_str() {
                "create" => t.create = Some(at),
                "start" => t.start = Some(at),
                "die" => t.die = Some(at),
                "destroy" => t.destroy = Some(at),
                _ => {}
            }
        }
    })
}

/// Milliseconds from `a` to `b` (negative when `b` is earlier).
pub fn ms_between(a: SystemTime, b: SystemTime) -> f64 {
    match b.duration_since(a) {
        Ok(d) => d.as_secs_f64() * 1000.0,
        Err(e) => -e.duration().as_secs_f64() * 1000.0,
    }
}
