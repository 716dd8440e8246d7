//! The dashboard: one HTML page, a stylesheet and a script, embedded in
//! the binary (no external assets, no build step). The script renders
//! every task text with `textContent`, never as HTML.

use axum::http::{HeaderValue, header};
use axum::response::{Html, IntoResponse, Response};

const INDEX: &str = include_str!("assets/index.html");
const LOGIN: &str = include_str!("assets/login.html");
const APP_JS: &str = include_str!("assets/app.js");
const APP_CSS: &str = include_str!("assets/app.css");

/// The "Log out" button of the page's header.
const LOGOUT: &str = r#"  <button id="logout" class="ghost" type="button">Log out</button>
"#;

/// `GET /` and `GET /tasks/{id}`: the script routes by path. Without a
/// token there is no session, so no "Log out" button.
pub(super) async fn index(
    axum::extract::State(web): axum::extract::State<super::server::Shared>,
) -> Html<String> {
    Html(page(web.auth.has_token()))
}

fn page(with_token: bool) -> String {
    if with_token {
        INDEX.to_string()
    } else {
        INDEX.replace(LOGOUT, "")
    }
}

fn asset(body: &'static str, content_type: &'static str) -> Response {
    let mut res = body.into_response();
    res.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    res
}

pub(super) async fn js() -> Response {
    asset(APP_JS, "text/javascript; charset=utf-8")
}

pub(super) async fn css() -> Response {
    asset(APP_CSS, "text/css; charset=utf-8")
}

/// The login page, with a message (ours, never the request's).
pub(super) fn login_html(message: Option<&'static str>) -> String {
    LOGIN.replace("{{message}}", message.unwrap_or(""))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_out_is_offered_only_with_a_token() {
        assert!(INDEX.contains(LOGOUT), "index.html lost its button");
        assert!(page(true).contains("Log out"));
        assert!(!page(false).contains("Log out"));
        assert!(page(false).contains("<main"));
    }
}
