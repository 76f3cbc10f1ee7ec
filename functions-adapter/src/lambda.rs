//! The AWS Lambda adapter: the Invoke API signed with SigV4 (`aws-sigv4`, no SDK).
//!
//! `POST {endpoint}/2015-03-31/functions/{name}/invocations` with `X-Amz-Invocation-Type`
//! `RequestResponse` (the reply carries the result) or `Event` (`202`, empty body). A function
//! error is `200` with `X-Amz-Function-Error` and the error document as the body; `429`
//! (`TooManyRequestsException`) carries `Retry-After`; `401`/`403` (bad signature, unknown key)
//! are credential errors and not retryable; `404` is an unknown function.
//!
//! Lambda payloads are JSON. With `event = "raw"` (the default) a body that parses as JSON is
//! sent as it is, an empty body as `{}`, any other body as a JSON string (base64 when not
//! UTF-8). With `event = "http"` the function gets the function-URL event of the whole request
//! and its answer is mapped back as a function URL would (`http_event`). Credentials come from
//! the standard environment variables `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY` and
//! `AWS_SESSION_TOKEN`, never from the topology. A function geofaas deployed answers
//! `{"geofaas_body": …}` through its wrapper, which is unwrapped into the raw output.
//!
//! Deploys (`deploy = true`, in `lambda_deploy.rs`): CreateFunction, or on
//! `409 ResourceConflictException` UpdateFunctionCode then UpdateFunctionConfiguration, each
//! followed by GetFunctionConfiguration until the function is `Active` and its last update
//! `Successful` (Lambda refuses a second update while one is in progress).

use std::time::{Duration, Instant, SystemTime};

use async_trait::async_trait;
use aws_credential_types::Credentials;
use aws_sigv4::http_request::{sign, SignableBody, SignableRequest, SigningSettings};
use aws_sigv4::sign::v4;
use base64::Engine as _;
use bytes::Bytes;
use geofaas_config::backend::LambdaInvocationType;
use geofaas_config::function::valid_function_name;
use geofaas_config::{EventStyle, FunctionConfig, LambdaBackend};
use http::{HeaderMap, Method, StatusCode};
use reqwest::Url;
use serde_json::Value;

use crate::factory::BuildError;
use crate::http_common::{self, Reply, PROBE_TIMEOUT};
use crate::http_event::{self, EventStyles};
use crate::package;
use crate::{FunctionBackend, Health, Invocation, InvokeError, InvokeOutput, RemoteDeploy};

/// The Lambda runtime of deployed `python3` folders unless `runtimes.python3` says otherwise.
const DEFAULT_PYTHON: &str = "python3.12";
/// The Lambda runtime of deployed `nodejs` folders unless `runtimes.nodejs` says otherwise.
const DEFAULT_NODEJS: &str = "nodejs20.x";

/// Talks to Lambda (or an endpoint speaking its Invoke API) in one region.
#[derive(Debug)]
pub struct LambdaAdapter {
    client: reqwest::Client,
    endpoint: Url,
    region: String,
    credentials: Credentials,
    timeout: Duration,
    invocation_type: LambdaInvocationType,
    events: EventStyles,
    functions: Option<Vec<String>>,
    names: NameMap,
    deploy: Option<Deploying>,
}

/// What a deploy needs beside the code (`deploy = true`).
#[derive(Debug)]
struct Deploying {
    role: Option<String>,
    python3: String,
    nodejs: String,
    memory_mb: Option<u32>,
}

/// Platform function names to Lambda function names and back.
#[derive(Debug, Default)]
struct NameMap {
    prefix: String,
    overrides: std::collections::BTreeMap<String, String>,
}

impl NameMap {
    fn lambda_name(&self, function: &str) -> String {
        match self.overrides.get(function) {
            Some(name) => name.clone(),
            None => format!("{}{function}", self.prefix),
        }
    }

    /// The platform name of a Lambda function, if it is one of ours.
    fn platform_name(&self, lambda: &str) -> Option<String> {
        if let Some((ours, _)) = self.overrides.iter().find(|(_, l)| *l == lambda) {
            return Some(ours.clone());
        }
        lambda
            .strip_prefix(self.prefix.as_str())
            .filter(|n| valid_function_name(n))
            .map(str::to_owned)
    }
}

impl LambdaAdapter {
    /// An adapter with credentials from `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY` and the
    /// optional `AWS_SESSION_TOKEN`.
    pub fn from_env(cfg: &LambdaBackend) -> Result<Self, BuildError> {
        let var =
            |name: &str| std::env::var(name).map_err(|_| BuildError::MissingEnv(name.to_owned()));
        let credentials = Credentials::new(
            var("AWS_ACCESS_KEY_ID")?,
            var("AWS_SECRET_ACCESS_KEY")?,
            std::env::var("AWS_SESSION_TOKEN")
                .ok()
                .filter(|t| !t.is_empty()),
            None,
            "environment",
        );
        Self::with_credentials(cfg, credentials)
    }

    /// An adapter signing with `credentials`.
    pub fn with_credentials(
        cfg: &LambdaBackend,
        credentials: Credentials,
    ) -> Result<Self, BuildError> {
        let endpoint = match &cfg.endpoint {
            Some(url) => http_common::base(url),
            None => Url::parse(&format!("https://lambda.{}.amazonaws.com/", cfg.region))
                .map_err(|e| BuildError::Client(format!("bad region {:?}: {e}", cfg.region)))?,
        };
        Ok(Self {
            client: http_common::client().map_err(BuildError::client)?,
            endpoint,
            region: cfg.region.clone(),
            credentials,
            timeout: Duration::from_millis(cfg.timeout_ms),
            invocation_type: cfg.invocation_type,
            events: EventStyles::new(cfg.event),
            functions: cfg.functions.clone(),
            names: NameMap {
                prefix: cfg.function_prefix.clone().unwrap_or_default(),
                overrides: cfg.lambda_names.clone(),
            },
            deploy: cfg.deploy.then(|| Deploying {
                role: cfg.role.clone(),
                python3: (cfg.runtimes.python3.as_deref())
                    .unwrap_or(DEFAULT_PYTHON)
                    .to_owned(),
                nodejs: (cfg.runtimes.nodejs.as_deref())
                    .unwrap_or(DEFAULT_NODEJS)
                    .to_owned(),
                memory_mb: cfg.memory_mb,
            }),
        })
    }

    /// This adapter with the `event` of the topology's `[[function]]`s overriding the
    /// backend's.
    pub fn with_functions(mut self, functions: &[FunctionConfig]) -> Self {
        self.events = self.events.overridden_by(functions);
        self
    }

    /// Runs one call with an explicit invocation type (the configured one is the default).
    pub async fn invoke_as(
        &self,
        call: Invocation,
        invocation_type: LambdaInvocationType,
    ) -> Result<InvokeOutput, InvokeError> {
        if !valid_function_name(&call.function) {
            return Err(InvokeError::UnknownFunction(call.function));
        }
        let lambda_name = self.names.lambda_name(&call.function);
        let url = self.url(&["2015-03-31", "functions", &lambda_name, "invocations"])?;
        let kind = match invocation_type {
            LambdaInvocationType::RequestResponse => "RequestResponse",
            LambdaInvocationType::Event => "Event",
        };
        let mut headers = HeaderMap::new();
        headers.insert(
            "content-type",
            http::HeaderValue::from_static("application/json"),
        );
        headers.insert(
            "x-amz-invocation-type",
            http::HeaderValue::from_static(kind),
        );
        let style = self.events.of(&call.function);
        let event = match style {
            EventStyle::Raw => payload(&call.body),
            EventStyle::Http => http_event::lambda_event(&call),
        };
        let request = self.signed(Method::POST, url, headers, event)?;
        let started = Instant::now();
        let reply = http_common::send(request, http_common::budget(&call, self.timeout)).await?;
        classify(&call.function, style, reply, started)
    }

    fn url(&self, segments: &[&str]) -> Result<Url, InvokeError> {
        let mut url = self.endpoint.clone();
        url.path_segments_mut()
            .map_err(|_| InvokeError::Protocol("endpoint cannot be a base URL".into()))?
            .pop_if_empty()
            .extend(segments);
        Ok(url)
    }

    /// A request signed with SigV4 for service `lambda`.
    fn signed(
        &self,
        method: Method,
        url: Url,
        headers: HeaderMap,
        body: Bytes,
    ) -> Result<reqwest::RequestBuilder, InvokeError> {
        let identity = self.credentials.clone().into();
        let params = v4::SigningParams::builder()
            .identity(&identity)
            .region(&self.region)
            .name("lambda")
            .time(SystemTime::now())
            .settings(SigningSettings::default())
            .build()
            .map_err(|e| InvokeError::Auth(format!("cannot sign: {e}")))?
            .into();
        let pairs = headers
            .iter()
            .filter_map(|(n, v)| Some((n.as_str(), v.to_str().ok()?)));
        let signable = SignableRequest::new(
            method.as_str(),
            url.as_str(),
            pairs,
            SignableBody::Bytes(&body),
        )
        .map_err(|e| InvokeError::Auth(format!("cannot sign: {e}")))?;
        let (instructions, _signature) = sign(signable, &params)
            .map_err(|e| InvokeError::Auth(format!("cannot sign: {e}")))?
            .into_parts();
        let mut request = self.client.request(method, url).headers(headers);
        for (name, value) in instructions.headers() {
            request = request.header(name, value);
        }
        Ok(request.body(body))
    }

    /// Asks ListFunctions, following `NextMarker`.
    async fn list_remote(&self) -> Result<Vec<String>, InvokeError> {
        let mut names = Vec::new();
        let mut marker: Option<String> = None;
        loop {
            let mut url = self.url(&["2015-03-31", "functions", ""])?;
            url.query_pairs_mut().append_pair("MaxItems", "50");
            if let Some(m) = &marker {
                url.query_pairs_mut().append_pair("Marker", m);
            }
            let request = self.signed(Method::GET, url, HeaderMap::new(), Bytes::new())?;
            let reply = http_common::send(request, PROBE_TIMEOUT).await?;
            if reply.status != StatusCode::OK {
                return Err(error_reply("", reply));
            }
            let page: Value = serde_json::from_slice(&reply.body)
                .map_err(|e| InvokeError::Protocol(format!("ListFunctions is not JSON: {e}")))?;
            let functions = page.get("Functions").and_then(Value::as_array);
            names.extend(functions.into_iter().flatten().filter_map(|f| {
                f.get("FunctionName")
                    .and_then(Value::as_str)
                    .and_then(|n| self.names.platform_name(n))
            }));
            marker = page
                .get("NextMarker")
                .and_then(Value::as_str)
                .map(str::to_owned);
            if marker.is_none() {
                return Ok(names);
            }
        }
    }
}

#[path = "lambda_deploy.rs"]
mod deploy;

/// The JSON payload Lambda gets for a raw body.
pub(crate) fn payload(body: &Bytes) -> Bytes {
    if body.is_empty() {
        return Bytes::from_static(b"{}");
    }
    if serde_json::from_slice::<serde::de::IgnoredAny>(body).is_ok() {
        return body.clone();
    }
    let text = match std::str::from_utf8(body) {
        Ok(text) => Value::String(text.to_owned()),
        Err(_) => Value::String(base64::engine::general_purpose::STANDARD.encode(body)),
    };
    Bytes::from(text.to_string())
}

fn classify(
    function: &str,
    style: EventStyle,
    reply: Reply,
    started: Instant,
) -> Result<InvokeOutput, InvokeError> {
    match reply.status {
        StatusCode::OK | StatusCode::ACCEPTED | StatusCode::NO_CONTENT => {
            if let Some(kind) = reply.headers.get("x-amz-function-error") {
                let kind = kind.to_str().unwrap_or("Unhandled");
                let message = serde_json::from_slice::<Value>(&reply.body)
                    .ok()
                    .and_then(|v| {
                        v.get("errorMessage")
                            .and_then(Value::as_str)
                            .map(str::to_owned)
                    })
                    .unwrap_or_else(|| http_common::excerpt(&reply.body));
                return Err(InvokeError::FunctionFailed {
                    message: format!("{function}: {kind} error: {message}"),
                    body: Some(reply.body),
                });
            }
            // An event answered (`Event` invocations) has no result to map.
            if style == EventStyle::Http && reply.status == StatusCode::OK {
                return Ok(InvokeOutput {
                    exec: started.elapsed(),
                    ..http_event::lambda_answer(function, &reply.body)?
                });
            }
            // A function geofaas deployed answers through its wrapper: unwrap the raw output.
            if let Some(body) = package::unwrap_body(&reply.body) {
                return Ok(InvokeOutput {
                    exec: started.elapsed(),
                    ..InvokeOutput::ok(body, None)
                });
            }
            let content_type = http_common::content_type(&reply.headers);
            Ok(InvokeOutput {
                exec: started.elapsed(),
                ..InvokeOutput::ok(reply.body, content_type)
            })
        }
        _ => Err(error_reply(function, reply)),
    }
}

/// Lambda's error type: the `x-amzn-ErrorType` header, else the body's `Type`/`__type`/`Code`.
fn error_type(reply: &Reply) -> String {
    let from_header = reply
        .headers
        .get("x-amzn-errortype")
        .and_then(|v| v.to_str().ok())
        .map(|v| v.split(':').next().unwrap_or(v).to_owned());
    from_header.unwrap_or_else(|| http_common::excerpt(&reply.body))
}

fn error_reply(function: &str, reply: Reply) -> InvokeError {
    let detail = format!("{} {}", reply.status, error_type(&reply));
    match reply.status {
        StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => InvokeError::Auth(detail),
        StatusCode::NOT_FOUND => InvokeError::UnknownFunction(function.to_owned()),
        StatusCode::TOO_MANY_REQUESTS => InvokeError::Overloaded {
            retry_after: http_common::retry_after(&reply.headers),
        },
        s if s.is_server_error() => InvokeError::Unavailable(detail),
        _ => InvokeError::Protocol(detail),
    }
}

#[async_trait]
impl FunctionBackend for LambdaAdapter {
    fn kind(&self) -> &'static str {
        "lambda"
    }

    async fn invoke(&self, call: Invocation) -> Result<InvokeOutput, InvokeError> {
        self.invoke_as(call, self.invocation_type).await
    }

    async fn list(&self) -> Result<Vec<String>, InvokeError> {
        match &self.functions {
            Some(names) => Ok(names.clone()),
            None => self.list_remote().await,
        }
    }

    fn deploys(&self) -> bool {
        self.deploy.is_some()
    }

    async fn deploy(&self, fun: &RemoteDeploy) -> Result<(), InvokeError> {
        self.deploy_function(fun).await
    }

    async fn health(&self) -> Health {
        // A signed ListFunctions: any answer but a credential error or a server error means the
        // endpoint takes our calls (emulators without ListFunctions answer 404).
        let url = match self.url(&["2015-03-31", "functions", ""]) {
            Ok(mut url) => {
                url.query_pairs_mut().append_pair("MaxItems", "1");
                url
            }
            Err(err) => return Health::Unhealthy(err.to_string()),
        };
        let request = match self.signed(Method::GET, url, HeaderMap::new(), Bytes::new()) {
            Ok(request) => request,
            Err(err) => return Health::Unhealthy(err.to_string()),
        };
        match http_common::send(request, PROBE_TIMEOUT).await {
            Ok(reply) if reply.status.is_success() || reply.status == StatusCode::NOT_FOUND => {
                Health::Healthy
            }
            Ok(reply) => Health::Unhealthy(error_reply("", reply).to_string()),
            Err(err) => Health::Unhealthy(err.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_are_always_json() {
        assert_eq!(&payload(&Bytes::new())[..], b"{}");
        assert_eq!(&payload(&Bytes::from_static(b"[1,2]"))[..], b"[1,2]");
        assert_eq!(&payload(&Bytes::from_static(b"hello"))[..], b"\"hello\"");
    }

    #[test]
    fn platform_names_map_to_lambda_names_and_back() {
        let names = NameMap {
            prefix: "myservice-prod-".into(),
            overrides: [("sieve".to_owned(), "legacy-sieve-v2".to_owned())].into(),
        };
        assert_eq!(names.lambda_name("resize"), "myservice-prod-resize");
        assert_eq!(names.lambda_name("sieve"), "legacy-sieve-v2");
        assert_eq!(
            names.platform_name("myservice-prod-resize").as_deref(),
            Some("resize")
        );
        assert_eq!(
            names.platform_name("legacy-sieve-v2").as_deref(),
            Some("sieve")
        );
        assert_eq!(names.platform_name("otherservice-dev-x"), None);
        assert_eq!(
            NameMap::default().platform_name("plain").as_deref(),
            Some("plain")
        );
    }
}
