//! A warm servo (issue 28): its container was started before any task was
//! claimed for it, so it asks its gateway (the socket mounted as for any
//! local servo) for its launch, waiting for as long as it takes a task to
//! be claimed, then (when its claim says there is one) for the submitted
//! workspace, unpacked as a remote servo's is. The task's `env:` comes in
//! the launch and goes to the agent's processes (`task_env`), never into
//! the servo's own environment.

use std::path::Path;
use std::time::Duration;

use saheeli_protocol::human::SessionKey;
use saheeli_protocol::remote::{routes, warm};

use crate::privsep::Mode;

/// The launch of the task this servo was claimed for (as JSON, as
/// `SAHEELI_LAUNCH` carries one), its env kept for the agent, and its
/// submitted workspace unpacked into `root`; with the task's session key
/// when the claim gave it.
pub(crate) async fn claimed(
    root: &Path,
    gateway: &str,
    mode: Mode,
) -> Result<(String, Option<SessionKey>), String> {
    let Some(sock) = gateway.strip_prefix("unix:") else {
        return Err(format!(
            "{} is set but the gateway `{gateway}` is not a unix socket",
            warm::WARM_ENV
        ));
    };
    let http = reqwest::Client::builder()
        .unix_socket(sock.to_string())
        .connect_timeout(Duration::from_secs(10))
        .build()
        .map_err(|e| format!("building the HTTP client: {e}"))?;
    claimed_at(&http, "http://gateway", root, mode).await
}

/// [`claimed`] through `http` at `base` (the host is a placeholder for a
/// socket; a warm job on a swarm node, issue 53: its hub, `http` sending
/// its slot's token).
pub(crate) async fn claimed_at(
    http: &reqwest::Client,
    base: &str,
    root: &Path,
    mode: Mode,
) -> Result<(String, Option<SessionKey>), String> {
    let launch = ask(http, format!("{base}{}", warm::CLAIM)).await?;
    // No submitted workspace: nothing to ask for (a round trip less).
    let workspace = launch
        .headers()
        .get(warm::WORKSPACE_HEADER)
        .is_none_or(|v| v != "none");
    let key = launch
        .headers()
        .get(warm::SESSION_KEY_HEADER)
        .and_then(|v| serde_json::from_slice::<SessionKey>(v.as_bytes()).ok());
    let launch = launch
        .text()
        .await
        .map_err(|e| format!("reading the claimed launch: {e}"))?;
    let parsed: saheeli_protocol::Launch = serde_json::from_str(&launch)
        .map_err(|e| format!("the claimed launch is not valid: {e}"))?;
    crate::task_env::set(parsed.env);
    if workspace {
        let ws = ask(http, format!("{base}{}", routes::WORKSPACE)).await?;
        if ws.status() == reqwest::StatusCode::OK {
            // Over a cached set-up unpacked already, the set-up's files
            // stay (as a cold start unpacks it over the workspace).
            let keep = crate::cached_setup::given();
            crate::remote::unpack_streaming(ws, root, mode, keep).await?;
        }
    }
    Ok((launch, key))
}

/// Asks the gateway whether this claimed servo may exit now (`GET end`):
/// its container's exit would cost the host's daemon CPU that servos
/// claimed a moment ago need to get going. Returns when it is answered,
/// when the gateway cannot be asked, after a little longer than the
/// longest hold, or on SIGTERM (a stop never waits).
pub(crate) async fn end(gateway: &str) {
    let Some(sock) = gateway.strip_prefix("unix:") else {
        return;
    };
    let Ok(http) = reqwest::Client::builder()
        .unix_socket(sock.to_string())
        .build()
    else {
        return;
    };
    let asked = http.get(routes_url(warm::END)).send();
    let most = Duration::from_millis(warm::END_HOLD_MS + 500);
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending().await,
        }
    };
    tokio::select! {
        _ = asked => {}
        _ = tokio::time::sleep(most) => {}
        _ = term => {}
    }
}

fn routes_url(route: &str) -> String {
    // The host is a placeholder: the connection goes to the socket.
    format!("http://gateway{route}")
}

/// `GET url` until it is answered 200: 204 (no task yet) asks again at
/// once, a gateway that cannot be reached (a foreman restarting) is asked
/// again for [`warm::PATIENCE_S`]; a refusal is final.
async fn ask(http: &reqwest::Client, url: String) -> Result<reqwest::Response, String> {
    let patience = Duration::from_secs(warm::PATIENCE_S);
    let mut unreachable_since: Option<tokio::time::Instant> = None;
    let mut delay = Duration::from_millis(20);
    loop {
        let last = match http.get(&url).send().await {
            Ok(r)
                if r.status() == reqwest::StatusCode::NO_CONTENT && url.ends_with(warm::CLAIM) =>
            {
                unreachable_since = None;
                continue;
            }
            Ok(r) if r.status().is_success() => return Ok(r),
            Ok(r) if r.status().is_client_error() => {
                return Err(format!("the gateway refused GET {url}: {}", r.status()));
            }
            Ok(r) => format!("status {}", r.status()),
            Err(e) => e.to_string(),
        };
        let since = *unreachable_since.get_or_insert_with(tokio::time::Instant::now);
        if since.elapsed() > patience {
            return Err(format!(
                "GET {url} failed for {}s: {last}",
                patience.as_secs()
            ));
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(Duration::from_secs(1));
    }
}
