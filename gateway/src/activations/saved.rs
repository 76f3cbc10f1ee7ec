//! The journal's records ([`super::journal`]): a call, an answer and an error as JSON that
//! keeps every byte (header values that are not text and bodies in base64).

use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode};
use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use bytes::Bytes;
use geofaas_config::LatLon;
use geofaas_functions::HttpRequest;
use serde::{Deserialize, Serialize};

use crate::call::Call;
use crate::error::ApiError;
use crate::idempotency::Stored;

/// One line of the journal.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "record", rename_all = "snake_case")]
pub(crate) enum Record {
    /// A call was accepted (or put back by `retry`): it is to run.
    Accepted {
        id: String,
        /// When it was first accepted, Unix milliseconds (its age counts from here).
        accepted_ms: u64,
        /// The API key id that started it.
        owner: Option<String>,
        /// Its `Idempotency-Key` (as the cache keys it) and the request's fingerprint, so a
        /// resubmission finds it.
        key: Option<(String, u64)>,
        call: SavedCall,
        /// Where to post the answer (`X-Callback-Url`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        callback: Option<String>,
    },
    /// A try failed in a way that may be retried; the next comes after the backoff.
    Attempt { id: String, error: SavedError },
    /// The call ended: answered, or dead-lettered (`failed`, with the call to retry it).
    Finished {
        id: String,
        function: String,
        owner: Option<String>,
        accepted_ms: u64,
        finished_ms: u64,
        /// Until when the journal must keep this line, Unix milliseconds.
        keep_until_ms: u64,
        answer: SavedAnswer,
        /// Every failed try, in order.
        attempts: Vec<SavedError>,
        /// The call, kept with a dead letter so it can be retried.
        call: Option<SavedCall>,
        /// Where the answer is to be posted, until a `delivered` line says it was.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        callback: Option<String>,
    },
    /// The answer reached the callback URL.
    Delivered { id: String },
}

/// A header value or body byte string: text as it is, anything else in base64.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub(crate) enum Blob {
    Text(String),
    Base64 { b64: String },
}

impl Blob {
    fn of(bytes: &[u8]) -> Self {
        match std::str::from_utf8(bytes) {
            Ok(t) => Self::Text(t.to_owned()),
            Err(_) => Self::Base64 {
                b64: B64.encode(bytes),
            },
        }
    }

    fn bytes(&self) -> Option<Vec<u8>> {
        match self {
            Self::Text(t) => Some(t.as_bytes().to_vec()),
            Self::Base64 { b64 } => B64.decode(b64).ok(),
        }
    }
}

fn save_headers<'a>(
    headers: impl Iterator<Item = (&'a HeaderName, &'a HeaderValue)>,
) -> Vec<(String, Blob)> {
    headers
        .map(|(n, v)| (n.as_str().to_owned(), Blob::of(v.as_bytes())))
        .collect()
}

fn load_headers(saved: &[(String, Blob)]) -> Vec<(HeaderName, HeaderValue)> {
    saved
        .iter()
        .filter_map(|(n, v)| {
            let name = HeaderName::from_bytes(n.as_bytes()).ok()?;
            Some((name, HeaderValue::from_bytes(&v.bytes()?).ok()?))
        })
        .collect()
}

/// A call as the journal keeps it: everything [`Call`] holds but the timings.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct SavedCall {
    pub(crate) function: String,
    method: String,
    /// The sub-path after `/fn/{name}`.
    path: String,
    query: String,
    url: String,
    source_ip: Option<IpAddr>,
    path_and_query: String,
    headers: Vec<(String, Blob)>,
    context: Vec<(String, Blob)>,
    body: Blob,
    location: Option<LatLon>,
    request_id: Blob,
    pinned: bool,
    caller: u64,
}

impl SavedCall {
    /// The journal's copy of `call`.
    pub(crate) fn of(call: &Call) -> Self {
        Self {
            function: call.function.clone(),
            method: call.http.method.as_str().to_owned(),
            path: call.http.path.clone(),
            query: call.http.query.clone(),
            url: call.http.url.clone(),
            source_ip: call.http.source_ip,
            path_and_query: call.path_and_query.clone(),
            headers: save_headers(call.headers.iter()),
            context: save_headers(call.context.iter().map(|(n, v)| (n, v))),
            body: Blob::of(&call.body),
            location: call.location,
            request_id: Blob::of(call.request_id.as_bytes()),
            pinned: call.pinned,
            caller: call.caller,
        }
    }

    /// The call to run now (its deadline counts from now); `None` if the record is damaged.
    pub(crate) fn to_call(&self) -> Option<Call> {
        let method = Method::from_bytes(self.method.as_bytes()).ok()?;
        let headers: HeaderMap = load_headers(&self.headers).into_iter().collect();
        let context: Vec<(HeaderName, HeaderValue)> = load_headers(&self.context);
        Some(Call {
            function: self.function.clone(),
            http: Arc::new(HttpRequest {
                method: method.clone(),
                path: self.path.clone(),
                query: self.query.clone(),
                url: self.url.clone(),
                source_ip: self.source_ip,
            }),
            method,
            path_and_query: self.path_and_query.clone(),
            headers,
            context: context.into(),
            body: Bytes::from(self.body.bytes()?),
            location: self.location,
            received: Instant::now(),
            route_time: Duration::ZERO,
            request_id: HeaderValue::from_bytes(&self.request_id.bytes()?).ok()?,
            pinned: self.pinned,
            caller: self.caller,
        })
    }
}

/// An answer as the journal keeps it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct SavedAnswer {
    status: u16,
    headers: Vec<(String, Blob)>,
    body: Blob,
}

impl SavedAnswer {
    pub(crate) fn of(stored: &Stored) -> Self {
        Self {
            status: stored.status.as_u16(),
            headers: save_headers(stored.headers.iter().map(|(n, v)| (n, v))),
            body: Blob::of(&stored.body),
        }
    }

    /// The `502` kept in the fleet's queue for an answer over its largest message.
    pub(crate) fn too_large(max: usize) -> Self {
        let body = serde_json::json!({"error": {
            "code": "answer_too_large_for_queue",
            "message": format!("the answer was over the fleet queue's largest message ({max} bytes); only the node that ran the call keeps it"),
        }});
        Self {
            status: 502,
            headers: vec![(
                "content-type".to_owned(),
                Blob::Text("application/json".to_owned()),
            )],
            body: Blob::Text(body.to_string()),
        }
    }

    pub(crate) fn to_stored(&self) -> Option<Stored> {
        Some(Stored {
            status: StatusCode::from_u16(self.status).ok()?,
            headers: load_headers(&self.headers),
            body: Bytes::from(self.body.bytes()?),
            request: 0,
        })
    }
}

/// A failed try: when, and the error the client would have got.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct SavedError {
    pub(crate) at_ms: u64,
    pub(crate) status: u16,
    pub(crate) code: String,
    pub(crate) message: String,
}

impl SavedError {
    pub(crate) fn of(e: &ApiError, at_ms: u64) -> Self {
        Self {
            at_ms,
            status: e.status.as_u16(),
            code: e.code.to_owned(),
            message: e.message.clone(),
        }
    }
}
