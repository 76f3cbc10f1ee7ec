//! `X-Callback-Url`: when an asynchronous call ends, its answer is posted there, signed, and
//! retried with backoff until the receiver takes it (a `2xx`).
//!
//! The POST carries the answer's body and `Content-Type`, `X-Activation-Id`, `X-Activation-Status`
//! (the answer's status), `X-Function`, and `X-Geofaas-Signature: t=UNIX_SECONDS,v1=HEX`: the
//! HMAC-SHA256, keyed with the node's `GEOFAAS_CALLBACK_SECRET`, of `UNIX_SECONDS.ID.BODY`. The
//! receiver recomputes it and checks that the time is recent. A URL the topology does not allow
//! (`[activations] callback_allow`) or a node without a secret refuses the call before it is
//! accepted; redirects are not followed.

use std::time::{Duration, SystemTime};

use axum::http::{header, HeaderMap, StatusCode};
use ring::hmac;

use crate::error::ApiError;
use crate::idempotency::Stored;
use geofaas_config::ActivationSettings;

/// Request header naming where to post the answer.
pub const CALLBACK_URL: &str = "x-callback-url";
/// The callback's signature header.
pub const SIGNATURE: &str = "x-geofaas-signature";
/// The environment variable holding the key callbacks are signed with.
pub const SECRET_ENV: &str = "GEOFAAS_CALLBACK_SECRET";
/// Tries of one callback.
const TRIES: u32 = 6;
/// Wait before the second try, doubled before each later one.
const BACKOFF: Duration = Duration::from_secs(1);
/// Deadline of one try.
const TRY_TIMEOUT: Duration = Duration::from_secs(10);

/// The callback URL of a call, checked: `None` without the header, `400` naming the URL when
/// it is malformed, not allowed, or the node has no key to sign with.
pub(crate) fn requested(
    headers: &HeaderMap,
    settings: &ActivationSettings,
) -> Result<Option<String>, ApiError> {
    let Some(value) = headers.get(CALLBACK_URL) else {
        return Ok(None);
    };
    let text = String::from_utf8_lossy(value.as_bytes());
    let url = url::Url::parse(text.trim())
        .map_err(|e| ApiError::bad_header("X-Callback-Url", &text, format!("not a URL: {e}")))?;
    if !matches!(url.scheme(), "http" | "https") || !url.username().is_empty() {
        return Err(ApiError::bad_header(
            "X-Callback-Url",
            &text,
            "an http:// or https:// URL without credentials",
        ));
    }
    if !settings.allows_callback(url.as_str()) {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "callback_not_allowed",
            format!(
                "X-Callback-Url {:?} is not under any of this node's [activations] callback_allow prefixes",
                url.as_str()
            ),
        ));
    }
    if secret().is_none() {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "callback_not_allowed",
            format!("this node has no {SECRET_ENV} to sign callbacks with"),
        ));
    }
    Ok(Some(url.into()))
}

fn secret() -> Option<hmac::Key> {
    let s = std::env::var(SECRET_ENV).ok().filter(|s| !s.is_empty())?;
    Some(hmac::Key::new(hmac::HMAC_SHA256, s.as_bytes()))
}

/// `t=TS,v1=HEX` over `TS.ID.BODY`.
pub(crate) fn signature(key: &hmac::Key, ts: u64, id: &str, body: &[u8]) -> String {
    let mut ctx = hmac::Context::with_key(key);
    ctx.update(format!("{ts}.{id}.").as_bytes());
    ctx.update(body);
    let tag = ctx.sign();
    let hex: String = tag.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    format!("t={ts},v1={hex}")
}

/// Posts `answer` of activation `id` to `url` until a `2xx`, at most [`TRIES`] times; whether
/// it was delivered.
pub(crate) async fn deliver(
    client: &reqwest::Client,
    url: &str,
    id: &str,
    function: &str,
    answer: &Stored,
) -> bool {
    let Some(key) = secret() else {
        tracing::error!(activation = id, "callback not sent: {SECRET_ENV} is gone");
        return false;
    };
    let content_type = answer
        .headers
        .iter()
        .find(|(n, _)| *n == header::CONTENT_TYPE)
        .map(|(_, v)| v.clone());
    for attempt in 1..=TRIES {
        if attempt > 1 {
            tokio::time::sleep(BACKOFF * (1 << (attempt - 2))).await;
        }
        let ts = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let mut req = client
            .post(url)
            .timeout(TRY_TIMEOUT)
            .header("x-activation-id", id)
            .header("x-activation-status", answer.status.as_u16())
            .header("x-function", function)
            .header(SIGNATURE, signature(&key, ts, id, &answer.body))
            .body(answer.body.clone());
        if let Some(ct) = &content_type {
            req = req.header(header::CONTENT_TYPE, ct.clone());
        }
        match req.send().await {
            Ok(r) if r.status().is_success() => return true,
            Ok(r) => tracing::warn!(
                activation = id,
                url,
                attempt,
                status = r.status().as_u16(),
                "callback refused; trying again"
            ),
            Err(e) => {
                tracing::warn!(activation = id, url, attempt, error = %e, "callback failed; trying again")
            }
        }
    }
    tracing::error!(activation = id, url, tries = TRIES, "callback given up");
    false
}

/// The client callbacks are sent with: no redirects (a redirect could leave the allowed prefix).
pub(crate) fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .connect_timeout(Duration::from_secs(5))
        .build()
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_signature_covers_time_id_and_body() {
        let key = hmac::Key::new(hmac::HMAC_SHA256, b"s3cret");
        let a = signature(&key, 1_700_000_000, "abc", b"body");
        assert!(a.starts_with("t=1700000000,v1="), "{a}");
        assert_eq!(a.len(), "t=1700000000,v1=".len() + 64);
        assert_ne!(a, signature(&key, 1_700_000_001, "abc", b"body"));
        assert_ne!(a, signature(&key, 1_700_000_000, "abd", b"body"));
        assert_ne!(a, signature(&key, 1_700_000_000, "abc", b"bodY"));
    }
}
