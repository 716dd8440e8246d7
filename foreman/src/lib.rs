//! `saheeli`, the foreman: queues agent tasks in SQLite and runs each in a
//! hardened servo container through the Docker API, collecting the whole
//! workspace into `results/<task_id>/`.
//!
//! # Layout
//!
//! - [`cli`]: the command line (clap); `commands/`: one file per command
//!   group (task, serve, run, eval, gc, build); `output/`: `--json` shapes,
//!   tables, terminal-safe text.
//! - `config/`: config.yaml (every key, `limits:`, `concurrency` as a
//!   number or `auto`), `.env`, and `providers` (which server a model's
//!   calls go to, and with which key); `spec/`: a prompt file, its
//!   front-matter and `--param` checked into a `TaskSpec` (a template's
//!   parameters resolved and `{{ name }}` replaced, its steps checked),
//!   where each setting came from and the tools the model gets (what
//!   `--dry-run` shows); `inputs/`: what goes into /workspace (packing,
//!   the submitted copies).
//! - `settings/`: the one settings table (every front-matter and
//!   config.yaml key: type, default, doc, `--param`, `SAHEELI_<KEY>`),
//!   from which `--param`, the environment overrides, `--dry-run` and the
//!   book's settings page derive; `docs` (tests only) writes and checks
//!   the book's generated pages (CLI and settings) and its links.
//! - `state`: the task lifecycle (one enum, one table of allowed moves);
//!   `text`: text made safe for a terminal, a wait in one line, RFC 3339
//!   times (below every module that shows text; `output` re-exports it).
//! - `fault`: why a Docker call failed for the daemon's sake
//!   (`DaemonFault`), which the backend sorts, admission counts and
//!   metrics label.
//! - `task`: a task as queued (`TaskSpec`'s fields, its chain of attempts
//!   and what their budgets have left, a template's parameter values):
//!   plain data below the store, which keeps it as JSON, and `spec/`,
//!   which builds and checks it.
//! - `store/`: the SQLite queue: schema and migrations, submit and claim,
//!   `move_state` (the one place a state changes), fenced leases, lookups,
//!   `override_outcome` (a person's verdict on an ended task), the human
//!   desk's rows, a template's steps marked done, each serving
//!   foreman's admission state (what `task status` and metrics show), and
//!   the LLM call ledger's SQL (`ledger`, run on the gateway's own
//!   connection).
//! - `admission`: the limit of `concurrency: auto` and the circuit
//!   breaker, pure (the loop asks, the supervisors report, metrics name
//!   the breaker's states).
//! - `reconciler/`: `saheeli serve`, the loop: claims, take-overs,
//!   cancels passed on, lease renewal, sweep, a control channel per task,
//!   and `gate`: the loop's side of admission, its log lines and the
//!   `admission` row.
//! - `supervisor/`: one task's life, written once for every engine:
//!   launch, the watch loop, collect, outcome (a pure function into
//!   `protocol::Reason`), finish and the retry policy, adopt, park; the
//!   context the loop shares with it (`Ctx`), the per-task control
//!   channel and letting go of a lost lease; its module doc has the
//!   lifecycle diagram and who writes state.
//! - `events/`: the bus every transition is published on, fed from the
//!   event trail; subscribers (progress today; webhooks, metrics and the
//!   dashboard next) never touch the loop.
//! - `backend/`: what the supervisor asks of an engine (`Engine`: facts
//!   only, never task state): this host's Docker (`local/`, with bollard
//!   helpers in `docker/` and size-limited workspaces in `disk`), or
//!   Docker Swarm (`swarm/`: a hardened job service per task, its token
//!   secret, Swarm's task states mapped, `build-servo --push`, removal on
//!   every node).
//! - `collect/`: bringing a workspace home safely (links never followed,
//!   sizes capped, keys redacted).
//! - `report/`: what a user takes away from an ended task besides its
//!   workspace: `.saheeli/changes.patch` (git format) and `report.md`.
//! - `door/`: how a servo reaches its task's gateway: a unix socket per
//!   task, a warm servo's socket, or for swarm servos one TCP listener
//!   with a per-task token (`remote`).
//! - `llm/`: the LLM proxy (keys, budgets, the call ledger, retries,
//!   metering, redaction) and `llm/vendor/`, the vendors' own APIs for
//!   third-party agents.
//! - `routes/`: the servo's task routes: the human desk, steps, the verify
//!   route (`verify` commands in a fresh container beside the paused task
//!   container, the assessor's call through the same budget),
//!   capabilities, children.
//!   They are put together per task in `supervisor/gateway.rs`.
//! - `ops/`: what the CLI, the HTTP API, the routes and the supervisor do
//!   alike (submit, steer, retry, a task's view, opening the database),
//!   with plain request types and one error type, `ops::Error`.
//! - `capability/`: MCP servers run outside the containers (`rmcp`),
//!   whose tools a granted task calls as `name__tool` through its gateway.
//! - `notify/`: webhooks: an outbox row per event and URL (written with
//!   the event), and a sender of its own in `serve`.
//! - `metrics/`: Prometheus metrics (`saheeli metrics`, and the handle a
//!   serving foreman keeps for `GET /metrics`): counted from SQLite at
//!   scrape time, plus this process's latencies recorded by small hooks.
//! - `listen`: serving a router with doors no client holds open
//!   (connection caps, header and idle timeouts), and the file-descriptor
//!   budget that keeps a reserve for launches.
//! - `web/`: `serve --http`: the JSON API, live events (SSE) and the
//!   embedded dashboard, a subscriber of the bus beside the loop.
//! - `eval/`: evaluation suites (`saheeli eval`): a suite file read
//!   strictly, each case into a `TaskSpec` through `spec/`, scoring an
//!   ended case (`expect`), `report.json`, the self-contained
//!   `report.html` (inline SVG charts) and comparing two runs; the runs
//!   and their case tasks are rows of `store/` (`eval`).
//! - `definitions/`: templates, eval suites, agent types and pools read
//!   from a Git repository while `serve --definitions` runs, each new
//!   commit judged as a whole before it applies.
//!
//! Exit codes: 0 ok, 1 a task failed or is incomplete, 2 bad input or a
//! failure of Saheeli itself.

/// `print!` for results on stdout: a closed pipe (`saheeli task status |
/// head -1`) ends the process quietly, as ripgrep does, where `print!`
/// would panic.
macro_rules! out {
    ($($arg:tt)*) => { $crate::write_stdout(format_args!($($arg)*)) };
}

/// `println!` for results on stdout, as [`out!`].
macro_rules! outln {
    () => { $crate::write_stdout(format_args!("\n")) };
    ($($arg:tt)*) => { $crate::write_stdout(format_args!("{}\n", format_args!($($arg)*))) };
}

mod admission;
mod backend;
mod capability;
pub mod cli;
mod collect;
mod commands;
mod config;
mod definitions;
#[cfg(test)]
mod docs;
mod door;
mod egress;
mod eval;
mod events;
mod fault;
mod git;
mod inputs;
mod listen;
mod llm;
mod metrics;
mod notify;
mod ops;
mod output;
mod reconciler;
mod report;
mod routes;
mod settings;
mod spec;
mod state;
mod store;
mod supervisor;
mod task;
mod text;
mod web;

use std::process::ExitCode;

use clap::Parser;
use tracing_subscriber::EnvFilter;

use crate::cli::{Cli, Command, EvalCommand, TaskCommand};

/// The `saheeli` command: parses the command line, runs it, and returns
/// the exit code (`error: …` on stderr and 2 for any error).
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let quiet_default = match &cli.command {
        Command::Serve(_) | Command::Run(_) | Command::BuildServo(_) | Command::Gc(_) => "info",
        Command::Task(_)
        | Command::Metrics
        | Command::Eval(_)
        | Command::Doctor(_)
        | Command::Import(_)
        | Command::Cache(_)
        | Command::Definitions(_) => "warn",
    };
    let level = match cli.verbose {
        0 => quiet_default,
        1 => "debug",
        _ => "trace",
    };
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new(format!("saheeli={level},warn")));
    let log = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false);
    // Text for a person at a terminal; JSON lines for whatever collects
    // the log of a service (systemd, a container runtime, a file).
    let stderr_is_terminal = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let format = cli.log_format.unwrap_or(if stderr_is_terminal {
        cli::LogFormat::Text
    } else {
        cli::LogFormat::Json
    });
    match format {
        // One JSON object per line; serde escapes what a title or a path
        // holds, so nothing reaches a terminal raw.
        cli::LogFormat::Json => log
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .init(),
        cli::LogFormat::Text => log
            .with_ansi(stderr_is_terminal)
            .compact()
            .fmt_fields(tracing_subscriber::field::MakeExt::delimited(
                tracing_subscriber::fmt::format::debug_fn(log_field),
                " ",
            ))
            .init(),
    }

    // Before the runtime: `.env` is loaded with `set_var`, which is only
    // sound while this is the process's only thread.
    let cfg = match config::Config::load(cli.config.as_deref()).and_then(|cfg| {
        cfg.load_dotenv()?;
        Ok(cfg)
    }) {
        Ok(cfg) => cfg,
        Err(err) => {
            eprintln!("error: {err:#}");
            return ExitCode::from(2);
        }
    };
    few_malloc_arenas();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: starting the async runtime: {e}");
            return ExitCode::from(2);
        }
    };
    match runtime.block_on(dispatch(cfg, cli)) {
        Ok(code) => code,
        // The reader went away (`| head`): nothing is wrong, nothing to say.
        Err(err) if broken_stdout(&err) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::from(2)
        }
    }
}

async fn dispatch(cfg: config::Config, cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::BuildServo(args) => commands::build_servo(&cfg, &args)
            .await
            .map(|()| ExitCode::SUCCESS),
        Command::Serve(args) => commands::serve(&cfg, args).await,
        Command::Run(args) => commands::run(&cfg, args).await,
        Command::Gc(args) => commands::gc(&cfg, args).await,
        Command::Metrics => commands::metrics(&cfg).await,
        Command::Doctor(args) => commands::doctor(&cfg, args).await,
        Command::Import(args) => commands::import(args),
        Command::Cache(c) => commands::cache(&cfg, c).await,
        Command::Definitions(c) => commands::definitions(&cfg, c).await,
        Command::Eval(args) => match args.command {
            Some(EvalCommand::Compare(a)) => commands::eval_compare(&cfg, a).await,
            Some(EvalCommand::List(a)) => commands::eval_list(&cfg, a).await,
            Some(EvalCommand::Regrade(a)) => commands::eval_regrade(&cfg, a).await,
            Some(EvalCommand::Export(a)) => commands::eval_export(&cfg, a),
            None => commands::eval(&cfg, args).await,
        },
        Command::Task(cmd) => match cmd {
            TaskCommand::Submit(a) => commands::submit(&cfg, a).await,
            TaskCommand::Status(a) => commands::status(&cfg, a).await,
            TaskCommand::Logs(a) => commands::logs(&cfg, a).await,
            TaskCommand::Results(a) => commands::results(&cfg, a).await,
            TaskCommand::Diff(a) => commands::diff(&cfg, a).await,
            TaskCommand::Report(a) => commands::report(&cfg, a).await,
            TaskCommand::Trajectory(a) => commands::trajectory(&cfg, a).await,
            TaskCommand::Cancel(a) => commands::cancel(&cfg, a).await,
            TaskCommand::Retry(a) => commands::retry(&cfg, a).await,
            TaskCommand::Fork(a) => commands::fork(&cfg, a).await,
            TaskCommand::Snapshot(a) => commands::snapshot(&cfg, a),
            TaskCommand::FollowUp(a) => commands::follow_up(&cfg, a).await,
            TaskCommand::Answer(a) => commands::answer(&cfg, a).await,
            TaskCommand::Approve(a) => commands::approve(&cfg, a).await,
            TaskCommand::Deny(a) => commands::deny(&cfg, a).await,
            TaskCommand::Inject(a) => commands::inject(&cfg, a).await,
            TaskCommand::Pause(a) => commands::pause(&cfg, a).await,
            TaskCommand::Resume(a) => commands::resume(&cfg, a).await,
            TaskCommand::Breakpoint(a) => commands::breakpoint(&cfg, a).await,
            TaskCommand::Step(a) => commands::step(&cfg, a).await,
            TaskCommand::StepOverride(a) => commands::step_override(&cfg, a).await,
            TaskCommand::Attach(a) => commands::attach(&cfg, a).await,
            TaskCommand::Override(a) => commands::override_outcome(&cfg, a).await,
        },
    }
}

/// Writes results to stdout; exits 0 at once when stdout is a closed
/// pipe (what `out!` and `outln!` call).
pub(crate) fn write_stdout(args: std::fmt::Arguments<'_>) {
    use std::io::Write;
    if let Err(e) = std::io::stdout().lock().write_fmt(args) {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        eprintln!("error: writing to stdout: {e}");
        std::process::exit(2);
    }
}

/// Whether `err` is a write to stdout whose reader has gone: a broken pipe
/// somewhere in its chain, and stdout's pipe closed at the other end (a
/// broken pipe to Docker or a webhook is an error like any other).
fn broken_stdout(err: &anyhow::Error) -> bool {
    let broken = err.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
    });
    let mut fd = libc::pollfd {
        fd: 1,
        events: libc::POLLOUT,
        revents: 0,
    };
    // SAFETY: poll reads and writes only `fd`, one entry; 0 ms: no wait.
    let polled = unsafe { libc::poll(&mut fd, 1, 0) };
    broken && polled == 1 && fd.revents & libc::POLLERR != 0
}

/// One log field (or the message) as text made safe by
/// `output::printable`: titles, questions, paths and messages come from
/// prompts and agents, and must not write escape sequences, bidi
/// overrides or line breaks into the serve log.
fn log_field(
    w: &mut tracing_subscriber::fmt::format::Writer<'_>,
    field: &tracing::field::Field,
    value: &dyn std::fmt::Debug,
) -> std::fmt::Result {
    let text = format!("{value:?}");
    let text = output::printable(&text);
    match field.name() {
        "message" => write!(w, "{text}"),
        name => write!(w, "{}={text}", name.trim_start_matches("r#")),
    }
}

/// Caps glibc's malloc arenas at two. By default every thread that
/// allocates may get an arena of its own (up to 8 per core); a serving
/// foreman's blocking threads (SQLite) and runtime workers then keep
/// freed memory spread over many of them, resident, with hundreds of
/// tasks running.
fn few_malloc_arenas() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets an allocator parameter; called before any
    // other thread exists.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 2);
    }
}
