//! The inbox look a servo's own chat call carries (`human::INBOX_AFTER`):
//! the gateway looks at the task's inbox as the call arrives, as the
//! desk's inbox route would, and the call waits for what it holds. The
//! look is the desk's (`routes::desk::DeskInbox`); this side only starts
//! it and awaits it, so llm knows no store.

use std::future::Future;
use std::pin::Pin;

use saheeli_protocol::human::Inbox;

/// A look under way: the inbox when the call must wait for it (messages
/// after the servo's newest, or a pause), None when the call goes on (an
/// empty inbox, or one that could not be read now: the next call looks
/// again, as the servo's own look did).
pub(crate) type Look = Pin<Box<dyn Future<Output = Option<Inbox>> + Send>>;

pub(crate) trait InboxLook: Send + Sync {
    /// Starts the look at once (before the caller reads the call's body)
    /// for the messages after note `after`.
    fn start(&self, after: i64) -> Look;
}
