use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use http::{HeaderValue, Method, StatusCode};
use serde_json::json;

use super::*;
use crate::HttpRequest;

fn put_users_7() -> Invocation {
    let mut call = Invocation::new("users", r#"{"name":"ada"}"#, Duration::from_secs(5));
    call.http = Arc::new(HttpRequest {
        method: Method::PUT,
        path: "/users/7".into(),
        query: "verbose=1&tag=a&tag=b".into(),
        url: "https://cbd.mel.test:8443/fn/users/users/7?verbose=1&tag=a&tag=b".into(),
        source_ip: Some("203.0.113.9".parse().unwrap()),
    });
    let h = &mut call.headers;
    h.insert("content-type", HeaderValue::from_static("application/json"));
    h.insert("user-agent", HeaderValue::from_static("curl/8.5.0"));
    h.append("x-tag", HeaderValue::from_static("one"));
    h.append("x-tag", HeaderValue::from_static("two"));
    h.insert(
        "cookie",
        HeaderValue::from_static("session=abc; theme=dark"),
    );
    call.context = Arc::from(vec![
        (
            http::HeaderName::from_static("x-geo-node"),
            HeaderValue::from_static("cloud"),
        ),
        (
            http::HeaderName::from_static("x-request-id"),
            HeaderValue::from_static("req-1"),
        ),
    ]);
    call
}

fn event_of(call: &Invocation) -> Value {
    let at = UNIX_EPOCH + Duration::from_millis(1_796_485_585_123);
    serde_json::from_slice(&lambda_event_at(call, at)).unwrap()
}

#[test]
fn a_call_is_the_function_url_event_of_payload_format_2() {
    let e = event_of(&put_users_7());
    assert_eq!(e["version"], "2.0");
    assert_eq!(e["routeKey"], "$default");
    assert_eq!(e["rawPath"], "/users/7");
    assert_eq!(e["rawQueryString"], "verbose=1&tag=a&tag=b");
    assert_eq!(
        e["queryStringParameters"],
        json!({"verbose": "1", "tag": "a,b"})
    );
    assert_eq!(e["cookies"], json!(["session=abc", "theme=dark"]));
    let h = &e["headers"];
    assert_eq!(h["content-type"], "application/json");
    assert_eq!(h["x-tag"], "one,two");
    assert_eq!(h["x-geo-node"], "cloud");
    assert_eq!(h["host"], "cbd.mel.test:8443");
    assert_eq!(h["x-forwarded-for"], "203.0.113.9");
    assert_eq!(h["x-forwarded-proto"], "https");
    assert!(
        h.get("cookie").is_none(),
        "cookies travel on their own: {h}"
    );
    let rc = &e["requestContext"];
    assert_eq!(rc["http"]["method"], "PUT");
    assert_eq!(rc["http"]["path"], "/users/7");
    assert_eq!(rc["http"]["sourceIp"], "203.0.113.9");
    assert_eq!(rc["http"]["userAgent"], "curl/8.5.0");
    assert_eq!(rc["requestId"], "req-1");
    assert_eq!(rc["domainName"], "cbd.mel.test:8443");
    assert_eq!(rc["domainPrefix"], "cbd");
    assert_eq!(rc["timeEpoch"], 1_796_485_585_123u64);
    assert_eq!(rc["time"], "05/Dec/2026:15:46:25 +0000");
    assert_eq!(e["body"], r#"{"name":"ada"}"#);
    assert_eq!(e["isBase64Encoded"], false);
}

#[test]
fn binary_bodies_are_base64_and_an_empty_one_is_absent() {
    let mut call = put_users_7();
    call.body = Bytes::from_static(&[0xff, 0x00, 0x01]);
    let e = event_of(&call);
    assert_eq!(e["body"], "/wAB");
    assert_eq!(e["isBase64Encoded"], true);
    // Valid UTF-8 but an image: base64 too, as function URLs do.
    call.body = Bytes::from_static(b"GIF89a");
    call.headers
        .insert("content-type", HeaderValue::from_static("image/gif"));
    assert_eq!(event_of(&call)["isBase64Encoded"], true);
    call.body = Bytes::new();
    let e = event_of(&call);
    assert!(e.get("body").is_none(), "{e}");
    assert_eq!(e["isBase64Encoded"], false);
    // No query: no parameters object, as Lambda sends.
    Arc::make_mut(&mut call.http).query.clear();
    let e = event_of(&call);
    assert!(e.get("queryStringParameters").is_none());
    assert_eq!(e["rawQueryString"], "");
}

#[test]
fn a_function_url_answer_maps_status_headers_cookies_and_body() {
    let answer = json!({
        "statusCode": 201,
        "headers": {"Content-Type": "application/json", "X-Handler": "users", "X-Count": 3},
        "multiValueHeaders": {"Vary": ["Accept", "Origin"]},
        "cookies": ["session=abc; Path=/; HttpOnly", "theme=dark"],
        "body": "{\"created\":\"7\"}",
    });
    let out = lambda_answer("users", &Bytes::from(answer.to_string())).unwrap();
    assert_eq!(out.status, StatusCode::CREATED);
    assert_eq!(out.headers["content-type"], "application/json");
    assert_eq!(out.headers["x-handler"], "users");
    assert_eq!(out.headers["x-count"], "3");
    let vary: Vec<_> = out.headers.get_all("vary").iter().collect();
    assert_eq!(vary, ["Accept", "Origin"]);
    let cookies: Vec<_> = out.headers.get_all("set-cookie").iter().collect();
    assert_eq!(cookies, ["session=abc; Path=/; HttpOnly", "theme=dark"]);
    assert_eq!(out.body.full().unwrap(), r#"{"created":"7"}"#);
}

#[test]
fn lambda_bodies_decode_base64_and_default_to_json() {
    let out = lambda_answer(
        "f",
        &Bytes::from(
            json!({"statusCode": "200", "isBase64Encoded": true, "body": "aGk=",
                   "headers": {"content-type": "text/plain"}})
            .to_string(),
        ),
    )
    .unwrap();
    assert_eq!(out.body.full().unwrap(), "hi");
    assert_eq!(out.headers["content-type"], "text/plain");
    // No statusCode: the whole result is a 200 JSON body (a string included).
    for result in [r#"{"ok":true}"#, r#""hello""#, "[1,2]"] {
        let out = lambda_answer("f", &Bytes::from(result)).unwrap();
        assert_eq!(out.status, StatusCode::OK);
        assert_eq!(out.headers["content-type"], "application/json");
        assert_eq!(out.body.full().unwrap(), result);
    }
    // A 204 without a body has no content type.
    let out = lambda_answer("f", &Bytes::from(r#"{"statusCode":204}"#)).unwrap();
    assert_eq!(out.status, StatusCode::NO_CONTENT);
    assert!(out.headers.is_empty(), "{:?}", out.headers);
    // A JSON (not string) body is serialised.
    let out = lambda_answer("f", &Bytes::from(r#"{"statusCode":200,"body":{"a":1}}"#)).unwrap();
    assert_eq!(out.body.full().unwrap(), r#"{"a":1}"#);
}

#[test]
fn answers_that_are_not_http_are_the_functions_failure() {
    for bad in [
        json!({"statusCode": 999}),
        json!({"statusCode": "abc"}),
        json!({"statusCode": 200, "headers": {"X-Evil": "a\r\nSet-Cookie: x=1"}}),
        json!({"statusCode": 200, "isBase64Encoded": true, "body": "%%%"}),
    ] {
        let e = lambda_answer("users", &Bytes::from(bad.to_string())).unwrap_err();
        assert!(matches!(e, InvokeError::BadAnswer(_)), "{bad}: {e}");
        assert!(e.to_string().contains("function users"), "{e}");
        // OpenWhisk has no `isBase64Encoded`: that body is text there.
        if bad.get("isBase64Encoded").is_none() {
            let e = openwhisk_answer("users", &bad).unwrap_err();
            assert!(matches!(e, InvokeError::BadAnswer(_)), "{bad}: {e}");
        }
    }
}

#[test]
fn a_call_is_a_raw_http_web_actions_parameters() {
    let p = openwhisk_params(&put_users_7());
    assert_eq!(p["__ow_method"], "put");
    assert_eq!(p["__ow_path"], "/users/7");
    assert_eq!(p["__ow_query"], "verbose=1&tag=a&tag=b");
    assert_eq!(p["__ow_body"], r#"{"name":"ada"}"#);
    assert_eq!(p["__ow_headers"]["x-tag"], "one, two");
    assert_eq!(p["__ow_headers"]["cookie"], "session=abc; theme=dark");
    assert_eq!(p["__ow_headers"]["x-geo-node"], "cloud");
    let mut call = put_users_7();
    call.body = Bytes::from_static(&[0xff]);
    Arc::make_mut(&mut call.http).path = "/".into();
    let p = openwhisk_params(&call);
    assert_eq!(p["__ow_body"], "/w==");
    assert_eq!(p["__ow_path"], "");
}

#[test]
fn a_web_actions_answer_maps_back() {
    let out = openwhisk_answer(
        "f",
        &json!({"statusCode": 201, "headers": {"Set-Cookie": ["a=1", "b=2"], "X-A": "1"},
                "body": {"created": true}}),
    )
    .unwrap();
    assert_eq!(out.status, StatusCode::CREATED);
    let cookies: Vec<_> = out.headers.get_all("set-cookie").iter().collect();
    assert_eq!(cookies, ["a=1", "b=2"]);
    assert_eq!(out.headers["content-type"], "application/json");
    assert_eq!(out.body.full().unwrap(), r#"{"created":true}"#);
    // A string body is HTML unless typed; a binary type's string is base64.
    let out = openwhisk_answer("f", &json!({"body": "<p>hi</p>"})).unwrap();
    assert_eq!(out.status, StatusCode::OK);
    assert_eq!(out.headers["content-type"], "text/html");
    let out = openwhisk_answer(
        "f",
        &json!({"headers": {"Content-Type": "image/png"}, "body": "aGk="}),
    )
    .unwrap();
    assert_eq!(out.body.full().unwrap(), "hi");
    // Headers only: no content, 204.
    let out = openwhisk_answer("f", &json!({"headers": {"Location": "/x"}})).unwrap();
    assert_eq!(out.status, StatusCode::NO_CONTENT);
    // Not a web response: the result as JSON.
    let out = openwhisk_answer("f", &json!({"primes": 25})).unwrap();
    assert_eq!(out.status, StatusCode::OK);
    assert_eq!(out.body.full().unwrap(), r#"{"primes":25}"#);
}

#[test]
fn a_functions_own_event_overrides_its_backends() {
    let mut http = FunctionConfig::named("users");
    http.event = Some(EventStyle::Http);
    let styles =
        EventStyles::new(EventStyle::Raw).overridden_by(&[http, FunctionConfig::named("echo")]);
    assert_eq!(styles.of("users"), EventStyle::Http);
    assert_eq!(styles.of("echo"), EventStyle::Raw);
    assert_eq!(styles.of("other"), EventStyle::Raw);
}
