//! The HTTP conventions of the remote platforms (`event = "http"`, docs/functions.md): a call
//! ([`Invocation`] with its [`crate::HttpRequest`]) as the event the platform's HTTP front
//! would send its function, and the function's answer back as a status, headers and a body.
//!
//! - AWS Lambda: the function-URL event, payload format 2.0 ([`lambda_event`]), and the
//!   function-URL answer (`statusCode`, `headers`, `multiValueHeaders`, `cookies`, `body`,
//!   `isBase64Encoded`; a result without `statusCode` is a `200` JSON body) ([`lambda_answer`]).
//! - Apache OpenWhisk: a raw-HTTP web action's parameters (`__ow_method`, `__ow_headers`,
//!   `__ow_path`, `__ow_query`, `__ow_body`) ([`openwhisk_params`]) and a web action's answer
//!   (`statusCode`, `headers`, `body`) ([`openwhisk_answer`]).
//!
//! Whatever the function answers passes the checks every backend's answers pass
//! ([`crate::http_fn::answer_status`], [`crate::http_fn::answer_headers`]).

use std::collections::BTreeMap;
use std::time::{SystemTime, UNIX_EPOCH};

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use bytes::Bytes;
use geofaas_config::{EventStyle, FunctionConfig};
use http::header::CONTENT_TYPE;
use serde_json::{json, Map, Value};

use crate::http_fn::{answer_headers, answer_status};
use crate::{Invocation, InvokeError, InvokeOutput};

/// The event style of each function on one backend: the backend's `event`, overridden by a
/// `[[function]]`'s.
#[derive(Clone, Debug, Default)]
pub struct EventStyles {
    default: EventStyle,
    overrides: BTreeMap<String, EventStyle>,
}

impl EventStyles {
    /// Every function with the backend's style `default`.
    pub fn new(default: EventStyle) -> Self {
        Self {
            default,
            overrides: BTreeMap::new(),
        }
    }

    /// These styles with the overrides of the topology's `functions`.
    pub fn overridden_by(mut self, functions: &[FunctionConfig]) -> Self {
        self.overrides = functions
            .iter()
            .filter_map(|f| Some((f.name.clone(), f.event?)))
            .collect();
        self
    }

    /// The style `function` is called with.
    pub fn of(&self, function: &str) -> EventStyle {
        self.overrides
            .get(function)
            .copied()
            .unwrap_or(self.default)
    }
}

/// Media types whose bodies are passed base64-encoded (with `isBase64Encoded`) even when
/// they happen to be valid UTF-8.
fn is_binary_type(content_type: &str) -> bool {
    let base = content_type
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    matches!(
        base.as_str(),
        "application/octet-stream"
            | "application/zip"
            | "application/gzip"
            | "application/pdf"
            | "application/x-protobuf"
            | "application/wasm"
    ) || ["image/", "audio/", "video/", "font/"]
        .iter()
        .any(|p| base.starts_with(p))
}

/// The body as event text: `(text, false)`, or `(base64, true)` when it is binary.
fn body_text(body: &Bytes, content_type: &str) -> (String, bool) {
    match std::str::from_utf8(body) {
        Ok(text) if !is_binary_type(content_type) => (text.to_owned(), false),
        _ => (B64.encode(body), true),
    }
}

/// The call's headers as one lower-cased object, repeated ones joined with `sep`, `cookie`
/// left out when `skip_cookie` (Lambda passes cookies on their own).
fn header_object(call: &Invocation, sep: &str, skip_cookie: bool) -> Map<String, Value> {
    let mut out: Map<String, Value> = Map::new();
    for (name, value) in call.sent_headers() {
        if skip_cookie && name == http::header::COOKIE {
            continue;
        }
        let value = String::from_utf8_lossy(value.as_bytes()).into_owned();
        match out.get_mut(name.as_str()) {
            Some(Value::String(joined)) => {
                joined.push_str(sep);
                joined.push_str(&value);
            }
            _ => {
                out.insert(name.as_str().to_owned(), Value::String(value));
            }
        }
    }
    out
}

/// Lambda's `requestContext.time`: `05/Dec/2026:15:46:25 +0000`.
fn lambda_time(now: SystemTime) -> String {
    // httpdate: `Sat, 05 Dec 2026 15:46:25 GMT`.
    let date = httpdate::fmt_http_date(now);
    let parts: Vec<&str> = date.split(' ').collect();
    match parts.as_slice() {
        [_, day, month, year, time, _] => format!("{day}/{month}/{year}:{time} +0000"),
        _ => date,
    }
}

/// The AWS Lambda function-URL event (payload format 2.0) of a call, as a function URL
/// would send it.
pub fn lambda_event(call: &Invocation) -> Bytes {
    lambda_event_at(call, SystemTime::now())
}

fn lambda_event_at(call: &Invocation, now: SystemTime) -> Bytes {
    let http = &call.http;
    let url = url::Url::parse(&http.url).ok();
    let host = url
        .as_ref()
        .and_then(|u| {
            let host = u.host_str()?;
            Some(match u.port() {
                Some(port) => format!("{host}:{port}"),
                None => host.to_owned(),
            })
        })
        .unwrap_or_else(|| "localhost".to_owned());
    let mut headers = header_object(call, ",", true);
    headers
        .entry("host")
        .or_insert_with(|| Value::String(host.clone()));
    if let Some(ip) = http.source_ip {
        headers
            .entry("x-forwarded-for")
            .or_insert_with(|| Value::String(ip.to_string()));
    }
    if let Some(u) = &url {
        headers
            .entry("x-forwarded-proto")
            .or_insert_with(|| Value::String(u.scheme().to_owned()));
        if let Some(port) = u.port_or_known_default() {
            headers
                .entry("x-forwarded-port")
                .or_insert_with(|| Value::String(port.to_string()));
        }
    }
    let cookies: Vec<Value> = call
        .headers
        .get_all(http::header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .map(|c| Value::String(c.to_owned()))
        .collect();
    let user_agent = headers
        .get("user-agent")
        .cloned()
        .unwrap_or_else(|| Value::String(String::new()));
    let content_type = headers
        .get("content-type")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    let prefix = host
        .split(['.', ':'])
        .next()
        .unwrap_or("localhost")
        .to_owned();
    let millis = now
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0);
    let mut event = Map::new();
    event.insert("version".into(), json!("2.0"));
    event.insert("routeKey".into(), json!("$default"));
    event.insert("rawPath".into(), json!(http.path));
    event.insert("rawQueryString".into(), json!(http.query));
    if !cookies.is_empty() {
        event.insert("cookies".into(), Value::Array(cookies));
    }
    event.insert("headers".into(), Value::Object(headers));
    if !http.query.is_empty() {
        let mut params: Map<String, Value> = Map::new();
        for (key, value) in url::form_urlencoded::parse(http.query.as_bytes()) {
            match params.get_mut(key.as_ref()) {
                Some(Value::String(joined)) => {
                    joined.push(',');
                    joined.push_str(&value);
                }
                _ => {
                    params.insert(key.into_owned(), Value::String(value.into_owned()));
                }
            }
        }
        event.insert("queryStringParameters".into(), Value::Object(params));
    }
    event.insert(
        "requestContext".into(),
        json!({
            "accountId": "anonymous",
            "apiId": prefix,
            "domainName": host,
            "domainPrefix": prefix,
            "http": {
                "method": http.method.as_str(),
                "path": http.path,
                "protocol": "HTTP/1.1",
                "sourceIp": http.source_ip.map(|ip| ip.to_string()).unwrap_or_default(),
                "userAgent": user_agent,
            },
            "requestId": call.request_id().unwrap_or(""),
            "routeKey": "$default",
            "stage": "$default",
            "time": lambda_time(now),
            "timeEpoch": millis,
        }),
    );
    if call.body.is_empty() {
        event.insert("isBase64Encoded".into(), json!(false));
    } else {
        let (text, base64) = body_text(&call.body, &content_type);
        event.insert("body".into(), json!(text));
        event.insert("isBase64Encoded".into(), json!(base64));
    }
    Bytes::from(Value::Object(event).to_string())
}

/// A header value of an answer as text (`true`, `7`, a string).
fn scalar(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => Some(s.clone()),
        Value::Null => None,
        other => Some(other.to_string()),
    }
}

/// `(name, value)` pairs of a `headers` object; arrays give one header per element.
fn header_pairs(headers: Option<&Value>, out: &mut Vec<(String, String)>) {
    let Some(Value::Object(map)) = headers else {
        return;
    };
    for (name, value) in map {
        match value {
            Value::Array(values) => {
                out.extend(values.iter().filter_map(scalar).map(|v| (name.clone(), v)))
            }
            v => out.extend(scalar(v).map(|v| (name.clone(), v))),
        }
    }
}

/// A `statusCode` as a number: a JSON number or a string of digits, else the function's
/// failure naming what it answered.
fn status_code(function: &str, value: &Value) -> Result<http::StatusCode, InvokeError> {
    let code = match value {
        Value::Number(n) => n.as_u64(),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    };
    match code {
        Some(code) => answer_status(function, code),
        None => Err(InvokeError::BadAnswer(format!(
            "function {function} answered statusCode {value}, which is not an HTTP status of 200-599"
        ))),
    }
}

/// The checked output of an answer's parts.
fn output(
    function: &str,
    status: http::StatusCode,
    pairs: Vec<(String, String)>,
    body: Bytes,
) -> Result<InvokeOutput, InvokeError> {
    let headers = answer_headers(
        function,
        pairs.iter().map(|(n, v)| (n.as_str(), v.as_bytes())),
    )?;
    Ok(InvokeOutput {
        status,
        headers,
        body: body.into(),
        ..InvokeOutput::default()
    })
}

fn decode_base64(function: &str, text: &str) -> Result<Bytes, InvokeError> {
    B64.decode(text.trim()).map(Bytes::from).map_err(|e| {
        InvokeError::BadAnswer(format!(
            "function {function} answered a body marked base64 that is not base64: {e}"
        ))
    })
}

/// A Lambda function's result as a function URL answers it: an object with `statusCode` is
/// the response it describes; any other JSON value is a `200` with that JSON as its body.
pub fn lambda_answer(function: &str, result: &Bytes) -> Result<InvokeOutput, InvokeError> {
    let json_type = || ("content-type".to_owned(), "application/json".to_owned());
    let value: Value = match serde_json::from_slice(result) {
        Ok(v) => v,
        // Not JSON at all (Lambda itself always answers JSON): the bytes as they came.
        Err(_) => {
            let pairs = vec![(
                "content-type".to_owned(),
                "application/octet-stream".to_owned(),
            )];
            return output(function, http::StatusCode::OK, pairs, result.clone());
        }
    };
    let Some(status) = value.get("statusCode") else {
        return output(
            function,
            http::StatusCode::OK,
            vec![json_type()],
            result.clone(),
        );
    };
    let status = status_code(function, status)?;
    let mut pairs = Vec::new();
    header_pairs(value.get("headers"), &mut pairs);
    header_pairs(value.get("multiValueHeaders"), &mut pairs);
    match value.get("cookies") {
        Some(Value::Array(cookies)) => pairs.extend(
            cookies
                .iter()
                .filter_map(scalar)
                .map(|c| ("set-cookie".to_owned(), c)),
        ),
        Some(Value::String(c)) => pairs.push(("set-cookie".to_owned(), c.clone())),
        _ => {}
    }
    let base64 = value.get("isBase64Encoded").and_then(Value::as_bool) == Some(true);
    let body = match value.get("body") {
        None | Some(Value::Null) => Bytes::new(),
        Some(Value::String(text)) if base64 => decode_base64(function, text)?,
        Some(Value::String(text)) => Bytes::from(text.clone()),
        Some(other) => Bytes::from(other.to_string()),
    };
    let typed = pairs
        .iter()
        .any(|(n, _)| n.eq_ignore_ascii_case("content-type"));
    if !body.is_empty() && !typed {
        pairs.push(json_type());
    }
    output(function, status, pairs, body)
}

/// The parameters of a raw-HTTP OpenWhisk web action for a call: the method (lower case, as
/// the controller sends it), the headers (lower-cased, repeated ones joined with `, `), the
/// path after the function, the query string as sent, and the body as text (base64 when it is
/// binary).
pub fn openwhisk_params(call: &Invocation) -> Value {
    let http = &call.http;
    let headers = header_object(call, ", ", false);
    let content_type = headers
        .get("content-type")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    let (body, _) = body_text(&call.body, &content_type);
    json!({
        "__ow_method": http.method.as_str().to_ascii_lowercase(),
        "__ow_headers": headers,
        "__ow_path": if http.path == "/" { "" } else { http.path.as_str() },
        "__ow_query": http.query,
        "__ow_body": body,
    })
}

/// A web action's result as the controller would answer it: `statusCode` (default `200`,
/// `204` without a body), `headers` (an array value is one header per element) and `body` (a
/// string, base64-decoded when the content type is binary, or JSON); a result with none of
/// them is a `200` JSON body.
pub fn openwhisk_answer(function: &str, result: &Value) -> Result<InvokeOutput, InvokeError> {
    let is_response = ["statusCode", "headers", "body"]
        .iter()
        .any(|k| result.get(k).is_some());
    if !is_response {
        let pairs = vec![("content-type".to_owned(), "application/json".to_owned())];
        let body = Bytes::from(result.to_string());
        return output(function, http::StatusCode::OK, pairs, body);
    }
    let mut pairs = Vec::new();
    header_pairs(result.get("headers"), &mut pairs);
    let content_type = pairs
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(CONTENT_TYPE.as_str()))
        .map(|(_, v)| v.clone());
    let (body, default_type) = match result.get("body") {
        None | Some(Value::Null) => (Bytes::new(), None),
        Some(Value::String(text)) if content_type.as_deref().is_some_and(is_binary_type) => {
            (decode_base64(function, text)?, None)
        }
        Some(Value::String(text)) => (Bytes::from(text.clone()), Some("text/html")),
        Some(other) => (Bytes::from(other.to_string()), Some("application/json")),
    };
    if let (None, Some(default)) = (&content_type, default_type) {
        pairs.push(("content-type".to_owned(), default.to_owned()));
    }
    let status = match result.get("statusCode") {
        Some(code) => status_code(function, code)?,
        None if body.is_empty() => http::StatusCode::NO_CONTENT,
        None => http::StatusCode::OK,
    };
    output(function, status, pairs, body)
}

#[cfg(test)]
#[path = "http_event_tests.rs"]
mod tests;
