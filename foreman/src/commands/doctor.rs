//! `saheeli doctor` (issue 27): calls each configured provider once with a
//! tiny tool-calling request (and once streamed), asks its server for its
//! window, and prints what works and what does not, with the fix; then
//! the engines' capability table (issue 53). Exit code 1 when any check
//! failed.

use std::process::ExitCode;

use crate::cli::DoctorArgs;
use crate::config::{Config, Providers};
use crate::llm::doctor::{Status, run};

pub(crate) async fn doctor(cfg: &Config, args: DoctorArgs) -> anyhow::Result<ExitCode> {
    let engines = crate::backend::capabilities::table_text(cfg.file.backend);
    if args.capabilities {
        outln!("{}", engines.trim_end());
        return Ok(ExitCode::SUCCESS);
    }
    let providers = Providers::from_config(cfg);
    let client = reqwest::Client::builder()
        .timeout(cfg.file.llm.request_timeout)
        .connect_timeout(std::time::Duration::from_secs(5))
        .build()?;
    for m in &args.model {
        let r = providers.route(m);
        anyhow::ensure!(
            cfg.file.providers.contains_key(&r.provider.name) || r.provider.key.is_some(),
            "--model {m}: it goes to provider `{}`, which is not configured (add it under `providers:` in {}, or set ${})",
            r.provider.name,
            cfg.describe_source(),
            r.provider.key_env.as_deref().unwrap_or("its key")
        );
    }
    let mut failed = false;
    for p in providers.all() {
        let builtin = !cfg.file.providers.contains_key(&p.name);
        if builtin && p.key.is_none() && crate::llm::probe::is_hosted(p) {
            outln!(
                "{}: not configured (${} is unset)",
                p.name,
                p.key_env.as_deref().unwrap_or("its key")
            );
            continue;
        }
        // The model: --model, else config's default model, when either
        // goes to this provider; else the server's first.
        let written = args
            .model
            .iter()
            .chain(std::iter::once(&cfg.file.task.model))
            .find(|m| providers.route(m).provider.name == p.name);
        let (model, window) = match written {
            Some(m) => {
                let r = providers.route(m);
                let w = crate::config::windows::window(
                    &cfg.file.windows,
                    p.context_window,
                    None,
                    m,
                    &r.model,
                );
                (Some(r.model), w)
            }
            None => (None, p.context_window),
        };
        outln!(
            "{}: {} at {}, key: {}",
            p.name,
            kind_name(p.kind),
            p.base_url,
            match (&p.key_env, &p.key) {
                (Some(var), Some(_)) => format!("${var}"),
                (Some(var), None) => format!("none (${var} is unset)"),
                (None, _) => "none".into(),
            }
        );
        for c in run(&client, p, model, window).await {
            failed |= c.status == Status::Fail;
            outln!("  {:<10}{:<6}{}", c.what, c.status.label(), c.said);
            if let Some(fix) = c.fix {
                outln!("  {:<10}{:<6}{}", "", "fix:", fix);
            }
        }
    }
    outln!("{}", engines.trim_end());
    if let Some(why) = crate::backend::capabilities::config_refusal(cfg) {
        failed = true;
        outln!("  config: {why}");
    }
    Ok(if failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

fn kind_name(k: crate::config::ProviderKind) -> &'static str {
    match k {
        crate::config::ProviderKind::Openai => "openai",
        crate::config::ProviderKind::Anthropic => "anthropic",
    }
}
