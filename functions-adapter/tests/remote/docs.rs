//! The topology snippets in `docs/backends.md` parse as backend configurations.

use geofaas_config::BackendConfig;

#[test]
fn every_backend_snippet_in_the_docs_parses() {
    let doc = include_str!("../../../docs/backends.md");
    let mut kinds = Vec::new();
    for block in doc.split("```toml").skip(1) {
        let block = block.split("```").next().unwrap_or_default();
        // The part between `[[node.backend]]` and the next table header is one backend.
        let Some(backend) = block.split("[[node.backend]]").nth(1) else {
            continue;
        };
        let body = backend.split("\n[").next().unwrap_or_default();
        let cfg: BackendConfig =
            toml::from_str(body).unwrap_or_else(|e| panic!("snippet does not parse: {e}\n{body}"));
        kinds.push(cfg.kind());
    }
    assert_eq!(
        kinds,
        [
            "local",
            "tinyfaas",
            "openwhisk",
            "lambda",
            "tinyfaas",
            "openwhisk",
            "lambda"
        ],
        "one snippet per kind, then the deploy snippets"
    );
}
