//! The tinyFaaS adapter (OpenFogStack/tinyFaaS).
//!
//! Calls go to the proxy, `{method} {url}/{name}[?query]` with the client's method (`HEAD` sent as
//! `GET`: the gateway drops the body), the raw body and the call's headers. tinyFaaS takes the
//! whole path as the function's name, so a call with a sub-path is refused, naming it. The
//! function list comes from the manager's `GET {manager_url}/list` (one name per line); a
//! function folder is deployed with `POST {manager_url}/upload`
//! `{"name","env","threads","zip":<base64>,"envs":["KEY=VALUE"]}` (`deploy = true`; the archive
//! is described in `package`).
//!
//! tinyFaaS answers `200` even when the function failed and never times a call out, so every
//! call runs under the caller's deadline (capped by `timeout_ms`), and a `200` whose body is
//! empty (`fail_on_empty`) or starts with the function's `failure_marker` is reported as
//! [`InvokeError::FunctionFailed`].

use std::collections::HashMap;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use base64::Engine as _;
use geofaas_config::function::valid_function_name;
use geofaas_config::{FunctionConfig, TinyfaasBackend};
use http::{Method, StatusCode};
use reqwest::Url;

use crate::factory::BuildError;
use crate::http_common::{self, PROBE_TIMEOUT};
use crate::package;
use crate::upstream::{Answer, Upstream};
use crate::{FunctionBackend, Health, Invocation, InvokeError, InvokeOutput, RemoteDeploy};

/// Budget of a deploy (building the function's image can take a while).
const DEPLOY_TIMEOUT: Duration = Duration::from_secs(300);

/// Talks to one tinyFaaS node.
#[derive(Debug)]
pub struct TinyfaasAdapter {
    /// Deploys, lists, probes, and calls when the proxy is not plain HTTP.
    client: reqwest::Client,
    /// Calls to a plain-HTTP proxy (what tinyFaaS serves): the hot path.
    calls: Option<Calls>,
    url: Url,
    manager_url: Url,
    timeout: Duration,
    fail_on_empty: bool,
    markers: HashMap<String, String>,
    /// `deploy = true`, and the upload's `threads`.
    deploy: bool,
    threads: u32,
}

/// The proxy's keep-alive connections, and the path every function name is appended to.
#[derive(Debug)]
struct Calls {
    upstream: Upstream,
    path: String,
}

impl Calls {
    /// For an `http://` proxy URL (tinyFaaS speaks no TLS); `None` for anything else.
    fn new(base: &Url) -> Option<Self> {
        if base.scheme() != "http" || base.query().is_some() {
            return None;
        }
        let host = match base.host()? {
            url::Host::Ipv6(ip) => format!("[{ip}]"),
            host => host.to_string(),
        };
        let upstream = Upstream::new(&host, base.port_or_known_default()?).ok()?;
        Some(Self {
            upstream,
            path: base.path().to_owned(),
        })
    }
}

impl TinyfaasAdapter {
    /// An adapter for the node `cfg` describes; `functions` supply the failure markers.
    pub fn new(cfg: &TinyfaasBackend, functions: &[FunctionConfig]) -> Result<Self, BuildError> {
        let url = http_common::base(&cfg.url);
        Ok(Self {
            client: http_common::client().map_err(BuildError::client)?,
            calls: Calls::new(&url),
            url,
            manager_url: http_common::base(&cfg.manager_url),
            timeout: Duration::from_millis(cfg.timeout_ms),
            fail_on_empty: cfg.fail_on_empty,
            markers: functions
                .iter()
                .filter_map(|f| Some((f.name.clone(), f.failure_marker.clone()?)))
                .collect(),
            deploy: cfg.deploy,
            threads: cfg.threads.max(1),
        })
    }

    fn endpoint(base: &Url, path: &str) -> Result<Url, InvokeError> {
        base.join(path)
            .map_err(|e| InvokeError::Protocol(format!("bad URL {base}{path}: {e}")))
    }

    /// `{url}/{name}` for a valid function name. Appending the segment skips the full parse
    /// (host included) that [`Url::join`] does on every call.
    fn function_url(base: &Url, name: &str) -> Result<Url, InvokeError> {
        let mut url = base.clone();
        url.path_segments_mut()
            .map_err(|()| InvokeError::Protocol(format!("bad URL {base}: cannot be a base")))?
            .pop_if_empty()
            .push(name);
        Ok(url)
    }

    fn classify(
        &self,
        function: &str,
        reply: Answer,
        started: Instant,
    ) -> Result<InvokeOutput, InvokeError> {
        match reply.status {
            StatusCode::OK => {
                self.check_body(function, &reply.body)?;
                Ok(InvokeOutput {
                    exec: started.elapsed(),
                    ..InvokeOutput::ok(reply.body, reply.content_type)
                })
            }
            // Accepted for asynchronous execution (`X-tinyFaaS-Async`).
            StatusCode::ACCEPTED => Ok(InvokeOutput {
                exec: started.elapsed(),
                ..InvokeOutput::default()
            }),
            StatusCode::NOT_FOUND => Err(InvokeError::UnknownFunction(function.to_owned())),
            status if status.is_server_error() => Err(InvokeError::Unavailable(format!(
                "tinyFaaS proxy answered {status} (function handler unreachable)"
            ))),
            status => Err(InvokeError::Protocol(format!(
                "tinyFaaS proxy answered {status}"
            ))),
        }
    }

    /// tinyFaaS reports failures as `200`: apply the topology's rules.
    fn check_body(&self, function: &str, body: &[u8]) -> Result<(), InvokeError> {
        if self.fail_on_empty && body.is_empty() {
            return Err(InvokeError::FunctionFailed {
                message: format!("{function} returned an empty body"),
                body: None,
            });
        }
        if let Some(marker) = self.markers.get(function) {
            if body.starts_with(marker.as_bytes()) {
                return Err(InvokeError::FunctionFailed {
                    message: format!("{function} reported a failure"),
                    body: Some(bytes::Bytes::copy_from_slice(body)),
                });
            }
        }
        Ok(())
    }
}

#[async_trait]
impl FunctionBackend for TinyfaasAdapter {
    fn kind(&self) -> &'static str {
        "tinyfaas"
    }

    async fn invoke(&self, mut call: Invocation) -> Result<InvokeOutput, InvokeError> {
        // The name becomes a path segment: only plain names may pass.
        if !valid_function_name(&call.function) {
            return Err(InvokeError::UnknownFunction(call.function));
        }
        if call.http.path != "/" {
            return Err(InvokeError::Refused(format!(
                "function {} runs on tinyFaaS, which routes a call by its path alone: it cannot take the sub-path {}",
                call.function, call.http.path
            )));
        }
        let method = match &call.http.method {
            &Method::HEAD => Method::GET,
            m => m.clone(),
        };
        let query = call.http.query.as_str();
        let budget = http_common::budget(&call, self.timeout);
        let started = Instant::now();
        let reply = match &self.calls {
            Some(calls) => {
                let mut path =
                    String::with_capacity(calls.path.len() + call.function.len() + query.len() + 1);
                path.push_str(&calls.path);
                path.push_str(&call.function);
                if !query.is_empty() {
                    path.push('?');
                    path.push_str(query);
                }
                let body = std::mem::take(&mut call.body);
                calls
                    .upstream
                    .send(
                        method,
                        &path,
                        call.sent_headers(),
                        body,
                        budget,
                        http_common::MAX_REPLY_BYTES,
                    )
                    .await?
            }
            None => {
                let mut url = Self::function_url(&self.url, &call.function)?;
                if !query.is_empty() {
                    url.set_query(Some(query));
                }
                let mut request = self.client.request(method, url).body(call.body.clone());
                for (name, value) in call.sent_headers() {
                    request = request.header(name, value);
                }
                let reply = http_common::send(request, budget).await?;
                Answer {
                    status: reply.status,
                    content_type: http_common::content_type(&reply.headers),
                    body: reply.body,
                }
            }
        };
        self.classify(&call.function, reply, started)
    }

    async fn list(&self) -> Result<Vec<String>, InvokeError> {
        let url = Self::endpoint(&self.manager_url, "list")?;
        let reply = http_common::send(self.client.get(url), PROBE_TIMEOUT).await?;
        if reply.status != StatusCode::OK {
            return Err(InvokeError::Unavailable(format!(
                "tinyFaaS list answered {}",
                reply.status
            )));
        }
        let text = String::from_utf8_lossy(&reply.body);
        Ok(text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .map(str::to_owned)
            .collect())
    }

    fn deploys(&self) -> bool {
        self.deploy
    }

    /// `POST {manager_url}/upload` `{"name","env","threads","zip","envs"}`: tinyFaaS builds the
    /// function's image and starts `threads` containers before it answers, replacing a function
    /// of that name once the new one runs.
    async fn deploy(&self, fun: &RemoteDeploy) -> Result<(), InvokeError> {
        if !self.deploy {
            return Err(InvokeError::Refused(
                "this tinyFaaS backend does not have deploy = true".into(),
            ));
        }
        // The manager takes `^[a-zA-Z0-9]+$` only (and answers a bare 500 otherwise).
        if fun.name.is_empty() || !fun.name.bytes().all(|b| b.is_ascii_alphanumeric()) {
            return Err(InvokeError::Refused(format!(
                "tinyFaaS takes only letters and digits in function names: cannot deploy {:?}",
                fun.name
            )));
        }
        let zip = package::pack("tinyFaaS", fun, package::tinyfaas_zip).await?;
        let envs: Vec<String> = fun.env.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let body = serde_json::json!({
            "name": fun.name,
            "env": fun.runtime.name(),
            "threads": self.threads,
            "zip": base64::engine::general_purpose::STANDARD.encode(zip),
            "envs": envs,
        });
        let url = Self::endpoint(&self.manager_url, "upload")?;
        let reply = http_common::send(self.client.post(url).json(&body), DEPLOY_TIMEOUT).await?;
        if reply.status == StatusCode::OK {
            return Ok(());
        }
        // tinyFaaS answers failures with an empty body and logs the reason.
        let words = match http_common::excerpt(&reply.body) {
            w if w.is_empty() => "no reason given (the tinyFaaS manager's log has it)".to_owned(),
            w => w,
        };
        let message = format!(
            "tinyFaaS upload of {} answered {}: {words}",
            fun.name, reply.status
        );
        Err(if reply.status.is_server_error() {
            InvokeError::Unavailable(message)
        } else {
            InvokeError::Refused(message)
        })
    }

    async fn health(&self) -> Health {
        // The manager must list, and the proxy must answer at all (404 for `/` is fine).
        if let Err(err) = self.list().await {
            return Health::Unhealthy(format!("manager: {err}"));
        }
        let probe = self.client.get(self.url.clone());
        match http_common::send(probe, PROBE_TIMEOUT).await {
            Ok(_) => Health::Healthy,
            Err(err) => Health::Unhealthy(format!("proxy: {err}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn function_url_is_what_joining_the_name_gives() {
        for base in [
            "http://127.0.0.1:8000",
            "http://127.0.0.1:8000/",
            "http://tinyfaas.example:8000/edge",
            "http://[::1]:8000/a/b/",
        ] {
            let base = http_common::base(&Url::parse(base).unwrap());
            for name in ["sieve", "echo_2", "a-b"] {
                assert_eq!(
                    TinyfaasAdapter::function_url(&base, name).unwrap(),
                    TinyfaasAdapter::endpoint(&base, name).unwrap()
                );
            }
        }
    }
}
