//! `agent:` (issue 25): which agent runs a task, checked at submit.
//!
//! The front-matter's `agent` wins over config.yaml's `task.agent`. A
//! third-party agent needs a model whose provider serves the API it speaks
//! (Anthropic Messages from an Anthropic provider, OpenAI's from an
//! OpenAI-compatible one) or a `replay:` script (the gateway answers any
//! of the three from it), and
//! its image ([`image_for`]), which the submitting command looks for in
//! Docker before anything is queued.

use std::path::Path;

use anyhow::bail;
use saheeli_protocol::{Agent, AgentName};

use crate::config::{Config, ProviderKind};

/// The agent a task runs with, checked; `fm` is the front-matter's `agent`.
pub(super) fn resolve(
    cfg: &Config,
    prompt: &Path,
    fm: Option<Agent>,
    model: &str,
    replay: bool,
) -> anyhow::Result<Agent> {
    let from_fm = fm.is_some();
    let agent = fm.unwrap_or_else(|| cfg.file.task.agent.clone());
    let key = if from_fm {
        "agent"
    } else {
        "task.agent` in config.yaml (`agent"
    };
    if let Err(why) = agent.check() {
        bail!("{}: {why}", prompt.display());
    }
    let Some(api) = agent.api() else {
        return Ok(agent);
    };
    if replay {
        // The gateway answers the agent's own API from the script
        // (`llm::vendor::replay`): no provider is involved.
        return Ok(agent);
    }
    let route = crate::config::Providers::from_config(cfg).route(model);
    let anthropic = route.provider.kind == ProviderKind::Anthropic;
    if api.needs_anthropic() != anthropic {
        let (wants, has) = if api.needs_anthropic() {
            ("an Anthropic provider", "an OpenAI-compatible one")
        } else {
            ("an OpenAI-compatible provider", "an Anthropic one")
        };
        bail!(
            "{}: `{key}` is `{}`, which speaks `{}` and needs {wants}, but model `{model}` \
             goes to provider `{}`, {has}; pick a model of a matching provider",
            prompt.display(),
            agent.label(),
            api.as_str(),
            route.provider.name,
        );
    }
    Ok(agent)
}

/// The image a task with `agent` runs in: the servo image for the
/// built-in loop, config.yaml's `agents:` entry (else
/// `saheeli-servo-NAME:<version>`) for a named agent, a custom agent's own
/// `image` (else the servo image).
pub(crate) fn image_for(cfg: &Config, agent: &Agent) -> String {
    match agent {
        Agent::Named(AgentName::Saheeli | AgentName::Oracle) => cfg.file.image.clone(),
        Agent::Named(n) => cfg
            .file
            .agents
            .get(n)
            .cloned()
            .unwrap_or_else(|| default_image(*n)),
        Agent::Custom(c) => c.image.clone().unwrap_or_else(|| cfg.file.image.clone()),
    }
}

/// `saheeli-servo-NAME:<version>`, what `build-servo --agent NAME` tags by default.
pub(crate) fn default_image(name: AgentName) -> String {
    format!("saheeli-servo-{name}:{}", env!("CARGO_PKG_VERSION"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use saheeli_protocol::{AgentApi, CustomAgent};

    fn cfg(yaml: &str) -> Config {
        Config {
            source: None,
            base_dir: "/tmp".into(),
            file: serde_yaml::from_str(yaml).unwrap(),
            set_keys: Default::default(),
        }
    }

    #[test]
    fn each_agent_needs_a_provider_of_its_api() {
        let c = cfg("providers:\n  local: { kind: openai, base_url: 'http://127.0.0.1:1/v1' }\n");
        let p = Path::new("p.md");
        let named = |n| Some(Agent::Named(n));
        // (agent, model, replay, error containing)
        let cases: &[(Option<Agent>, &str, bool, Option<&str>)] = &[
            (None, "local/m", false, None),
            (None, "replay:x.yaml", true, None),
            (named(AgentName::MiniSweAgent), "local/m", false, None),
            (named(AgentName::Aider), "gpt-4o-mini", false, None),
            (named(AgentName::Codex), "local/m", false, None),
            (
                named(AgentName::ClaudeCode),
                "claude-sonnet-4-5",
                false,
                None,
            ),
            (
                named(AgentName::ClaudeCode),
                "local/m",
                false,
                Some("needs an Anthropic provider"),
            ),
            (
                named(AgentName::MiniSweAgent),
                "claude-sonnet-4-5",
                false,
                Some("needs an OpenAI-compatible provider"),
            ),
            (named(AgentName::MiniSweAgent), "replay:x.yaml", true, None),
            (named(AgentName::ClaudeCode), "replay:x.yaml", true, None),
            (
                Some(Agent::Custom(CustomAgent {
                    command: vec![],
                    api: AgentApi::OpenaiChat,
                    image: None,
                })),
                "local/m",
                false,
                Some("`agent.command` is empty"),
            ),
        ];
        for (agent, model, replay, err) in cases {
            let got = resolve(&c, p, agent.clone(), model, *replay);
            match (err, got) {
                (None, Ok(a)) => assert_eq!(&a, agent.as_ref().unwrap_or(&Agent::default())),
                (Some(want), Err(e)) => {
                    let e = format!("{e:#}");
                    assert!(
                        e.contains(want) && e.contains("p.md"),
                        "{agent:?} {model}: {e}"
                    );
                }
                (want, got) => panic!("{agent:?} {model}: wanted {want:?}, got {got:?}"),
            }
        }
    }

    #[test]
    fn config_names_the_key_when_it_set_the_agent() {
        let c = cfg("task: { agent: claude-code }\n");
        let e = resolve(&c, Path::new("p.md"), None, "gpt-4o-mini", false).unwrap_err();
        assert!(format!("{e:#}").contains("task.agent"), "{e:#}");
    }

    #[test]
    fn images_come_from_agents_or_the_default_tag() {
        let c = cfg("image: servo:x\nagents: { mini-swe-agent: mini:y }\n");
        let named = |n| image_for(&c, &Agent::Named(n));
        assert_eq!(named(AgentName::Saheeli), "servo:x");
        assert_eq!(named(AgentName::MiniSweAgent), "mini:y");
        assert_eq!(named(AgentName::Aider), default_image(AgentName::Aider));
        assert!(default_image(AgentName::Aider).starts_with("saheeli-servo-aider:"));
        let custom = |image: Option<&str>| {
            image_for(
                &c,
                &Agent::Custom(CustomAgent {
                    command: vec!["x".into()],
                    api: AgentApi::OpenaiChat,
                    image: image.map(String::from),
                }),
            )
        };
        assert_eq!(custom(None), "servo:x");
        assert_eq!(custom(Some("mine:1")), "mine:1");
    }
}
