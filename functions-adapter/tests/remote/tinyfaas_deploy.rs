//! Deploys to tinyFaaS (`POST {manager_url}/upload`) against the fake node, whose manager
//! checks an upload as tinyFaaS's does.

use std::io::Write as _;
use std::time::Duration;

use base64::Engine as _;
use geofaas_config::{BackendConfig, TinyfaasBackend};
use geofaas_functions::local::Runtime;
use geofaas_functions::{build_backend, InvokeError};
use geofaas_test_support::tinyfaas::{FakeFunction, FakeTinyfaas};

use crate::call;
use crate::deploy_support::{deploy, folder, GREET_PY};

fn config(node: &FakeTinyfaas, deploy: bool) -> TinyfaasBackend {
    let toml = format!(
        "url = \"{}\"\nmanager_url = \"{}\"\ndeploy = {deploy}\nthreads = 2\n",
        node.proxy_url(),
        node.manager_url()
    );
    toml::from_str(&toml).expect("valid tinyfaas config")
}

async fn node() -> FakeTinyfaas {
    FakeTinyfaas::start([("echo", FakeFunction::Echo)])
        .await
        .expect("fake tinyFaaS starts")
}

/// The bytes of `path` in a zip archive.
fn unzipped(zip: &[u8], path: &str) -> Vec<u8> {
    use std::io::Read as _;
    let mut archive = zip::ZipArchive::new(std::io::Cursor::new(zip)).unwrap();
    let mut file = archive.by_name(path).unwrap();
    let mut data = Vec::new();
    file.read_to_end(&mut data).unwrap();
    data
}

#[tokio::test]
async fn a_deploy_uploads_the_folder_and_a_redeploy_replaces_it() {
    let node = node().await;
    let backend = build_backend(
        &BackendConfig::Tinyfaas(config(&node, true)),
        std::path::Path::new("."),
        &[],
    )
    .unwrap();
    assert!(backend.deploys());
    // Reads the function list into the cache (refreshed every 30 s by default).
    assert!(!backend.serves("greet").await);

    let dir = folder(&[("fn.py", GREET_PY), ("lib/words.txt", "hello\n")]);
    let env = [("GREETING", "hello"), ("TOKEN", "s3cret")];
    let first = deploy("greet", "0123456789ab", Runtime::Python3, dir.path(), &env);
    backend.deploy(&first).await.expect("upload accepted");
    let uploads = node.uploads();
    assert_eq!(uploads.len(), 1);
    let upload = &uploads[0];
    assert_eq!(
        (upload.name.as_str(), upload.env.as_str(), upload.threads),
        ("greet", "python3", 2)
    );
    assert_eq!(upload.envs, ["GREETING=hello", "TOKEN=s3cret"]);
    assert_eq!(
        upload.files,
        ["fn.py", "lib/words.txt", "requirements.txt"],
        "the folder, with the requirements.txt tinyFaaS's python3 image needs"
    );
    assert_eq!(unzipped(&upload.zip, "fn.py"), GREET_PY.as_bytes());
    // The deploy dropped the cached list: the new function is served at once.
    assert!(backend.serves("greet").await);
    let out = backend
        .invoke(call("greet", "17", Duration::from_secs(5)))
        .await
        .unwrap();
    assert_eq!(
        &out.body.full().unwrap()[..],
        b"17",
        "the fake's uploaded functions echo"
    );

    std::fs::write(dir.path().join("fn.py"), "def fn(i, h):\n    return 'v2'\n").unwrap();
    let second = deploy("greet", "ba9876543210", Runtime::Python3, dir.path(), &[]);
    backend.deploy(&second).await.expect("redeploy accepted");
    let uploads = node.uploads();
    assert_eq!(uploads.len(), 2);
    assert_eq!(
        unzipped(&uploads[1].zip, "fn.py"),
        b"def fn(i, h):\n    return 'v2'\n"
    );
    assert!(
        uploads[1].envs.is_empty(),
        "the new version's environment replaces the old"
    );
    let mut names = backend.list().await.unwrap();
    names.sort();
    assert_eq!(names, ["echo", "greet"], "replaced, not added twice");
}

#[tokio::test]
async fn node_and_binary_folders_build_and_refusals_say_why() {
    let node = node().await;
    let backend = build_backend(
        &BackendConfig::Tinyfaas(config(&node, true)),
        std::path::Path::new("."),
        &[],
    )
    .unwrap();
    let js = folder(&[(
        "index.js",
        "module.exports = (req, res) => res.send('hi');\n",
    )]);
    backend
        .deploy(&deploy(
            "hello",
            "0123456789ab",
            Runtime::Nodejs,
            js.path(),
            &[],
        ))
        .await
        .expect("an index.js folder gets the package.json tinyFaaS needs");
    let sh = folder(&[("fn.sh", "#!/bin/sh\ncat\n")]);
    backend
        .deploy(&deploy(
            "copy",
            "0123456789ab",
            Runtime::Binary,
            sh.path(),
            &[],
        ))
        .await
        .expect("binary");
    let envs: Vec<_> = node.uploads().iter().map(|u| u.env.clone()).collect();
    assert_eq!(envs, ["nodejs", "binary"]);

    let err = backend
        .deploy(&deploy(
            "hello-node",
            "0123456789ab",
            Runtime::Nodejs,
            js.path(),
            &[],
        ))
        .await
        .unwrap_err();
    assert!(matches!(err, InvokeError::Refused(_)), "{err:?}");
    assert!(err.to_string().contains("letters and digits"), "{err}");
    assert_eq!(node.uploads().len(), 2, "nothing was sent");

    node.break_builds();
    let dir = folder(&[("fn.py", GREET_PY)]);
    let secret = [("TOKEN", "s3cret-value")];
    let err = backend
        .deploy(&deploy(
            "greet",
            "0123456789ab",
            Runtime::Python3,
            dir.path(),
            &secret,
        ))
        .await
        .unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("tinyFaaS upload of greet answered 500 Internal Server Error"),
        "{text}"
    );
    assert!(!text.contains("s3cret-value"), "{text}");
    assert!(!backend.serves("greet").await);

    let off = build_backend(
        &BackendConfig::Tinyfaas(config(&node, false)),
        std::path::Path::new("."),
        &[],
    )
    .unwrap();
    assert!(!off.deploys());
    assert!(off
        .deploy(&deploy(
            "greet",
            "0123456789ab",
            Runtime::Python3,
            dir.path(),
            &[]
        ))
        .await
        .is_err());
}

/// A zip holding `files` (`path`, bytes), directories listed only when `dirs` is set.
fn zip_of(files: &[(&str, &[u8])], dirs: &[&str]) -> String {
    let mut writer = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let options = zip::write::SimpleFileOptions::default();
    for dir in dirs {
        writer.add_directory(*dir, options).unwrap();
    }
    for (path, data) in files {
        writer.start_file(*path, options).unwrap();
        writer.write_all(data).unwrap();
    }
    let zip = writer.finish().unwrap().into_inner();
    base64::engine::general_purpose::STANDARD.encode(zip)
}

#[tokio::test]
async fn the_fake_manager_refuses_what_the_real_one_refuses() {
    let node = node().await;
    let client = reqwest::Client::new();
    let url = format!("{}/upload", node.manager_url());
    let post = |body: serde_json::Value| client.post(&url).json(&body).send();
    let good = zip_of(
        &[
            ("fn.py", b"def fn(i, h):\n    return i\n"),
            ("requirements.txt", b""),
        ],
        &[],
    );
    let upload = |name: &str, env: &str, zip: &str| serde_json::json!({"name": name, "env": env, "threads": 1, "zip": zip});

    let resp = client.get(&url).send().await.unwrap();
    assert_eq!(resp.status(), 400);
    let resp = client.post(&url).body("{not json").send().await.unwrap();
    assert_eq!(resp.status(), 400);
    for (body, why) in [
        (upload("a-b", "python3", &good), "name not alphanumeric"),
        (upload("ok", "ruby", &good), "no such runtime"),
        (upload("ok", "python3", "%%%"), "not base64"),
        (upload("ok", "python3", "UEsDBA=="), "not a zip"),
        (
            upload("ok", "python3", &zip_of(&[("fn.py", b"")], &[])),
            "no requirements.txt: pip install -r fails",
        ),
        (
            upload(
                "ok",
                "python3",
                &zip_of(
                    &[("fn.py", b""), ("requirements.txt", b""), ("lib/x.py", b"")],
                    &[],
                ),
            ),
            "lib/ not listed before lib/x.py",
        ),
        (
            upload(
                "ok",
                "nodejs",
                &zip_of(
                    &[("index.js", b""), ("package.json", br#"{"name":"x"}"#)],
                    &[],
                ),
            ),
            "require(\"fn\") finds no package named fn",
        ),
    ] {
        let resp = post(body).await.unwrap();
        assert_eq!(resp.status(), 500, "{why}");
        assert_eq!(
            resp.text().await.unwrap(),
            "",
            "{why}: tinyFaaS only logs the reason"
        );
    }
    assert!(node.uploads().is_empty());

    let nested = zip_of(
        &[("fn.py", b""), ("requirements.txt", b""), ("lib/x.py", b"")],
        &["lib/"],
    );
    let resp = post(upload("ok", "python3", &nested)).await.unwrap();
    assert_eq!(resp.status(), 200);
    assert!(resp.text().await.unwrap().contains("http://:8000/ok\n"));
}
