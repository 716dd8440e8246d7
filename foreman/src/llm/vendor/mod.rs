//! The vendors' own APIs for third-party agents (issue 25): Anthropic
//! Messages, Chat Completions streamed, OpenAI Responses.
//!
//! - `native`: each request vetted (fields, model, output caps, headers);
//!   `parts`: its content parts and items, by allow list (no remote URL or
//!   stored file for the provider to fetch).
//! - `passthrough`: the routes: passed on with the task's key, metered
//!   from the usage they report; `stream`: a relayed stream metered as it
//!   goes; `replay`: a `replay:` script answering in the agent's API.

pub(crate) mod native;
pub(crate) mod parts;
pub(crate) mod passthrough;
pub(crate) mod replay;
pub(crate) mod stream;
