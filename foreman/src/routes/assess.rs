//! The assessor (`assess: true`): one LLM call through the task's own
//! gateway path (reserved, metered and settled in its budget like the
//! servo's calls) with the objective, the agent's completion message and
//! the evidence (verify output, the files changed, the patch cut to a
//! limit). The answer must be `{"verdict": "met" | "not_met" | "limited",
//! "feedback": string, "findings": [string]}` (the older `{"met": bool,
//! "feedback": string}` is read too); one that is not is asked for again
//! once, then counted as not met. `limited` (more attempts cannot help)
//! stops the retries: the task ends `incomplete`, reason `limited`.

use std::time::Instant;

use super::ctx::Ctx;
use super::verify_link::VerifyLink;
use crate::llm::chat::forward;
use crate::llm::provider_call::error_text;
use axum::http::StatusCode;
use saheeli_protocol::chat::{ChatMessage, ChatRequest, ChatResponse};
use saheeli_protocol::verify::{AssessVerdict, Assessment, Check, CheckKind, Graded};
use tracing::warn;

/// How much of the patch the assessor reads.
const PATCH_CAP: usize = 32 * 1024;

/// How much of each verify command's output the assessor reads.
const OUTPUT_CAP: usize = 4 * 1024;

/// Largest answer read back from the provider.
const MAX_ANSWER: usize = 16 << 20;

pub(crate) const SYSTEM: &str = "You are Saheeli's assessor. You judge whether a coding agent's \
work meets its objective, from the evidence given: the objective, the agent's own account, the \
results of the verification commands, and the changes it made. You cannot run anything. Be strict \
about the objective and fair about everything else. Answer with exactly one JSON object and \
nothing else: {\"verdict\": \"met\" or \"not_met\" or \"limited\", \"feedback\": \"...\", \
\"findings\": [\"...\"], \"score\": a number from 0 to 1 for how well the objective is met}. When the objective is not met, the feedback tells the agent precisely what \
is missing or wrong, so that it can fix it. Answer \"limited\" only when more attempts cannot help: \
the agent lacks a capability or the environment prevents the objective (no network, a missing \
service, no permission). The findings list what was found and done, and what could not be.";

/// What the provider's answer was.
enum Answer {
    Judged(Assessment),
    /// Not a verdict in the fixed shape: why.
    Malformed(String),
}

/// Assesses attempt `attempt`: the check it adds (failed when the
/// assessment could not be made).
pub(crate) async fn assess(
    gw: &Ctx,
    link: &VerifyLink,
    attempt: u32,
    message: &str,
    verified: &[Check],
) -> Check {
    let t0 = Instant::now();
    let (files, patch) = match evidence(gw, link).await {
        Ok(e) => e,
        Err(e) => (
            Vec::new(),
            format!("(the changes could not be read: {e:#})"),
        ),
    };
    let mut prompt = prompt(&link.objective, message, verified, &files, &patch);
    if link.egress {
        let id = gw.task_id;
        if let Ok(entries) = gw.db(move |s, _| s.egress_of(id)).await {
            prompt.push_str(&super::verify_egress::section(&entries));
        }
    }
    let mut why = String::new();
    let mut done = None;
    for _ in 0..2 {
        match ask(gw, &prompt).await {
            Ok(Answer::Judged(a)) => {
                done = Some(a);
                break;
            }
            Ok(Answer::Malformed(w)) => why = w,
            Err(e) => {
                done = Some(Assessment {
                    verdict: AssessVerdict::NotMet,
                    feedback: format!("the assessment could not be made: {e}"),
                    findings: Vec::new(),
                    score: None,
                });
                break;
            }
        }
    }
    let a = done.unwrap_or_else(|| {
        warn!(task_id = %gw.task_id, why = %why, "the assessor did not answer in the fixed shape");
        let why =
            format!("the assessor's answer was not a verdict ({why}), twice; counted as not met");
        Assessment {
            verdict: AssessVerdict::NotMet,
            feedback: why,
            findings: Vec::new(),
            score: None,
        }
    });
    Check {
        attempt,
        kind: CheckKind::Assess,
        command: "assess".into(),
        exit_code: None,
        duration_ms: t0.elapsed().as_millis() as u64,
        passed: a.verdict == AssessVerdict::Met,
        output: a.feedback,
        limited: a.verdict == AssessVerdict::Limited,
        findings: a.findings,
        // The assessor's score rides as a grade (source `assess`): what
        // `select: assess` ranks samples by.
        graded: a.score.filter(|s| s.is_finite()).map(|s| Graded {
            reward: s.clamp(0.0, 1.0),
            source: "assess".into(),
            ..Graded::default()
        }),
    }
}

/// One call to the task's model through its gateway path.
async fn ask(gw: &Ctx, prompt: &str) -> Result<Answer, String> {
    let req = ChatRequest {
        model: gw.route.model.clone(),
        messages: vec![ChatMessage::system(SYSTEM), ChatMessage::user(prompt)],
        ..Default::default()
    };
    let resp = forward(gw, req).await;
    let status = resp.status();
    let bytes = axum::body::to_bytes(resp.into_body(), MAX_ANSWER)
        .await
        .map_err(|e| format!("reading the answer: {e}"))?;
    if status == StatusCode::BAD_GATEWAY {
        return Ok(Answer::Malformed(error_text(&bytes)));
    }
    if !status.is_success() {
        return Err(error_text(&bytes));
    }
    let r: ChatResponse =
        serde_json::from_slice(&bytes).map_err(|e| format!("unreadable answer: {e}"))?;
    let text = r
        .choices
        .into_iter()
        .next()
        .and_then(|c| c.message.content)
        .unwrap_or_default();
    Ok(parse(&text))
}

/// The older answer: `{met, feedback}`.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct MetOrNot {
    met: bool,
    feedback: String,
}

/// The verdict in `text`: the JSON object in it (a fence around it is
/// allowed), exactly `{verdict, feedback, findings}` (or `{met, feedback}`).
fn parse(text: &str) -> Answer {
    let (Some(a), Some(b)) = (text.find('{'), text.rfind('}')) else {
        return Answer::Malformed("no JSON object".into());
    };
    if b < a {
        return Answer::Malformed("no JSON object".into());
    }
    let object = &text[a..=b];
    match serde_json::from_str::<Assessment>(object) {
        Ok(v) => Answer::Judged(v),
        Err(e) => match serde_json::from_str::<MetOrNot>(object) {
            Ok(old) => Answer::Judged(Assessment {
                verdict: if old.met {
                    AssessVerdict::Met
                } else {
                    AssessVerdict::NotMet
                },
                feedback: old.feedback,
                findings: Vec::new(),
                score: None,
            }),
            Err(_) => Answer::Malformed(format!(
                "expected {{\"verdict\": \"met\" | \"not_met\" | \"limited\", \"feedback\": string, \
                 \"findings\": [string]}}: {e}"
            )),
        },
    }
}

/// The assessor's prompt.
fn prompt(
    objective: &str,
    message: &str,
    verified: &[Check],
    files: &[String],
    patch: &str,
) -> String {
    let mut s = format!(
        "# Objective\n\n{}\n\n# The agent's completion message\n\n{}\n\n",
        objective.trim(),
        message.trim()
    );
    s.push_str("# Verification\n\n");
    if verified.is_empty() {
        s.push_str("No verification commands are configured.\n\n");
    }
    for c in verified {
        let code = c.exit_code.map_or("none".to_string(), |c| c.to_string());
        let out = if c.output.len() > OUTPUT_CAP {
            let mut end = OUTPUT_CAP;
            while !c.output.is_char_boundary(end) {
                end -= 1;
            }
            format!("{}\n[… cut …]", &c.output[..end])
        } else {
            c.output.clone()
        };
        s.push_str(&format!(
            "`{}` exited {code}:\n```\n{}\n```\n\n",
            c.command,
            out.trim_end()
        ));
    }
    s.push_str("# Files changed\n\n");
    if files.is_empty() {
        s.push_str("None.\n");
    }
    for f in files {
        s.push_str(&format!("- {f}\n"));
    }
    s.push_str(&format!(
        "\n# The changes (a unified diff, at most {} KiB)\n\n```diff\n{}\n```\n\n\
         Is the objective met? Answer with the JSON object only.\n",
        PATCH_CAP / 1024,
        patch.trim_end()
    ));
    s
}

/// The files changed and the patch: the container's workspace is copied
/// out (links never followed, capped, keys redacted) and compared with
/// the submitted one.
async fn evidence(gw: &Ctx, link: &VerifyLink) -> anyhow::Result<(Vec<String>, String)> {
    let (d, container) = link.engine.container(gw.task_id).await?;
    std::fs::create_dir_all(&link.scratch)?;
    let dest = link
        .scratch
        .join(format!("{}-{}", gw.task_id, uuid::Uuid::new_v4().simple()));
    let secrets = gw.upstream.providers.secrets();
    let copied =
        crate::backend::local::collect_workspace(&d, &container, dest.clone(), secrets, 256 << 20)
            .await;
    let submitted = link.submitted.is_file().then(|| link.submitted.clone());
    let dir = dest.clone();
    let made = match copied {
        Ok(_) => tokio::task::spawn_blocking(move || {
            crate::report::evidence(&dir, submitted.as_deref(), PATCH_CAP)
        })
        .await
        .map_err(anyhow::Error::from)
        .and_then(|r| r),
        Err(e) => Err(e),
    };
    let _ = tokio::fs::remove_dir_all(&dest).await;
    made
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_verdict_is_read_from_a_fence_and_nothing_else_passes() {
        let Answer::Judged(a) = parse("```json\n{\"met\": false, \"feedback\": \"no tests\"}\n```")
        else {
            panic!("not judged");
        };
        assert_eq!(a.verdict, AssessVerdict::NotMet);
        assert_eq!(a.feedback, "no tests");
        let Answer::Judged(a) =
            parse(r#"{"verdict": "limited", "feedback": "no network", "findings": ["x"]}"#)
        else {
            panic!("not judged");
        };
        assert_eq!(a.verdict, AssessVerdict::Limited);
        assert_eq!(a.findings, ["x"]);
        assert_eq!(a.score, None, "a score is optional");
        // Issue 51: `select: assess` ranks samples by it.
        let Answer::Judged(a) = parse(r#"{"verdict": "met", "feedback": "", "score": 0.75}"#)
        else {
            panic!("not judged");
        };
        assert_eq!(a.score, Some(0.75));
        for bad in [
            "yes",
            "{\"met\": \"yes\", \"feedback\": \"\"}",
            "{\"met\": true}",
            "} {",
        ] {
            assert!(matches!(parse(bad), Answer::Malformed(_)), "{bad}");
        }
    }

    #[test]
    fn the_prompt_holds_objective_message_output_and_patch() {
        let c = Check {
            attempt: 1,
            kind: CheckKind::Verify,
            command: "sh t.sh".into(),
            exit_code: Some(0),
            duration_ms: 1,
            passed: true,
            output: "ok 3 tests".into(),
            limited: false,
            findings: Vec::new(),
            graded: None,
        };
        let p = prompt(
            "Fix add",
            "I fixed it",
            &[c],
            &["add.sh".into()],
            "+++ b/add.sh",
        );
        for part in [
            "Fix add",
            "I fixed it",
            "`sh t.sh` exited 0",
            "ok 3 tests",
            "- add.sh",
            "+++ b/add.sh",
        ] {
            assert!(p.contains(part), "{part}: {p}");
        }
    }
}
