//! `saheeli serve --http ADDR`: the dashboard and the JSON API, served by
//! the foreman's own process next to the reconciler loop (never inside it).
//!
//! Everything here reads SQLite through its own connection and follows the
//! event bus; what a person does (answer, cancel, …) is written through the
//! same functions the CLI uses, and the reconciler picks it up as it picks
//! up the CLI's writes.
//!
//! - `server`: settings (address, token), the router, start and stop.
//! - `auth`: the token (bearer or login cookie), cross-site and host checks;
//!   `limit`: failed guesses paced per client address.
//! - `api`: the JSON routes; `error`: their `{"error": {message, kind}}`.
//! - `sse`: server-sent events, live and resumable (`Last-Event-ID`);
//!   `trail`: a task's audit lines numbered for those streams.
//! - `files`: an ended task's results, read without following links.
//! - `definitions`: the definitions read from Git, and refreshing them.
//! - `assets`: the dashboard (HTML, CSS and JS embedded in the binary).

mod api;
mod assets;
mod auth;
mod definitions;
mod error;
mod files;
mod fork;
mod limit;
mod server;
mod sse;
mod trail;

pub(crate) use server::{HttpSettings, start};
