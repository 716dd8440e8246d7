//! Who may use the dashboard, and from where.
//!
//! - With a token (`http.token_env`), every request but the login page and
//!   its stylesheet needs it: `Authorization: Bearer <token>`, or the
//!   session cookie the login page sets (`HttpOnly`, `SameSite=Strict`).
//!   Without one (loopback only), the `Host` must be a loopback name, so a
//!   web page cannot reach the API through DNS rebinding.
//! - Every POST must come from this origin: the body must be declared JSON
//!   (`Content-Type: application/json`, which a cross-site form cannot
//!   send without a CORS preflight this server never grants; the login
//!   form is the one exception), and `Origin` and `Sec-Fetch-Site`, when
//!   the browser sends them, must say this site.
//! - Named tokens (`http.api_tokens`, issue 52) are bearer tokens too; a
//!   request with one acts as its name ([`Principal`]), which is what a
//!   person's act records and what `approve: { from: [...] }` checks.
//! - Failed guesses (login form, bearer) are paced per address (`limit`).
//! - The session cookie has no `Secure` attribute: this server speaks
//!   plain HTTP only (no TLS, no configured external URL); put a TLS
//!   proxy in front for any address but loopback.

use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;
use std::sync::Mutex;

use axum::Form;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{Html, IntoResponse, Redirect, Response};

use super::error::ApiError;
use super::server::Shared;

/// The session cookie's name.
const COOKIE: &str = "saheeli_session";
/// Sessions kept at most (the oldest is forgotten first).
const MAX_SESSIONS: usize = 256;

/// Who a request acts as, as the guard found it (a request extension).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Principal {
    /// The main token, a session, or no token at all (loopback): the
    /// serving user, recorded as `USER (http)`.
    Serving,
    /// A named token's name (`http.api_tokens`; issue 52), recorded as it
    /// is: an approval `from: [NAME]` counts it.
    Named(String),
}

impl Principal {
    /// The name a person's act is recorded under.
    pub fn who(&self) -> String {
        match self {
            Principal::Serving => format!("{} (http)", crate::ops::who()),
            Principal::Named(n) => n.clone(),
        }
    }
}

/// `http.api_tokens` read: each name's token from its variable, each as
/// long as `min`, none the same as another or the main token. Errors name
/// the key and the variable, never a token.
pub(super) fn named_tokens(
    map: &BTreeMap<String, String>,
    main: Option<&str>,
    min: usize,
) -> anyhow::Result<Vec<(String, String)>> {
    let mut out: Vec<(String, String)> = Vec::new();
    for (name, var) in map {
        if name.is_empty()
            || name.len() > 64
            || name.chars().any(|c| c.is_whitespace() || c.is_control())
        {
            anyhow::bail!(
                "`http.api_tokens`: the name `{name}` must be 1 to 64 characters, no spaces"
            );
        }
        let Some(t) = std::env::var(var)
            .ok()
            .map(|t| t.trim().to_string())
            .filter(|t| !t.is_empty())
        else {
            anyhow::bail!(
                "`http.api_tokens.{name}`: the variable `{var}` is not set; put `{name}`'s token \
                 in it (the environment, or `.env` beside config.yaml), never in config.yaml"
            );
        };
        if t.len() < min {
            anyhow::bail!(
                "the token of `http.api_tokens.{name}` (in `{var}`) is {} characters; use at \
                 least {min} random ones (e.g. `openssl rand -hex 24`)",
                t.len()
            );
        }
        if main == Some(t.as_str()) || out.iter().any(|(_, o)| *o == t) {
            anyhow::bail!(
                "the token of `http.api_tokens.{name}` (in `{var}`) is the same as another \
                 token; give each name its own"
            );
        }
        out.push((name.clone(), t));
    }
    Ok(out)
}

/// The token, and the sessions logged in with it (in memory: a restart
/// logs everyone out).
pub(super) struct Auth {
    token: Option<String>,
    /// Named tokens: name and token.
    named: Vec<(String, String)>,
    sessions: Mutex<VecDeque<String>>,
    /// Failed attempts per client address (`limit`).
    pub attempts: super::limit::Attempts,
}

impl Auth {
    pub fn new(token: Option<String>, named: Vec<(String, String)>) -> Auth {
        Auth {
            token,
            named,
            sessions: Mutex::new(VecDeque::new()),
            attempts: Default::default(),
        }
    }

    /// Whether requests need a token (and so people a session).
    pub fn has_token(&self) -> bool {
        self.token.is_some()
    }

    fn token_matches(&self, given: &str) -> bool {
        self.token
            .as_deref()
            .is_some_and(|t| constant_time_eq(t.as_bytes(), given.trim().as_bytes()))
    }

    fn new_session(&self) -> String {
        let id = format!(
            "{}{}",
            uuid::Uuid::new_v4().simple(),
            uuid::Uuid::new_v4().simple()
        );
        let mut s = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
        if s.len() >= MAX_SESSIONS {
            s.pop_front();
        }
        s.push_back(id.clone());
        id
    }

    fn has_session(&self, id: &str) -> bool {
        let s = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
        s.iter()
            .any(|k| constant_time_eq(k.as_bytes(), id.as_bytes()))
    }

    fn end_session(&self, id: &str) {
        let mut s = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
        s.retain(|k| k != id);
    }

    /// Who the request acts as: a named token's name, else the serving
    /// user when it carries the token or a live session (or no token is
    /// needed); None: refused.
    fn principal(&self, headers: &HeaderMap) -> Option<Principal> {
        let bearer = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        if let Some(b) = bearer {
            // Every name compared, so the time says nothing of which.
            let mut found = None;
            for (name, t) in &self.named {
                if constant_time_eq(t.as_bytes(), b.trim().as_bytes()) {
                    found = Some(Principal::Named(name.clone()));
                }
            }
            if found.is_some() {
                return found;
            }
        }
        if self.token.is_none() || bearer.is_some_and(|t| self.token_matches(t)) {
            return Some(Principal::Serving);
        }
        cookie(headers, COOKIE)
            .is_some_and(|s| self.has_session(&s))
            .then_some(Principal::Serving)
    }

    /// Whether the request carries a token or a live session.
    #[cfg(test)]
    fn admits(&self, headers: &HeaderMap) -> bool {
        self.principal(headers).is_some()
    }
}

/// Compares without stopping at the first difference.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The value of cookie `name`.
fn cookie(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.to_string())
}

/// Paths anyone may load: the login page and the stylesheet it uses.
fn public(path: &str) -> bool {
    path == "/login" || path == "/assets/app.css"
}

/// The guard in front of every route.
pub(super) async fn guard(State(web): State<Shared>, mut req: Request, next: Next) -> Response {
    let path = req.uri().path().to_string();
    if web.auth.token.is_none()
        && let Err(e) = loopback_host(req.headers())
    {
        return e.into_response();
    }
    // A bearer token is a guess like the login form's: paced the same.
    let peer = peer(&req);
    let bearer = req.headers().contains_key(header::AUTHORIZATION);
    let login = path == "/login" && req.method() == Method::POST;
    if web.auth.token.is_some()
        && (bearer || login)
        && let Some(ip) = peer
        && let Err(wait) = web.auth.attempts.check(ip)
    {
        return super::limit::too_many(wait);
    }
    let principal = web.auth.principal(req.headers());
    if let Some(p) = &principal {
        req.extensions_mut().insert(p.clone());
    }
    if !public(&path) && principal.is_none() {
        if bearer && let Some(ip) = peer {
            web.auth.attempts.failed(ip);
        }
        if req.method() == Method::GET && !path.starts_with("/api/") {
            return Redirect::to("/login").into_response();
        }
        return ApiError::unauthorized().into_response();
    }
    if req.method() != Method::GET
        && req.method() != Method::HEAD
        && let Err(e) = same_origin(req.headers(), path == "/login")
    {
        return e.into_response();
    }
    let res = next.run(req).await;
    if login
        && res.status() == StatusCode::UNAUTHORIZED
        && let Some(ip) = peer
    {
        web.auth.attempts.failed(ip);
    }
    res
}

/// The client's address (set by `listen::serve`).
fn peer(req: &Request) -> Option<std::net::IpAddr> {
    req.extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0.ip())
}

/// Without a token, only a loopback `Host` is served (no DNS rebinding).
fn loopback_host(headers: &HeaderMap) -> Result<(), ApiError> {
    let host = headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let name = match host.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or(""),
        None => host.rsplit_once(':').map_or(host, |(h, _)| h),
    };
    let ok = name == "localhost"
        || name
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback());
    if ok {
        Ok(())
    } else {
        Err(ApiError::cross_site(format!(
            "host `{host}` is not this machine's loopback: without a token the dashboard answers \
             only to 127.0.0.1 or localhost"
        )))
    }
}

/// Refuses a state-changing request another site could have made.
fn same_origin(headers: &HeaderMap, form_ok: bool) -> Result<(), ApiError> {
    let get = |h: header::HeaderName| headers.get(h).and_then(|v| v.to_str().ok());
    if let Some(site) = get(header::HeaderName::from_static("sec-fetch-site"))
        && !matches!(site, "same-origin" | "none")
    {
        return Err(ApiError::cross_site(format!(
            "a cross-site request (`Sec-Fetch-Site: {site}`) may not change anything here"
        )));
    }
    if let Some(origin) = get(header::ORIGIN) {
        let host = get(header::HOST).unwrap_or("");
        let ours = [format!("http://{host}"), format!("https://{host}")];
        if !ours.iter().any(|o| o == origin) {
            return Err(ApiError::cross_site(format!(
                "`Origin: {origin}` is not this server (`{host}`); another site may not post here"
            )));
        }
    }
    let ct = get(header::CONTENT_TYPE).unwrap_or("");
    let json = ct
        .split(';')
        .next()
        .is_some_and(|m| m.trim().eq_ignore_ascii_case("application/json"));
    let form = ct.starts_with("application/x-www-form-urlencoded");
    if !(json || (form_ok && form)) {
        return Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "bad_input",
            "a POST must send `Content-Type: application/json` (an empty body is `{}`); \
             this is also what keeps other sites from posting here",
        ));
    }
    Ok(())
}

/// Headers on every response: no sniffing, no framing, no referrer, and
/// a content policy allowing this origin's own script and style only.
pub(super) async fn security_headers(mut res: Response) -> Response {
    let h = res.headers_mut();
    h.insert(
        "x-content-type-options",
        HeaderValue::from_static("nosniff"),
    );
    h.insert("x-frame-options", HeaderValue::from_static("DENY"));
    h.insert("referrer-policy", HeaderValue::from_static("no-referrer"));
    if !h.contains_key(header::CONTENT_SECURITY_POLICY) {
        h.insert(
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(
                "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
                 connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
            ),
        );
    }
    if !h.contains_key(header::CACHE_CONTROL) {
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    res
}

/// `GET /login`.
pub(super) async fn login_page(State(web): State<Shared>) -> Response {
    if web.auth.token.is_none() {
        return Redirect::to("/").into_response();
    }
    Html(super::assets::login_html(None)).into_response()
}

#[derive(serde::Deserialize)]
pub(super) struct LoginForm {
    token: String,
}

/// `POST /login` (a form): a session cookie for the right token.
pub(super) async fn login(State(web): State<Shared>, form: Form<LoginForm>) -> Response {
    if !web.auth.token_matches(&form.token) {
        let page = super::assets::login_html(Some("That is not the token. Try again."));
        return (StatusCode::UNAUTHORIZED, Html(page)).into_response();
    }
    let session = web.auth.new_session();
    let cookie = format!("{COOKIE}={session}; Path=/; HttpOnly; SameSite=Strict");
    let mut res = Redirect::to("/").into_response();
    if let Ok(v) = HeaderValue::from_str(&cookie) {
        res.headers_mut().insert(header::SET_COOKIE, v);
    }
    res
}

/// `POST /logout`: forgets the session.
pub(super) async fn logout(State(web): State<Shared>, headers: HeaderMap) -> Response {
    if let Some(s) = cookie(&headers, COOKIE) {
        web.auth.end_session(&s);
    }
    let mut res = Redirect::to("/login").into_response();
    res.headers_mut().insert(
        header::SET_COOKIE,
        HeaderValue::from_static("saheeli_session=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0"),
    );
    res
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn only_this_origin_may_post() {
        let ok = headers(&[
            ("host", "127.0.0.1:7878"),
            ("origin", "http://127.0.0.1:7878"),
            ("content-type", "application/json"),
        ]);
        assert!(same_origin(&ok, false).is_ok());
        let evil = headers(&[
            ("host", "127.0.0.1:7878"),
            ("origin", "http://evil.example"),
            ("content-type", "application/json"),
        ]);
        assert_eq!(same_origin(&evil, false).unwrap_err().kind, "cross_site");
        let form = headers(&[("host", "127.0.0.1:7878"), ("content-type", "text/plain")]);
        assert_eq!(
            same_origin(&form, false).unwrap_err().status,
            StatusCode::UNSUPPORTED_MEDIA_TYPE
        );
        let fetch = headers(&[
            ("sec-fetch-site", "cross-site"),
            ("content-type", "application/json"),
        ]);
        assert!(same_origin(&fetch, false).is_err());
    }

    #[test]
    fn without_a_token_only_loopback_hosts_are_served() {
        for ok in ["127.0.0.1:7878", "localhost:80", "[::1]:7878", "localhost"] {
            assert!(loopback_host(&headers(&[("host", ok)])).is_ok(), "{ok}");
        }
        for bad in ["evil.example:7878", "10.0.0.1:7878", ""] {
            assert!(loopback_host(&headers(&[("host", bad)])).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_token_or_a_session_admits() {
        let auth = Auth::new(
            Some("0123456789abcdef0123".into()),
            vec![("alice".into(), "alice-token-0123456789".into())],
        );
        assert!(!auth.admits(&HeaderMap::new()));
        let named = headers(&[("authorization", "Bearer alice-token-0123456789")]);
        assert_eq!(
            auth.principal(&named),
            Some(Principal::Named("alice".into()))
        );
        assert_eq!(
            auth.principal(&headers(&[(
                "authorization",
                "Bearer 0123456789abcdef0123"
            )])),
            Some(Principal::Serving)
        );
        assert!(auth.admits(&headers(&[(
            "authorization",
            "Bearer 0123456789abcdef0123"
        )])));
        assert!(!auth.admits(&headers(&[("authorization", "Bearer nope")])));
        let s = auth.new_session();
        let with = headers(&[("cookie", &format!("a=b; saheeli_session={s}"))]);
        assert!(auth.admits(&with));
        auth.end_session(&s);
        assert!(!auth.admits(&with));
    }
}
