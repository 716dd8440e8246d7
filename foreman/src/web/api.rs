//! The JSON routes: list, show, submit, and what a person does to a task.
//! Each does what its CLI command does, through the same functions.

use std::path::PathBuf;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::ops::{self, Steer, Submit};
use crate::output::TaskView;
use crate::state::TaskState;
use crate::store::HumanAct;

use super::error::ApiError;
use super::server::Shared;

/// Tasks listed when no `limit` is given, and the most a request gets.
const DEFAULT_LIMIT: usize = 100;
const MAX_LIMIT: usize = 1000;

type ApiResult<T> = Result<T, ApiError>;

/// `GET /api/foreman`: the serving foreman's footer, as `task status`
/// prints it (its limit, breaker, launch time and warm pool), and its
/// idle warm servos; nulls when no foreman serves. `pools`: each
/// `pools:` entry's `pool`, `running`, `max` and `queued` (issue 52).
pub(super) async fn foreman(State(web): State<Shared>) -> ApiResult<Json<Value>> {
    let since = crate::store::now_ms() - crate::metrics::ADMISSION_FRESH_MS;
    let row = web.db(move |s| s.admission_since(since)).await?;
    // The pools of the definitions in use (issue 52), else config.yaml's.
    let (base, defs) = (web.cfg.clone(), web.definitions.is_some());
    let (caps, definitions) = web
        .db(move |s| {
            let cfg = ops::with_definitions(&base, s)?;
            let st = crate::definitions::status(s).map_err(ops::Error::Internal)?;
            Ok::<_, ops::Error>((cfg.file.pools, st))
        })
        .await?;
    let definitions = (defs || definitions.commit.is_some() || definitions.rejected.is_some())
        .then(|| {
            json!({
                "commit": definitions.commit,
                "rejected": definitions.rejected,
            })
        });
    let pools = if caps.is_empty() {
        Vec::new()
    } else {
        let groups = web.db(|s| s.pool_groups()).await?;
        crate::admission::pools::usage(&caps, &groups)
    };
    Ok(Json(json!({
        "line": row.as_ref().map(crate::output::admission_line),
        "pool_idle": row.and_then(|r| r.pool_idle),
        "pools": pools,
        "definitions": definitions,
    })))
}

/// Any unknown path.
pub(super) async fn not_found() -> ApiError {
    ApiError::not_found("no such route; the API is under /api/tasks (see the README)")
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ListQuery {
    state: Option<String>,
    since: Option<String>,
    limit: Option<usize>,
}

/// `since`: an RFC 3339 time, or a duration back from now (`90s`, `2h`).
fn since_ms(since: &str) -> ApiResult<i64> {
    let since = since.trim();
    if let Ok(t) = humantime::parse_rfc3339_weak(since) {
        let ms = t
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0);
        return Ok(ms);
    }
    match humantime::parse_duration(since) {
        Ok(d) => Ok(crate::store::now_ms() - d.as_millis() as i64),
        Err(_) => Err(ApiError::bad_input(format!(
            "`since` `{since}` is neither a time (`2025-01-31T12:00:00Z`) nor a duration (`2h`)"
        ))),
    }
}

fn parse_state(s: &str) -> ApiResult<TaskState> {
    s.parse().map_err(|_| {
        let all: Vec<&str> = <TaskState as strum::IntoEnumIterator>::iter()
            .map(TaskState::as_str)
            .collect();
        ApiError::bad_input(format!(
            "`state` `{s}` is not a task state; use one of {}",
            all.join(", ")
        ))
    })
}

/// `GET /api/tasks?state=&since=&limit=`: newest first, as `task status --json`.
pub(super) async fn list(
    State(web): State<Shared>,
    query: Result<Query<ListQuery>, axum::extract::rejection::QueryRejection>,
) -> ApiResult<Json<Vec<TaskView>>> {
    let Query(q) = query.map_err(|e| ApiError::bad_input(e.body_text()))?;
    let state = q.state.as_deref().map(parse_state).transpose()?;
    let since = q.since.as_deref().map(since_ms).transpose()?;
    let limit = q.limit.unwrap_or(DEFAULT_LIMIT);
    if limit == 0 || limit > MAX_LIMIT {
        return Err(ApiError::bad_input(format!(
            "`limit` must be 1 to {MAX_LIMIT}"
        )));
    }
    let rows = web.db(move |s| s.list_where(state, since, limit)).await?;
    Ok(Json(rows.iter().map(|t| TaskView::new(t, None)).collect()))
}

/// `GET /api/tasks/{id}`'s query: which page of its events.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ShowQuery {
    events_before: Option<i64>,
    limit: Option<usize>,
}

/// Most events one view returns.
const MAX_EVENTS: usize = 1000;

/// `GET /api/tasks/{id}?events_before=SEQ&limit=N`: `task status ID
/// --json`, with the newest `limit` events (200) or those below `SEQ`.
pub(super) async fn show(
    State(web): State<Shared>,
    Path(id): Path<String>,
    query: Result<Query<ShowQuery>, axum::extract::rejection::QueryRejection>,
) -> ApiResult<Json<TaskView>> {
    let Query(q) = query.map_err(|e| ApiError::bad_input(e.body_text()))?;
    let limit = q.limit.unwrap_or(ops::EventPage::DEFAULT_LIMIT);
    if limit == 0 || limit > MAX_EVENTS {
        return Err(ApiError::bad_input(format!(
            "`limit` must be 1 to {MAX_EVENTS}"
        )));
    }
    let page = ops::EventPage {
        before: q.events_before,
        limit,
    };
    Ok(Json(web.db(move |s| ops::task_view(s, &id, page)).await?))
}

/// `POST /api/tasks`'s body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct SubmitBody {
    /// The prompt file's text: Markdown with optional front-matter.
    #[serde(default)]
    prompt: Option<String>,
    /// Instead of `prompt`: a template of the definitions in use, by
    /// name (issue 52; as `task submit --template`).
    #[serde(default)]
    template: Option<String>,
    /// `KEY=VALUE` overrides, as `--param`.
    #[serde(default)]
    params: Vec<String>,
    #[serde(default)]
    priority: Option<i64>,
    /// Queue it as a child of this task (issue 30; as `--parent`).
    #[serde(default)]
    parent: Option<String>,
    /// The file name messages call the prompt (default `prompt.md`).
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    no_human: bool,
    #[serde(default)]
    plan_only: bool,
    /// As `task submit --agent-type` (issue 52).
    #[serde(default)]
    agent_type: Option<String>,
}

/// Where a submitted prompt is taken to live: the project directory (the
/// one config.yaml is in), so relative `workspace:` and replay scripts
/// resolve there and must stay below it.
fn prompt_path(web: &Shared, name: Option<&str>) -> ApiResult<PathBuf> {
    let name = name.unwrap_or("prompt.md");
    let plain = !name.is_empty()
        && !name.starts_with('.')
        && name.len() <= 128
        && !name.contains(['/', '\\', '\0']);
    if !plain {
        return Err(ApiError::bad_input(format!(
            "`name` `{name}` must be a plain file name such as `fix.md`"
        )));
    }
    Ok(web.cfg.base_dir.join(name))
}

fn json_body<T: serde::de::DeserializeOwned + Default>(body: &Bytes) -> ApiResult<T> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_input(format!("the request body is not the JSON expected: {e}")))
}

/// `POST /api/tasks`: validates and queues a prompt as `task submit` does.
pub(super) async fn submit(State(web): State<Shared>, body: Bytes) -> ApiResult<Response> {
    let body: SubmitBody = serde_json::from_slice(&body).map_err(|e| {
        ApiError::bad_input(format!(
            "the body must be JSON like {{\"prompt\": \"---\\ntitle: …\\n---\\nDo X\", \
             \"params\": [\"max_steps=10\"], \"priority\": 0}}: {e}"
        ))
    })?;
    let mut params = body.params;
    params.extend(body.agent_type.map(|t| format!("agent_type={t}")));
    let args = Submit {
        params,
        priority: body.priority,
        no_human: body.no_human,
        plan_only: body.plan_only,
        ..Submit::default()
    };
    let (cfg, path, spec) = match (body.prompt, body.template) {
        (Some(text), None) => {
            let path = prompt_path(&web, body.name.as_deref())?;
            let (base, path2, args) = (web.cfg.clone(), path.clone(), args.clone());
            let (cfg, spec) = web
                .db(move |s| {
                    // The agent types of the definitions in use, if any.
                    let cfg = ops::with_definitions(&base, s)?;
                    let spec = ops::spec_for_text(&cfg, &path2, &text, &args)?;
                    Ok::<_, ops::Error>((cfg, spec))
                })
                .await?;
            (cfg, path, spec)
        }
        (None, Some(name)) => {
            let (base, args) = (web.cfg.clone(), args.clone());
            web.db(move |s| ops::template_spec(&base, s, &name, &args))
                .await?
        }
        _ => {
            return Err(ApiError::bad_input(
                "give exactly one of `prompt` (the prompt's text) and `template` (a template's \
                 name in the definitions in use)",
            ));
        }
    };
    let id = match &body.parent {
        Some(parent) => ops::submit_child(&cfg, &path, spec, &args, parent).await?,
        None => ops::submit_spec(&cfg, &path, spec, &args).await?,
    };
    let view = web
        .db(move |s| ops::task_view(s, &id.to_string(), ops::EventPage::newest()))
        .await?;
    Ok((
        StatusCode::CREATED,
        Json(json!({"id": id.to_string(), "task": view})),
    )
        .into_response())
}

/// The bodies the actions take (each uses its own field).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ActBody {
    text: Option<String>,
    reason: Option<String>,
    note: Option<String>,
    /// `breakpoint`: the template step, `before` or `after`, and whether
    /// to clear it.
    step: Option<String>,
    position: Option<String>,
    /// `step-override`: `done` or `skipped` (with `step` and `reason`).
    state: Option<String>,
    #[serde(default)]
    clear: bool,
    /// `follow-up`: the review's feedback (issue 52).
    prompt: Option<String>,
}

const ACTIONS: &str = "cancel, retry, fork, snapshot, follow-up, answer, approve, deny, pause, resume, \
     inject, breakpoint, step, step-override";

/// `step-override`'s body: `{"step": NAME, "state": "done" | "skipped", "reason": TEXT}`.
fn step_override_of(b: ActBody) -> ApiResult<Steer> {
    use crate::ops::StepOverrideState;
    let step = required(b.step, "step", "step-override")?;
    let state = match b.state.as_deref() {
        Some("done") => StepOverrideState::Done,
        Some("skipped") => StepOverrideState::Skipped,
        _ => {
            return Err(ApiError::bad_input(
                "`step-override` needs `\"state\": \"done\"` or `\"skipped\"` in the body",
            ));
        }
    };
    let reason = required(b.reason, "reason", "step-override")?;
    Ok(Steer::StepOverride {
        step,
        state,
        reason,
    })
}

/// `breakpoint`'s body: `{"step": NAME, "position": "before" | "after", "clear": false}`.
fn breakpoint_of(b: ActBody) -> ApiResult<Steer> {
    use saheeli_protocol::template::Position;
    // `{"clear": true}` alone: every breakpoint.
    if b.clear && b.step.is_none() && b.position.is_none() {
        return Ok(Steer::ClearBreakpoints);
    }
    let step = required(b.step, "step", "breakpoint")?;
    let position = match b.position.as_deref() {
        Some("before") => Position::Before,
        Some("after") => Position::After,
        _ => {
            return Err(ApiError::bad_input(
                "`breakpoint` needs `\"position\": \"before\"` or `\"after\"` in the body",
            ));
        }
    };
    Ok(Steer::Breakpoint {
        step,
        position,
        active: !b.clear,
    })
}

fn required(v: Option<String>, field: &str, action: &str) -> ApiResult<String> {
    v.filter(|t| !t.trim().is_empty()).ok_or_else(|| {
        ApiError::bad_input(format!(
            "`{action}` needs `{{\"{field}\": \"…\"}}` in the body"
        ))
    })
}

/// What an action asks for (None: retry, which is not a steer).
fn steer_of(action: &str, b: ActBody) -> ApiResult<Option<Steer>> {
    Ok(Some(match action {
        "cancel" => Steer::Cancel,
        "retry" => return Ok(None),
        "answer" => Steer::Reply(HumanAct::Answer(required(b.text, "text", action)?)),
        "approve" => Steer::Reply(HumanAct::Approve(b.note.filter(|n| !n.trim().is_empty()))),
        "deny" => Steer::Reply(HumanAct::Deny(required(b.reason, "reason", action)?)),
        "pause" => Steer::Pause,
        "resume" => Steer::Resume,
        "inject" => Steer::Inject(required(b.text, "text", action)?),
        "breakpoint" => breakpoint_of(b)?,
        "step" => Steer::Step,
        "step-override" => step_override_of(b)?,
        other => {
            return Err(ApiError::not_found(format!(
                "no action `{other}`; use one of {ACTIONS}"
            )));
        }
    }))
}

/// `POST /api/tasks/{id}/{action}`: the CLI command of the same name.
/// Answers `{"message", "task"}` (retry: also `id`, the new task).
pub(super) async fn act(
    State(web): State<Shared>,
    Path((id, action)): Path<(String, String)>,
    axum::Extension(principal): axum::Extension<super::auth::Principal>,
    body: Bytes,
) -> ApiResult<Json<Value>> {
    if action == "fork" {
        return super::fork::fork(web, id, body).await;
    }
    if action == "snapshot" {
        return super::fork::snapshot(web, id).await;
    }
    let b: ActBody = json_body(&body)?;
    if action == "follow-up" {
        // Issue 52: `{"prompt": FEEDBACK}`, a new task on the delivered branch.
        let prompt = required(b.prompt, "prompt", "follow-up")?;
        let new = ops::follow_up(&web.cfg, &id, &prompt).await?;
        let shown = new.to_string();
        let view = web
            .db(move |s| ops::task_view(s, &shown, ops::EventPage::newest()))
            .await?;
        return Ok(Json(json!({
            "id": new.to_string(),
            "message": format!("following up as {new}"),
            "task": view,
        })));
    }
    let Some(steer) = steer_of(&action, b)? else {
        let r = ops::retry_task(&web.cfg, &id).await?;
        let new = r.id.to_string();
        let view = web
            .db(move |s| ops::task_view(s, &new, ops::EventPage::newest()))
            .await?;
        return Ok(Json(json!({
            "id": r.id.to_string(),
            "retry_of": r.retry_of.to_string(),
            "message": r.note.unwrap_or_else(|| format!("queued again as {}", r.id)),
            "task": view,
        })));
    };
    let cfg = web.cfg.clone();
    let (message, view) = web
        .db(move |s| {
            // Who acted: a named token's name (issue 52), else the
            // serving user through the web.
            let message = ops::steer(&cfg, s, &id, steer, &principal.who())?;
            Ok::<_, ops::Error>((message, ops::task_view(s, &id, ops::EventPage::newest())?))
        })
        .await?;
    Ok(Json(json!({"message": message, "task": view})))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn since_takes_a_time_or_a_duration() {
        assert_eq!(since_ms("1970-01-01T00:00:01Z").unwrap(), 1000);
        let ago = crate::store::now_ms() - since_ms("1h").unwrap();
        // About an hour: the wall clock read twice may step back a little
        // between the two reads (it did here, by 1 ms).
        assert!((3_590_000..3_700_000).contains(&ago), "{ago}");
        assert_eq!(since_ms("yesterday").unwrap_err().kind, "bad_input");
    }

    #[test]
    fn actions_check_their_bodies() {
        assert!(steer_of("answer", ActBody::default()).is_err());
        assert_eq!(
            steer_of("frobnicate", ActBody::default())
                .unwrap_err()
                .status,
            StatusCode::NOT_FOUND
        );
        assert_eq!(
            steer_of(
                "deny",
                ActBody {
                    reason: Some("no".into()),
                    ..Default::default()
                }
            )
            .unwrap(),
            Some(Steer::Reply(HumanAct::Deny("no".into())))
        );
        assert_eq!(steer_of("retry", ActBody::default()).unwrap(), None);
        let bp = |step: &str, position: &str| ActBody {
            step: Some(step.into()),
            position: Some(position.into()),
            ..Default::default()
        };
        assert!(steer_of("breakpoint", bp("fix", "middle")).is_err());
        assert!(steer_of("breakpoint", bp(" ", "after")).is_err());
        assert_eq!(
            steer_of("breakpoint", bp("fix", "after")).unwrap(),
            Some(Steer::Breakpoint {
                step: "fix".into(),
                position: saheeli_protocol::template::Position::After,
                active: true
            })
        );
    }
}
