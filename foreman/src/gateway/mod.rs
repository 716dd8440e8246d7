//! The LLM gateway: an HTTP endpoint on a unix socket, one per running task,
//! bind-mounted into that task's container at /run/saheeli (or, for servos
//! on other hosts, one TCP listener shared by token: `remote`).
//!
//! The servo speaks OpenAI chat completions to it. The gateway checks the
//! task's budget before each call, picks the provider for the model, adds
//! the API key (which never enters a container), translates for Anthropic,
//! retries what is worth retrying, and counts every billed response.
//! Because each task has its own socket directory, a servo can only spend
//! its own budget.
//!
//! The agent's shell can reach the socket too, so nothing of a request is
//! trusted: only `POST /v1/chat/completions` (and, for third-party agents,
//! `/v1/messages`, `/v1/messages/count_tokens`, `/v1/responses`: see
//! `native`), the human desk's routes
//! (`desk`: questions, replies, messages, pauses), `step_done` and the verify route are served, the body is parsed
//! into protocol's typed request and a new one is built from it (the task's
//! model, one choice, no streaming, the output capped to what the budget
//! leaves), each call's estimate is reserved before it is forwarded, and
//! every answer and log line is redacted for the keys.
//!
//! # Layout
//!
//! - `meter`: budget, usage and reservations; `input_bound`: the most
//!   input tokens a call can be billed (issue 47), and `count` the
//!   provider's own count where that bound would refuse it; `ledger`: the same per call
//!   in SQLite, for a foreman that adopts a task.
//! - `desk`: humans in the loop, through the same socket; `steps`: a
//!   template's steps marked done (`step_done`).
//! - `children`, `child_spec`: parent and child tasks (`spawn_task`,
//!   `wait_tasks`; issue 30): a child's spec and workspace from a hostile
//!   request, the limits and budget in the store.
//! - `capability`: the tools of the task's granted MCP capabilities, and
//!   calls to them (refused, and recorded, when not granted).
//! - `verify`, `assess`: checking `task_complete` (verify commands run in
//!   a fresh container on the task's workspace, the assessor's LLM call
//!   through this gateway); `verify_tree`, `shadow`, `python_modules`: the
//!   workspace made what `changes.patch` delivers, and what shadows the
//!   commands refused.
//! - `socket`: the run directory and socket permissions; `redact`: keys
//!   out; `splice`: keys out of a stream whose text is split between
//!   events (issue 47).
//! - `warm`: a warm servo's socket (issue 28): idle, it serves only the
//!   claim long poll; claimed, the task's own routes; released, its launch.
//! - `remote`: one TCP listener for servos on other hosts (Swarm), a
//!   per-task token selecting the task's routes; the workspace in and out.
//! - `providers`, `anthropic`, `retry`: where calls go, translation, retries.
//! - `handler`: serving one request of the built-in loop; `provider_call`:
//!   its call to the provider, tried, rate-limited and read back.
//! - `limits`, `limit_headers`: one shared budget of requests and tokens
//!   per provider and model, learned from the providers' rate-limit
//!   headers, in which every task's calls wait their turn (issue 26).
//! - `native`, `passthrough`, `stream`: the vendors' own APIs for
//!   third-party agents (issue 25): Anthropic Messages, Chat Completions
//!   streamed, OpenAI Responses, vetted, passed through with the task's
//!   key and metered from the usage they report, streams included;
//!   `parts`: their content parts and items, by allow list (no remote
//!   URL or stored file for the provider to fetch);
//!   `record`: what they saw, for `saheeli task trajectory`.
//! - `synthesis`: `report: synthesized`, one metered call after the task
//!   ends for the report's findings section (issue 29).
//! - `assemble`, `live`: the built-in loop's calls streamed from the
//!   provider and put back together, their text published as it comes to
//!   the task's live followers (`GET /saheeli/v1/live`; issue 29).
//! - `usage`, `pricing`: what a provider billed, cached tokens included,
//!   and what that costs (issue 26).

mod anthropic;
mod assemble;
mod assess;
mod capability;
mod child_spec;
mod children;
mod count;
mod desk;
pub(crate) mod doctor;
mod handler;
mod input_bound;
mod ledger;
mod limit_headers;
mod limits;
mod live;
mod meter;
mod native;
mod parts;
mod passthrough;
mod pricing;
pub(crate) mod probe;
mod provider_call;
/// Moved to `config::providers` (issue 48, A2); re-exported for the gateway's files.
mod providers {
    pub(crate) use crate::config::providers::*;
}
mod python_modules;
pub(crate) mod record;
#[cfg(test)]
mod recorded;
mod redact;
mod remote;
mod replay;
mod retry;
mod server;
mod shadow;
mod shape;
mod socket;
mod splice;
mod steps;
mod stream;
mod synthesis;
mod upstream;
mod usage;
mod verify;
mod verify_tree;
mod warm;

use handler::{
    GatewayState, chat_completions, cut_off, error_response, forward, json_response, ledger,
    not_found, session_key,
};
use ledger::Ledger;
use provider_call::{call, error_text, rate_patience};
use redact::Redactor;
use retry::Verdict;

pub(crate) use children::DelegateLink;
pub(crate) use desk::{DeskLink, DeskPolicy, WaitFlag};
pub(crate) use handler::error_chain;
pub(crate) use meter::{Budget, Meter};
pub(crate) use providers::{Providers, Route};
pub(crate) use remote::{Hub, RemoteTask, Uploaded};
pub(crate) use server::{Gateway, GatewayPlan, Way};
pub(crate) use upstream::{Upstream, redact_keys, trajectories_dir};
pub(crate) use verify::VerifyLink;
pub(crate) use warm::{WarmSocket, WarmTask};
