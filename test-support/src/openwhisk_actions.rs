//! Actions created through the fake controller's API (`PUT …/actions/{name}`), checked as the
//! controller checks them (`Actions.scala`, `Exec.scala`), shown by `GET`, and run for real on
//! invoke as an OpenWhisk runtime would: the zip unpacked, the init parameters exported to the
//! environment, `main(args)` called by python3 (`__main__.py`) or node (`require` of the folder),
//! a raised error or a result that is not a JSON object being an application error.

use std::time::{SystemTime, UNIX_EPOCH};

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use base64::Engine as _;
use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::{error, lock, reject, FakeAction, Shared};

/// The kinds this fake's controller has runtimes for (a stock deployment's `runtimes.json`).
const KINDS: [&str; 8] = [
    "python:3.10",
    "python:3.11",
    "python:default",
    "nodejs:18",
    "nodejs:20",
    "nodejs:default",
    "blackbox",
    "sequence",
];

/// An action created or replaced through the API.
#[derive(Clone, Debug, PartialEq)]
pub struct DeployedAction {
    /// `exec.kind`.
    pub kind: String,
    /// The code: the decoded archive when `binary`, else the source text.
    pub code: Vec<u8>,
    /// Whether the code was base64 (the controller decides this from the code itself).
    pub binary: bool,
    /// `exec.main` (default `main`).
    pub main: String,
    /// `parameters` as sent (`{key, value, init?}` entries).
    pub parameters: Vec<Value>,
    /// `annotations` as sent.
    pub annotations: Vec<Value>,
    /// Semantic version, `0.0.1` on create and one patch higher on each overwrite.
    pub version: String,
}

impl DeployedAction {
    fn annotation(&self, key: &str) -> Option<&Value> {
        self.annotations
            .iter()
            .find(|a| a.get("key").and_then(Value::as_str) == Some(key))
            .and_then(|a| a.get("value"))
    }

    fn params(&self, init: bool) -> impl Iterator<Item = (&str, &Value)> {
        self.parameters.iter().filter_map(move |p| {
            let is_init = p.get("init").and_then(Value::as_bool).unwrap_or(false);
            (is_init == init).then_some((p.get("key")?.as_str()?, p.get("value")?))
        })
    }

    /// The action as `GET` and the `PUT` answer show it.
    fn record(&self, namespace: &str, name: &str) -> Value {
        json!({
            "namespace": namespace,
            "name": name,
            "version": self.version,
            "publish": false,
            "exec": {"kind": self.kind, "binary": self.binary, "main": self.main},
            "parameters": self.parameters,
            "annotations": self.annotations,
            "limits": {"timeout": 60000, "memory": 256, "logs": 10, "concurrency": 1},
            "updated": SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64),
        })
    }
}

/// The controller's `400` message for a body it cannot deserialise.
fn malformed(detail: &str) -> String {
    format!("The request content was malformed:\n{detail}")
}

/// `Exec.isBinaryCode`: non-empty base64 whose length is a multiple of 4.
fn is_binary_code(code: &str) -> bool {
    let t = code.trim();
    !t.is_empty()
        && t.len().is_multiple_of(4)
        && base64::engine::general_purpose::STANDARD.decode(t).is_ok()
}

fn key_values(content: &Map<String, Value>, field: &str) -> Result<Vec<Value>, String> {
    match content.get(field) {
        None => Ok(Vec::new()),
        Some(Value::Array(items))
            if items
                .iter()
                .all(|i| i.get("key").is_some_and(Value::is_string)) =>
        {
            Ok(items.clone())
        }
        Some(_) => Err(malformed(&format!(
            "'{field}' must be an array of key-value pairs"
        ))),
    }
}

/// Checks a PUT body as the controller deserialises a `WhiskActionPut`; `Err` is the `400`'s
/// message.
fn parse(body: &[u8]) -> Result<DeployedAction, String> {
    let Ok(Value::Object(content)) = serde_json::from_slice::<Value>(body) else {
        return Err(malformed("Object expected"));
    };
    let Some(exec) = content.get("exec") else {
        return Err("exec undefined".to_owned());
    };
    let Some(kind) = exec.get("kind").and_then(Value::as_str) else {
        return Err(malformed("'kind' must be a string defined in 'exec'"));
    };
    if !KINDS.contains(&kind) {
        return Err(malformed(&format!(
            "The specified runtime '{kind}' is not supported by this platform. Valid values are: '{}'.",
            KINDS.join("', '")
        )));
    }
    let Some(code) = exec.get("code").and_then(Value::as_str) else {
        return Err(malformed(&format!(
            "'code' must be a string or attachment object defined in 'exec' for '{kind}' actions"
        )));
    };
    let binary = is_binary_code(code);
    let code = if binary {
        base64::engine::general_purpose::STANDARD
            .decode(code.trim())
            .unwrap_or_default()
    } else {
        code.as_bytes().to_vec()
    };
    Ok(DeployedAction {
        kind: kind.to_owned(),
        code,
        binary,
        main: exec
            .get("main")
            .and_then(Value::as_str)
            .unwrap_or("main")
            .to_owned(),
        parameters: key_values(&content, "parameters")?,
        annotations: key_values(&content, "annotations")?,
        version: "0.0.1".to_owned(),
    })
}

#[derive(Deserialize)]
pub(super) struct PutQuery {
    overwrite: Option<String>,
}

/// `PUT /api/v1/namespaces/{ns}/actions/{action}?overwrite=`.
pub(super) async fn put(
    State(ctx): State<Shared>,
    Path((ns, action)): Path<(String, String)>,
    Query(query): Query<PutQuery>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if let Some(reply) = reject(&ctx, &headers, Some(&ns)) {
        return reply;
    }
    let mut deployed = match parse(&body) {
        Ok(d) => d,
        Err(message) => return error(StatusCode::BAD_REQUEST, &message),
    };
    let mut inner = lock(&ctx);
    if let Some(existing) = inner.actions.get(&action) {
        if query.overwrite.as_deref() != Some("true") {
            return error(StatusCode::CONFLICT, "resource already exists");
        }
        let patch = match existing {
            FakeAction::Deployed(old) => old
                .version
                .rsplit('.')
                .next()
                .and_then(|p| p.parse::<u64>().ok())
                .unwrap_or(1),
            _ => 1,
        };
        deployed.version = format!("0.0.{}", patch + 1);
    }
    let record = deployed.record(&ctx.namespace, &action);
    inner
        .actions
        .insert(action, FakeAction::Deployed(Box::new(deployed)));
    Json(record).into_response()
}

/// `GET /api/v1/namespaces/{ns}/actions/{action}`.
pub(super) async fn get(
    State(ctx): State<Shared>,
    Path((ns, action)): Path<(String, String)>,
    headers: HeaderMap,
) -> Response {
    if let Some(reply) = reject(&ctx, &headers, Some(&ns)) {
        return reply;
    }
    match lock(&ctx).actions.get(&action) {
        Some(FakeAction::Deployed(d)) => Json(d.record(&ctx.namespace, &action)).into_response(),
        Some(_) => Json(
            json!({"namespace": ctx.namespace, "name": action, "version": "0.0.1",
            "publish": false, "exec": {"kind": "nodejs:default", "binary": false}}),
        )
        .into_response(),
        None => error(
            StatusCode::NOT_FOUND,
            "The requested resource does not exist.",
        ),
    }
}

/// The controller's check before an invoke: a `final` action's defined parameters cannot be
/// overridden by the call's (`Some` is the `400` to send).
pub(super) fn refuse_overrides(action: &DeployedAction, params: &Value) -> Option<Response> {
    let is_final = action.annotation("final").and_then(Value::as_bool) == Some(true);
    let defined: Vec<&str> = action
        .params(false)
        .chain(action.params(true))
        .filter(|(_, v)| !v.is_null())
        .map(|(k, _)| k)
        .collect();
    let overrides = params
        .as_object()
        .is_some_and(|p| p.keys().any(|k| defined.contains(&k.as_str())));
    (is_final && overrides).then(|| {
        error(
            StatusCode::BAD_REQUEST,
            "Request defines parameters that are not allowed (e.g., reserved properties).",
        )
    })
}

/// Runs `action` on `params` as its runtime would: `(success, result)`.
pub(super) async fn run(action: &DeployedAction, params: Value) -> (bool, Value) {
    match run_code(action, params).await {
        Ok(result @ Value::Object(_)) => (true, result),
        Ok(_) => (
            false,
            json!({"error": "The action did not return a dictionary."}),
        ),
        Err(message) => (false, json!({"error": message})),
    }
}

async fn run_code(action: &DeployedAction, mut params: Value) -> Result<Value, String> {
    if !action.binary {
        return Err("this fake runs archive (binary) actions only".into());
    }
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    zip::ZipArchive::new(std::io::Cursor::new(&action.code))
        .and_then(|mut z| z.extract(dir.path()))
        .map_err(|e| format!("The action failed to generate or locate a binary: {e}"))?;
    if let Value::Object(args) = &mut params {
        for (k, v) in action.params(false) {
            args.entry(k.to_owned()).or_insert_with(|| v.clone());
        }
    }
    let env: Vec<(String, String)> = action
        .params(true)
        .map(|(k, v)| {
            (
                k.to_owned(),
                v.as_str().map_or_else(|| v.to_string(), str::to_owned),
            )
        })
        .collect();
    let (program, script) = if action.kind.starts_with("python") {
        (
            "python3",
            "import json, os, runpy, sys\nd = sys.argv[1]\nsys.path.insert(0, d)\n\
             entry = runpy.run_path(os.path.join(d, '__main__.py'))[sys.argv[2]]\n\
             print(json.dumps(entry(json.loads(sys.stdin.read()))))\n",
        )
    } else {
        (
            "node",
            "let s = ''; process.stdin.on('data', c => s += c).on('end', () => {\n\
             const m = require(process.argv[1]);\n\
             Promise.resolve(m[process.argv[2]](JSON.parse(s))).then(\n\
             r => console.log(JSON.stringify(r)), e => { console.error(String(e && e.message || e)); process.exit(1); });\n});\n",
        )
    };
    let flag = if program == "python3" { "-c" } else { "-e" };
    let mut child = tokio::process::Command::new(program)
        .arg(flag)
        .arg(script)
        .arg(dir.path())
        .arg(&action.main)
        .envs(env)
        .current_dir(dir.path())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("cannot start {program}: {e}"))?;
    if let Some(mut stdin) = child.stdin.take() {
        use tokio::io::AsyncWriteExt as _;
        let _ = stdin.write_all(params.to_string().as_bytes()).await;
    }
    let out = child.wait_with_output().await.map_err(|e| e.to_string())?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let last = stderr
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("the action exited");
        return Err(last.trim().to_owned());
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    let last = stdout.lines().last().unwrap_or_default();
    serde_json::from_str(last)
        .map_err(|_| "The action did not produce a valid JSON response.".into())
}
