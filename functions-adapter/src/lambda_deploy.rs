//! Deploys to Lambda: CreateFunction, or UpdateFunctionCode and UpdateFunctionConfiguration
//! for a function that exists, each waited on until Lambda reports the function ready.

use std::time::Duration;

use base64::Engine as _;
use bytes::Bytes;
use http::{HeaderMap, Method, StatusCode};
use serde_json::{json, Value};
use tokio::time::Instant;

use super::{Deploying, LambdaAdapter};
use crate::http_common::{self, Reply};
use crate::local::Runtime;
use crate::package;
use crate::{InvokeError, RemoteDeploy};

/// Budget of a whole deploy, the waits for the function to become ready included.
const DEPLOY_TIMEOUT: Duration = Duration::from_secs(300);
/// Pause between two reads of the function's state while Lambda prepares it.
const READY_POLL: Duration = Duration::from_millis(500);

impl LambdaAdapter {
    /// Installs `fun` as Lambda function `lambda_name(fun.name)`, replacing its code and
    /// configuration when it exists.
    pub(super) async fn deploy_function(&self, fun: &RemoteDeploy) -> Result<(), InvokeError> {
        let deploying = self.deploy.as_ref().ok_or_else(|| {
            InvokeError::Refused("this Lambda backend does not have deploy = true".into())
        })?;
        let role = deploying.role.as_deref().ok_or_else(|| {
            InvokeError::Refused(
                "a Lambda deploy needs the backend's role (an IAM role ARN)".into(),
            )
        })?;
        let zip = package::pack("Lambda", fun, package::lambda_zip).await?;
        let name = self.names.lambda_name(&fun.name);
        let deadline = Instant::now() + DEPLOY_TIMEOUT;
        let code = base64::engine::general_purpose::STANDARD.encode(zip);
        let mut create = self.configuration(deploying, role, fun);
        create["FunctionName"] = json!(name);
        create["PackageType"] = json!("Zip");
        create["Code"] = json!({ "ZipFile": code });
        let url = self.url(&["2015-03-31", "functions"])?;
        let reply = self.send_json(Method::POST, url, &create, deadline).await?;
        match reply.status {
            StatusCode::CREATED | StatusCode::OK => {}
            StatusCode::CONFLICT if error_of(&reply).0.contains("ResourceConflict") => {
                let url = self.url(&["2015-03-31", "functions", &name, "code"])?;
                let body = json!({ "ZipFile": code });
                let reply = self.send_json(Method::PUT, url, &body, deadline).await?;
                expect_ok("UpdateFunctionCode", &name, reply)?;
                self.wait_ready(&name, deadline).await?;
                let url = self.url(&["2015-03-31", "functions", &name, "configuration"])?;
                let body = self.configuration(deploying, role, fun);
                let reply = self.send_json(Method::PUT, url, &body, deadline).await?;
                expect_ok("UpdateFunctionConfiguration", &name, reply)?;
            }
            _ => return Err(deploy_error("CreateFunction", &name, reply)),
        }
        self.wait_ready(&name, deadline).await
    }

    /// The fields CreateFunction and UpdateFunctionConfiguration share.
    fn configuration(&self, deploying: &Deploying, role: &str, fun: &RemoteDeploy) -> Value {
        let runtime = match fun.runtime {
            Runtime::Nodejs => &deploying.nodejs,
            _ => &deploying.python3,
        };
        let variables: serde_json::Map<String, Value> = fun
            .env
            .iter()
            .map(|(k, v)| (k.clone(), Value::String(v.clone())))
            .collect();
        // Lambda's own default is 3 s: give the function the backend's call timeout.
        let timeout_s = self.timeout.as_millis().div_ceil(1000).clamp(1, 900);
        let mut config = json!({
            "Runtime": runtime,
            "Role": role,
            "Handler": package::LAMBDA_HANDLER,
            "Description": format!("geofaas {} version {}", fun.name, fun.version),
            "Timeout": timeout_s,
            "Environment": { "Variables": variables },
        });
        if let Some(mb) = deploying.memory_mb {
            config["MemorySize"] = json!(mb);
        }
        config
    }

    async fn send_json(
        &self,
        method: Method,
        url: reqwest::Url,
        body: &Value,
        deadline: Instant,
    ) -> Result<Reply, InvokeError> {
        let mut headers = HeaderMap::new();
        headers.insert(
            "content-type",
            http::HeaderValue::from_static("application/json"),
        );
        let body = Bytes::from(body.to_string());
        let request = self.signed(method, url, headers, body)?;
        http_common::send(request, deadline.saturating_duration_since(Instant::now())).await
    }

    /// Reads GetFunctionConfiguration until the function is `Active` and its last update is no
    /// longer `InProgress` (a new function is `Pending` for a while; an update in progress
    /// refuses the next one).
    async fn wait_ready(&self, name: &str, deadline: Instant) -> Result<(), InvokeError> {
        let url = self.url(&["2015-03-31", "functions", name, "configuration"])?;
        loop {
            let request = self.signed(Method::GET, url.clone(), HeaderMap::new(), Bytes::new())?;
            let budget = deadline.saturating_duration_since(Instant::now());
            let reply = http_common::send(request, budget).await?;
            if reply.status != StatusCode::OK {
                return Err(deploy_error("GetFunctionConfiguration", name, reply));
            }
            let config: Value = serde_json::from_slice(&reply.body).map_err(|e| {
                InvokeError::Protocol(format!("Lambda GetFunctionConfiguration of {name}: {e}"))
            })?;
            let field = |k: &str| config.get(k).and_then(Value::as_str).unwrap_or_default();
            if field("State") == "Failed" || field("LastUpdateStatus") == "Failed" {
                let reason = [field("StateReason"), field("LastUpdateStatusReason")]
                    .into_iter()
                    .filter(|r| !r.is_empty())
                    .collect::<Vec<_>>()
                    .join("; ");
                return Err(InvokeError::Refused(format!(
                    "Lambda could not prepare {name}: {reason}"
                )));
            }
            // An emulator may leave the fields out: absent counts as ready.
            let pending = field("State") == "Pending" || field("LastUpdateStatus") == "InProgress";
            if !pending {
                return Ok(());
            }
            if Instant::now() + READY_POLL >= deadline {
                return Err(InvokeError::Timeout(DEPLOY_TIMEOUT));
            }
            tokio::time::sleep(READY_POLL).await;
        }
    }
}

/// Lambda's error type and message: the `x-amzn-ErrorType` header or the body's `__type`,
/// and the body's `message` (`Message` in some answers).
fn error_of(reply: &Reply) -> (String, String) {
    let body: Value = serde_json::from_slice(&reply.body).unwrap_or(Value::Null);
    let kind = reply
        .headers
        .get("x-amzn-errortype")
        .and_then(|v| v.to_str().ok())
        .map(|v| v.split(':').next().unwrap_or(v).to_owned())
        .or_else(|| {
            let kind = body.get("__type").and_then(Value::as_str)?;
            Some(kind.rsplit('#').next().unwrap_or(kind).to_owned())
        })
        .unwrap_or_default();
    let message = ["message", "Message"]
        .iter()
        .find_map(|k| body.get(k).and_then(Value::as_str))
        .map(str::to_owned)
        .unwrap_or_else(|| http_common::excerpt(&reply.body));
    (kind, message)
}

fn expect_ok(op: &str, name: &str, reply: Reply) -> Result<(), InvokeError> {
    if reply.status.is_success() {
        return Ok(());
    }
    Err(deploy_error(op, name, reply))
}

/// A failed deploy step, naming the operation, the function, the status and Lambda's words.
fn deploy_error(op: &str, name: &str, reply: Reply) -> InvokeError {
    let (kind, message) = error_of(&reply);
    let what = format!(
        "Lambda {op} of {name} answered {} {kind}: {message}",
        reply.status
    );
    match reply.status {
        StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => InvokeError::Auth(what),
        s if s.is_server_error() || s == StatusCode::TOO_MANY_REQUESTS => {
            InvokeError::Unavailable(what)
        }
        _ => InvokeError::Refused(what),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(status: u16, headers: &[(&str, &str)], body: &str) -> Reply {
        let mut map = HeaderMap::new();
        for (k, v) in headers {
            map.insert(
                http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        Reply {
            status: StatusCode::from_u16(status).unwrap(),
            headers: map,
            body: Bytes::from(body.to_owned()),
        }
    }

    #[test]
    fn errors_name_the_operation_function_type_and_message() {
        // Lambda's shape: the type in a header, `Type: User` and `message` in the body.
        let real = reply(
            400,
            &[(
                "x-amzn-ErrorType",
                "InvalidParameterValueException:http://internal.amazon.com/",
            )],
            r#"{"Type":"User","message":"The role defined for the function cannot be assumed by Lambda."}"#,
        );
        let err = deploy_error("CreateFunction", "geofaas-echo", real);
        assert!(matches!(err, InvokeError::Refused(_)), "{err:?}");
        assert_eq!(
            err.to_string(),
            "Lambda CreateFunction of geofaas-echo answered 400 Bad Request \
             InvalidParameterValueException: The role defined for the function cannot be assumed by Lambda."
        );
        // moto's shape: `__type` in the body.
        let moto = reply(
            409,
            &[],
            r#"{"__type":"ResourceConflictException","message":"Function already exist: echo"}"#,
        );
        assert_eq!(
            error_of(&moto),
            (
                "ResourceConflictException".into(),
                "Function already exist: echo".into()
            )
        );
        let denied = deploy_error("UpdateFunctionCode", "echo", reply(403, &[], "{}"));
        assert!(matches!(denied, InvokeError::Auth(_)), "{denied:?}");
        let down = deploy_error("CreateFunction", "echo", reply(503, &[], ""));
        assert!(down.is_retryable(), "{down:?}");
    }
}
