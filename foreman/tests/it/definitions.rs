//! Issue 52, definitions from Git, on a real repository, a real `serve`
//! and real Docker: a template added by a commit is submittable by name
//! after `POST /api/definitions/refresh` and its task records that
//! commit; a commit with a broken template is rejected as a whole (status
//! says why, the `definitions.rejected` webhook reaches a local receiver,
//! signed) while the last good set keeps serving; a commit that removes a
//! template stops new submits of it while a task already queued from it
//! still runs; a remote repository is refused at start.

use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use serde_json::{Value, json};

use crate::lifecycle::wait_for;
use crate::util::{Saheeli, require_docker, script};
use crate::web::{WebServe, get, post as post_api, until_api};
use crate::webhooks::{SECRET, verify};

/// Host git for the test's own repository.
fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(["-c", "user.name=Test", "-c", "user.email=test@example.com"])
        .args(["-c", "init.defaultBranch=main"])
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .output()
        .expect("git runs");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Writes (or, with None, removes) files in the definitions repository
/// and commits them; returns the commit.
fn commit(s: &Saheeli, files: &[(&str, Option<&str>)], message: &str) -> String {
    let repo = s.path().join("defs");
    if !repo.join(".git").exists() {
        std::fs::create_dir_all(&repo).unwrap();
        git(&repo, &["init", "-q"]);
    }
    for (path, text) in files {
        let p = repo.join(path);
        match text {
            Some(t) => {
                std::fs::create_dir_all(p.parent().unwrap()).unwrap();
                std::fs::write(&p, t).unwrap();
            }
            None => std::fs::remove_file(&p).unwrap(),
        }
    }
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-q", "-m", message]);
    git(&repo, &["rev-parse", "HEAD"])
}

const TEMPLATE: &str = "---\nmodel: replay:agent.json\ntitle: \"Fix {{file}}\"\ntimeout: 2m\n\
    parameters:\n  - { name: file, required: true }\n---\nFix {{file}}.\n";

/// The project: the replay agent every template runs, and a webhook for
/// `definitions.rejected` only.
fn project(hook: &str) -> Saheeli {
    let s = Saheeli::with_config(&format!(
        "notify: [{{ url: \"{hook}\", events: [definitions.rejected] }}]\n"
    ))
    .env("SAHEELI_WEBHOOK_SECRET", SECRET);
    s.write(
        "agent.json",
        &script(&[("task_complete", json!({ "message": "Fixed." }))]),
    );
    s
}

/// A receiver of notices: every signed body, in arrival order.
struct Hooks {
    port: u16,
    got: Arc<Mutex<Vec<Value>>>,
    _rt: tokio::runtime::Runtime,
}

impl Hooks {
    fn start() -> Hooks {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let listener = rt
            .block_on(tokio::net::TcpListener::bind(("127.0.0.1", 0)))
            .unwrap();
        let port = listener.local_addr().unwrap().port();
        let got: Arc<Mutex<Vec<Value>>> = Arc::default();
        let app = Router::new()
            .route("/hook", post(hook))
            .with_state(got.clone());
        rt.spawn(async move { axum::serve(listener, app).await.unwrap() });
        Hooks { port, got, _rt: rt }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}/hook", self.port)
    }
}

async fn hook(
    State(got): State<Arc<Mutex<Vec<Value>>>>,
    headers: HeaderMap,
    body: Bytes,
) -> StatusCode {
    let sig = headers
        .get("saheeli-signature")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if !verify(sig, &body) {
        return StatusCode::UNAUTHORIZED;
    }
    let mut v: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    v["header_event"] = json!(headers.get("saheeli-event").and_then(|h| h.to_str().ok()));
    got.lock().unwrap().push(v);
    StatusCode::OK
}

fn status(s: &Saheeli) -> Value {
    s.expect_json(&["definitions", "status", "--json"], 0)
}

fn refresh(w: &WebServe) -> Value {
    let r = post_api(&w.addr, "/api/definitions/refresh", json!({}));
    assert_eq!(r.status, 200, "{}", r.body);
    r.json()
}

fn submit_template(s: &Saheeli, name: &str) -> String {
    let out = s.expect(
        &[
            "task",
            "submit",
            "--template",
            name,
            "--param",
            "file=a.txt",
            "--json",
        ],
        0,
    );
    serde_json::from_str::<Value>(&out).unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string()
}

#[test]
fn a_template_added_by_commit_is_submittable_and_a_broken_commit_is_rejected_whole() {
    require_docker();
    let hooks = Hooks::start();
    let s = project(&hooks.url());
    let c1 = commit(&s, &[("templates/hello.md", Some(TEMPLATE))], "hello");
    let w = WebServe::start(&s, "127.0.0.1:0", &["--definitions", "defs", "-j", "1"]);
    let st = status(&s);
    assert_eq!(st["commit"], c1.as_str(), "{st:#}");
    assert_eq!(st["templates"], json!(["hello"]));
    assert_eq!(st["changes"]["added"], json!(["templates/hello.md"]));

    // Not yet in the set: refused, naming the template and the commit.
    let err = s.expect_err(
        &["task", "submit", "--template", "fix", "--param", "file=a"],
        2,
    );
    assert!(
        err.contains("template `fix` is not in the definitions at commit")
            && err.contains(&c1[..12])
            && err.contains("templates: hello"),
        "{err}"
    );

    // Added by a commit: submittable by name after a refresh.
    let c2 = commit(&s, &[("templates/fix.md", Some(TEMPLATE))], "fix");
    let r = refresh(&w);
    assert_eq!(r["synced"]["outcome"], "applied", "{r:#}");
    assert_eq!(r["synced"]["commit"], c2.as_str());
    assert_eq!(r["synced"]["changes"]["added"], json!(["templates/fix.md"]));
    assert_eq!(refresh(&w)["synced"]["outcome"], "unchanged");
    let id = submit_template(&s, "fix");
    let t = until_api(&w, &id, "the template's task ends", |t| {
        t["state"] == "complete"
    });
    assert_eq!(t["definitions_commit"], c2.as_str(), "{t:#}");
    assert_eq!(t["template"], "fix");
    assert_eq!(t["title"], "Fix a.txt");

    // A commit with one broken template and one good new one: refused
    // as a whole, saying why; the good one does not apply either.
    let c3 = commit(
        &s,
        &[
            (
                "templates/fix.md",
                Some("---\nmodle: replay:agent.json\n---\nFix it.\n"),
            ),
            ("templates/new.md", Some(TEMPLATE)),
        ],
        "broken",
    );
    let r = refresh(&w);
    assert_eq!(r["synced"]["outcome"], "rejected", "{r:#}");
    let reason = r["synced"]["reason"].as_str().unwrap().to_string();
    assert!(
        reason.contains("templates/fix.md:2") && reason.contains("modle"),
        "{reason}"
    );
    let st = status(&s);
    assert_eq!(
        st["commit"],
        c2.as_str(),
        "the last good set serves: {st:#}"
    );
    assert_eq!(st["rejected"]["commit"], c3.as_str());
    assert_eq!(st["rejected"]["reason"], reason.as_str());
    assert_eq!(st["rejected"]["pending"], true);
    let text = s.expect(&["definitions", "status"], 0);
    assert!(
        text.contains(&c2) && text.contains(&c3) && text.contains("modle"),
        "{text}"
    );
    // The dashboard's status says it too.
    let f = get(&w.addr, "/api/foreman").json();
    assert_eq!(f["definitions"]["commit"], c2.as_str(), "{f:#}");
    assert_eq!(f["definitions"]["rejected"]["commit"], c3.as_str());
    // The webhook, signed, once.
    let delivered = wait_for(Duration::from_secs(30), || {
        !hooks.got.lock().unwrap().is_empty()
    });
    assert!(
        delivered,
        "no definitions.rejected webhook\n{}",
        w.serve.log()
    );
    let got = hooks.got.lock().unwrap().clone();
    assert_eq!(got.len(), 1, "{got:#?}");
    assert_eq!(got[0]["type"], "definitions.rejected");
    assert_eq!(got[0]["header_event"], "definitions.rejected");
    assert_eq!(got[0]["definitions"]["commit"], c3.as_str());
    assert_eq!(got[0]["definitions"]["current"], c2.as_str());
    assert_eq!(got[0]["definitions"]["reason"], reason.as_str());
    // The old set keeps working: `fix` as it was, `new` not at all.
    let id = post_api(
        &w.addr,
        "/api/tasks",
        json!({"template": "fix", "params": ["file=b.txt"]}),
    );
    assert_eq!(id.status, 201, "{}", id.body);
    let id = id.json()["id"].as_str().unwrap().to_string();
    let t = until_api(&w, &id, "the old set's task ends", |t| {
        t["state"] == "complete"
    });
    assert_eq!(t["definitions_commit"], c2.as_str());
    let err = s.expect_err(
        &["task", "submit", "--template", "new", "--param", "file=a"],
        2,
    );
    assert!(
        err.contains("template `new` is not in the definitions"),
        "{err}"
    );
    // The same broken commit is not judged (or notified) again.
    assert_eq!(refresh(&w)["synced"]["outcome"], "unchanged");
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(hooks.got.lock().unwrap().len(), 1);
}

#[test]
fn a_removed_template_stops_new_submits_but_a_queued_task_still_runs() {
    require_docker();
    let hooks = Hooks::start();
    let s = project(&hooks.url());
    let c1 = commit(&s, &[("templates/fix.md", Some(TEMPLATE))], "fix");
    // A serve applies the first commit, then stops.
    s.expect(&["serve", "--drain", "--definitions", "defs"], 0);
    assert_eq!(status(&s)["commit"], c1.as_str());
    // Queued from it while nothing serves.
    let id = submit_template(&s, "fix");
    let c2 = commit(
        &s,
        &[
            ("templates/fix.md", None),
            ("templates/other.md", Some(TEMPLATE)),
        ],
        "remove fix",
    );
    // The next serve applies the removal first, then runs the queued task.
    s.expect(&["serve", "--drain", "--definitions", "defs@main"], 0);
    let st = status(&s);
    assert_eq!(st["commit"], c2.as_str(), "{st:#}");
    assert_eq!(st["changes"]["removed"], json!(["templates/fix.md"]));
    assert_eq!(st["changes"]["added"], json!(["templates/other.md"]));
    let t = s.task(&id);
    assert_eq!(t["state"], "complete", "{t:#}");
    assert_eq!(t["definitions_commit"], c1.as_str());
    let err = s.expect_err(
        &["task", "submit", "--template", "fix", "--param", "file=a"],
        2,
    );
    assert!(
        err.contains("template `fix` is not in the definitions at commit")
            && err.contains(&c2[..12]),
        "{err}"
    );
    submit_template(&s, "other");
    // The repository unreadable at the next start: the set applied before
    // keeps serving (its queued task runs), and the log says why.
    std::fs::rename(s.path().join("defs"), s.path().join("defs-moved")).unwrap();
    std::fs::create_dir(s.path().join("defs")).unwrap();
    let out = s.run(&["serve", "--drain", "--definitions", "defs"]);
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{log}");
    assert!(log.contains("definitions not read"), "{log}");
    assert_eq!(status(&s)["commit"], c2.as_str());
    assert!(s.tasks().iter().all(|t| t["state"] == "complete"));
}

#[test]
fn a_remote_definitions_repository_or_a_missing_one_is_refused_at_start() {
    let s = Saheeli::new();
    let err = s.expect_err(
        &[
            "serve",
            "--drain",
            "--definitions",
            "https://example.com/defs.git",
        ],
        2,
    );
    assert!(
        err.contains("is a remote repository") && err.contains("clone it here"),
        "{err}"
    );
    let err = s.expect_err(&["serve", "--drain", "--definitions", "nowhere"], 2);
    assert!(
        err.contains("`definitions.repo`") && err.contains("nowhere"),
        "{err}"
    );
    // Without a serve ever applying a set, a template submit says what to do.
    let err = s.expect_err(&["task", "submit", "--template", "fix"], 2);
    assert!(err.contains("serve --definitions"), "{err}");
    let st = s.expect_json(&["definitions", "status", "--json"], 0);
    assert_eq!(st["commit"], Value::Null);
}

/// The set's agent types and pools replace config.yaml's (which has
/// none): a file submit's `--agent-type` resolves against the set, and the
/// set's `{ agent_type: a, max: 1 }` caps the claims (from the store's
/// timestamps) while a task in no pool runs beside them.
#[test]
fn the_sets_agent_types_and_pools_apply_to_new_submits_and_claims() {
    use crate::fake_llm::{FakeLlm, Reply};
    use crate::pools::{most_at_once, slots};
    require_docker();
    let llm = FakeLlm::start_matching(vec![], |_| {
        Some(Reply::Slow(
            Duration::from_secs(2),
            Box::new(Reply::tool("task_complete", json!({"message": "done"}))),
        ))
    });
    let s = Saheeli::new()
        .env("OPENAI_API_KEY", "sk-test")
        .env("OPENAI_BASE_URL", &llm.base_url());
    // Unknown before any set applies: config.yaml defines no types.
    s.write("plain.md", "---\ntitle: Review\n---\nReview the change.\n");
    let err = s.expect_err(
        &[
            "task",
            "submit",
            "--prompt",
            "plain.md",
            "--agent-type",
            "a",
        ],
        2,
    );
    assert!(err.contains("`agent_type` `a` is not defined"), "{err}");
    let c = commit(
        &s,
        &[
            (
                "saheeli.yaml",
                Some(
                    "agent_types:\n  a: { model: gpt-a, max_steps: 5 }\npools:\n  - { agent_type: a, max: 1 }\n",
                ),
            ),
            (
                "templates/review.md",
                Some("---\nagent_type: a\ntitle: Review\n---\nReview the change.\n"),
            ),
        ],
        "types and pools",
    );
    s.expect(&["serve", "--drain", "--definitions", "defs"], 0);
    let st = status(&s);
    assert_eq!(st["commit"], c.as_str(), "{st:#}");
    assert_eq!(st["agent_types"], json!(["a"]));
    assert_eq!(st["pools"], json!(["agent_type=a (max 1)"]));
    let by_template = |_: usize| {
        let out = s.expect(&["task", "submit", "--template", "review", "--json"], 0);
        serde_json::from_str::<Value>(&out).unwrap()["id"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let mut a: Vec<String> = (0..2).map(by_template).collect();
    let out = s.expect(
        &[
            "task",
            "submit",
            "--prompt",
            "plain.md",
            "--agent-type",
            "a",
            "--json",
        ],
        0,
    );
    a.push(
        serde_json::from_str::<Value>(&out).unwrap()["id"]
            .as_str()
            .unwrap()
            .to_string(),
    );
    s.write("free.md", "---\nmodel: free\n---\nDo another thing.\n");
    let free = {
        let out = s.expect(&["task", "submit", "--prompt", "free.md", "--json"], 0);
        serde_json::from_str::<Value>(&out).unwrap()["id"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let t = s.task(&a[2]);
    assert_eq!(
        (t["agent_type"].as_str(), t["model"].as_str()),
        (Some("a"), Some("gpt-a")),
        "{t:#}"
    );
    // The set's pool in the metrics and the status footer.
    let metrics = crate::metrics::parse(&s.expect(&["metrics"], 0));
    let at = [("pool", "agent_type=a")];
    assert_eq!(crate::metrics::get(&metrics, "saheeli_pool_max", &at), 1.0);
    assert_eq!(
        crate::metrics::get(&metrics, "saheeli_pool_queued", &at),
        3.0
    );
    let footer = s.expect(&["task", "status"], 0);
    assert!(
        footer.contains("pools: agent_type=a 0/1 (3 queued)"),
        "{footer}"
    );
    let out = s.run(&["serve", "--drain", "-j", "4", "--definitions", "defs"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for id in a.iter().chain([&free]) {
        assert_eq!(s.task(id)["state"], "complete", "{id}");
    }
    let slots = slots(&s);
    let a_ids: Vec<&String> = a.iter().collect();
    assert_eq!(most_at_once(&slots, &a_ids), 1, "{slots:#?}");
    // The task in no pool did not wait behind the type's.
    assert!(slots[&free].0 < slots[&a[1]].0, "{slots:#?}");
}

/// A suite of the set in use runs by name (`eval NAME --from-definitions`),
/// from the commit's files written below the state directory; a name the
/// set lacks is refused naming the commit; a suite whose prompt file is
/// missing rejects its commit.
#[test]
fn a_suite_of_the_set_in_use_runs_by_name() {
    require_docker();
    let s = Saheeli::new();
    let c = commit(
        &s,
        &[
            (
                "evals/smoke.yaml",
                Some(
                    "name: smoke\ncases:\n  - id: done\n    text: Say done.\n    model: replay:agent.json\n",
                ),
            ),
            (
                "evals/agent.json",
                Some(&script(&[("task_complete", json!({ "message": "done" }))])),
            ),
        ],
        "a suite",
    );
    s.expect(&["serve", "--drain", "--definitions", "defs"], 0);
    assert_eq!(status(&s)["evals"], json!(["smoke"]));
    let report = s.expect_json(&["eval", "smoke", "--from-definitions", "--json"], 0);
    assert_eq!(report["suite"], "smoke", "{report:#}");
    assert_eq!(
        report["by_category"]["uncategorized"]["passed"], 1,
        "{report:#}"
    );
    let path = report["suite_path"].as_str().unwrap();
    assert!(
        path.ends_with(&format!("definitions/trees/{c}/evals/smoke.yaml")),
        "the run names the commit's files: {path}"
    );
    let err = s.expect_err(&["eval", "nope", "--from-definitions"], 2);
    assert!(
        err.contains("suite `nope` is not in the definitions at commit")
            && err.contains(&c[..12])
            && err.contains("suites: smoke"),
        "{err}"
    );
    // A case naming a prompt file the commit lacks: the commit is refused.
    commit(
        &s,
        &[(
            "evals/smoke.yaml",
            Some("name: smoke\ncases:\n  - id: done\n    prompt: gone.md\n"),
        )],
        "broken suite",
    );
    s.expect(&["serve", "--drain", "--definitions", "defs"], 0);
    let st = status(&s);
    assert_eq!(st["commit"], c.as_str(), "{st:#}");
    let reason = st["rejected"]["reason"].as_str().unwrap();
    assert!(
        reason.contains("evals/smoke.yaml") && reason.contains("gone.md"),
        "{reason}"
    );
}

/// `definitions:` in config.yaml, polled: a new commit applies without a
/// refresh, within a few polls.
#[test]
fn a_polled_repository_applies_a_new_commit_without_a_refresh() {
    require_docker();
    let s = Saheeli::with_config("definitions: { repo: defs, ref: main, poll: 1s }\n");
    s.write(
        "agent.json",
        &script(&[("task_complete", json!({ "message": "Fixed." }))]),
    );
    let c1 = commit(&s, &[("templates/a.md", Some(TEMPLATE))], "a");
    let serve = crate::human::Serve::start(&s, &[]);
    let applied = |c: &str| {
        let c = c.to_string();
        wait_for(Duration::from_secs(30), || {
            status(&s)["commit"] == c.as_str()
        })
    };
    assert!(applied(&c1), "{}", serve.log());
    let c2 = commit(&s, &[("templates/b.md", Some(TEMPLATE))], "b");
    assert!(applied(&c2), "the poll never applied it\n{}", serve.log());
    assert_eq!(status(&s)["changes"]["added"], json!(["templates/b.md"]));
    assert!(
        serve.log().contains("definitions applied"),
        "{}",
        serve.log()
    );
}
