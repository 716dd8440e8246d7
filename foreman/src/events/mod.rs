//! Task events for whoever wants to follow them: an in-process bus fed from
//! the durable event trail in SQLite, so it carries every transition that
//! any `saheeli` process made (a submit, a cancel, another foreman's
//! launch), in order, without the reconciler loop knowing its readers.
//!
//! Subscribers (`saheeli run`'s progress today; webhooks, metrics and the
//! dashboard next) never touch the loop.

mod bus;
mod feed;

pub(crate) use bus::{Bus, TaskEvent};
pub(crate) use feed::feed;
