//! Egress through the gateway (issue 50): a file and many small requests
//! from an HTTP server on this host's 127.0.0.2, fetched by the same
//! Python client twice — on this host straight from the server (the
//! floor), and inside a task's container through its servo's bridge and
//! the foreman's proxy. Throughput is shown as time per MB (lower is
//! better; the target ≥ 0.8× the direct MB/s is ≤ 1.25× its time per MB);
//! the latency a proxied request adds, per request.

use std::process::{Child, Command, Stdio};

use serde_json::{Value, json};

use crate::env::{Env, progress};
use crate::project::Project;
use crate::stats::{Figure, median};

/// Downloads `big.bin` RUNS times (MB/s each) and `small.txt` N times
/// (ms each), on a fresh connection each; prints JSON.
const FETCH: &str = r#"import json, sys, time, urllib.request
base, runs, small = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rates, ms = [], []
for _ in range(runs):
    t, n = time.perf_counter(), 0
    with urllib.request.urlopen(base + "/big.bin", timeout=120) as r:
        while True:
            b = r.read(1 << 20)
            if not b:
                break
            n += len(b)
    rates.append(n / (time.perf_counter() - t) / 1e6)
for _ in range(small):
    t = time.perf_counter()
    with urllib.request.urlopen(base + "/small.txt", timeout=30) as r:
        r.read()
    ms.append((time.perf_counter() - t) * 1000)
print(json.dumps({"mbps": rates, "ms": ms}))
"#;

struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub async fn egress(env: &Env) -> anyhow::Result<Vec<Figure>> {
    let (mb, runs, small) = (
        env.sizes.egress_mb,
        env.sizes.egress_runs,
        env.sizes.egress_requests,
    );
    progress(&format!(
        "egress: {runs} × {mb} MB and {small} small requests, through a task's proxy and straight on this host"
    ));
    let p = Project::new(env, 2)?;
    let result = measure(&p, mb, runs, small);
    p.cleanup(env).await;
    result
}

fn measure(p: &Project, mb: usize, runs: usize, small: usize) -> anyhow::Result<Vec<Figure>> {
    let site = p.path().join("site");
    std::fs::create_dir_all(&site)?;
    let mut big = vec![0u8; mb << 20];
    for (i, b) in big.iter_mut().enumerate() {
        *b = (i.wrapping_mul(2654435761) >> 13) as u8;
    }
    std::fs::write(site.join("big.bin"), &big)?;
    std::fs::write(site.join("small.txt"), "ok\n")?;
    let port = std::net::TcpListener::bind(("127.0.0.2", 0))?
        .local_addr()?
        .port();
    let _server = Server(
        Command::new("python3")
            .args([
                "-m",
                "http.server",
                &port.to_string(),
                "--bind",
                "127.0.0.2",
            ])
            .arg("--directory")
            .arg(&site)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?,
    );
    let t0 = std::time::Instant::now();
    while std::net::TcpStream::connect(("127.0.0.2", port)).is_err() {
        anyhow::ensure!(t0.elapsed().as_secs() < 10, "the HTTP server did not start");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let base = format!("http://127.0.0.2:{port}");
    let (runs_s, small_s) = (runs.to_string(), small.to_string());
    let direct = Command::new("python3")
        .args(["-c", FETCH, &base, &runs_s, &small_s])
        .env_remove("HTTP_PROXY")
        .env_remove("http_proxy")
        .output()?;
    anyhow::ensure!(
        direct.status.success(),
        "the direct fetch failed: {}",
        String::from_utf8_lossy(&direct.stderr)
    );
    let direct: Value = serde_json::from_slice(&direct.stdout)?;
    std::fs::create_dir_all(p.path().join("ws"))?;
    std::fs::write(p.path().join("ws/fetch.py"), FETCH)?;
    let turns = json!({"turns": [
        {"tool_calls": [{"name": "execute_shell", "arguments": {
            "command": format!("python3 fetch.py {base} {runs} {small} > out.json 2> err.txt")}}]},
        {"tool_calls": [{"name": "task_complete", "arguments": {"message": "fetched"}}]},
    ]});
    std::fs::write(p.path().join("egress.json"), serde_json::to_vec(&turns)?)?;
    std::fs::write(
        p.path().join("egress.md"),
        format!(
            "---\nmodel: replay:egress.json\nworkspace: ws\ntimeout: 30m\n\
             egress: {{agent: [\"127.0.0.2:{port}\"]}}\n---\nFetch.\n"
        ),
    )?;
    let (_, task) = p.timed_run("egress.md")?;
    let results = std::path::PathBuf::from(task["results"].as_str().unwrap_or_default());
    let out = std::fs::read(results.join("out.json")).map_err(|e| {
        let err = std::fs::read_to_string(results.join("err.txt")).unwrap_or_default();
        anyhow::anyhow!("the proxied fetch wrote no out.json ({e}): {err}")
    })?;
    let proxied: Value = serde_json::from_slice(&out)?;
    let list = |v: &Value, k: &str| -> Vec<f64> {
        v[k].as_array()
            .map(|a| a.iter().filter_map(Value::as_f64).collect())
            .unwrap_or_default()
    };
    let per_mb = |rates: Vec<f64>| -> Vec<f64> { rates.iter().map(|r| 1000.0 / r).collect() };
    let (d_rate, p_rate) = (list(&direct, "mbps"), list(&proxied, "mbps"));
    let (d_ms, p_ms) = (list(&direct, "ms"), list(&proxied, "ms"));
    let through = Figure::new(
        &format!("egress: {mb} MB through the gateway's proxy"),
        "ms/MB",
        &per_mb(p_rate.clone()),
    )
    .against("direct on loopback", median(&per_mb(d_rate.clone())), 1.25)
    .detail("proxied_mb_per_s", median(&p_rate))
    .detail("direct_mb_per_s", median(&d_rate))
    .note(format!(
        "{:.0} MB/s through the proxy, {:.0} MB/s straight (target ≥ 0.8× the direct MB/s)",
        median(&p_rate),
        median(&d_rate)
    ));
    let added = median(&p_ms) - median(&d_ms);
    let latency = Figure::new("egress: one small request through the proxy", "ms", &p_ms)
        .detail("direct_ms", median(&d_ms))
        .detail("added_ms", added)
        .note(format!(
            "{added:.2} ms added per request (a new connection each: bridge, unix socket, head, connect)"
        ));
    Ok(vec![through, latency])
}
