//! The shipped example functions in `functions/` give the outputs the experiments rely on.

use std::path::PathBuf;

use geofaas_config::LocalBackend;
use geofaas_functions::FunctionBackend;

use crate::{ok_text, runtime};

fn examples() -> LocalBackend {
    LocalBackend {
        functions_dir: PathBuf::from("../functions"),
        ..LocalBackend::default()
    }
}

#[tokio::test]
async fn lists_every_example() {
    let rt = runtime(&examples());
    let names = rt.list().await.expect("list");
    for name in ["echo", "echo-binary", "hello-node", "sieve", "sievehard"] {
        assert!(
            names.iter().any(|n| n == name),
            "{name} missing from {names:?}"
        );
    }
}

#[tokio::test]
async fn sieve_counts_primes_under_ten_thousand() {
    let rt = runtime(&examples());
    assert_eq!(
        ok_text(&rt, "sieve", "").await.0,
        "Found 1229 primes under 10000"
    );
}

#[tokio::test]
async fn sievehard_uses_the_body_or_one_million() {
    let rt = runtime(&examples());
    assert_eq!(
        ok_text(&rt, "sievehard", "").await.0,
        "Found 78498 primes under 1000000"
    );
    assert_eq!(
        ok_text(&rt, "sievehard", "abc").await.0,
        "Found 78498 primes under 1000000"
    );
    assert_eq!(
        ok_text(&rt, "sievehard", "100").await.0,
        "Found 25 primes under 100"
    );
}

#[tokio::test]
async fn echo_returns_its_input_in_every_runtime() {
    let rt = runtime(&examples());
    let text = "héllo\nworld 🌍";
    assert_eq!(ok_text(&rt, "echo", text).await.0, text);
    assert_eq!(ok_text(&rt, "echo", "").await.0, "");
    assert_eq!(ok_text(&rt, "echo-binary", text).await.0, text);
    assert_eq!(
        ok_text(&rt, "hello-node", "geofaas").await.0,
        "Hello, geofaas!"
    );
    assert_eq!(ok_text(&rt, "hello-node", "").await.0, "Hello, world!");
}
