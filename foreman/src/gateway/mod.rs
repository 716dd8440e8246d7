//! Where a model's calls go (`providers`: moving to config).

pub(crate) mod providers;

pub(crate) use providers::header_vars;
pub(crate) use providers::{Providers, Route};
