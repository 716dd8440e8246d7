//! `servo mcp --url URL`: Saheeli's own tools for a third-party agent,
//! as an MCP server over stdio (issue 25). The agent (Claude Code, Codex)
//! starts it from its MCP config; it relays `tools/list` and `tools/call`
//! to the servo's loopback listener at URL (`/saheeli/mcp/tools`,
//! `/saheeli/mcp/call`), where the servo answers them ([`super::own`]):
//! it holds the gateway socket, which this process (the agent's uid)
//! cannot open.
//!
//! MCP's stdio transport is newline-delimited JSON-RPC 2.0; this server
//! answers `initialize`, `ping`, `tools/list` and `tools/call`, ignores
//! notifications and says "method not found" to anything else. Written
//! here rather than with rmcp's server half, which would bring schemars
//! and its macros into the container's binary for four methods.

use std::io::{BufRead, Read, Write};
use std::process::ExitCode;
use std::time::Duration;

use serde_json::{Value, json};

/// The MCP revision answered when the client names none.
const PROTOCOL: &str = "2025-06-18";
/// The longest line read from the agent.
const MAX_LINE: usize = 4 << 20;
/// How long one call may take: `ask_user` waits for a person.
const CALL_WAIT: Duration = Duration::from_secs(7 * 24 * 3600);

/// `servo mcp --url URL`.
pub(crate) fn main(mut argv: impl Iterator<Item = String>) -> ExitCode {
    let url = match (argv.next().as_deref(), argv.next()) {
        (Some("--url"), Some(u)) if u.starts_with("http://127.0.0.1:") => u,
        _ => {
            eprintln!("servo mcp: expected `--url http://127.0.0.1:PORT`");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("servo mcp: {e}");
            return ExitCode::from(1);
        }
    };
    let http = match reqwest::Client::builder().no_proxy().build() {
        Ok(h) => h,
        Err(e) => {
            eprintln!("servo mcp: {e}");
            return ExitCode::from(1);
        }
    };
    let relay = Relay { http, url };
    let stdin = std::io::stdin();
    let mut input = stdin.lock();
    let mut line = Vec::new();
    loop {
        line.clear();
        match input
            .by_ref()
            .take(MAX_LINE as u64 + 1)
            .read_until(b'\n', &mut line)
        {
            Ok(0) => return ExitCode::SUCCESS,
            Ok(_) => {}
            Err(e) => {
                eprintln!("servo mcp: reading stdin: {e}");
                return ExitCode::from(1);
            }
        }
        if line.len() > MAX_LINE {
            eprintln!("servo mcp: a message longer than {MAX_LINE} bytes; stopping");
            return ExitCode::from(1);
        }
        let Some(answer) = runtime.block_on(answer(&relay, &line)) else {
            continue;
        };
        let mut out = std::io::stdout().lock();
        if writeln!(out, "{answer}")
            .and_then(|()| out.flush())
            .is_err()
        {
            return ExitCode::SUCCESS;
        }
    }
}

struct Relay {
    http: reqwest::Client,
    url: String,
}

impl Relay {
    async fn send(&self, req: reqwest::RequestBuilder) -> Result<Value, String> {
        let r = req
            .timeout(CALL_WAIT)
            .send()
            .await
            .map_err(|e| format!("the servo cannot be reached: {e}"))?;
        let status = r.status();
        let body: Value = r
            .json()
            .await
            .map_err(|e| format!("the servo's answer is not JSON: {e}"))?;
        if !status.is_success() {
            return Err(format!("the servo refused ({status}): {body}"));
        }
        Ok(body)
    }

    async fn tools(&self) -> Result<Value, String> {
        self.send(self.http.get(format!("{}/saheeli/mcp/tools", self.url)))
            .await
    }

    async fn call(&self, params: &Value) -> Result<Value, String> {
        self.send(
            self.http
                .post(format!("{}/saheeli/mcp/call", self.url))
                .json(params),
        )
        .await
    }
}

fn error(id: &Value, code: i64, message: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
}

fn result(id: &Value, result: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "result": result})
}

/// The answer to one line; None for a notification (or a response).
async fn answer(relay: &Relay, line: &[u8]) -> Option<Value> {
    let msg: Value = match serde_json::from_slice(line) {
        Ok(v) => v,
        Err(e) if line.iter().all(u8::is_ascii_whitespace) => {
            let _ = e;
            return None;
        }
        Err(e) => return Some(error(&Value::Null, -32700, &format!("parse error: {e}"))),
    };
    let id = msg.get("id").cloned()?;
    let Some(method) = msg.get("method").and_then(Value::as_str) else {
        // A response to something this server never asks: ignored.
        return None;
    };
    let params = msg.get("params").cloned().unwrap_or(Value::Null);
    Some(match method {
        "initialize" => {
            let version = params["protocolVersion"].as_str().unwrap_or(PROTOCOL);
            result(
                &id,
                json!({"protocolVersion": version,
                       "capabilities": {"tools": {"listChanged": false}},
                       "serverInfo": {"name": "saheeli", "version": env!("CARGO_PKG_VERSION")},
                       "instructions": "Saheeli's tools: ask_user asks the person who runs \
                        this task and waits for the answer; task_complete says the task is done \
                        (with a summary); step_done marks one of the task's steps done."}),
            )
        }
        "ping" => result(&id, json!({})),
        "tools/list" => match relay.tools().await {
            Ok(tools) => result(&id, tools),
            Err(e) => error(&id, -32603, &e),
        },
        "tools/call" => match relay.call(&params).await {
            Ok(r) => result(&id, r),
            Err(e) => result(
                &id,
                json!({"content": [{"type": "text", "text": format!("error: {e}")}],
                       "isError": true}),
            ),
        },
        other => error(&id, -32601, &format!("method `{other}` not found")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn relay() -> Relay {
        Relay {
            http: reqwest::Client::new(),
            // Nothing listens on port 1: calls fail as errors, not panics.
            url: "http://127.0.0.1:1".into(),
        }
    }

    #[tokio::test]
    async fn it_speaks_json_rpc() {
        let r = relay();
        let init = answer(
            &r,
            br#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-03-26"}}"#,
        )
        .await
        .unwrap();
        assert_eq!(init["id"], 1);
        assert_eq!(init["result"]["protocolVersion"], "2025-03-26");
        assert!(init["result"]["capabilities"]["tools"].is_object());
        let note = br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
        assert!(answer(&r, note).await.is_none());
        let ping = answer(&r, br#"{"jsonrpc":"2.0","id":"p","method":"ping"}"#)
            .await
            .unwrap();
        assert_eq!(ping["result"], json!({}));
        let other = answer(&r, br#"{"jsonrpc":"2.0","id":2,"method":"resources/list"}"#)
            .await
            .unwrap();
        assert_eq!(other["error"]["code"], -32601);
        let bad = answer(&r, b"{not json").await.unwrap();
        assert_eq!(bad["error"]["code"], -32700);
        // The servo away: a call is a tool error the agent reads.
        let call = answer(
            &r,
            br#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"ask_user","arguments":{"question":"q"}}}"#,
        )
        .await
        .unwrap();
        assert_eq!(call["result"]["isError"], true, "{call}");
    }
}
