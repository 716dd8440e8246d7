//! `saheeli eval export` (issue 49): a real run of the shipped benchmarks
//! with the oracle, written as a Harbor job directory and read back by a
//! small parser of Harbor's result schema (`docs/design/benchmark-formats.md`
//! §1.8–1.9: the types below hold the fields Harbor requires, typed as its
//! models type them), and as RL JSON lines.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::Value;

use crate::util::{Saheeli, require_docker};

/// Harbor's `JobResult` (the parts its viewer reads).
#[derive(Debug, Deserialize)]
struct JobResult {
    id: String,
    started_at: String,
    finished_at: Option<String>,
    n_total_trials: u64,
    stats: JobStats,
    trial_results: Vec<Value>,
}

#[derive(Debug, Deserialize)]
struct JobStats {
    n_completed_trials: u64,
    n_errored_trials: u64,
    evals: BTreeMap<String, AgentDatasetStats>,
}

#[derive(Debug, Deserialize)]
struct AgentDatasetStats {
    n_trials: u64,
    n_errors: u64,
    metrics: Vec<BTreeMap<String, f64>>,
    pass_at_k: BTreeMap<String, f64>,
    reward_stats: BTreeMap<String, BTreeMap<String, Vec<String>>>,
    exception_stats: BTreeMap<String, Vec<String>>,
}

/// Harbor's `TrialResult`: its required fields and those we fill.
#[derive(Debug, Deserialize)]
struct TrialResult {
    id: String,
    task_name: String,
    trial_name: String,
    trial_uri: String,
    task_id: TaskPath,
    source: Option<String>,
    task_checksum: String,
    config: TrialConfig,
    agent_info: AgentInfo,
    agent_result: Option<AgentContext>,
    verifier_result: Option<VerifierResult>,
    exception_info: Option<Value>,
    started_at: Option<String>,
    finished_at: Option<String>,
    environment_setup: Option<Timing>,
    agent_setup: Option<Timing>,
    agent_execution: Option<Timing>,
    verifier: Option<Timing>,
}

#[derive(Debug, Deserialize)]
struct TaskPath {
    path: String,
}

#[derive(Debug, Deserialize)]
struct TrialConfig {
    task: TaskPath,
    trial_name: String,
    agent: AgentConfig,
}

#[derive(Debug, Deserialize)]
struct AgentConfig {
    name: String,
}

#[derive(Debug, Deserialize)]
struct AgentInfo {
    name: String,
    version: String,
}

#[derive(Debug, Deserialize)]
struct AgentContext {
    n_input_tokens: Option<u64>,
    n_output_tokens: Option<u64>,
    cost_usd: Option<f64>,
}

#[derive(Debug, Deserialize)]
struct VerifierResult {
    rewards: BTreeMap<String, f64>,
}

#[derive(Debug, Deserialize)]
struct Timing {
    started_at: String,
    finished_at: String,
}

/// Harbor's `TrialLock` (minimal).
#[derive(Debug, Deserialize)]
struct TrialLock {
    task: LockTask,
}

#[derive(Debug, Deserialize)]
struct LockTask {
    name: String,
    digest: String,
}

fn read<T: for<'de> Deserialize<'de>>(path: &Path) -> T {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}\n{text}", path.display()))
}

/// An RFC 3339 time with a zone, as Pydantic reads a datetime.
fn is_time(t: &str) -> bool {
    t.len() >= 20 && t.as_bytes()[4] == b'-' && t.as_bytes()[10] == b'T' && t.ends_with('Z')
}

/// The primary reward: `reward`, or the only key.
fn primary(rewards: &BTreeMap<String, f64>) -> f64 {
    match rewards.get("reward") {
        Some(r) => *r,
        None if rewards.len() == 1 => *rewards.values().next().unwrap(),
        None => panic!("no primary reward in {rewards:?}"),
    }
}

fn run_benchmarks(s: &Saheeli) -> String {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../evals/benchmarks");
    let dir = dir.canonicalize().unwrap();
    let report = s.expect_json(
        &[
            "eval",
            dir.to_str().unwrap(),
            "--param",
            "agent=oracle",
            "--repeat",
            "2",
            "--json",
        ],
        0,
    );
    assert_eq!(report["pass_rate"], 1.0, "{report}");
    report["run_id"].as_str().unwrap().to_string()
}

#[test]
fn an_oracle_run_exports_as_a_harbor_job_directory_and_rl_lines() {
    require_docker();
    let s = Saheeli::new();
    let run = run_benchmarks(&s);
    let prefix = &run[..13];
    let out = s.expect(
        &[
            "eval", "export", prefix, "--format", "harbor", "--out", "jobs",
        ],
        0,
    );
    let job = PathBuf::from(out.trim());
    assert_eq!(job, s.path().join("jobs").join(&run));

    // The job: config.json names the job and the agent; result.json has
    // the stats Harbor's viewer lists.
    let config: Value = read(&job.join("config.json"));
    assert_eq!(config["job_name"], run.as_str());
    assert_eq!(config["agents"][0]["name"], "oracle", "{config}");
    let result: JobResult = read(&job.join("result.json"));
    assert_eq!(result.id, run);
    assert!(is_time(&result.started_at), "{}", result.started_at);
    assert!(result.finished_at.as_deref().is_some_and(is_time));
    assert_eq!(result.n_total_trials, 4, "2 cases × 2 repeats");
    assert_eq!(result.stats.n_completed_trials, 4);
    assert_eq!(result.stats.n_errored_trials, 0);
    assert!(result.trial_results.is_empty());
    assert_eq!(result.stats.evals.len(), 1, "{:?}", result.stats.evals);
    let (key, eval) = result.stats.evals.iter().next().unwrap();
    // The oracle has no model: Harbor's `<agent>__<dataset>`.
    assert!(key.starts_with("oracle__"), "{key}");
    assert_eq!(eval.n_trials, 4);
    assert_eq!(eval.n_errors, 0);
    assert_eq!(
        eval.metrics,
        vec![BTreeMap::from([("mean".to_string(), 1.0)])]
    );
    assert_eq!(eval.pass_at_k.get("1"), Some(&1.0), "{:?}", eval.pass_at_k);
    assert_eq!(eval.pass_at_k.get("2"), Some(&1.0), "{:?}", eval.pass_at_k);
    assert_eq!(
        eval.reward_stats["reward"]["1.0"].len(),
        4,
        "{:?}",
        eval.reward_stats
    );
    assert!(eval.exception_stats.is_empty());

    // Every trial, read as Harbor reads it.
    let mut trials = Vec::new();
    for e in std::fs::read_dir(&job).unwrap().flatten() {
        if !e.file_type().unwrap().is_dir() {
            continue;
        }
        let dir = e.path();
        let t: TrialResult = read(&dir.join("result.json"));
        let name = dir.file_name().unwrap().to_str().unwrap().to_string();
        assert_eq!(t.trial_name, name);
        assert_eq!(t.config.trial_name, name);
        assert!(name.starts_with(&format!("{}__", t.task_name)), "{name}");
        assert!(t.trial_uri.starts_with("file:///") && t.trial_uri.ends_with(&name));
        assert!(
            Path::new(&t.task_id.path).is_absolute(),
            "{}",
            t.task_id.path
        );
        assert_eq!(t.config.task.path, t.task_id.path);
        assert!(Path::new(&t.task_id.path).join("solution").exists() || t.task_name == "tb1-hello");
        assert_eq!(t.source.as_deref(), Some("benchmarks"), "{t:?}");
        assert_eq!(t.task_checksum.len(), 64);
        assert_eq!(t.id.len(), 36, "a UUID: {}", t.id);
        assert_eq!(t.agent_info.name, "oracle");
        assert_eq!(t.config.agent.name, "oracle");
        assert!(!t.agent_info.version.is_empty());
        let usage = t.agent_result.as_ref().unwrap();
        assert_eq!(
            (usage.n_input_tokens, usage.n_output_tokens),
            (Some(0), Some(0))
        );
        assert_eq!(usage.cost_usd, Some(0.0));
        assert!(t.exception_info.is_none(), "{t:?}");
        let rewards = &t.verifier_result.as_ref().expect("a reward").rewards;
        assert_eq!(primary(rewards), 1.0, "{name}: {rewards:?}");
        let times = [
            &t.environment_setup,
            &t.agent_setup,
            &t.agent_execution,
            &t.verifier,
        ];
        for (i, p) in times.into_iter().enumerate() {
            let p = p
                .as_ref()
                .unwrap_or_else(|| panic!("{name}: phase {i} missing"));
            assert!(is_time(&p.started_at) && is_time(&p.finished_at), "{p:?}");
            assert!(p.started_at <= p.finished_at, "{name}: phase {i}: {p:?}");
        }
        let (start, end) = (t.started_at.unwrap(), t.finished_at.unwrap());
        assert!(start <= t.environment_setup.as_ref().unwrap().started_at);
        assert!(t.verifier.as_ref().unwrap().finished_at <= end);
        let lock: TrialLock = read(&dir.join("lock.json"));
        assert_eq!(lock.task.name, t.task_name);
        assert!(lock.task.digest.starts_with("sha256:"));
        let reward = std::fs::read_to_string(dir.join("verifier/reward.txt")).unwrap();
        assert_eq!(reward.trim().parse::<f64>().unwrap(), 1.0);
        let stdout = std::fs::read_to_string(dir.join("verifier/test-stdout.txt")).unwrap();
        assert!(stdout.contains("reward: 1"), "{stdout}");
        // The trajectory: ATIF v1.8, the oracle's two scripted turns.
        let traj: Value = read(&dir.join("agent/trajectory.json"));
        assert_eq!(traj["schema_version"], "ATIF-v1.8");
        let steps = traj["steps"].as_array().unwrap();
        for (i, st) in steps.iter().enumerate() {
            assert_eq!(st["step_id"], i + 1, "{traj}");
        }
        let agent: Vec<&Value> = steps.iter().filter(|s| s["source"] == "agent").collect();
        assert_eq!(agent.len(), 2, "{traj}");
        assert_eq!(agent[0]["tool_calls"][0]["function_name"], "execute_shell");
        assert_eq!(agent[1]["tool_calls"][0]["function_name"], "task_complete");
        assert_eq!(agent[0]["llm_call_count"], 0, "no model was called");
        assert!(agent[0].get("metrics").is_none());
        let obs = &agent[0]["observation"]["results"][0];
        assert_eq!(
            obs["source_call_id"],
            agent[0]["tool_calls"][0]["tool_call_id"]
        );
        trials.push(t.task_name);
    }
    trials.sort();
    assert_eq!(
        trials,
        ["harbor-hello", "harbor-hello", "tb1-hello", "tb1-hello"]
    );

    // Written once: the same directory again is refused, naming it.
    let err = s.expect_err(
        &[
            "eval", "export", &run, "--format", "harbor", "--out", "jobs",
        ],
        2,
    );
    assert!(
        err.contains("exists; remove it or give another `--out`"),
        "{err}"
    );

    // RL: one line per sample, its reward, outcome and trajectory.
    s.expect(
        &[
            "eval", "export", &run, "--format", "rl", "--out", "rl.jsonl",
        ],
        0,
    );
    let text = std::fs::read_to_string(s.path().join("rl.jsonl")).unwrap();
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 4, "{text}");
    for l in &lines {
        assert_eq!(l["reward"], 1.0, "{l}");
        assert_eq!(l["rewards"]["reward"], 1.0, "{l}");
        assert_eq!(l["reward_source"], "verifier", "{l}");
        assert_eq!(l["outcome"]["state"], "complete", "{l}");
        assert_eq!(l["agent"], "oracle");
        assert!(l["repeat"] == 1 || l["repeat"] == 2, "{l}");
        assert_eq!(l["tokens"]["total"], 0);
        assert_eq!(l["trajectory"]["schema_version"], "ATIF-v1.8");
        assert!(l["task_id"].as_str().is_some_and(|t| t.len() == 36));
    }
    let err = s.expect_err(
        &["eval", "export", "nope", "--format", "rl", "--out", "-"],
        2,
    );
    assert!(err.contains("no eval run with id `nope`"), "{err}");
}

/// A task asking for logprobs (`logprobs: true`) against the fake OpenAI
/// server, which returns them as OpenAI does (`choices[].logprobs.content`,
/// streamed): each agent step of the RL export's trajectory carries its
/// call's, one per completion token, in order; the Harbor trial's
/// `rollout_details` too. A task that does not ask gets none.
#[test]
fn the_logprobs_a_provider_returned_are_in_each_agent_step_of_the_export() {
    use crate::fake_llm::{FakeLlm, Reply};
    use crate::fake_stream::logprob;
    use serde_json::json;
    require_docker();
    let llm = FakeLlm::start(vec![
        Reply::Said(
            "Let me look.".into(),
            vec![("execute_shell".into(), json!({"command": "echo hi"}))],
            (50, 3),
        ),
        Reply::Said(
            "Done.".into(),
            vec![("task_complete".into(), json!({"message": "said hi"}))],
            (60, 1),
        ),
    ]);
    let s = Saheeli::new()
        .env("OPENAI_API_KEY", "sk-test")
        .env("OPENAI_BASE_URL", &llm.base_url());
    s.write(
        "suite.yaml",
        "name: lp\ndefaults: { model: gpt-test, max_steps: 5, timeout: 2m }\ncases:\n\
         \x20 - { id: asks, text: Say hi., logprobs: true }\n",
    );
    let out = s.expect_json(&["eval", "suite.yaml", "--json"], 0);
    let run = out["run_id"].as_str().unwrap().to_string();
    // The gateway asked: the request said so.
    let seen = llm.seen();
    assert_eq!(seen[0].body["logprobs"], true, "{:?}", seen[0].body);
    s.expect(
        &[
            "eval", "export", &run, "--format", "rl", "--out", "rl.jsonl",
        ],
        0,
    );
    let text = std::fs::read_to_string(s.path().join("rl.jsonl")).unwrap();
    let line: Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    let steps = line["trajectory"]["steps"].as_array().unwrap();
    let agent: Vec<&Value> = steps.iter().filter(|s| s["source"] == "agent").collect();
    assert_eq!(agent.len(), 2, "{line}");
    // "Let me look." is 3 tokens at the fake ("Let m", "e loo", "k."); "Done." one.
    let want = |n: usize| (0..n).map(logprob).collect::<Vec<f64>>();
    assert_eq!(agent[0]["metrics"]["logprobs"], json!(want(3)), "{line}");
    assert_eq!(agent[0]["metrics"]["completion_tokens"], 3);
    assert_eq!(agent[1]["metrics"]["logprobs"], json!(want(1)), "{line}");
    // Harbor's trial: the same, per call, in `rollout_details`.
    s.expect(
        &[
            "eval", "export", &run, "--format", "harbor", "--out", "jobs",
        ],
        0,
    );
    let trial = std::fs::read_dir(s.path().join("jobs"))
        .unwrap()
        .flatten()
        .flat_map(|job| std::fs::read_dir(job.path()).unwrap().flatten())
        .find(|e| e.path().join("result.json").is_file())
        .unwrap();
    let result: Value = read(&trial.path().join("result.json"));
    assert_eq!(
        result["agent_result"]["rollout_details"],
        json!([{"logprobs": [want(3), want(1)]}]),
        "{result}"
    );
}
