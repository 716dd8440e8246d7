//! How tasks are shown: tables for people, JSON for scripts.

mod json;
mod table;
mod text;

use json::{duration_ms, time};

pub(crate) use json::{AttemptView, TaskView};
pub(crate) use table::{detail, short_duration, table};
pub(crate) use text::{audit_line, clean, printable};
