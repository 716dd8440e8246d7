//! Approval gates: which tool calls wait for a human's approval (a tool,
//! and a pattern over the call's main argument), and the plan gate.

use saheeli_protocol::human::{Gate, PLAN};

use crate::tools::Tool;

/// The task's approval gates, compiled.
pub(crate) struct Gates {
    pub plan: bool,
    tools: Vec<(String, Option<regex::Regex>)>,
}

impl Gates {
    pub fn new(gates: &[Gate]) -> Result<Gates, String> {
        let mut g = Gates {
            plan: false,
            tools: Vec::new(),
        };
        for gate in gates {
            if gate.tool == PLAN {
                g.plan = true;
                continue;
            }
            let re = match &gate.pattern {
                Some(p) => Some(
                    regex::Regex::new(p)
                        .map_err(|e| format!("gate `{}`: bad pattern `{p}`: {e}", gate.tool))?,
                ),
                None => None,
            };
            g.tools.push((gate.tool.clone(), re));
        }
        Ok(g)
    }

    /// Whether this call waits for a human's approval.
    pub fn holds(&self, tool: &Tool) -> bool {
        self.tools.iter().any(|(t, re)| {
            t == tool.name()
                && match re {
                    None => true,
                    Some(re) => re.is_match(&main_argument(tool)),
                }
        })
    }
}

/// What a gate's pattern is matched against: the command of
/// `execute_shell`, the path of a file tool, else the raw arguments.
fn main_argument(tool: &Tool) -> String {
    let arguments = tool.arguments();
    let key = if tool.is_shell() { "command" } else { "path" };
    serde_json::from_str::<serde_json::Value>(arguments)
        .ok()
        .and_then(|v| v.get(key).and_then(|s| s.as_str()).map(str::to_string))
        .unwrap_or_else(|| arguments.to_string())
}
