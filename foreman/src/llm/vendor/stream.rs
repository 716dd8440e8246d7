//! Metering a streamed answer (server-sent events) while it passes: each
//! event is relayed whole (redacted for the keys), the usage the stream
//! reports is read as it goes, and the call is settled from it at the end.
//!
//! When the usage reported takes the task past its budget the rest of the
//! stream is replaced by an error event in the API's own format and the
//! task ends `budget`. A stream cut by either side, or ended without its
//! usage, is settled at its reservation (as a call cut off, issue 27).

use std::sync::Arc;
use std::time::Instant;

use axum::body::Bytes;
use futures_util::StreamExt;
use saheeli_protocol::Reason;
use saheeli_protocol::chat::{ChatUsage, gateway_error};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tracing::{info, warn};

use super::native::Api;
use crate::llm::Budget;
use crate::llm::GatewayState;
use crate::llm::chat::cut_off;
use crate::llm::meter;
use crate::llm::meter::Meter;
use crate::llm::pricing::Rates;
use crate::llm::record;
use crate::llm::sse::{MAX_EVENT, boundary};
use crate::llm::task::ledger;
use crate::metrics::{Refusal, live};
use crate::text::error_chain;

/// Usage as far as a body or a stream has reported it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Partial {
    /// All the input the provider processed, cached included.
    pub input: Option<u64>,
    pub output: Option<u64>,
    /// Of the input: read from, and written to, the provider's cache.
    pub cache_read: Option<u64>,
    pub cache_write: Option<u64>,
}

impl Partial {
    /// A later report: what it says wins (stream counts are cumulative).
    pub fn merge(&mut self, later: Partial) {
        self.input = later.input.or(self.input);
        self.output = later.output.or(self.output);
        self.cache_read = later.cache_read.or(self.cache_read);
        self.cache_write = later.cache_write.or(self.cache_write);
    }

    /// As the meter and the ledger count it.
    pub fn usage(&self) -> ChatUsage {
        let input = self.input.unwrap_or(0);
        let output = self.output.unwrap_or(0);
        let read = self.cache_read.unwrap_or(0).min(input);
        ChatUsage {
            prompt_tokens: input,
            completion_tokens: output,
            total_tokens: input + output,
            cache_read_tokens: read,
            cache_write_tokens: self.cache_write.unwrap_or(0).min(input - read),
        }
    }

    pub fn total(&self) -> u64 {
        self.input.unwrap_or(0) + self.output.unwrap_or(0)
    }
}

/// The usage a body or a stream event reports, in any of the three APIs:
/// `usage` at the top (a Messages or Responses body, `message_delta`, a
/// chat chunk), in `message` (`message_start`) or in `response`
/// (`response.completed`). The one place usage is read, whole or streamed.
pub(crate) fn read_usage(v: &Value) -> Partial {
    let u = [
        v.get("usage"),
        v.pointer("/message/usage"),
        v.pointer("/response/usage"),
    ]
    .into_iter()
    .flatten()
    .find(|u| u.is_object());
    let Some(u) = u else {
        return Partial::default();
    };
    let field = |names: [&str; 2]| names.iter().find_map(|n| u.get(*n)?.as_u64());
    let read = u.get("cache_read_input_tokens").and_then(Value::as_u64);
    let write = u.get("cache_creation_input_tokens").and_then(Value::as_u64);
    let input = field(["input_tokens", "prompt_tokens"]);
    if read.is_some() || write.is_some() {
        // Anthropic's shape (llama-server's too): `input_tokens` is only
        // what came after the last cache breakpoint (llm::usage).
        return Partial {
            input: Some(input.unwrap_or(0) + read.unwrap_or(0) + write.unwrap_or(0)),
            output: field(["output_tokens", "completion_tokens"]),
            cache_read: read,
            cache_write: write,
        };
    }
    let cached = [
        "/prompt_tokens_details/cached_tokens",
        "/input_tokens_details/cached_tokens",
    ]
    .iter()
    .find_map(|p| u.pointer(p)?.as_u64());
    Partial {
        input,
        output: field(["output_tokens", "completion_tokens"]),
        cache_read: cached,
        cache_write: None,
    }
}

/// One event as it came, and what it means for the meter.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Event {
    pub usage: Partial,
    /// It carries the call's final usage.
    pub settles: bool,
    /// The stream's last event (`message_stop`, `[DONE]`,
    /// `response.completed`, or an error the provider sent).
    pub last: bool,
    /// The provider ended the stream with an error.
    pub failed: bool,
}

/// Reads one event block (its `data:` lines joined) for `api`.
pub(crate) fn classify(api: Api, block: &str) -> Event {
    let data: Vec<&str> = block
        .lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .map(|d| d.strip_prefix(' ').unwrap_or(d))
        .collect();
    let data = data.join("\n");
    if api == Api::Chat && data.trim() == "[DONE]" {
        return Event {
            last: true,
            ..Event::default()
        };
    }
    let Ok(v) = serde_json::from_str::<Value>(&data) else {
        return Event::default();
    };
    let kind = v.get("type").and_then(Value::as_str).unwrap_or("");
    let usage = read_usage(&v);
    let (settles, last, failed) = match api {
        Api::Messages => (
            kind == "message_delta",
            matches!(kind, "message_stop" | "error"),
            kind == "error",
        ),
        Api::Chat => {
            let err = v.get("error").is_some();
            (usage.output.is_some(), err, err)
        }
        Api::Responses => {
            let done = matches!(
                kind,
                "response.completed" | "response.incomplete" | "response.failed"
            );
            let failed = matches!(kind, "error" | "response.failed");
            (
                done && usage.output.is_some(),
                done || kind == "error",
                failed,
            )
        }
    };
    Event {
        usage,
        settles,
        last,
        failed,
    }
}

/// Whether `usage` for this call takes the task past its budget, counted
/// on what it already spent.
pub(crate) fn over_budget(
    meter: &Meter,
    budget: &Budget,
    price: Option<Rates>,
    usage: Partial,
) -> bool {
    let tokens = budget
        .max_tokens
        .is_some_and(|max| meter.tokens() + usage.total() > max);
    let cost = match (budget.max_cost, price) {
        (Some(max), Some(p)) => meter.cost() + p.micro_usd(&usage.usage()) as f64 / 1e6 > max,
        _ => false,
    };
    tokens || cost
}

/// The event ending a stream with an error, in the API's own format.
pub(crate) fn error_event(api: Api, kind: &str, message: &str) -> String {
    let data = match api {
        Api::Messages | Api::Chat => api.error_body(kind, message),
        Api::Responses => json!({"type": "response.failed", "response": {
            "object": "response", "status": "failed",
            "error": {"code": kind, "message": message}, "output": [], "usage": null}}),
    };
    match api {
        Api::Messages => format!("event: error\ndata: {data}\n\n"),
        Api::Chat => format!("data: {data}\n\n"),
        Api::Responses => format!("event: response.failed\ndata: {data}\n\n"),
    }
}

/// Passes a stream on event by event, reading its usage; see `stream`.
pub(crate) async fn relay(
    api: Api,
    resp: reqwest::Response,
    tx: mpsc::Sender<Result<Bytes, std::io::Error>>,
    mut held: Held,
    started: Instant,
) {
    let gw = held.gw.clone();
    let mut upstream = resp.bytes_stream();
    let mut buf: Vec<u8> = Vec::new();
    let mut usage = Partial::default();
    let mut settled_by: Option<Partial> = None;
    // Why the stream ended before its last event, if it did.
    let mut cut: Option<String> = None;
    // What the agent writes, to the task's live followers (issue 29).
    let mut listener = crate::llm::assemble::Listener::new(api);
    let mut speaker = crate::llm::live::Speaker::new(&gw.live, &gw.upstream.redactor);
    // Redaction across events: a key split between two reaches no one.
    let mut splice = crate::llm::splice::Splice::new(api);
    let redactor = gw.upstream.redactor.clone();
    'read: loop {
        while let Some((len, sep)) = boundary(&buf) {
            let block: Vec<u8> = buf.drain(..len + sep).take(len).collect();
            let text = String::from_utf8_lossy(&block);
            let event = classify(api, &text);
            listener.event(&text, &mut speaker);
            usage.merge(event.usage);
            if event.settles {
                settled_by = Some(usage);
            }
            if over_budget(&gw.meter, &gw.budget, gw.rates, usage) {
                gw.meter.set_fatal(Reason::Budget);
                live().refusal(Refusal::Budget);
                info!(task_id = %gw.task_id, tokens = usage.total(), "budget spent mid-stream: stream ended");
                let msg = format!(
                    "token or cost budget spent mid-stream: this call reported {} tokens; the task \
                     ends with reason `budget`",
                    usage.total()
                );
                let mut end = error_event(api, gateway_error::BUDGET, &msg);
                if let Some(text) = splice.finish(&redactor) {
                    end = text + "\n\n" + &end;
                }
                held.saw(&end);
                held.call.ended = Some(msg);
                let _ = tx.send(Ok(end.into())).await;
                // What the provider reported is what it billed; without a
                // final report the reservation is counted.
                held.settle(settled_by).await;
                return;
            }
            for out in splice.push(&redactor, &text) {
                let out = out + "\n\n";
                held.saw(&out);
                if tx.send(Ok(out.into())).await.is_err() {
                    info!(task_id = %gw.task_id, "the agent closed a stream: settled at its reservation");
                    break 'read;
                }
            }
            if event.last {
                if event.failed {
                    settled_by = None;
                }
                held.settle(settled_by).await;
                live().llm_call(&gw.route.provider.name, started.elapsed());
                return;
            }
        }
        speaker.flush();
        if buf.len() > MAX_EVENT {
            cut = Some(format!("an event longer than {} bytes", MAX_EVENT));
            break;
        }
        match upstream.next().await {
            Some(Ok(chunk)) => buf.extend_from_slice(&chunk),
            Some(Err(e)) => {
                cut = Some(format!(
                    "the provider's stream was cut: {}",
                    error_chain(&e.without_url())
                ));
                break;
            }
            None => {
                cut = Some("the provider's stream ended before its last event".into());
                break;
            }
        }
    }
    if let Some(why) = cut {
        let why = gw.upstream.redactor.redact(&why).into_owned();
        warn!(task_id = %gw.task_id, error = %why, "stream cut: settled at its reservation");
        let mut end = error_event(api, gateway_error::UNAVAILABLE, &why);
        if let Some(text) = splice.finish(&redactor) {
            end = text + "\n\n" + &end;
        }
        held.saw(&end);
        held.call.ended = Some(why);
        let _ = tx.send(Ok(end.into())).await;
    }
    held.settle(None).await;
}

/// A call reserved and not yet settled, owned by its stream. Dropped
/// unsettled, it is settled at its reservation (`handler::cut_off`).
pub(crate) struct Held {
    pub(crate) gw: Arc<GatewayState>,
    pub(crate) grant: Option<meter::Grant>,
    /// What `task trajectory` gets of the call (`record`).
    pub(crate) call: record::Call,
    /// The request's shape: with the input count reported, it bounds the
    /// next call's input (`input_bound`).
    pub(crate) shape: Option<crate::llm::input_bound::Shape>,
}

impl Held {
    /// Keeps what was passed on of the answer, up to the record's cap.
    pub(crate) fn saw(&mut self, text: &str) {
        self.call.saw_logprobs(text);
        let room = record::MAX_PART.saturating_sub(self.call.response.len());
        if room > 0 {
            let mut end = text.len().min(room);
            while !text.is_char_boundary(end) {
                end -= 1;
            }
            self.call.response.push_str(&text[..end]);
        }
    }

    /// Settles with the usage reported; None (nothing reported, or a
    /// stream cut) counts the reservation, as a call cut off.
    pub(crate) async fn settle(mut self, usage: Option<Partial>) {
        let Some(grant) = self.grant.take() else {
            return;
        };
        let Some(u) = usage else {
            self.cut(&grant);
            return;
        };
        let usage = u.usage();
        let gw = &self.gw;
        if let (Some(input), Some(shape)) = (u.input, self.shape.take()) {
            gw.meter.counted(shape, input);
        }
        let cost_micro = gw.meter.settle(&grant, usage, gw.rates);
        let id = self.call.call_id.clone();
        ledger(gw, move |l| l.settle(&id, &usage, cost_micro as f64 / 1e6)).await;
        info!(task_id = %gw.task_id, call_id = %self.call.call_id, input = usage.prompt_tokens, output = usage.completion_tokens, "agent call settled");
        self.call.usage = Some((usage.prompt_tokens, usage.completion_tokens));
        self.write();
    }

    fn cut(&mut self, grant: &meter::Grant) {
        cut_off(&self.gw, grant, &self.call.call_id);
        self.call
            .ended
            .get_or_insert_with(|| "cut off: settled at its reservation".into());
        self.write();
    }

    /// The call's trajectory line, written from a blocking thread.
    fn write(&mut self) {
        let call = std::mem::take(&mut self.call);
        let text = record::line(&call, &self.gw.upstream.redactor);
        let (dir, task) = (
            self.gw.upstream.trajectories.clone(),
            self.gw.task_id.to_string(),
        );
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn_blocking(move || record::append(dir, task, text));
        }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        if let Some(grant) = self.grant.take() {
            self.cut(&grant);
        }
    }
}

#[cfg(test)]
#[path = "stream_tests.rs"]
mod tests;
