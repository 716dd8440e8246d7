//! The sender: takes due outbox rows and POSTs them, off the serve loop.

use std::path::PathBuf;
use std::time::Duration;

use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::store::{Delivery, Store, now_ms};

use super::{body, sign};

/// How often due deliveries are looked for.
const TICK: Duration = Duration::from_millis(250);
/// Deliveries in flight at once.
const PARALLEL: usize = 16;
/// One POST's limit.
const TIMEOUT: Duration = Duration::from_secs(10);
/// How long a claim holds (longer than a POST can take).
const CLAIM_MS: i64 = 15_000;
/// Backoff between attempts: doubles from 1 s up to this.
const MAX_BACKOFF: Duration = Duration::from_secs(600);

/// Delivers until `stop`; one per serve. Its own connection and client.
pub(crate) async fn run(
    database: PathBuf,
    max_age: Duration,
    owner: String,
    mailer: Option<std::sync::Arc<super::Mailer>>,
    stop: CancellationToken,
) {
    let store = match tokio::task::spawn_blocking(move || Store::open(&database)).await {
        Ok(Ok(s)) => std::sync::Arc::new(std::sync::Mutex::new(s)),
        Ok(Err(e)) => return warn!(error = %e, "webhook sender: database not opened; no webhooks"),
        Err(e) => return warn!(error = %e, "webhook sender: thread failed; no webhooks"),
    };
    let client = match reqwest::Client::builder()
        .timeout(TIMEOUT)
        .redirect(reqwest::redirect::Policy::none())
        .build()
    {
        Ok(c) => c,
        Err(e) => return warn!(error = %e, "webhook sender: no HTTP client; no webhooks"),
    };
    let secret = std::env::var("SAHEELI_WEBHOOK_SECRET")
        .ok()
        .filter(|s| !s.is_empty());
    let mut warned = false;
    let mut flying: JoinSet<()> = JoinSet::new();
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            Some(_) = flying.join_next(), if !flying.is_empty() => continue,
            _ = stop.cancelled() => break,
        }
        let room = PARALLEL.saturating_sub(flying.len());
        if room == 0 {
            continue;
        }
        let (s, o) = (store.clone(), owner.clone());
        let due = tokio::task::spawn_blocking(move || {
            s.lock().unwrap().claim_deliveries(&o, CLAIM_MS, room)
        })
        .await;
        let due = match due {
            Ok(Ok(d)) => d,
            Ok(Err(e)) => {
                warn!(error = %e, "webhook sender: outbox not read");
                continue;
            }
            Err(_) => continue,
        };
        if !due.is_empty() && secret.is_none() && !warned {
            warned = true;
            warn!("SAHEELI_WEBHOOK_SECRET is not set: webhooks are sent unsigned");
        }
        let (s, o) = (store.clone(), owner.clone());
        let notices = tokio::task::spawn_blocking(move || {
            s.lock().unwrap().claim_notices(&o, CLAIM_MS, room)
        })
        .await;
        match notices {
            Ok(Ok(notices)) => {
                for n in notices {
                    let (client, store, secret) = (client.clone(), store.clone(), secret.clone());
                    flying.spawn(super::notice::deliver(client, store, n, secret, max_age));
                }
            }
            Ok(Err(e)) => warn!(error = %e, "webhook sender: notices not read"),
            Err(_) => {}
        }
        for d in due {
            let (client, store, secret) = (client.clone(), store.clone(), secret.clone());
            let mailer = mailer.clone();
            flying.spawn(async move {
                let outcome = if d.url.starts_with("mailto:") {
                    match &mailer {
                        Some(m) => m.send(&d).await,
                        None => Err("no `smtp:` relay in config.yaml".to_string()),
                    }
                } else {
                    post(&client, &d, secret.as_deref()).await
                };
                record(&store, &d, outcome, max_age).await;
            });
        }
    }
    // What is in flight finishes (bounded by the POST timeout).
    while flying.join_next().await.is_some() {}
}

/// One POST; Ok on a 2xx.
async fn post(client: &reqwest::Client, d: &Delivery, secret: Option<&str>) -> Result<(), String> {
    let body = body(d);
    let mut req = client
        .post(&d.url)
        .header("content-type", "application/json")
        .header("user-agent", concat!("saheeli/", env!("CARGO_PKG_VERSION")))
        .header("saheeli-event-id", format!("evt_{}", d.event_id))
        .header("saheeli-event", &d.kind);
    if let Some(secret) = secret {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |t| t.as_secs());
        req = req.header("saheeli-signature", sign(secret.as_bytes(), now, &body));
    }
    match req.body(body).send().await {
        Ok(r) if r.status().is_success() => Ok(()),
        Ok(r) => Err(format!("HTTP {}", r.status())),
        Err(e) => Err(crate::text::error_chain(&e)),
    }
}

/// Records how a delivery went: delivered, or when to try again (dead
/// once it is older than `max_age`).
async fn record(
    store: &std::sync::Arc<std::sync::Mutex<Store>>,
    d: &Delivery,
    outcome: Result<(), String>,
    max_age: Duration,
) {
    let (id, url, kind) = (d.id, d.url.clone(), d.kind.clone());
    let attempts = d.attempts;
    let too_old = now_ms() - d.created_at > max_age.as_millis() as i64;
    let store = store.clone();
    let done = tokio::task::spawn_blocking(move || {
        let mut s = store.lock().unwrap();
        match &outcome {
            Ok(()) => s.delivery_done(id),
            Err(e) => {
                let wait = backoff(attempts);
                s.delivery_failed(id, e, now_ms() + wait.as_millis() as i64, too_old)
            }
        }
        .map(|()| outcome)
    })
    .await;
    match done {
        Ok(Ok(Ok(()))) => debug!(%url, %kind, "webhook delivered"),
        Ok(Ok(Err(e))) if too_old => {
            warn!(%url, %kind, error = %e, "webhook given up (notify_max_age)")
        }
        Ok(Ok(Err(e))) => {
            info!(%url, %kind, error = %e, attempt = attempts + 1, "webhook failed; trying again later")
        }
        Ok(Err(e)) => warn!(error = %e, "webhook outcome not recorded"),
        Err(e) => warn!(error = %e, "webhook outcome thread failed"),
    }
}

/// 1 s, 2 s, 4 s … up to [`MAX_BACKOFF`], with up to 20% jitter.
pub(super) fn backoff(attempts: i64) -> Duration {
    let base = Duration::from_secs(1u64 << attempts.clamp(0, 10) as u32).min(MAX_BACKOFF);
    base + base.mul_f64(fastrand::f64() * 0.2)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_and_is_capped() {
        assert!(backoff(0) >= Duration::from_secs(1) && backoff(0) < Duration::from_millis(1201));
        assert!(backoff(3) >= Duration::from_secs(8));
        assert!(backoff(40) <= MAX_BACKOFF.mul_f64(1.2));
    }
}
