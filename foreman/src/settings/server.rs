//! The foreman's own settings: config.yaml keys a prompt cannot set.

use super::Setting;

pub(super) const SERVER: &[Setting] = &[
    Setting::new("agents", "map")
        .default("{}")
        .doc("Third-party agents' images by name (`claude-code: saheeli-servo-claude-code:0.1.0`); `build-servo --agent NAME` builds them.")
        .config("agents"),
    Setting::new("images", "map")
        .default("{}")
        .doc("`map:` images a task's `environment:` Dockerfile starts `FROM` that Docker does not have here, mapped to local ones (`images: { map: { python:3.13-slim: my-python:3.13 } }`); no registry is used.")
        .config("images"),
    Setting::new("setup_cache", "map")
        .default("{ max_bytes: 10g }")
        .doc("Cached set-ups (`setup:` results, as images `saheeli-setup:SCOPE-KEY`): `max_bytes` is what they may hold together, the least recently used removed past it; 0 caches nothing. `saheeli cache ls|rm|prune`.")
        .config("setup_cache"),
    Setting::new("base_image", "string")
        .default("saheeli-base:bookworm")
        .doc("The image the Dockerfile starts FROM (build arg `BASE`).")
        .config("base_image"),
    Setting::new("concurrency", "integer | auto")
        .default("4")
        .doc("Tasks run at once: a number, or `auto` (follow Docker's create/start latency and errors).")
        .config("concurrency"),
    Setting::new("database", "path")
        .default("saheeli.db")
        .doc("The SQLite queue.")
        .config("database"),
    Setting::new("results_dir", "path")
        .default("results")
        .doc("Where `results/<task_id>/` directories are collected.")
        .config("results_dir"),
    Setting::new("file_access", "owner | group | all")
        .default("owner")
        .doc("Who else may read the database, `state_dir` and results (0600/0700, 0640/0750, 0644/0755); an existing database or `state_dir` more open than this is narrowed.")
        .config("file_access"),
    Setting::new("state_dir", "path")
        .default(".saheeli")
        .doc("Saheeli's own state: copies of submitted workspaces, the workspace images (`workspaces/`), the servo copies bound into containers (`servos/`).")
        .config("state_dir"),
    Setting::new("run_dir", "path")
        .doc("Gateway sockets, one directory per task (unset: `$XDG_RUNTIME_DIR/saheeli`, `/run/saheeli` for root, …).")
        .config("run_dir"),
    Setting::new("stop_grace", "duration")
        .default("10s")
        .doc("How long a stopped servo gets to flush before it is killed.")
        .config("stop_grace"),
    Setting::new("suspend_after", "duration")
        .doc("Freeze (cgroup freezer) a servo that waited this long on a human, a pause, `wait_tasks` or a model call its gateway holds (a rate-limit wait, a Retry-After, a slow model); thawed when the answer comes (a model call's answer waits for the thaw). Unset: never (see docs/guides/humans.md).")
        .config("suspend_after"),
    Setting::new("suspend", "freeze | checkpoint")
        .default("freeze")
        .doc("What `suspend_after` does to a waiting servo: `freeze` (cgroup freezer: no CPU, no slot, its memory kept). `checkpoint` (CRIU to disk) is refused at load: not supported, see docs/design/checkpoint.md.")
        .config("suspend"),
    Setting::new("lease", "duration")
        .default("10s")
        .doc("A foreman renews its hold on running tasks every fifth of this; another takes them over once it passes.")
        .config("lease"),
    Setting::new("collection", "auto | archive")
        .default("auto")
        .doc("How a workspace is brought home: straight from the volume's directory when possible, else the archive API.")
        .config("collection"),
    Setting::new("max_results_size", "size")
        .default("10g")
        .doc("Collection stops here; the task ends `incomplete` (`results_too_large`), partial results kept.")
        .config("max_results_size"),
    Setting::new("requeue_backoff", "map")
        .default("{ initial: 1s, multiplier: 2, max: 32s }")
        .doc("How long a task waits in `queued` after an infrastructure failure (a failed launch, a servo lost before it ran); ±20 % jitter.")
        .config("requeue_backoff"),
    Setting::new("max_workspace_size", "size")
        .default("1g")
        .doc("A submitted `workspace:` larger than this (in files) is refused.")
        .config("max_workspace_size"),
    Setting::new("deliver_author", "string")
        .default("Saheeli <saheeli@localhost>")
        .doc("Author and committer (`Name <email>`) of the commit a task's `deliver:` pushes; credentials for the push are `SAHEELI_GIT_USERNAME` and `SAHEELI_GIT_PASSWORD` in the `.env` beside config.yaml.")
        .config("deliver_author"),
    Setting::new("notify_max_age", "duration")
        .default("24h")
        .doc("A webhook delivery still failing after this long is given up (marked dead).")
        .config("notify_max_age"),
    Setting::new("smtp", "map")
        .doc("The mail relay of `notify: [{ email: ADDRESS }]`: `relay` (HOST:PORT), `from`, `tls` (`starttls`, the default; `tls`; `none` for a relay on this host). Its login is `SAHEELI_SMTP_USERNAME` and `SAHEELI_SMTP_PASSWORD` (environment or .env).")
        .config("smtp"),
    Setting::new("providers", "map")
        .default("{}")
        .doc("LLM servers by name (`kind`, `base_url`, `api_key_env`, `max_output_tokens`, `context_window`); a model `NAME/model` goes to NAME.")
        .config("providers"),
    Setting::new("prices", "map")
        .default("{}")
        .doc("USD per million tokens by model (`input_per_mtok`, `output_per_mtok`, `cache_read_per_mtok`, `cache_write_per_mtok`), for `max_cost` and reports.")
        .config("prices"),
    Setting::new("windows", "map")
        .default("{}")
        .doc("Context windows in tokens by model (`name` or `prefix*`), over the built-in table.")
        .config("windows"),
    Setting::new("capabilities", "map")
        .default("{}")
        .doc("MCP servers run by the foreman, by name (`command`/`args`/`env`, or `url`/`headers`).")
        .config("capabilities"),
    Setting::new("allow", "list")
        .doc("The capabilities tasks may ask for (unset: every one configured).")
        .config("allow"),
    Setting::new("backend", "docker | swarm")
        .default("docker")
        .doc("Where tasks run: this host's Docker engine, or a Docker Swarm (`swarm:`).")
        .config("backend"),
    Setting::new("swarm.manager", "string")
        .doc("The swarm manager's API, DOCKER_HOST-style (`tcp://10.0.0.11:2375`). Required with `backend: swarm`.")
        .config("swarm.manager"),
    Setting::new("swarm.registry", "string")
        .doc("`host:port` of the registry the nodes pull the servo image from.")
        .config("swarm.registry"),
    Setting::new("swarm.network", "string")
        .doc("The attachable overlay network the servos join, or `none`: jobs with no network at all, reaching the gateway through a relay on their node (the nodes' engines must have no default bridge; see [Docker Swarm](../operating/swarm.md#no-network-swarmnetwork-none)).")
        .config("swarm.network"),
    Setting::new("swarm.gateway_listen", "string")
        .doc("`addr:port` the gateway listens on, reachable from every node.")
        .config("swarm.gateway_listen"),
    Setting::new("pool", "list")
        .default("[]")
        .doc("Warm servos on this host (issue 28), or warm job services on a swarm's nodes (issue 53): classes `{size: N | auto, max_idle, image?, network?, resources?, setup_key?}`; a task whose image, network and resources equal a class's (and, with `setup_key`, a cached set-up's key its set-up's) is served by one of its idle servos, else it launches cold.")
        .config("pool"),
    Setting::new("agent_types", "map")
        .default("{}")
        .doc("Named kinds of worker (issue 52): `reviewer: { agent, model, image, max_steps, max_tokens, max_cost, timeout, tools, capabilities }`; a task's `agent_type: reviewer` (or `--agent-type`) takes them as defaults under its own front-matter.")
        .config("agent_types"),
    Setting::new("pools", "list")
        .default("[]")
        .doc("Caps beside `concurrency`: `{ agent_type: reviewer, max: 4 }`, `{ model: claude-sonnet-4-5, max: 16 }`, `{ key: ANTHROPIC_API_KEY, max: 32 }` (the provider key's variable); a task runs only while every pool it is in has room, counted over every foreman of the database; the tightest wins, and a full pool's queued tasks never hold up another's.")
        .config("pools"),
    Setting::new("definitions", "map")
        .doc("Templates, eval suites, agent types and pools read from a Git repository while `serve` runs (issue 52): `{ repo: PATH, ref: HEAD, poll: 60s }` (also `serve --definitions REPO[@REF]`); a new commit applies only when all of it is valid. See [Definitions from Git](../guides/definitions.md).")
        .config("definitions"),
    Setting::new("swarm.tls", "map")
        .doc("TLS for the manager's and every node's engine API (served with `--tlsverify`): `ca` (PEM of the CA that signed the engines' certificates; the only one trusted), `cert` and `key` (the foreman's client certificate), paths relative to the config file.")
        .config("swarm.tls"),
    Setting::new("limits.memory", "size")
        .default("8g")
        .doc("The most memory any task may ask for.")
        .config("limits.memory"),
    Setting::new("limits.cpus", "number")
        .default("4.0")
        .doc("The most CPUs any task may ask for.")
        .config("limits.cpus"),
    Setting::new("limits.pids", "integer")
        .default("4096")
        .doc("The most processes any task may ask for.")
        .config("limits.pids"),
    Setting::new("limits.disk", "size")
        .default("20g")
        .doc("The largest /workspace any task may ask for.")
        .config("limits.disk"),
    Setting::new("limits.networks", "list")
        .default("[none]")
        .doc("The network modes a task may ask for.")
        .config("limits.networks"),
    Setting::new("limits.egress", "list")
        .default("[\"*\"]")
        .doc("The hosts a task's `egress:` may name (`*`: any name or address; narrow it to `[pypi.org, \"*.pythonhosted.org\"]`). Loopback, private and link-local addresses are reached only when a task names the address itself.")
        .config("limits.egress"),
    Setting::new("limits.disk_enforcement", "loop | off")
        .default("loop")
        .doc("How `resources.disk` is enforced: an ext4 image per task (root, local daemon), or not at all.")
        .config("limits.disk_enforcement"),
    Setting::new("llm.request_timeout", "duration")
        .default("5m")
        .doc("Limit on one upstream LLM request.")
        .config("llm.request_timeout"),
    Setting::new("llm.max_attempts", "integer")
        .default("6")
        .doc("Attempts per call for 429, 5xx, resets and timeouts (the first included).")
        .config("llm.max_attempts"),
    Setting::new("llm.max_retry_time", "duration")
        .default("5m")
        .doc("Give up retrying a call after this long.")
        .config("llm.max_retry_time"),
    Setting::new("llm.anthropic_max_tokens", "integer")
        .default("8192")
        .doc("`max_tokens` sent to Anthropic, which requires one.")
        .config("llm.anthropic_max_tokens"),
    Setting::new("llm.max_output_tokens", "integer")
        .default("4096")
        .doc("Output cap sent with every call (a provider's `max_output_tokens` overrides it), lowered to what the budget leaves.")
        .config("llm.max_output_tokens"),
    Setting::new("llm.stream", "bool")
        .default("true")
        .doc("Ask providers to stream the built-in loop's answers, so `task logs --follow`, `task attach` and the dashboard show the model's text as it comes (`llm.delta`); off: whole answers (agents' own streams are shown either way).")
        .config("llm.stream"),
    Setting::new("http.addr", "IP:PORT")
        .doc("Where `serve` serves the dashboard and API (`serve --http` overrides); unset: no server.")
        .config("http.addr"),
    Setting::new("http.token_env", "string")
        .default("SAHEELI_HTTP_TOKEN")
        .doc("The variable (or `.env` entry) holding the access token; required for any address but loopback.")
        .config("http.token_env"),
    Setting::new("http.api_tokens", "map")
        .default("{}")
        .doc("Named API tokens (issue 52): `{ alice: SAHEELI_TOKEN_ALICE }`, a name to the variable (or `.env` entry) holding its token; a request with `Authorization: Bearer` that token acts as that name, so an approval `from: [alice]` can be decided over HTTP. Each token as long as the main one; never in config.yaml.")
        .config("http.api_tokens"),
    Setting::new("http.header_timeout", "duration")
        .default("10s")
        .doc("A request's head must arrive within this; an idle keep-alive connection is closed after it.")
        .config("http.header_timeout"),
    Setting::new("http.max_connections", "integer")
        .default("256")
        .doc("Connections open at once (live event streams included).")
        .config("http.max_connections"),
    Setting::new("http.max_connections_per_client", "integer")
        .default("64")
        .doc("Connections one client address (an IPv6 /64) may hold open at once, below `http.max_connections`: one client cannot take the others' share. Behind a reverse proxy every client is the proxy's address: raise it to `http.max_connections`.")
        .config("http.max_connections_per_client"),
];
