//! The human desk: questions, approvals, plans, injected messages,
//! pauses, template steps done and verification (`verify`, `assess`), through the same gateway socket as the LLM calls (no other
//! network, no key). Every call is retried while the gateway is away (a
//! foreman restarting); the servo's own deadline bounds the waiting.

use std::time::Duration;

use saheeli_protocol::human::{
    Ask, Asked, Breakpoint, Delivered, Inbox, MAX_WAIT_MS, Replied, Reply, routes,
};
use saheeli_protocol::snapshot::{SnapshotPoint, SnapshotTaken, routes as snapshot_routes};
use saheeli_protocol::template::{self, StepDone, StepStart, StepsDone};
use saheeli_protocol::verify::{Verdict, VerifyRequest, routes as verify_routes};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tracing::{debug, warn};

/// Longest wait for a verdict (the foreman runs each verify command up to
/// its `verify_timeout`; the servo's deadline ends the wait sooner).
const VERIFY_WAIT: Duration = Duration::from_secs(7 * 24 * 3600);

/// Longest wait for a snapshot (a copy of a large workspace).
const SNAPSHOT_WAIT: Duration = Duration::from_secs(600);

/// How long a report the agent does not wait on (a restore that came
/// out incomplete) may try to reach the gateway.
const REPORT_WAIT: Duration = Duration::from_secs(10);

/// How long a look at the inbox before an LLM call may take.
const INBOX_LOOK: Duration = Duration::from_secs(2);

pub(crate) struct Desk {
    http: reqwest::Client,
    base: String,
}

impl Desk {
    /// `unix:/path/to.sock` or `http://host:port` (as the gateway's).
    pub fn new(address: &str) -> Result<Desk, String> {
        let builder = reqwest::Client::builder()
            .timeout(Duration::from_millis(MAX_WAIT_MS) + Duration::from_secs(30))
            .connect_timeout(Duration::from_secs(5));
        let (builder, base) = match address.strip_prefix("unix:") {
            Some(path) => (
                builder.unix_socket(path.to_string()),
                "http://gateway".to_string(),
            ),
            None => (builder, address.trim_end_matches('/').to_string()),
        };
        let http = builder
            .default_headers(crate::remote::auth_headers()?)
            .build()
            .map_err(|e| format!("building the desk's HTTP client: {e}"))?;
        Ok(Desk { http, base })
    }

    /// Asks (idempotent per call id); the reply when one is there at once.
    pub async fn ask(&self, ask: &Ask) -> Result<Option<Reply>, Refused> {
        let asked: Asked = self.post_retrying(routes::ASK, ask).await?;
        Ok(asked.reply)
    }

    /// The reply to `call_id`, waiting up to `wait` for one, with what
    /// the foreman recorded as asked (the call the human decided on).
    pub async fn reply(&self, call_id: &str, wait: Duration) -> Result<Replied, Refused> {
        let url = format!(
            "{}{}{}?wait_ms={}",
            self.base,
            routes::ASK_PREFIX,
            call_id,
            wait.as_millis().min(u128::from(MAX_WAIT_MS))
        );
        self.get_retrying(&url).await
    }

    /// Messages after note `after` (the newest in the session: whoever
    /// marks notes delivered, the servo gets what it has not got) and the
    /// pause flag; None when the gateway cannot be reached now (the next
    /// step asks again: nothing is lost).
    pub async fn inbox_now(&self, after: i64) -> Option<Inbox> {
        let url = format!("{}{}?wait_ms=0&after={after}", self.base, routes::INBOX);
        // A quick look: a gateway that hangs must not hold the step up.
        let look = tokio::time::timeout(INBOX_LOOK, self.get::<Inbox>(&url));
        match look
            .await
            .unwrap_or_else(|_| Err(Failure("no answer in time".into(), false)))
        {
            Ok(i) => Some(i),
            Err(e) => {
                debug!(error = %e.0, "inbox not reachable; looking again next step");
                None
            }
        }
    }

    /// The inbox after note `after`, waiting up to `wait` for a change
    /// (while paused).
    pub async fn inbox_wait(&self, wait: Duration, after: i64) -> Result<Inbox, Refused> {
        let url = format!(
            "{}{}?wait_ms={}&after={after}",
            self.base,
            routes::INBOX,
            wait.as_millis().min(u128::from(MAX_WAIT_MS))
        );
        self.get_retrying(&url).await
    }

    pub async fn delivered(&self, ids: Vec<i64>) -> Result<(), Refused> {
        let _: serde_json::Value = self
            .post_retrying(routes::DELIVERED, &Delivered { ids })
            .await?;
        Ok(())
    }

    /// A snapshot point (issue 51): `step` steps are done and the session
    /// saved; the foreman keeps the workspace as it is now when the task's
    /// `snapshots:` says so. The step waits for it (the copy must not see
    /// the next step's writes); a gateway away or slow costs the snapshot,
    /// never the step.
    pub async fn snapshot(&self, step: u32) -> Option<SnapshotTaken> {
        let point = SnapshotPoint { step };
        let call = self.post::<_, SnapshotTaken>(snapshot_routes::SNAPSHOT, &point);
        match tokio::time::timeout(SNAPSHOT_WAIT, call).await {
            Ok(Ok(t)) => Some(t),
            Ok(Err(e)) => {
                warn!(step, error = %e.0, "no snapshot at this step");
                None
            }
            Err(_) => {
                warn!(step, "no snapshot at this step: no answer in time");
                None
            }
        }
    }

    /// Records that a template step starts; the names of all steps done so far.
    pub async fn step_start(&self, step: &StepStart) -> Result<StepsDone, Refused> {
        self.post_retrying(template::routes::STEP_START, step).await
    }

    /// Records a template step as done; the names of all steps done so far.
    pub async fn step_done(&self, step: &StepDone) -> Result<StepsDone, Refused> {
        // A checked step's command runs first: as long as a verify may.
        self.post_waiting(template::routes::STEP_DONE, step, VERIFY_WAIT)
            .await
    }

    /// Spawns a child task (idempotent per call id).
    pub async fn spawn(
        &self,
        req: &saheeli_protocol::delegate::Spawn,
    ) -> Result<saheeli_protocol::delegate::Spawned, Refused> {
        self.post_retrying(saheeli_protocol::delegate::routes::SPAWN, req)
            .await
    }

    /// One long poll for children's outcomes, up to `wait` (idempotent
    /// per call id).
    pub async fn wait_children(
        &self,
        req: &saheeli_protocol::delegate::Wait,
        wait: Duration,
    ) -> Result<saheeli_protocol::delegate::Waited, Refused> {
        let path = saheeli_protocol::delegate::routes::WAIT;
        self.post_waiting(path, req, wait + Duration::from_secs(30))
            .await
    }

    /// Asks the foreman to verify (and assess) the work; waits as long as
    /// the checks take (the servo's own deadline bounds the wait).
    pub async fn verify(&self, req: &VerifyRequest) -> Result<Verdict, Refused> {
        self.post_waiting(verify_routes::VERIFY, req, VERIFY_WAIT)
            .await
    }

    pub async fn breakpoint(&self, bp: &Breakpoint) -> Result<(), Refused> {
        let _: serde_json::Value = self.post_retrying(routes::BREAKPOINT, bp).await?;
        Ok(())
    }

    /// The key this task's session is sealed with, asked until the gateway
    /// answers (a foreman restarting).
    /// With it, the key of the attempt a retry goes on from (issue 30).
    pub async fn session_key(&self) -> Result<(Vec<u8>, Option<Vec<u8>>), Refused> {
        let url = format!("{}{}", self.base, routes::SESSION_KEY);
        let got: saheeli_protocol::human::SessionKey = self.get_retrying(&url).await?;
        key_pair(&got)
    }

    /// The tools of the task's granted capabilities.
    pub async fn capability_tools(&self) -> Result<Vec<saheeli_protocol::chat::ToolSpec>, Refused> {
        let url = format!(
            "{}{}",
            self.base,
            saheeli_protocol::capability::routes::TOOLS
        );
        let tools: saheeli_protocol::capability::Tools = self.get_retrying(&url).await?;
        Ok(tools.tools)
    }

    /// Calls a capability's tool (the foreman runs it; it may take a while).
    pub async fn capability(
        &self,
        call: &saheeli_protocol::capability::Call,
    ) -> Result<saheeli_protocol::capability::CallResult, Refused> {
        let path = saheeli_protocol::capability::routes::CALL;
        self.post_waiting(path, call, Duration::from_secs(180))
            .await
    }

    /// A POST whose answer may take up to `wait` (the foreman is working).
    async fn post_waiting<B: Serialize, T: DeserializeOwned>(
        &self,
        path: &str,
        body: &B,
        wait: Duration,
    ) -> Result<T, Refused> {
        retrying(|| async {
            let r = self
                .http
                .post(format!("{}{path}", self.base))
                .timeout(wait)
                .json(body)
                .send()
                .await
                .map_err(|e| Failure(e.to_string(), false))?;
            read(r).await
        })
        .await
    }

    async fn get<T: DeserializeOwned>(&self, url: &str) -> Result<T, Failure> {
        let r = self
            .http
            .get(url)
            .send()
            .await
            .map_err(|e| Failure(e.to_string(), false))?;
        read(r).await
    }

    async fn post<B: Serialize, T: DeserializeOwned>(
        &self,
        path: &str,
        body: &B,
    ) -> Result<T, Failure> {
        let r = self
            .http
            .post(format!("{}{path}", self.base))
            .json(body)
            .send()
            .await
            .map_err(|e| Failure(e.to_string(), false))?;
        read(r).await
    }

    /// Says the agent's own session a retry brought could not be restored
    /// (issue 51), for the retry's trail; given up after [`REPORT_WAIT`]
    /// (the agent starts over either way).
    pub async fn restore_incomplete(&self, why: &str) -> Result<(), Refused> {
        use saheeli_protocol::agent_session::{RESTORE_INCOMPLETE, RestoreIncomplete};
        let body = RestoreIncomplete {
            why: why.to_string(),
        };
        let sent = self.post_retrying::<_, serde_json::Value>(RESTORE_INCOMPLETE, &body);
        match tokio::time::timeout(REPORT_WAIT, sent).await {
            Ok(r) => r.map(|_| ()),
            Err(_) => Err(Refused(format!(
                "the gateway did not answer in {} s",
                REPORT_WAIT.as_secs()
            ))),
        }
    }

    async fn get_retrying<T: DeserializeOwned>(&self, url: &str) -> Result<T, Refused> {
        retrying(|| self.get(url)).await
    }

    async fn post_retrying<B: Serialize, T: DeserializeOwned>(
        &self,
        path: &str,
        body: &B,
    ) -> Result<T, Refused> {
        retrying(|| self.post(path, body)).await
    }
}

/// The desk said no (a 4xx): asking again will not help.
#[derive(Debug)]
pub(crate) struct Refused(pub String);

/// A failed call, and whether it was refused (else: try again).
struct Failure(String, bool);

/// Tries until an answer or a refusal; the gateway away (a foreman
/// restarting) or a 5xx is waited out with capped backoff.
async fn retrying<T, F: std::future::Future<Output = Result<T, Failure>>>(
    mut call: impl FnMut() -> F,
) -> Result<T, Refused> {
    let mut pause = Duration::from_millis(200);
    loop {
        match call().await {
            Ok(t) => return Ok(t),
            Err(Failure(e, true)) => return Err(Refused(e)),
            Err(Failure(e, false)) => warn!(error = %e, "the desk did not answer; asking again"),
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_secs(5));
    }
}

async fn read<T: DeserializeOwned>(r: reqwest::Response) -> Result<T, Failure> {
    let status = r.status();
    let bytes = r.bytes().await.map_err(|e| Failure(e.to_string(), false))?;
    if !status.is_success() {
        let text = format!(
            "HTTP {status}: {}",
            String::from_utf8_lossy(&bytes[..bytes.len().min(500)])
        );
        return Err(Failure(text, status.is_client_error()));
    }
    serde_json::from_slice(&bytes).map_err(|e| Failure(format!("unreadable answer: {e}"), true))
}

/// A session key and the resumed attempt's, as bytes.
pub(crate) fn key_pair(
    got: &saheeli_protocol::human::SessionKey,
) -> Result<(Vec<u8>, Option<Vec<u8>>), Refused> {
    let resume = got.resume_key.as_deref().map(key_bytes).transpose()?;
    Ok((key_bytes(&got.key)?, resume))
}

/// A session key's 32 bytes, from its hex.
fn key_bytes(key: &str) -> Result<Vec<u8>, Refused> {
    let bytes: Option<Vec<u8>> = (0..key.len())
        .step_by(2)
        .map(|i| {
            key.get(i..i + 2)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
        })
        .collect();
    match bytes {
        Some(b) if b.len() == 32 => Ok(b),
        _ => Err(Refused(
            "the gateway's session key is not 32 bytes of hex".into(),
        )),
    }
}
