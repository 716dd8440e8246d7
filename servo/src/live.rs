//! Following the gateway's live lines (issue 29): what the model writes,
//! as it streams in, printed to stdout (the container log, which `task
//! logs --follow`, `task attach` and the dashboard read) and never to the
//! audit file. Live only: a line the servo was not there for is gone.

use std::io::Write;
use std::time::Duration;

use futures_util::StreamExt;
use saheeli_protocol::live::{LiveLine, routes};

/// Longest live line passed on; a longer one is dropped.
const MAX_LINE: usize = 64 * 1024;

/// Follows the gateway at `address` (`unix:/path` or `http://host:port`)
/// for as long as the servo runs; the receiver hears when the first try
/// was made (once it got through, what is published is seen).
pub(crate) fn follow(address: &str) -> tokio::sync::oneshot::Receiver<()> {
    let (ready, rx) = tokio::sync::oneshot::channel();
    let (builder, base) = match address.strip_prefix("unix:") {
        Some(path) => (
            reqwest::Client::builder().unix_socket(path.to_string()),
            "http://gateway".to_string(),
        ),
        None => (
            reqwest::Client::builder(),
            address.trim_end_matches('/').to_string(),
        ),
    };
    let Ok(headers) = crate::remote::auth_headers() else {
        return rx;
    };
    let Ok(http) = builder
        .connect_timeout(Duration::from_secs(10))
        .default_headers(headers)
        .build()
    else {
        return rx;
    };
    let url = format!("{base}{}", routes::LIVE);
    tokio::spawn(async move {
        let mut ready = Some(ready);
        loop {
            let asked = http.get(&url).send().await;
            // Ready after the first try, whatever it gave: a gateway not
            // there yet delays nothing (the first call waits for it anyway).
            if let Some(r) = ready.take() {
                let _ = r.send(());
            }
            match asked {
                Ok(resp) if resp.status().is_success() => {
                    let t0 = std::time::Instant::now();
                    print_lines(resp).await;
                    // A follow that ended at once is not asked again at once.
                    if t0.elapsed() > Duration::from_secs(1) {
                        continue;
                    }
                }
                // A gateway that serves no live lines: nothing to follow.
                Ok(resp) if resp.status() == reqwest::StatusCode::NOT_FOUND => return,
                _ => {}
            }
            // A gateway that is not there (yet, or any more): ask again.
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    });
    rx
}

async fn print_lines(resp: reqwest::Response) {
    let mut chunks = resp.bytes_stream();
    let mut buf: Vec<u8> = Vec::new();
    while let Some(Ok(chunk)) = chunks.next().await {
        buf.extend_from_slice(&chunk);
        while let Some(i) = buf.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = buf.drain(..=i).collect();
            let text = String::from_utf8_lossy(&line[..i]);
            // Only a live line is printed, one write each (audit lines
            // are written whole too, so the two never interleave).
            if let Some(l) = LiveLine::parse(&text) {
                let mut out = serde_json::to_vec(&l).expect("live lines serialize");
                out.push(b'\n');
                let _ = std::io::stdout().lock().write_all(&out);
            }
        }
        if buf.len() > MAX_LINE {
            buf.clear();
        }
    }
}
