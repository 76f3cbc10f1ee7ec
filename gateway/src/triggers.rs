//! Queue triggers: `geofaas deploy DIR --on nats:SUBJECT` makes each message published on that
//! NATS subject a call of the function, at least once (docs/events.md, "Queue triggers").
//!
//! The subjects are kept with the version (`deploy::store::VersionEnv::on`), like cron
//! schedules. A node with the fleet's queue (`[queue]`) watches its deployed functions'
//! subjects (`tasks::triggers`): each subject gets a JetStream stream that keeps its messages until every
//! function subscribed to it took them (interest retention), and each function a durable
//! consumer on it, shared by every node, so a message goes to one node. That node accepts the
//! message as an asynchronous call (queued, retried and dead-lettered like any `202`) and only
//! then acknowledges it; a node that dies before leaves it to be delivered again. The
//! activation's idempotency key is the message's stream and sequence, so a message delivered
//! again to the same node is not accepted twice.
//!
//! The call is a `POST /fn/{name}` with the message's payload as the body, its headers as
//! request headers, and `X-Geofaas-Trigger: nats` and `X-Geofaas-Subject` (which no client can
//! send). A structured-mode CloudEvent (`content-type: application/cloudevents+json`) becomes
//! binary mode (CloudEvents' HTTP binding): its attributes as `ce-*` headers and its `data` as
//! the body.

use axum::http::{header, HeaderMap, HeaderName, HeaderValue};
use bytes::Bytes;

/// Most bytes of a subject.
const MAX_SUBJECT: usize = 255;

/// The subject of a trigger `nats:SUBJECT`, or why it is not one.
pub fn parse(spec: &str) -> Result<String, String> {
    let Some(subject) = spec.trim().strip_prefix("nats:") else {
        return Err(format!(
            "trigger {spec:?}: give nats:SUBJECT (the only queue triggers are NATS subjects)"
        ));
    };
    let bad = |why: &str| Err(format!("trigger {spec:?}: {why}"));
    if subject.is_empty() || subject.len() > MAX_SUBJECT {
        return bad("the subject must be 1 to 255 characters");
    }
    if subject.starts_with('$') || subject.starts_with('_') {
        return bad("subjects starting with '$' or '_' are NATS's own");
    }
    let tokens: Vec<&str> = subject.split('.').collect();
    for (i, t) in tokens.iter().enumerate() {
        if t.is_empty() || t.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return bad("each '.'-separated token must be non-empty, without spaces");
        }
        if (t.contains('*') && *t != "*")
            || (t.contains('>') && (*t != ">" || i + 1 != tokens.len()))
        {
            return bad("'*' must be a whole token, and '>' the whole last token");
        }
    }
    Ok(subject.to_owned())
}

/// The stream that keeps `subject`'s messages: `{calls stream}_ON_{first 8 bytes of its
/// SHA-256 in hex}`.
pub fn stream_name(queue_stream: &str, subject: &str) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, subject.as_bytes());
    let hex: String = digest.as_ref()[..8]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("{queue_stream}_ON_{hex}")
}

/// The request headers and body a message becomes.
pub fn message_call(msg: &async_nats::Message) -> (HeaderMap, Bytes) {
    let mut headers = HeaderMap::new();
    if let Some(h) = &msg.headers {
        for (name, values) in h.iter() {
            let Ok(name) = HeaderName::from_bytes(AsRef::<str>::as_ref(name).as_bytes()) else {
                continue;
            };
            if name.as_str().starts_with("nats-") {
                continue;
            }
            for v in values {
                if let Ok(v) = HeaderValue::from_str(v.as_str()) {
                    headers.append(name.clone(), v);
                }
            }
        }
    }
    let structured = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|t| t.starts_with("application/cloudevents+json"));
    if structured {
        if let Some((ce, body)) = binary_mode(&msg.payload) {
            headers.remove(header::CONTENT_TYPE);
            headers.extend(ce);
            return (headers, body);
        }
    }
    if !headers.contains_key(header::CONTENT_TYPE) {
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/octet-stream"),
        );
    }
    (headers, msg.payload.clone())
}

/// A structured-mode CloudEvent as binary mode: `ce-*` headers (`datacontenttype` as
/// `content-type`) and its `data` (or `data_base64`) as the body.
fn binary_mode(payload: &[u8]) -> Option<(HeaderMap, Bytes)> {
    use base64::Engine as _;
    let event: serde_json::Map<String, serde_json::Value> = serde_json::from_slice(payload).ok()?;
    let mut headers = HeaderMap::new();
    let mut body = Bytes::new();
    for (k, v) in &event {
        match k.as_str() {
            "data" => {
                body = match v {
                    serde_json::Value::String(s) => Bytes::from(s.clone()),
                    other => Bytes::from(other.to_string()),
                }
            }
            "data_base64" => {
                body = Bytes::from(
                    base64::engine::general_purpose::STANDARD
                        .decode(v.as_str()?)
                        .ok()?,
                );
            }
            "datacontenttype" => {
                headers.insert(
                    header::CONTENT_TYPE,
                    HeaderValue::from_str(v.as_str()?).ok()?,
                );
            }
            attr => {
                let text = match v {
                    serde_json::Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                let name = HeaderName::from_bytes(format!("ce-{attr}").as_bytes()).ok()?;
                headers.insert(name, HeaderValue::from_str(&text).ok()?);
            }
        }
    }
    if !headers.contains_key(header::CONTENT_TYPE)
        && event.get("data").is_some_and(|d| !d.is_string())
    {
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
    }
    Some((headers, body))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn triggers_name_a_nats_subject() {
        assert_eq!(parse("nats:orders.created").unwrap(), "orders.created");
        assert_eq!(parse(" nats:sensors.*.temp ").unwrap(), "sensors.*.temp");
        assert_eq!(parse("nats:iot.>").unwrap(), "iot.>");
        for bad in [
            "orders",
            "mqtt:x",
            "nats:",
            "nats:a..b",
            "nats:a.b*",
            "nats:>.a",
            "nats:a b",
            "nats:$JS.API",
            "nats:_INBOX.x",
        ] {
            let e = parse(bad).unwrap_err();
            assert!(e.contains(&format!("{bad:?}")), "{e}");
        }
    }

    #[test]
    fn each_subject_has_its_own_stream() {
        let a = stream_name("GEOFAAS_CALLS", "orders.created");
        assert!(a.starts_with("GEOFAAS_CALLS_ON_") && a.len() == "GEOFAAS_CALLS_ON_".len() + 16);
        assert_ne!(a, stream_name("GEOFAAS_CALLS", "orders.paid"));
        assert_eq!(a, stream_name("GEOFAAS_CALLS", "orders.created"));
    }

    #[test]
    fn a_structured_cloudevent_becomes_binary_mode() {
        let event = br#"{"specversion":"1.0","type":"com.example.order","source":"/shop","id":"A-1","datacontenttype":"application/json","data":{"sku":"x","n":2}}"#;
        let (h, body) = binary_mode(event).unwrap();
        assert_eq!(h["ce-specversion"], "1.0");
        assert_eq!(h["ce-type"], "com.example.order");
        assert_eq!(h["ce-id"], "A-1");
        assert_eq!(h[header::CONTENT_TYPE], "application/json");
        let data: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(data["n"], 2);
        let b64 = br#"{"specversion":"1.0","type":"t","source":"s","id":"1","data_base64":"AAEC"}"#;
        assert_eq!(binary_mode(b64).unwrap().1.as_ref(), &[0, 1, 2]);
        assert!(binary_mode(b"not json").is_none());
    }
}
