//! Capability tools (`name__tool`): MCP servers the foreman runs outside
//! the container; the servo only knows their names and schemas, and calls
//! them through the gateway socket. And `tools:`, which narrows the
//! built-in tools the model is offered.

use saheeli_protocol::capability::Call;
use saheeli_protocol::tools::allowed_by;
use tracing::warn;

use super::Agent;
use crate::tools::ToolOutput;

impl Agent {
    /// Offers only the built-in tools `tools:` lists (when it does).
    pub(super) fn narrow_tools(&mut self) {
        let allowed = self.task.tools.clone();
        self.specs
            .retain(|s| allowed_by(allowed.as_deref(), &s.function.name));
    }

    /// Adds the granted capabilities' tools, as the gateway lists them.
    pub(super) async fn load_capabilities(&mut self) {
        if self.task.capabilities.is_empty() || !self.capability_tools.is_empty() {
            return;
        }
        match self.desk.capability_tools().await {
            Ok(tools) => {
                self.capability_tools = tools.iter().map(|t| t.function.name.clone()).collect();
                self.specs.extend(tools);
            }
            Err(e) => {
                warn!(error = %e.0, "capability tools unavailable");
                self.messages.push(saheeli_protocol::chat::ChatMessage::user(format!(
                    "[saheeli] The capabilities {} could not be reached ({}); their tools are not available.",
                    self.task.capabilities.join(", "),
                    e.0
                )));
            }
        }
    }

    /// Whether the task was granted the capability tool `name`.
    pub(super) fn granted(&self, name: &str) -> bool {
        self.capability_tools.iter().any(|t| t == name)
    }

    /// Runs a granted capability's tool through the gateway.
    pub(super) async fn capability(&self, name: &str, arguments: &str) -> ToolOutput {
        let call = Call {
            tool: name.to_string(),
            arguments: arguments.to_string(),
        };
        match self.desk.capability(&call).await {
            Ok(r) if r.ok => ToolOutput::ok(r.text),
            Ok(r) => ToolOutput::error(r.text),
            Err(e) => ToolOutput::error(e.0),
        }
    }
}
