//! A servo on another host (the Swarm backend): it reaches its gateway
//! over TCP instead of a mounted unix socket, proves which task it is with
//! a per-task token, fetches its launch and submitted workspace at start and
//! uploads its whole workspace as a tar when it ends.

/// The file holding the task's gateway token (a Swarm secret mounted into
/// that task only). Set only for remote servos; never the token itself.
pub const TOKEN_FILE_ENV: &str = "SAHEELI_GATEWAY_TOKEN_FILE";

/// Where the Swarm backend mounts the token secret in a servo.
pub const TOKEN_FILE: &str = "/run/secrets/saheeli-gateway-token";

/// The HTTP header carrying the token on every request: `Bearer <token>`.
pub const AUTHORIZATION: &str = "authorization";

/// Longest token a gateway reads from a request (a token is 64 hex digits).
pub const MAX_TOKEN_BYTES: usize = 128;

/// The gateway's routes only a remote servo uses.
pub mod routes {
    /// `GET`: the task's [`Launch`](crate::Launch) as JSON.
    pub const LAUNCH: &str = "/saheeli/v1/launch";
    /// `GET`: the submitted workspace as a tar (204 when none was
    /// submitted); `PUT`: the whole workspace as a tar, once, at the end.
    pub const WORKSPACE: &str = "/saheeli/v1/workspace";
}

/// On `PUT workspace`: `1` when the servo parked (it saved its session to
/// wait for a human), so the foreman keeps the upload as the task's parked
/// workspace instead of its results. The foreman checks it against the
/// servo's exit code.
pub const PARKED_HEADER: &str = "x-saheeli-parked";

/// How long a remote servo keeps trying to upload its workspace while its
/// gateway cannot take it (no foreman listening, 5xx, or a foreman that
/// does not know the task yet: 403/404), so that a job ending while no
/// foreman runs is collected by the next one that adopts it.
pub const UPLOAD_PATIENCE_S: u64 = 600;

/// The HTTP header naming the task a request is for (its id).
pub const TASK_HEADER: &str = "x-saheeli-task";

/// The environment variable with the servo's task id (not a secret).
pub const TASK_ID_ENV: &str = "SAHEELI_TASK_ID";

/// `swarm.network: none`: a job has no network at all, and reaches its
/// gateway through the relay on its node (`servo relay`, a global service
/// on the node's own network) over a unix socket in a node-local volume.
pub mod relay {
    /// Where a job mounts the relay's volume (read-only).
    pub const DIR: &str = "/run/saheeli-relay";
    /// The relay's socket, as a job sees it: its `SAHEELI_GATEWAY` is
    /// `unix:` and this.
    pub const SOCKET: &str = "/run/saheeli-relay/gateway.sock";
    /// Where the relay itself mounts the volume (read-write).
    pub const KEEPER_DIR: &str = "/relay";
    /// The socket's name in the volume.
    pub const SOCKET_NAME: &str = "gateway.sock";
}

/// A warm servo (issue 28): started on this host before any task was
/// claimed for it, it waits on its gateway socket for one.
pub mod warm {
    /// Set (`1`) in a warm servo's container: the servo asks its gateway
    /// for its launch (`GET` [`CLAIM`]) and, when there is one, the
    /// submitted workspace (`GET` [`super::routes::WORKSPACE`]) before
    /// anything else.
    pub const WARM_ENV: &str = "SAHEELI_WARM";

    /// `GET`: the launch of the task this servo was claimed for, as JSON
    /// (a [`Launch`](crate::Launch), the task's `env:` in it); answered
    /// once a task is claimed, 204 when none was for a while (ask again).
    pub const CLAIM: &str = "/saheeli/v1/claim";

    /// A header of the answer to [`CLAIM`]: `none` when the task has no
    /// submitted workspace, so the servo does not ask for one (a round
    /// trip less before its first LLM call); absent or anything else: ask.
    pub const WORKSPACE_HEADER: &str = "saheeli-workspace";

    /// A header of the answer to [`CLAIM`]: the task's session key (a
    /// [`SessionKey`](crate::human::SessionKey) as JSON), so the servo
    /// seals its session without asking for it (a round trip less). The
    /// claim is served on the same socket, to the same servo, as the key
    /// route; absent: the servo asks the key route.
    pub const SESSION_KEY_HEADER: &str = "saheeli-session-key";

    /// How long a warm servo keeps asking while its gateway cannot be
    /// reached (a foreman restarting adopts or removes it meanwhile).
    pub const PATIENCE_S: u64 = 600;

    /// `GET`, the claimed servo's last request, once its task is over and
    /// everything is written: answered (204) when the servo may exit. At
    /// once, unless servos of the same pool were claimed a moment ago and
    /// have not made their first model call yet; then when they have, at
    /// most [`END_HOLD_MS`] later. A container's exit costs its daemon
    /// about as much CPU as a tenth of its start: exits in the middle of
    /// a burst of claims slow exactly the servos the pool is there for.
    pub const END: &str = "/saheeli/v1/end";

    /// The longest a servo's end is held (see [`END`]); the servo stops
    /// waiting a little later on its own.
    pub const END_HOLD_MS: u64 = 1000;
}
