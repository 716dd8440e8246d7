//! The footer of `task status`: how a serving foreman admits tasks.

use crate::store::AdmissionRow;

/// One line: the limit, what runs, the breaker and Docker's launch time.
pub(crate) fn admission_line(r: &AdmissionRow) -> String {
    let mode = if r.concurrency == "auto" {
        format!("concurrency auto (limit now {})", r.limit)
    } else {
        format!("concurrency {}", r.concurrency)
    };
    let breaker = match r.breaker.as_str() {
        "open" => format!(
            "breaker open after {} Docker errors in a row: no launches for {}s",
            r.failures,
            (r.open_for_ms.unwrap_or(0).max(0) as u64).div_ceil(1000)
        ),
        "half_open" => "breaker half-open: trying one launch".to_string(),
        _ => "breaker closed".to_string(),
    };
    let latency = match (r.latency_ms, r.baseline_ms) {
        (Some(l), Some(b)) => format!("; create+start {l:.0} ms (baseline {b:.0} ms)"),
        _ => String::new(),
    };
    let pool = match r.pool_idle {
        Some(n) => format!("; pool: {n} warm servos idle"),
        None => String::new(),
    };
    format!(
        "foreman: {mode}, {} running, {breaker}{latency}{pool}",
        r.running
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(concurrency: &str, breaker: &str) -> AdmissionRow {
        AdmissionRow {
            owner: "f".into(),
            concurrency: concurrency.into(),
            limit: 12,
            running: 7,
            breaker: breaker.into(),
            failures: 5,
            latency_ms: Some(84.4),
            baseline_ms: Some(61.0),
            open_for_ms: Some(4_200),
            updated_at: 0,
            pool_idle: None,
        }
    }

    #[test]
    fn the_footer_names_the_limit_and_the_breaker() {
        assert_eq!(
            admission_line(&row("auto", "closed")),
            "foreman: concurrency auto (limit now 12), 7 running, breaker closed; \
             create+start 84 ms (baseline 61 ms)"
        );
        assert_eq!(
            admission_line(&AdmissionRow {
                latency_ms: None,
                ..row("8", "open")
            }),
            "foreman: concurrency 8, 7 running, breaker open after 5 Docker errors in a row: \
             no launches for 5s"
        );
        assert!(admission_line(&row("auto", "half_open")).contains("breaker half-open"));
        assert!(
            admission_line(&AdmissionRow {
                pool_idle: Some(8),
                ..row("8", "closed")
            })
            .ends_with("; pool: 8 warm servos idle")
        );
    }
}
