//! A fake tinyFaaS node, faithful to OpenFogStack/tinyFaaS's wire protocol:
//!
//! - **proxy** (`:8000` in a real node): any method on `/{name}` (leading slashes stripped) runs
//!   the function with the raw body and headers and answers `200` with its output, `404` with an
//!   empty body for an unknown name, `202` at once when `X-tinyFaaS-Async` is set, `500` with an
//!   empty body when the function's handler cannot be reached. Like the real proxy it answers
//!   `200` even when the function itself failed (the body is then the error text, or empty when
//!   the handler died), and it never times a call out.
//! - **manager** (`:8080`): `GET /list` (one name per line), `POST /upload`
//!   `{"name","env","threads","zip","envs"}`, `POST /delete` `{"name"}`, `POST /wipe`; a wrong
//!   method or a body that is not JSON gets `400` with an empty body.
//!
//! An upload is checked as tinyFaaS's manager (`cmd/manager`, `pkg/manager`, `pkg/docker`)
//! checks it, each failure a `500` with an empty body (the manager only logs why): the name
//! must match `^[a-zA-Z0-9]+$`, `zip` must be base64 of a zip archive whose every file's folder
//! is listed before it (its unzip creates no parent folders), `env` must be one of its runtimes
//! (`binary`, `go`, `nodejs`, `python3`), and the image must build: `python3` needs
//! `requirements.txt` and `fn.py`, `nodejs` a `package.json` named `fn` (it runs
//! `npm install ./fn` and `require("fn")`), `binary` an `fn.sh`. `envs` entries are
//! `KEY=VALUE` (others are skipped, as tinyFaaS does). A good upload replaces the function of
//! that name and answers `200` with one URL per protocol, e.g. `http://:8000/<name>`.
//!
//! Functions are canned [`FakeFunction`] behaviours: the fake runs no code (an uploaded one
//! echoes).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use axum::Router;
use base64::Engine as _;
use serde::Deserialize;

use crate::server::TestServer;

/// What a fake function does when called.
#[derive(Clone, Debug)]
pub enum FakeFunction {
    /// Answers `200` with the request body.
    Echo,
    /// Answers `200` with this body.
    Reply(Bytes),
    /// The function raised: tinyFaaS still answers `200`, with the error text as the body.
    Raise(String),
    /// The function's handler crashed: `200` with an empty body.
    Crash,
    /// The handler cannot be reached: `500` with an empty body.
    Unreachable,
    /// Never answers (tinyFaaS has no call timeout).
    Hang,
    /// Answers like `Echo` after this delay.
    Slow(Duration),
}

/// One `POST /upload` the manager accepted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Upload {
    /// Function name.
    pub name: String,
    /// Runtime environment, e.g. `python3`.
    pub env: String,
    /// Number of handler instances.
    pub threads: i64,
    /// The decoded zip archive.
    pub zip: Vec<u8>,
    /// The function's environment, `KEY=VALUE` entries as sent.
    pub envs: Vec<String>,
    /// Paths of the files in the archive, in archive order.
    pub files: Vec<String>,
}

#[derive(Debug, Default)]
struct Inner {
    functions: BTreeMap<String, FakeFunction>,
    uploads: Vec<Upload>,
    calls: Vec<(String, HeaderMap, Bytes)>,
    /// Method and request target (path and query) of each call, as received.
    requests: Vec<(Method, String)>,
    /// Every upload fails as a failed image build does (`500`, empty body).
    broken_builds: bool,
}

type Shared = Arc<Mutex<Inner>>;

/// A running fake tinyFaaS node: a proxy server and a manager server.
#[derive(Debug)]
pub struct FakeTinyfaas {
    proxy: TestServer,
    manager: TestServer,
    state: Shared,
}

impl FakeTinyfaas {
    /// Starts a node serving `functions` on two fresh local ports.
    pub async fn start(
        functions: impl IntoIterator<Item = (impl Into<String>, FakeFunction)>,
    ) -> anyhow::Result<Self> {
        let inner = Inner {
            functions: functions.into_iter().map(|(n, f)| (n.into(), f)).collect(),
            ..Inner::default()
        };
        let state: Shared = Arc::new(Mutex::new(inner));
        let proxy = TestServer::start(proxy_router(state.clone())).await?;
        let manager = TestServer::start(manager_router(state.clone())).await?;
        Ok(Self {
            proxy,
            manager,
            state,
        })
    }

    /// Base URL of the function proxy (`http://127.0.0.1:<port>`).
    pub fn proxy_url(&self) -> String {
        self.proxy.url()
    }

    /// Base URL of the manager.
    pub fn manager_url(&self) -> String {
        self.manager.url()
    }

    /// Kills the node: both ports refuse connections and open connections are reset.
    pub fn stop(&mut self) {
        self.proxy.stop();
        self.manager.stop();
    }

    /// Like [`FakeTinyfaas::stop`], returning once no connection can be served any more.
    pub async fn shutdown(&mut self) {
        self.proxy.shutdown().await;
        self.manager.shutdown().await;
    }

    /// Deploys or replaces a function behind the manager's back.
    pub fn set_function(&self, name: impl Into<String>, behaviour: FakeFunction) {
        lock(&self.state).functions.insert(name.into(), behaviour);
    }

    /// Makes every later upload fail as a failed image build does (Docker down, a bad
    /// requirement): `500` with an empty body.
    pub fn break_builds(&self) {
        lock(&self.state).broken_builds = true;
    }

    /// Uploads the manager accepted, in order.
    pub fn uploads(&self) -> Vec<Upload> {
        lock(&self.state).uploads.clone()
    }

    /// The method and request target (path and query) of each call the proxy received.
    pub fn requests(&self) -> Vec<(Method, String)> {
        lock(&self.state).requests.clone()
    }

    /// Calls the proxy received: function name, headers, body.
    pub fn calls(&self) -> Vec<(String, HeaderMap, Bytes)> {
        lock(&self.state).calls.clone()
    }
}

fn lock(state: &Shared) -> MutexGuard<'_, Inner> {
    state
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn proxy_router(state: Shared) -> Router {
    Router::new()
        .route("/", any(|| async { StatusCode::NOT_FOUND }))
        .route("/{*name}", any(call))
        .with_state(state)
}

async fn call(
    State(state): State<Shared>,
    Path(name): Path<String>,
    method: Method,
    uri: axum::http::Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let name = name.trim_start_matches('/').to_owned();
    let behaviour = {
        let mut inner = lock(&state);
        let target = uri.path_and_query().map_or("/", |p| p.as_str()).to_owned();
        inner.requests.push((method, target));
        inner
            .calls
            .push((name.clone(), headers.clone(), body.clone()));
        inner.functions.get(&name).cloned()
    };
    let Some(behaviour) = behaviour else {
        return StatusCode::NOT_FOUND.into_response();
    };
    let is_async = headers
        .get("X-tinyFaaS-Async")
        .is_some_and(|v| !v.is_empty());
    if is_async {
        tokio::spawn(run(behaviour, body));
        return StatusCode::ACCEPTED.into_response();
    }
    run(behaviour, body).await
}

async fn run(behaviour: FakeFunction, body: Bytes) -> Response {
    match behaviour {
        FakeFunction::Echo => (StatusCode::OK, body).into_response(),
        FakeFunction::Reply(out) => (StatusCode::OK, out).into_response(),
        FakeFunction::Raise(text) => (StatusCode::OK, text).into_response(),
        FakeFunction::Crash => StatusCode::OK.into_response(),
        FakeFunction::Unreachable => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
        FakeFunction::Hang => std::future::pending().await,
        FakeFunction::Slow(delay) => {
            tokio::time::sleep(delay).await;
            (StatusCode::OK, body).into_response()
        }
    }
}

fn manager_router(state: Shared) -> Router {
    Router::new()
        .route("/list", any(list))
        .route("/upload", any(upload))
        .route("/delete", any(delete))
        .route("/wipe", any(wipe))
        .with_state(state)
}

fn bad_method(allowed: &str) -> Response {
    (
        StatusCode::BAD_REQUEST,
        format!("invalid method, only {allowed} allowed\n"),
    )
        .into_response()
}

async fn list(State(state): State<Shared>, method: Method) -> Response {
    if method != Method::GET {
        return bad_method("GET");
    }
    let names: String = lock(&state)
        .functions
        .keys()
        .map(|n| format!("{n}\n"))
        .collect();
    (StatusCode::OK, names).into_response()
}

/// The upload as Go's `json.Decoder` reads it: missing fields are zero values.
#[derive(Deserialize)]
struct UploadRequest {
    #[serde(default)]
    name: String,
    #[serde(default)]
    env: String,
    #[serde(default)]
    threads: i64,
    #[serde(default)]
    zip: String,
    #[serde(default)]
    envs: Vec<String>,
}

/// tinyFaaS's runtimes (`pkg/docker/runtimes`).
const RUNTIMES: [&str; 4] = ["binary", "go", "nodejs", "python3"];

async fn upload(State(state): State<Shared>, method: Method, body: Bytes) -> Response {
    if method != Method::POST {
        return StatusCode::BAD_REQUEST.into_response();
    }
    let Ok(req) = serde_json::from_slice::<UploadRequest>(&body) else {
        return StatusCode::BAD_REQUEST.into_response();
    };
    let failed = StatusCode::INTERNAL_SERVER_ERROR.into_response();
    let Ok(zip) = base64::engine::general_purpose::STANDARD.decode(&req.zip) else {
        return failed;
    };
    let alphanumeric = !req.name.is_empty() && req.name.bytes().all(|b| b.is_ascii_alphanumeric());
    if !alphanumeric || !RUNTIMES.contains(&req.env.as_str()) {
        return failed;
    }
    let Some(files) = unzip(&zip) else {
        return failed;
    };
    if lock(&state).broken_builds || !image_builds(&req.env, &files) {
        return failed;
    }
    let mut inner = lock(&state);
    inner.functions.insert(req.name.clone(), FakeFunction::Echo);
    inner.uploads.push(Upload {
        name: req.name.clone(),
        env: req.env,
        threads: req.threads,
        zip,
        envs: req.envs,
        files: files.iter().map(|(path, _)| path.clone()).collect(),
    });
    let urls: String = [("http", 8000), ("coap", 5683), ("grpc", 9000)]
        .iter()
        .map(|(proto, port)| format!("{proto}://:{port}/{}\n", req.name))
        .collect();
    (StatusCode::OK, urls).into_response()
}

/// The files of a zip archive as tinyFaaS's `util.Unzip` extracts them: `None` when it is not
/// a zip, or a file's folder was not created by an earlier entry.
fn unzip(zip: &[u8]) -> Option<Vec<(String, Vec<u8>)>> {
    use std::io::Read as _;
    let mut archive = zip::ZipArchive::new(std::io::Cursor::new(zip)).ok()?;
    let mut folders = std::collections::BTreeSet::from([String::new()]);
    let mut files = Vec::new();
    for i in 0..archive.len() {
        let mut entry = archive.by_index(i).ok()?;
        let name = entry.name().ok()?.trim_start_matches("./").to_owned();
        if entry.is_dir() {
            folders.insert(name.trim_end_matches('/').to_owned());
            continue;
        }
        let parent = name.rsplit_once('/').map_or("", |(p, _)| p).to_owned();
        if !folders.contains(&parent) {
            return None;
        }
        let mut data = Vec::new();
        entry.read_to_end(&mut data).ok()?;
        files.push((name, data));
    }
    Some(files)
}

/// Whether tinyFaaS's image for `env` builds and starts from these files.
fn image_builds(env: &str, files: &[(String, Vec<u8>)]) -> bool {
    let file = |path: &str| files.iter().find(|(p, _)| p == path).map(|(_, d)| d);
    match env {
        "python3" => file("requirements.txt").is_some() && file("fn.py").is_some(),
        "nodejs" => file("package.json")
            .and_then(|m| serde_json::from_slice::<serde_json::Value>(m).ok())
            .is_some_and(|m| m["name"] == "fn"),
        "binary" => file("fn.sh").is_some(),
        _ => file("fn.go").is_some(),
    }
}

#[derive(Deserialize)]
struct DeleteRequest {
    name: String,
}

async fn delete(State(state): State<Shared>, method: Method, body: Bytes) -> Response {
    if method != Method::POST {
        return bad_method("POST");
    }
    let Ok(req) = serde_json::from_slice::<DeleteRequest>(&body) else {
        return (StatusCode::BAD_REQUEST, "failed to decode delete request\n").into_response();
    };
    if lock(&state).functions.remove(&req.name).is_none() {
        return (
            StatusCode::INTERNAL_SERVER_ERROR,
            "failed to delete function\n",
        )
            .into_response();
    }
    (StatusCode::OK, format!("Function {} deleted\n", req.name)).into_response()
}

async fn wipe(State(state): State<Shared>, method: Method) -> Response {
    if method != Method::POST {
        return bad_method("POST");
    }
    lock(&state).functions.clear();
    (StatusCode::OK, "All functions deleted\n").into_response()
}
