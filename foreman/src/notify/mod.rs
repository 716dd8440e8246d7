//! Webhooks (`notify:` in config.yaml and in a prompt's front-matter).
//!
//! Never lost: each event a webhook asked for is an outbox row written in
//! the same transaction as the event (store/queue.rs `enqueue_webhooks`).
//! Never blocking: a sender of its own (`sender::run`, one per serve, with
//! its own database connection and HTTP client) takes due rows, oldest
//! first per task and URL, and POSTs them; a slow or dead receiver delays
//! nothing but its own deliveries. At least once: a row is marked
//! delivered when the receiver answers 2xx, retried with exponential
//! backoff otherwise, and given up (`dead`) after `notify_max_age`.
//!
//! Each body is signed: header `Saheeli-Signature: t=<unix seconds>,
//! v1=<hex HMAC-SHA256 of "<t>.<body>">` with the secret in
//! `SAHEELI_WEBHOOK_SECRET` (see `body::sign`); `Saheeli-Event-Id` names the
//! event, the same on every retry, so a receiver can drop repeats.
//!
//! An `email:` channel (`notify: [{ email: ADDRESS }]`) is a row like any
//! other (`mailto:ADDRESS`), mailed through config.yaml's `smtp:` relay
//! (`email`).
//!
//! Foreman events that belong to no task (`definitions.rejected`) are
//! notices: rows of their own outbox, to config.yaml's webhooks that ask
//! for them, sent by the same sender (`notice`).

mod body;
mod email;
mod notice;
mod sender;

pub(crate) use email::Mailer;

pub(crate) use body::{body, sign};
pub(crate) use sender::run;
