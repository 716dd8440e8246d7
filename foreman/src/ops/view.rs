//! A task as `task status ID` and the HTTP API show it: its row, its
//! events a page at a time, its steps.

/// Events a view of one task shows unless asked for others (`task status
/// ID --events`, the API's task view). Why a page: a task's trail can be
/// long (a flood wrote 2,458 events, 285 MB, before the gateway's caps),
/// and a view must not load it whole.
pub(crate) const EVENTS_SHOWN: usize = 200;

use crate::output::{self, TaskView};

use crate::store::StoreError;

/// Which of a task's events a view shows: up to `limit` below `before`
/// (None: the newest).
#[derive(Clone, Copy, Debug)]
pub(crate) struct EventPage {
    pub before: Option<i64>,
    pub limit: usize,
}

impl EventPage {
    /// Events a view shows unless asked for others ([`EVENTS_SHOWN`]).
    pub const DEFAULT_LIMIT: usize = EVENTS_SHOWN;

    /// The newest [`EventPage::DEFAULT_LIMIT`] events.
    pub fn newest() -> EventPage {
        EventPage {
            before: None,
            limit: Self::DEFAULT_LIMIT,
        }
    }
}

/// One task with a page of its events and its attempts: `task status ID
/// --json`, and the HTTP API's `GET /api/tasks/{id}`.
pub(crate) fn task_view(
    store: &crate::store::Store,
    id_or_prefix: &str,
    page: EventPage,
) -> Result<TaskView, StoreError> {
    let t = store.require(id_or_prefix)?;
    let (mut events, total) = store.events_page(t.id, page.before, page.limit)?;
    // Older ones exist when the page is full and its oldest is not the first.
    let before = events
        .last()
        .map(|e| e.seq)
        .filter(|_| events.len() == page.limit)
        .filter(|&seq| {
            store
                .events_page(t.id, Some(seq), 1)
                .is_ok_and(|(older, _)| !older.is_empty())
        });
    events.reverse();
    let attempts = store.attempts(t.id)?;
    let steps = crate::store::step_status_with(
        &t.spec.steps,
        &store.steps_done(t.id)?,
        &store.step_overrides(t.id)?,
    );
    let mut view = TaskView::new(&t, Some(&events))
        .with_grade(&store.verify_checks(t.id)?)
        .with_egress(t.spec.egress.any(), store.egress_of(t.id)?);
    view.events_total = Some(total);
    view.events_before = before;
    view.attempts = Some(attempts.iter().map(output::AttemptView::new).collect());
    let starts = store.step_starts(t.id)?;
    let breakpoints = store.breakpoints(t.id, &t.spec.steps)?;
    view.template_steps = Some(
        steps
            .iter()
            .map(|s| output::StepView::new(s).with_controls(&starts, &breakpoints))
            .collect(),
    );
    view.webhooks = Some(store.webhook_counts(t.id)?).filter(|c| *c != Default::default());
    (view.parent, view.children, view.tree) = output::family(store, &t)?;
    view.samples = output::samples_view(store, &t)?;
    Ok(view)
}
