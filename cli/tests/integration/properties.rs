//! Property tests of the function-name router and the header parsers it runs, over raw and
//! structured inputs: whatever the path, method, headers or body, the gateway answers (no
//! panic, no 5xx from input alone), refuses names that cannot be functions with `400`, and
//! never echoes a control character back.

use std::sync::{Arc, OnceLock};

use axum::body::Body;
use axum::http::Request;
use geofaas_functions::FunctionBackend;
use geofaas_test_support::memory::MemoryBackend;
use http_body_util::BodyExt;
use proptest::prelude::*;
use tower::ServiceExt;

use crate::router::MELBOURNE;

fn router() -> axum::Router {
    static ROUTER: OnceLock<axum::Router> = OnceLock::new();
    ROUTER
        .get_or_init(|| {
            let topology = Arc::new(
                geofaas_config::Topology::parse(
                    MELBOURNE,
                    "melbourne.toml",
                    std::path::Path::new("."),
                )
                .unwrap(),
            );
            let backend: Arc<dyn FunctionBackend> =
                Arc::new(MemoryBackend::new().with_echo("echo"));
            let state = geofaas_gateway::NodeState::new(
                topology,
                "cloud",
                vec![backend],
                Default::default(),
            )
            .unwrap();
            geofaas_gateway::routes::router(Arc::new(state))
        })
        .clone()
}

fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    })
}

/// Status and body of one request, or `None` when `http` itself refuses to build it.
fn answer(
    method: &str,
    path: &str,
    headers: &[(String, Vec<u8>)],
    body: Vec<u8>,
) -> Option<(u16, Vec<u8>)> {
    let mut req = Request::builder().method(method).uri(path);
    for (name, value) in headers {
        req = req.header(name.as_str(), value.as_slice());
    }
    let req = req.body(Body::from(body)).ok()?;
    runtime().block_on(async {
        let resp = router().oneshot(req).await.unwrap();
        let status = resp.status().as_u16();
        let body = resp
            .into_body()
            .collect()
            .await
            .unwrap()
            .to_bytes()
            .to_vec();
        Some((status, body))
    })
}

/// A path segment: percent-escapes, dots, slashes, controls, letters.
fn segment() -> impl Strategy<Value = String> {
    prop_oneof![
        "[A-Za-z0-9_-]{1,70}",
        "(%[0-9A-Fa-f]{2}|[A-Za-z0-9._~/-]){0,20}",
        Just("..".to_owned()),
        Just("%2e%2e".to_owned()),
        Just("a%00b".to_owned()),
        Just("%2F".to_owned()),
        "\\PC{0,10}",
    ]
}

fn header() -> impl Strategy<Value = (String, Vec<u8>)> {
    let name = prop_oneof![
        Just("x-client-location".to_owned()),
        Just("idempotency-key".to_owned()),
        Just("prefer".to_owned()),
        Just("x-geofaas-offload".to_owned()),
        Just("x-geofaas-retry".to_owned()),
        Just("content-length".to_owned()),
        Just("authorization".to_owned()),
        "[a-z-]{1,16}",
    ];
    // Bytes `http` accepts in a header value (visible ASCII, tab, obs-text).
    let byte = prop_oneof![0x20u8..0x7f, 0x80u8..=0xff, Just(b'\t')];
    (name, proptest::collection::vec(byte, 0..40))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2048, ..ProptestConfig::default() })]

    #[test]
    fn any_request_gets_an_answer_and_bad_names_are_400(
        method in prop_oneof![
            Just("GET".to_owned()),
            Just("POST".to_owned()),
            Just("PUT".to_owned()),
            "[A-Z]{1,8}",
        ],
        seg in segment(),
        query in "(\\?[a-z=&%0-9]{0,12})?",
        headers in proptest::collection::vec(header(), 0..4),
        body in proptest::collection::vec(any::<u8>(), 0..64),
    ) {
        let path = format!("/fn/{seg}{query}");
        let Some((status, body)) = answer(&method, &path, &headers, body) else {
            // Not a request a client can send (`http` refuses to build it).
            prop_assume!(false);
            return Ok(());
        };
        prop_assert!(status < 500, "{method} {path} {headers:?}: {status}");
        let text = String::from_utf8_lossy(&body);
        prop_assert!(!text.chars().any(|c| c.is_control() && c != '\n'), "{text:?}");
        let decoded = percent_decoded(&seg);
        let valid = decoded.as_deref().is_some_and(|n| {
            !n.is_empty() && n.len() <= 64 && n.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        });
        if !valid && (method == "GET" || method == "POST") && status != 431 && status != 400 {
            prop_assert!(false, "{method} {path}: a bad name got {status}: {text}");
        }
    }
}

/// The function name `seg` gives (its first path segment, up to a `?` that starts the query;
/// the rest is the function's sub-path), percent-decoded, when it is valid UTF-8.
fn percent_decoded(seg: &str) -> Option<String> {
    let seg = seg.split(['?', '#']).next().unwrap_or_default();
    let seg = seg.split('/').next().unwrap_or_default();
    let bytes = seg.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}
