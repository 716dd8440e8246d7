//! `saheeli doctor` against the fake LLM (its real wire format): a provider
//! that works, one that answers without a tool call, one that is not there.
//! (Against the real llama-server: local_server.rs.)

use futures_util::StreamExt;
use insta::assert_snapshot;
use serde_json::json;

use crate::fake_llm::{FakeLlm, Reply};
use crate::util::Saheeli;

#[test]
fn doctor_says_what_works_and_the_fix_for_what_does_not() {
    let good = FakeLlm::start(vec![
        Reply::tool("ping", json!({"x": 1})),
        Reply::tool("ping", json!({"x": 1})),
    ]);
    let mute = FakeLlm::start(vec![
        Reply::Text("pong".into(), (40, 2)),
        Reply::Text("pong".into(), (40, 2)),
    ]);
    // A port nothing listens on: bound, then closed.
    let gone = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let config = format!(
        "providers:\n  good: {{ kind: openai, base_url: '{}' }}\n  \
         mute: {{ kind: openai, base_url: '{}', api_key_env: MUTE_KEY, context_window: 16384 }}\n  \
         gone: {{ kind: openai, base_url: 'http://{gone}/v1' }}\n",
        good.base_url(),
        mute.base_url()
    );
    let s = Saheeli::with_config(&config)
        .env("ANTHROPIC_API_KEY", "")
        .env("MUTE_KEY", "mute-secret-key");
    let out = s
        .cmd(&[
            "doctor",
            "--model",
            "good/small",
            "--model",
            "mute/small",
            "--model",
            "gone/small",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout)
        .replace(&good.base_url(), "http://GOOD/v1")
        .replace(&mute.base_url(), "http://MUTE/v1")
        .replace(&gone.to_string(), "GONE");
    // The OS's words for a refused connection vary: keep the line's start.
    let text: String = text
        .lines()
        .map(|l| match l.find("no answer from") {
            Some(i) => format!("{}no answer from …", &l[..i]),
            None => l.to_string(),
        })
        .collect::<Vec<_>>()
        .join("\n");
    assert_snapshot!("doctor_fake_llm", text);
    // The key went only where it was named, and no key to the others.
    for seen in good.seen() {
        assert_eq!(seen.authorization, None);
        assert_eq!(seen.body["tool_choice"], "auto");
    }
    for seen in mute.seen() {
        assert_eq!(
            seen.authorization.as_deref(),
            Some("Bearer mute-secret-key")
        );
    }
    assert_eq!(good.seen().len(), 2);
    assert_eq!(good.seen()[1].body["stream"], true);
}

/// A hostile provider on 127.0.0.1 answering every request with `answer`;
/// it counts the bytes its answers' bodies gave out.
struct Hostile {
    addr: std::net::SocketAddr,
    served: std::sync::Arc<std::sync::atomic::AtomicU64>,
    _runtime: tokio::runtime::Runtime,
}

type Answer = fn(
    &axum::http::HeaderMap,
    std::sync::Arc<std::sync::atomic::AtomicU64>,
) -> axum::response::Response;

impl Hostile {
    fn start(answer: Answer) -> Hostile {
        let served = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        let addr = listener.local_addr().unwrap();
        let count = served.clone();
        let app = axum::Router::new().fallback(move |headers: axum::http::HeaderMap| {
            let count = count.clone();
            async move { answer(&headers, count) }
        });
        runtime.spawn(async move { axum::serve(listener, app).await.unwrap() });
        Hostile {
            addr,
            served,
            _runtime: runtime,
        }
    }

    fn doctor(&self) -> (std::process::Output, std::time::Duration) {
        let config = format!(
            "providers:\n  evil: {{ kind: openai, base_url: 'http://{}/v1', api_key_env: EVIL_KEY }}\n",
            self.addr
        );
        let s = Saheeli::with_config(&config)
            .env("ANTHROPIC_API_KEY", "")
            .env("EVIL_KEY", EVIL_KEY);
        let started = std::time::Instant::now();
        let out = s
            .cmd(&["doctor", "--model", "evil/small"])
            .output()
            .unwrap();
        (out, started.elapsed())
    }
}

const EVIL_KEY: &str = "sk-hostile4-DOCTORKEY-0123456789";
const GIB: u64 = 1 << 30;

/// Issue 47 (hostile N28): a provider answering 1 GiB (made as it is
/// read, 64 KiB at a time) to every request. The doctor reads a bounded
/// part of each answer and says so; it held the whole (2.7 GB) before.
#[test]
fn doctor_reads_a_bounded_part_of_a_huge_answer() {
    let evil = Hostile::start(|_, count| {
        let chunk = axum::body::Bytes::from(vec![b'x'; 64 * 1024]);
        let body = futures_util::stream::iter(0..GIB / (64 * 1024)).map(move |_| {
            count.fetch_add(64 * 1024, std::sync::atomic::Ordering::Relaxed);
            Ok::<_, std::io::Error>(chunk.clone())
        });
        axum::response::Response::new(axum::body::Body::from_stream(body))
    });
    let (out, took) = evil.doctor();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(text.contains("longer than 4 MiB"), "{text}");
    let served = evil.served.load(std::sync::atomic::Ordering::Relaxed);
    eprintln!("served {served} bytes in {took:?}");
    // Five answers read (probes, the call, the stream), each cut at 4 MiB
    // (plus what the sockets buffer).
    assert!(served < 128 << 20, "the doctor read {served} bytes");
}

/// Issue 47 (hostile N29): a provider's 401 echoes the Authorization
/// header with OSC and CSI escapes (a window title, a cleared screen, a
/// clipboard write). The doctor prints neither the key nor an escape.
#[test]
fn doctor_prints_a_hostile_401_redacted_and_without_escapes() {
    let evil = Hostile::start(|headers, _| {
        let auth = headers
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string();
        let body = format!(
            "\u{1b}]0;pwned\u{7}\u{1b}[2J\u{1b}]52;c;ZXZpbA==\u{7}you sent {auth} \u{9b}31m"
        );
        axum::response::IntoResponse::into_response((axum::http::StatusCode::UNAUTHORIZED, body))
    });
    let (out, _) = evil.doctor();
    let text = String::from_utf8_lossy(&out.stdout);
    let all = format!("{text}{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(text.contains("HTTP 401"), "{text}");
    assert!(!all.contains("DOCTORKEY"), "{all}");
    assert!(
        !all.contains('\u{1b}') && !all.contains('\u{7}') && !all.contains('\u{9b}'),
        "{all:?}"
    );
    assert!(text.contains("[REDACTED:EVIL_KEY]"), "{text}");
}
