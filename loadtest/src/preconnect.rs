//! What the client does with a node's connection hint, as a mobile app's HTTP stack would:
//! on `Link: <https://next-node>; rel=preconnect` (RFC 8288) it opens a connection to that
//! origin in the background, so the call after a handover finds one open there.
//!
//! reqwest cannot open a bare connection, so the preconnect is a cheap request on the client's
//! own pool, `GET /healthz`, whose kept-alive TLS connection the next call to that origin
//! reuses (one shared connection over HTTP/2, an idle pooled one over HTTP/1.1). An origin is
//! preconnected at most once every [`AGAIN`] while the hints go on, which also keeps an
//! HTTP/1.1 connection from idling out at the node (whose header timeout, 10 s by default,
//! covers the wait for the next request). [`Connections`] counts the connections the client
//! opened, so a report can tell a call that opened one from a call that reused one.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use reqwest::header::{HeaderMap, LINK};
use url::Url;

/// How long after preconnecting an origin a new hint for it is ignored.
pub const AGAIN: Duration = Duration::from_secs(5);

/// The `https` origins that `headers` name with `rel=preconnect` in a `Link` (relative
/// references resolved against `base`, the answer's URL), each once, in order.
pub fn hinted_origins(headers: &HeaderMap, base: &Url) -> Vec<Url> {
    let mut out: Vec<Url> = Vec::new();
    for value in headers.get_all(LINK) {
        let Ok(text) = value.to_str() else { continue };
        for (target, params) in links(text) {
            if !params
                .iter()
                .any(|(k, v)| k == "rel" && rel_has(v, "preconnect"))
            {
                continue;
            }
            let Ok(url) = base.join(&target) else {
                continue;
            };
            if url.scheme() != "https" || url.host().is_none() {
                continue;
            }
            let origin = crate::route::origin(&url);
            if !out.contains(&origin) {
                out.push(origin);
            }
        }
    }
    out
}

/// Whether a `rel` value (space-separated relation types, case-insensitive) has `want`.
fn rel_has(rel: &str, want: &str) -> bool {
    rel.split_ascii_whitespace()
        .any(|r| r.eq_ignore_ascii_case(want))
}

/// The link-values of one `Link` field: `<target>` and its parameters (names lowercased,
/// quoted values unquoted). A link-value that does not start with `<` ends the parse.
fn links(text: &str) -> Vec<(String, Vec<(String, String)>)> {
    let mut out = Vec::new();
    let mut rest = text.trim_start();
    while let Some(after) = rest.strip_prefix('<') {
        let Some(end) = after.find('>') else { break };
        let target = after[..end].to_owned();
        rest = after[end + 1..].trim_start();
        let mut params = Vec::new();
        while let Some(p) = rest.strip_prefix(';') {
            let (param, tail) = param(p);
            params.extend(param);
            rest = tail;
        }
        out.push((target, params));
        rest = rest.strip_prefix(',').unwrap_or("").trim_start();
    }
    out
}

/// One `; name=value` parameter (the `;` already taken) and the text after it.
fn param(text: &str) -> (Option<(String, String)>, &str) {
    let text = text.trim_start();
    let name_end = text.find(['=', ';', ',']).unwrap_or(text.len());
    let name = text[..name_end].trim().to_ascii_lowercase();
    let mut rest = &text[name_end..];
    let mut value = String::new();
    if let Some(v) = rest.strip_prefix('=') {
        let v = v.trim_start();
        if let Some(q) = v.strip_prefix('"') {
            // A quoted string: backslash escapes the next character.
            let mut chars = q.char_indices();
            let mut end = q.len();
            while let Some((i, c)) = chars.next() {
                match c {
                    '\\' => {
                        if let Some((_, c)) = chars.next() {
                            value.push(c);
                        }
                    }
                    '"' => {
                        end = i + 1;
                        break;
                    }
                    c => value.push(c),
                }
            }
            rest = &q[end.min(q.len())..];
        } else {
            let end = v.find([';', ',']).unwrap_or(v.len());
            value = v[..end].trim().to_owned();
            rest = &v[end..];
        }
    }
    let rest = rest.trim_start();
    ((!name.is_empty()).then_some((name, value)), rest)
}

/// Counts the connections a client opened (TCP and TLS set up), through a connector layer.
#[derive(Clone, Debug, Default)]
pub struct Connections(Arc<AtomicU64>);

impl Connections {
    /// Connections opened so far.
    pub fn opened(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// For `reqwest::ClientBuilder::connector_layer`: counts each connection the connector set up.
impl<S> tower::Layer<S> for Connections {
    type Service = Counted<S>;

    fn layer(&self, inner: S) -> Counted<S> {
        Counted {
            inner,
            opened: self.0.clone(),
        }
    }
}

/// A connector that counts the connections it set up (see [`Connections`]).
#[derive(Clone, Debug)]
pub struct Counted<S> {
    inner: S,
    opened: Arc<AtomicU64>,
}

impl<S, R> tower::Service<R> for Counted<S>
where
    S: tower::Service<R>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = BoxFuture<'static, Result<S::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, dst: R) -> Self::Future {
        let (connecting, opened) = (self.inner.call(dst), self.opened.clone());
        Box::pin(async move {
            let conn = connecting.await?;
            opened.fetch_add(1, Ordering::Relaxed);
            Ok(conn)
        })
    }
}

/// The origins one client preconnected lately, and how many preconnects it started and
/// finished.
#[derive(Debug, Default)]
pub struct Preconnects {
    last: Mutex<HashMap<Url, Instant>>,
    started: AtomicU64,
    finished: AtomicU64,
}

impl Preconnects {
    /// Whether to preconnect `origin` at `now` (not within [`AGAIN`] of the last time); if so,
    /// it counts as preconnected from `now`.
    pub fn claim(&self, origin: &Url, now: Instant) -> bool {
        let mut last = self.last.lock();
        last.retain(|_, at| now.saturating_duration_since(*at) < AGAIN);
        if last.contains_key(origin) {
            return false;
        }
        last.insert(origin.clone(), now);
        self.started.fetch_add(1, Ordering::Relaxed);
        true
    }

    /// Preconnects started so far.
    pub fn started(&self) -> u64 {
        self.started.load(Ordering::Relaxed)
    }

    /// Preconnects finished so far (their request answered or failed).
    pub fn finished(&self) -> u64 {
        self.finished.load(Ordering::Relaxed)
    }
}

/// Opens (or keeps open) a pooled connection of `http` to `origin`: `GET /healthz`, its body
/// read to the end so an HTTP/1.1 connection goes back to the pool; counted in `done`.
pub async fn open(http: reqwest::Client, origin: Url, timeout: Duration, done: Arc<Preconnects>) {
    let result = async {
        let url = origin.join("healthz").map_err(|e| e.to_string())?;
        let resp = http.get(url).timeout(timeout).send().await;
        resp.map_err(|e| e.to_string())?
            .bytes()
            .await
            .map_err(|e| e.to_string())
    }
    .await;
    match result {
        Ok(_) => tracing::debug!(%origin, "preconnected"),
        Err(e) => tracing::debug!(%origin, error = %e, "preconnect failed"),
    }
    done.finished.fetch_add(1, Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::HeaderValue;

    fn origins(values: &[&str]) -> Vec<String> {
        let mut h = HeaderMap::new();
        for v in values {
            h.append(LINK, HeaderValue::from_str(v).unwrap());
        }
        let base = Url::parse("https://edge-a:8443/fn/sieve").unwrap();
        hinted_origins(&h, &base)
            .into_iter()
            .map(String::from)
            .collect()
    }

    #[test]
    fn a_preconnect_link_names_an_origin() {
        assert_eq!(
            origins(&["<https://127.0.0.1:9443>; rel=preconnect"]),
            ["https://127.0.0.1:9443/"]
        );
        // Quoted, several relation types, other case, a path, parameters around it.
        assert_eq!(
            origins(&["<https://cloud:8443/x?y=1>; anchor=\"/\"; REL=\"dns-prefetch Preconnect\"; crossorigin"]),
            ["https://cloud:8443/"]
        );
        // Several link-values in one field and over two fields; duplicates once.
        assert_eq!(
            origins(&[
                "</help>; rel=help, <https://b:1>; rel=preconnect",
                "<https://c:2>;rel=preconnect, <https://b:1/>; rel=preconnect",
            ]),
            ["https://b:1/", "https://c:2/"]
        );
        // A relative reference resolves against the answer's URL.
        assert_eq!(origins(&["</>; rel=preconnect"]), ["https://edge-a:8443/"]);
    }

    #[test]
    fn other_relations_plain_http_and_garbage_are_ignored() {
        assert!(origins(&["<https://b:1>; rel=preload"]).is_empty());
        assert!(origins(&["<https://b:1>; rel=\"preconnected\""]).is_empty());
        assert!(origins(&["<http://b:1>; rel=preconnect"]).is_empty());
        assert!(origins(&["<https://b:1>"]).is_empty());
        assert!(origins(&["https://b:1; rel=preconnect"]).is_empty());
        assert!(origins(&["<https://b:1; rel=preconnect"]).is_empty());
        assert!(origins(&["<https://b:1>; rel=\"preconnect"]).len() <= 1);
        assert!(origins(&["<https://b:1>; rel=\"pre\\\"connect\""]).is_empty());
    }

    #[test]
    fn an_origin_is_preconnected_once_per_interval() {
        let p = Preconnects::default();
        let (a, b) = (
            Url::parse("https://a:1/").unwrap(),
            Url::parse("https://b:1/").unwrap(),
        );
        let t0 = Instant::now();
        assert!(p.claim(&a, t0));
        assert!(!p.claim(&a, t0 + Duration::from_secs(1)));
        assert!(p.claim(&b, t0 + Duration::from_secs(1)));
        assert!(p.claim(&a, t0 + AGAIN));
        assert_eq!(p.started(), 3);
    }
}
