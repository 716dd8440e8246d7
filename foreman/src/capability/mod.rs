//! Capabilities: MCP servers run on the foreman's side of the sandbox,
//! with their credentials, never in a container. A task granted
//! `capabilities: [git]` sees the server's tools as `git__<tool>` through
//! its gateway socket; each call goes servo → gateway → here → the MCP
//! server and back. A server is started on first use and shared by the
//! tasks that use it; one that fails (crashed, hung) is dropped and started
//! again on the next call, and the failed call is a tool error for the
//! model, never the end of the task. Spoken with `rmcp`, the official SDK;
//! a stdio server's process and its 4 MiB cap on one message are `stdio`'s.

mod stdio;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use rmcp::model::CallToolRequestParams;
use rmcp::service::{RoleClient, RunningService, ServiceExt};
use saheeli_protocol::chat::{FunctionSpec, ToolSpec};
use tokio::sync::Mutex;
use tracing::{info, warn};

use crate::config::{CapabilityConfig, Config};

/// Between a capability's name and its tool's: `git__git_status`.
pub(crate) const SEP: &str = "__";

/// How long starting a server (and listing its tools) may take.
const START: Duration = Duration::from_secs(60);

/// A running server and the tools it offers.
struct Server {
    client: RunningService<RoleClient, ()>,
    tools: Vec<rmcp::model::Tool>,
    /// A stdio server's process, killed when the server is dropped.
    _child: Option<tokio::process::Child>,
    /// Set when a stdio server sent a message over `stdio::MAX_MESSAGE`.
    over: Arc<AtomicBool>,
}

/// The capability servers of one foreman.
pub(crate) struct Broker {
    configs: BTreeMap<String, CapabilityConfig>,
    running: Mutex<HashMap<String, Arc<Server>>>,
}

/// What a call gave: the text for the model, and whether the tool said it
/// failed.
pub(crate) struct Called {
    pub text: String,
    pub is_error: bool,
}

impl std::fmt::Debug for Broker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Broker")
            .field("capabilities", &self.configs.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl Broker {
    pub fn new(cfg: &Config) -> Broker {
        // A relative command path is relative to config.yaml, like its
        // other paths; a bare name is looked up in PATH.
        let mut configs = cfg.file.capabilities.clone();
        for c in configs.values_mut() {
            if let Some(cmd) = &c.command
                && cmd.contains('/')
                && std::path::Path::new(cmd).is_relative()
            {
                c.command = Some(cfg.base_dir.join(cmd).display().to_string());
            }
        }
        Broker {
            configs,
            running: Mutex::new(HashMap::new()),
        }
    }

    /// The server for `name`, started if it is not running.
    async fn server(&self, name: &str) -> Result<Arc<Server>, String> {
        let mut running = self.running.lock().await;
        if let Some(s) = running.get(name) {
            return Ok(s.clone());
        }
        let cfg = self
            .configs
            .get(name)
            .ok_or_else(|| format!("capability `{name}` is not configured"))?;
        let started = tokio::time::timeout(START, start(name, cfg))
            .await
            .map_err(|_| {
                format!(
                    "capability `{name}` did not start within {}s",
                    START.as_secs()
                )
            })??;
        info!(
            capability = name,
            tools = started.tools.len(),
            "capability server started"
        );
        let s = Arc::new(started);
        running.insert(name.to_string(), s.clone());
        Ok(s)
    }

    /// Forgets a server that failed: the next call starts it again.
    async fn drop_server(&self, name: &str) {
        if let Some(s) = self.running.lock().await.remove(name) {
            warn!(
                capability = name,
                "capability server failed; it is started again on the next call"
            );
            // Stops it (and its child process) when the last user lets go.
            drop(s);
        }
    }

    /// The tools of `granted` capabilities, as the model is offered them.
    pub async fn tools(&self, granted: &[String]) -> Result<Vec<ToolSpec>, String> {
        let mut specs = Vec::new();
        for name in granted {
            let s = self.server(name).await?;
            specs.extend(s.tools.iter().map(|t| spec(name, t)));
        }
        Ok(specs)
    }

    /// Calls `tool` of capability `name` with the model's JSON arguments.
    pub async fn call(
        &self,
        name: &str,
        tool: &str,
        arguments: &str,
        limit: Duration,
    ) -> Result<Called, String> {
        let args: serde_json::Map<String, serde_json::Value> = if arguments.trim().is_empty() {
            serde_json::Map::new()
        } else {
            serde_json::from_str(arguments)
                .map_err(|e| format!("the arguments are not a JSON object: {e}"))?
        };
        let s = self.server(name).await?;
        if !s.tools.iter().any(|t| t.name == tool) {
            return Err(format!("capability `{name}` has no tool `{tool}`"));
        }
        let params = CallToolRequestParams::new(tool.to_string()).with_arguments(args);
        match tokio::time::timeout(limit, s.client.call_tool(params)).await {
            Ok(Ok(r)) => Ok(Called {
                text: result_text(&r),
                is_error: r.is_error.unwrap_or(false),
            }),
            Ok(Err(_)) if s.over.load(Ordering::Relaxed) => {
                self.drop_server(name).await;
                Err(format!(
                    "capability `{name}`: the answer of `{tool}` was over {} MiB, the most one \
                     capability message may hold; the call failed. Ask for less (a narrower \
                     query, a smaller range or file)",
                    stdio::MAX_MESSAGE >> 20
                ))
            }
            Ok(Err(e)) => {
                self.drop_server(name).await;
                Err(format!("capability `{name}` failed: {e}"))
            }
            Err(_) => {
                self.drop_server(name).await;
                Err(format!(
                    "capability `{name}` did not answer within {}s",
                    limit.as_secs()
                ))
            }
        }
    }
}

/// Starts one server: a command over stdio (its environment: a few basics
/// and only the variables the config names), or a streamable-HTTP URL.
async fn start(name: &str, cfg: &CapabilityConfig) -> Result<Server, String> {
    let mut over = Arc::new(AtomicBool::new(false));
    let mut child = None;
    let client = match (&cfg.command, &cfg.url) {
        (Some(command), _) => {
            let mut cmd = tokio::process::Command::new(command);
            cmd.args(&cfg.args).env_clear();
            for var in ["PATH", "HOME", "LANG", "LC_ALL", "TMPDIR"] {
                if let Ok(v) = std::env::var(var) {
                    cmd.env(var, v);
                }
            }
            for var in &cfg.env {
                match std::env::var(var) {
                    Ok(v) => {
                        cmd.env(var, v);
                    }
                    Err(_) => warn!(capability = name, var, "environment variable not set"),
                }
            }
            let started = stdio::spawn(cmd)
                .map_err(|e| format!("starting capability `{name}` (`{command}`): {e}"))?;
            child = Some(started.child);
            over = started.over.clone();
            let served = ().serve((started.read, started.write)).await;
            served.map_err(|e| {
                if over.load(Ordering::Relaxed) {
                    format!(
                        "capability `{name}`: a message over {} MiB during the MCP handshake",
                        stdio::MAX_MESSAGE >> 20
                    )
                } else {
                    format!("capability `{name}`: MCP handshake failed: {e}")
                }
            })?
        }
        (None, Some(url)) => {
            use rmcp::transport::StreamableHttpClientTransport;
            use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
            let mut headers = HashMap::new();
            for (k, v) in &cfg.headers {
                let value = expand(v)?;
                let k = reqwest::header::HeaderName::from_bytes(k.as_bytes())
                    .map_err(|e| format!("capability `{name}`: header `{k}`: {e}"))?;
                let v = reqwest::header::HeaderValue::from_str(&value)
                    .map_err(|e| format!("capability `{name}`: header value: {e}"))?;
                headers.insert(k, v);
            }
            let config =
                StreamableHttpClientTransportConfig::with_uri(url.clone()).custom_headers(headers);
            let transport = StreamableHttpClientTransport::from_config(config);
            ().serve(transport).await.map_err(|e| {
                format!("capability `{name}`: MCP handshake with `{url}` failed: {e}")
            })?
        }
        (None, None) => {
            return Err(format!(
                "capability `{name}` has neither `command` nor `url`"
            ));
        }
    };
    let tools = client
        .list_all_tools()
        .await
        .map_err(|e| format!("capability `{name}`: listing its tools failed: {e}"))?;
    Ok(Server {
        client,
        tools,
        _child: child,
        over,
    })
}

/// `${VAR}` in a header template, from the environment.
fn expand(template: &str) -> Result<String, String> {
    let mut out = template.to_string();
    for var in crate::config::header_vars(template) {
        let v = std::env::var(&var)
            .map_err(|_| format!("`${{{var}}}` is not set in the environment"))?;
        out = out.replace(&format!("${{{var}}}"), &v);
    }
    Ok(out)
}

/// A tool as the model sees it: `name__tool`, its description, its schema.
fn spec(capability: &str, t: &rmcp::model::Tool) -> ToolSpec {
    ToolSpec {
        kind: "function".into(),
        function: FunctionSpec {
            name: format!("{capability}{SEP}{}", t.name),
            description: t.description.as_deref().unwrap_or("").to_string(),
            parameters: serde_json::Value::Object((*t.input_schema).clone()),
        },
    }
}

/// The text of a tool's result: its text blocks, else its structured
/// content, else the whole result as JSON.
fn result_text(r: &rmcp::model::CallToolResult) -> String {
    let texts: Vec<String> = r
        .content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect();
    if !texts.is_empty() {
        return texts.join("\n");
    }
    if let Some(s) = &r.structured_content {
        return s.to_string();
    }
    serde_json::to_string(r).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A minimal MCP server over stdio: `big` answers 20 MiB, `small` a word.
    const SERVER: &str = r#"
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    mid, method = m.get("id"), m.get("method")
    if mid is None:
        continue
    if method == "initialize":
        r = {"protocolVersion": m["params"]["protocolVersion"], "capabilities": {"tools": {}},
             "serverInfo": {"name": "big", "version": "1"}}
    elif method == "tools/list":
        r = {"tools": [{"name": n, "inputSchema": {"type": "object"}} for n in ("big", "small")]}
    elif method == "tools/call":
        n = m["params"]["name"]
        r = {"content": [{"type": "text", "text": "x" * (20 << 20) if n == "big" else "small"}]}
    else:
        r = {}
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": mid, "result": r}) + "\n")
    sys.stdout.flush()
"#;

    #[tokio::test]
    async fn an_answer_over_the_cap_fails_fast_and_says_why() {
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("big.py");
        std::fs::write(&script, SERVER).unwrap();
        let mut file = crate::config::ConfigFile::default();
        file.capabilities.insert(
            "big".into(),
            CapabilityConfig {
                command: Some("python3".into()),
                args: vec![script.display().to_string()],
                ..Default::default()
            },
        );
        let cfg = Config {
            source: None,
            base_dir: dir.path().to_path_buf(),
            file,
            set_keys: Default::default(),
        };
        let broker = Broker::new(&cfg);
        let limit = Duration::from_secs(120);
        let small = broker.call("big", "small", "{}", limit).await.unwrap();
        assert_eq!(small.text, "small");
        let started = std::time::Instant::now();
        let e = broker.call("big", "big", "{}", limit).await.err().unwrap();
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{:?}",
            started.elapsed()
        );
        assert!(e.contains("over 4 MiB") && e.contains("`big`"), "{e}");
        // The server is started again for the next call.
        let again = broker.call("big", "small", "{}", limit).await.unwrap();
        assert_eq!(again.text, "small");
    }
}
