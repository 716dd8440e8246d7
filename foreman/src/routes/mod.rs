//! The servo's task routes on its gateway, beside the LLM proxy: the
//! human desk (`desk`: questions, replies, messages, pauses, the session
//! key), a template's steps (`steps`), checking `task_complete` (`verify`,
//! `assess`; `verify_tree`, `shadow`, `python_modules`: the workspace made
//! what `changes.patch` delivers, and what shadows the commands refused),
//! the granted MCP capabilities (`capability`), child tasks (`children`,
//! `child_spec`: `spawn_task`, `wait_tasks`, issue 30) and the report's
//! synthesis call (`synthesis`, issue 29). Nothing of a request is
//! trusted: the agent's shell reaches the socket too.
//!
//! Each route is served with [`Ctx`]: the task's LLM side (budget, meter,
//! redaction: `llm::GatewayState`) and its desk link, the settings the
//! routes take from the task's spec.

pub(crate) mod assess;
pub(crate) mod capability;
pub(crate) mod child_spec;
pub(crate) mod children;
pub(crate) mod ctx;
pub(crate) mod desk;
pub(crate) mod python_modules;
pub(crate) mod shadow;
pub(crate) mod steps;
pub(crate) mod synthesis;
pub(crate) mod verify;
pub(crate) mod verify_link;
pub(crate) mod verify_tree;

pub(crate) use children::DelegateLink;
pub(crate) use ctx::Ctx;
pub(crate) use desk::{DeskLink, DeskPolicy, WaitFlag};
pub(crate) use verify_link::VerifyLink;
