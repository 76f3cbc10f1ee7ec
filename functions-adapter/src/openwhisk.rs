//! The Apache OpenWhisk adapter.
//!
//! A call is a blocking invoke,
//! `POST {api_host}/api/v1/namespaces/{ns}/actions/[{pkg}/]{name}?blocking=true&result=true&timeout=<ms>`
//! with HTTP Basic auth from the `uuid:key` API key. `200` carries the action's result;
//! `202 {"activationId"}` means the controller's blocking wait ran out, and the activation is
//! polled (`GET …/activations/{id}`, `404` until it is done) until the call's deadline; `502`
//! is an action (application) error whose result reaches the client as the failure body;
//! `429` and `503` are retryable; `401`/`403` are credential errors.
//!
//! Parameters, `event = "raw"` (the default): a body that is a JSON object is passed as the
//! action's parameters; any other body is passed as `{"__ow_body": "<text>"}` (base64 when not
//! UTF-8, as web actions do). The output is the action's JSON result, except for an action
//! geofaas deployed, whose wrapper's `{"geofaas_body": …}` is unwrapped into the function's raw
//! output. With `event = "http"` the action is called as a raw-HTTP web action
//! (`__ow_method`, `__ow_headers`, `__ow_path`, `__ow_query`, `__ow_body`) and its result read
//! as a web action's answer (`statusCode`, `headers`, `body`; `http_event`).
//!
//! Deploys (`deploy = true`): `PUT …/actions/[{pkg}/]{name}?overwrite=true` with the folder and
//! its wrapper as a zip (`exec.binary`), the environment as `init` parameters; see `package`
//! and `docs/backends.md`.

use std::time::{Duration, Instant};

use async_trait::async_trait;
use base64::Engine as _;
use bytes::Bytes;
use geofaas_config::backend::DeployRuntimes;
use geofaas_config::function::valid_function_name;
use geofaas_config::{EventStyle, FunctionConfig, OpenwhiskBackend};
use http::StatusCode;
use reqwest::Url;
use serde_json::{json, Value};

use crate::factory::BuildError;
use crate::http_common::{self, Reply, PROBE_TIMEOUT};
use crate::http_event::{self, EventStyles};
use crate::local::Runtime;
use crate::package;
use crate::{FunctionBackend, Health, Invocation, InvokeError, InvokeOutput, RemoteDeploy};

/// The longest blocking wait an OpenWhisk controller grants, in milliseconds.
const MAX_BLOCKING_WAIT_MS: u128 = 60_000;

/// Budget of one action PUT (the controller stores the code before it answers).
const DEPLOY_TIMEOUT: Duration = Duration::from_secs(120);

/// Talks to one OpenWhisk deployment.
#[derive(Debug)]
pub struct OpenwhiskAdapter {
    client: reqwest::Client,
    api: Url,
    namespace: String,
    package: Option<String>,
    user: String,
    key: String,
    timeout: Duration,
    poll_interval: Duration,
    events: EventStyles,
    deploy: bool,
    runtimes: DeployRuntimes,
}

impl OpenwhiskAdapter {
    /// An adapter reading its API key from the environment variable `cfg.api_key_env`.
    pub fn from_env(cfg: &OpenwhiskBackend) -> Result<Self, BuildError> {
        let key = std::env::var(&cfg.api_key_env)
            .map_err(|_| BuildError::MissingEnv(cfg.api_key_env.clone()))?;
        Self::with_api_key(cfg, &key)
    }

    /// An adapter using `api_key` (`uuid:key`, split at the first colon).
    pub fn with_api_key(cfg: &OpenwhiskBackend, api_key: &str) -> Result<Self, BuildError> {
        let (user, key) = api_key
            .trim()
            .split_once(':')
            .filter(|(u, k)| !u.is_empty() && !k.is_empty())
            .ok_or_else(|| BuildError::BadApiKey(cfg.api_key_env.clone()))?;
        let mut api = http_common::base(&cfg.api_host);
        api.set_path(&format!("{}api/v1/", api.path()));
        Ok(Self {
            client: http_common::client().map_err(BuildError::client)?,
            api,
            namespace: cfg.namespace.clone(),
            package: cfg.package.clone(),
            user: user.to_owned(),
            key: key.to_owned(),
            timeout: Duration::from_millis(cfg.timeout_ms),
            poll_interval: Duration::from_millis(cfg.poll_interval_ms.max(1)),
            events: EventStyles::new(cfg.event),
            deploy: cfg.deploy,
            runtimes: cfg.runtimes.clone(),
        })
    }

    /// This adapter with the `event` of the topology's `[[function]]`s overriding the
    /// backend's.
    pub fn with_functions(mut self, functions: &[FunctionConfig]) -> Self {
        self.events = self.events.overridden_by(functions);
        self
    }

    /// `{api}/namespaces/{ns}/{rest}` with every segment percent-encoded.
    fn url(&self, rest: &[&str]) -> Result<Url, InvokeError> {
        let mut url = self.api.clone();
        url.path_segments_mut()
            .map_err(|_| InvokeError::Protocol("API host cannot be a base URL".into()))?
            .pop_if_empty()
            .push("namespaces")
            .push(&self.namespace)
            .extend(rest);
        Ok(url)
    }

    /// `{api}/namespaces/{ns}/actions/[{pkg}/]{name}`.
    fn action_url(&self, name: &str) -> Result<Url, InvokeError> {
        let mut segments = vec!["actions"];
        if let Some(pkg) = &self.package {
            segments.push(pkg);
        }
        segments.push(name);
        self.url(&segments)
    }

    /// The action a deploy PUTs: the archive with its wrapper as `exec`, the environment as
    /// init parameters (exported to the action's environment, not passed as arguments), and
    /// annotations that keep them from being overridden by a call or joined by the API key.
    fn action(&self, fun: &RemoteDeploy, zip: &[u8]) -> Value {
        let kind = match fun.runtime {
            Runtime::Nodejs => self.runtimes.nodejs.as_deref().unwrap_or("nodejs:default"),
            _ => self.runtimes.python3.as_deref().unwrap_or("python:default"),
        };
        let parameters: Vec<Value> = fun
            .env
            .iter()
            .map(|(key, value)| json!({"key": key, "value": value, "init": true}))
            .collect();
        json!({
            "exec": {
                "kind": kind,
                "code": base64::engine::general_purpose::STANDARD.encode(zip),
                "binary": true,
                "main": "main",
            },
            "parameters": parameters,
            "annotations": [
                {"key": "final", "value": true},
                {"key": "provide-api-key", "value": false},
                {"key": "geofaas-version", "value": fun.version},
            ],
        })
    }

    fn get(&self, url: Url) -> reqwest::RequestBuilder {
        self.client.get(url).basic_auth(&self.user, Some(&self.key))
    }

    async fn poll(
        &self,
        id: &str,
        call: &Invocation,
        started: Instant,
    ) -> Result<InvokeOutput, InvokeError> {
        let url = self.url(&["activations", id])?;
        loop {
            let budget = http_common::budget(call, self.timeout.saturating_sub(started.elapsed()));
            if budget.is_zero() {
                return Err(InvokeError::Timeout(started.elapsed()));
            }
            tokio::time::sleep(self.poll_interval.min(budget)).await;
            let budget = http_common::budget(call, self.timeout.saturating_sub(started.elapsed()));
            let reply = http_common::send(self.get(url.clone()), budget).await?;
            match reply.status {
                // Not finished yet.
                StatusCode::NOT_FOUND => continue,
                StatusCode::OK => {
                    let style = self.events.of(&call.function);
                    return activation_outcome(&call.function, style, &reply.body, started);
                }
                _ => return Err(error_reply(&call.function, reply)),
            }
        }
    }
}

/// The parameters object an action receives for a raw body.
pub(crate) fn params(body: &Bytes) -> Value {
    if let Ok(v @ Value::Object(_)) = serde_json::from_slice::<Value>(body) {
        return v;
    }
    match std::str::from_utf8(body) {
        Ok(text) => json!({ "__ow_body": text }),
        Err(_) => json!({ "__ow_body": base64::engine::general_purpose::STANDARD.encode(body) }),
    }
}

/// The output of a call: a web action's answer with `event = "http"`; else the raw output of
/// a function geofaas deployed (its wrapper's result unwrapped), else the action's JSON result.
fn json_output(
    function: &str,
    style: EventStyle,
    result: &Value,
    started: Instant,
) -> Result<InvokeOutput, InvokeError> {
    let out = match style {
        EventStyle::Http => http_event::openwhisk_answer(function, result)?,
        EventStyle::Raw => match package::unwrap_result(result) {
            Some(body) => InvokeOutput::ok(body, None),
            None => {
                let json = Some(http::HeaderValue::from_static("application/json"));
                InvokeOutput::ok(Bytes::from(result.to_string()), json)
            }
        },
    };
    Ok(InvokeOutput {
        exec: started.elapsed(),
        ..out
    })
}

/// Reads a finished activation record: the controller's `response: {success, result}`, or
/// the swagger's `result: {status, value}`.
fn activation_outcome(
    function: &str,
    style: EventStyle,
    body: &[u8],
    started: Instant,
) -> Result<InvokeOutput, InvokeError> {
    let record: Value = serde_json::from_slice(body)
        .map_err(|e| InvokeError::Protocol(format!("activation record is not JSON: {e}")))?;
    let (success, result) = if let Some(resp) = record.get("response") {
        let ok = resp.get("success").and_then(Value::as_bool);
        let ok = ok.unwrap_or(resp.get("status").and_then(Value::as_str) == Some("success"));
        (ok, resp.get("result").cloned().unwrap_or(Value::Null))
    } else if let Some(res) = record.get("result") {
        let ok = res.get("status").and_then(Value::as_str) == Some("success");
        (ok, res.get("value").cloned().unwrap_or(Value::Null))
    } else {
        return Err(InvokeError::Protocol(
            "activation record without a result".into(),
        ));
    };
    if success {
        json_output(function, style, &result, started)
    } else {
        Err(InvokeError::FunctionFailed {
            message: "action failed".to_owned(),
            body: Some(Bytes::from(result.to_string())),
        })
    }
}

/// The controller's `{"error": …}` message, if any.
fn error_message(body: &[u8]) -> String {
    serde_json::from_slice::<Value>(body)
        .ok()
        .and_then(|v| v.get("error").and_then(Value::as_str).map(str::to_owned))
        .unwrap_or_else(|| http_common::excerpt(body))
}

/// Classifies a reply that is neither a result nor an activation id.
fn error_reply(function: &str, reply: Reply) -> InvokeError {
    let message = error_message(&reply.body);
    match reply.status {
        StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => InvokeError::Auth(message),
        StatusCode::NOT_FOUND => InvokeError::UnknownFunction(function.to_owned()),
        StatusCode::TOO_MANY_REQUESTS => InvokeError::Overloaded {
            retry_after: http_common::retry_after(&reply.headers),
        },
        StatusCode::SERVICE_UNAVAILABLE => InvokeError::Overloaded {
            retry_after: http_common::retry_after(&reply.headers),
        },
        StatusCode::REQUEST_TIMEOUT => {
            InvokeError::Unavailable(format!("controller timed out: {message}"))
        }
        s if s.is_server_error() => InvokeError::Unavailable(format!("{s}: {message}")),
        s => InvokeError::Protocol(format!("{s}: {message}")),
    }
}

#[async_trait]
impl FunctionBackend for OpenwhiskAdapter {
    fn kind(&self) -> &'static str {
        "openwhisk"
    }

    async fn invoke(&self, call: Invocation) -> Result<InvokeOutput, InvokeError> {
        if !valid_function_name(&call.function) {
            return Err(InvokeError::UnknownFunction(call.function));
        }
        let mut url = self.action_url(&call.function)?;
        let style = self.events.of(&call.function);
        let started = Instant::now();
        let budget = http_common::budget(&call, self.timeout);
        // Ask the controller to stop waiting a little before our deadline, so we get the
        // activation id (202) instead of a cut connection.
        let wait_ms = (budget.as_millis() * 9 / 10).clamp(1, MAX_BLOCKING_WAIT_MS);
        url.query_pairs_mut()
            .append_pair("blocking", "true")
            .append_pair("result", "true")
            .append_pair("timeout", &wait_ms.to_string());
        let request = self
            .client
            .post(url)
            .basic_auth(&self.user, Some(&self.key))
            .json(&match style {
                EventStyle::Raw => params(&call.body),
                EventStyle::Http => http_event::openwhisk_params(&call),
            });
        let reply = http_common::send(request, budget).await?;
        match reply.status {
            StatusCode::OK => {
                let result: Value = serde_json::from_slice(&reply.body).map_err(|e| {
                    InvokeError::Protocol(format!("action result is not JSON: {e}"))
                })?;
                json_output(&call.function, style, &result, started)
            }
            StatusCode::ACCEPTED => {
                let id = activation_id(&reply)?;
                self.poll(&id, &call, started).await
            }
            StatusCode::BAD_GATEWAY => Err(InvokeError::FunctionFailed {
                message: format!(
                    "action {} failed: {}",
                    call.function,
                    error_message(&reply.body)
                ),
                body: Some(reply.body),
            }),
            _ => Err(error_reply(&call.function, reply)),
        }
    }

    async fn list(&self) -> Result<Vec<String>, InvokeError> {
        let mut url = self.url(&["actions"])?;
        url.query_pairs_mut().append_pair("limit", "0");
        let reply = http_common::send(self.get(url), PROBE_TIMEOUT).await?;
        if reply.status != StatusCode::OK {
            return Err(error_reply("", reply));
        }
        let briefs: Vec<Value> = serde_json::from_slice(&reply.body)
            .map_err(|e| InvokeError::Protocol(format!("action list is not a JSON array: {e}")))?;
        let in_scope = |ns: &str| match &self.package {
            Some(pkg) => ns.rsplit_once('/').is_some_and(|(_, p)| p == pkg),
            None => !ns.contains('/'),
        };
        Ok(briefs
            .iter()
            .filter(|b| {
                b.get("namespace")
                    .and_then(Value::as_str)
                    .is_some_and(in_scope)
            })
            .filter_map(|b| b.get("name").and_then(Value::as_str).map(str::to_owned))
            .collect())
    }

    fn deploys(&self) -> bool {
        self.deploy
    }

    /// `PUT …/actions/[{pkg}/]{name}?overwrite=true` with the archive `package` builds.
    async fn deploy(&self, fun: &RemoteDeploy) -> Result<(), InvokeError> {
        if !self.deploy {
            return Err(InvokeError::Refused(
                "this OpenWhisk backend does not have deploy = true".into(),
            ));
        }
        if !valid_function_name(&fun.name) {
            return Err(InvokeError::Refused(format!(
                "not a function name: {:?}",
                fun.name
            )));
        }
        let zip = package::pack("OpenWhisk", fun, package::openwhisk_zip).await?;
        let mut url = self.action_url(&fun.name)?;
        url.query_pairs_mut().append_pair("overwrite", "true");
        let request = self
            .client
            .put(url)
            .basic_auth(&self.user, Some(&self.key))
            .json(&self.action(fun, &zip));
        let reply = http_common::send(request, DEPLOY_TIMEOUT).await?;
        if reply.status == StatusCode::OK {
            return Ok(());
        }
        let what = format!(
            "OpenWhisk answered the PUT of action {} with {}: {}",
            fun.name,
            reply.status,
            error_message(&reply.body)
        );
        Err(match reply.status {
            StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => InvokeError::Auth(what),
            s if s.is_server_error() || s == StatusCode::TOO_MANY_REQUESTS => {
                InvokeError::Unavailable(what)
            }
            _ => InvokeError::Refused(what),
        })
    }

    async fn health(&self) -> Health {
        let url = self.api.join("namespaces");
        let Ok(url) = url else {
            return Health::Unhealthy("bad API host".into());
        };
        match http_common::send(self.get(url), PROBE_TIMEOUT).await {
            Ok(reply) if reply.status == StatusCode::OK => Health::Healthy,
            Ok(reply) => Health::Unhealthy(error_reply("", reply).to_string()),
            Err(err) => Health::Unhealthy(err.to_string()),
        }
    }
}

/// The activation id of a 202: the `x-openwhisk-activation-id` header, else the body's
/// `activationId` (or the swagger's `id`).
fn activation_id(reply: &Reply) -> Result<String, InvokeError> {
    if let Some(id) = reply
        .headers
        .get("x-openwhisk-activation-id")
        .and_then(|v| v.to_str().ok())
    {
        return Ok(id.to_owned());
    }
    let body: Value = serde_json::from_slice(&reply.body).unwrap_or(Value::Null);
    body.get("activationId")
        .or_else(|| body.get("id"))
        .and_then(Value::as_str)
        .map(str::to_owned)
        .ok_or_else(|| InvokeError::Protocol("202 without an activation id".into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn swagger_and_controller_activation_shapes_both_parse() {
        let controller = br#"{"response":{"status":"success","success":true,"result":{"n":1}}}"#;
        let out = activation_outcome("f", EventStyle::Raw, controller, Instant::now()).unwrap();
        assert_eq!(&out.body.full().unwrap()[..], br#"{"n":1}"#);
        let swagger = br#"{"result":{"status":"application error","value":{"error":"x"}}}"#;
        match activation_outcome("f", EventStyle::Raw, swagger, Instant::now()) {
            Err(InvokeError::FunctionFailed { body: Some(b), .. }) => {
                assert_eq!(&b[..], br#"{"error":"x"}"#)
            }
            other => panic!("expected a function failure, got {other:?}"),
        }
    }

    #[test]
    fn raw_bodies_become_ow_body_and_objects_pass_through() {
        assert_eq!(params(&Bytes::from_static(b"{\"a\":1}")), json!({"a": 1}));
        assert_eq!(
            params(&Bytes::from_static(b"1000")),
            json!({"__ow_body": "1000"})
        );
        assert_eq!(
            params(&Bytes::from_static(&[0xff])),
            json!({"__ow_body": "/w=="})
        );
    }
}
