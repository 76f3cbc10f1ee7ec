//! The archives each platform gets, and the wrappers run for real (python3, node) on what the
//! adapters send, their results unwrapped as the adapters do.

use std::io::Read as _;
use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::process::Command;

use bytes::Bytes;
use serde_json::{json, Value};

use super::*;

fn write(dir: &Path, path: &str, text: &str) {
    let path = dir.join(path);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

/// (name, unix mode, contents) of every entry, in archive order.
fn entries(zip: &[u8]) -> Vec<(String, u32, Vec<u8>)> {
    let mut archive = zip::ZipArchive::new(std::io::Cursor::new(zip)).unwrap();
    (0..archive.len())
        .map(|i| {
            let mut file = archive.by_index(i).unwrap();
            let name = file.name().unwrap().into_owned();
            assert!(
                file.is_dir() || file.compression() == zip::CompressionMethod::Deflated,
                "{name} is deflated"
            );
            let mut data = Vec::new();
            file.read_to_end(&mut data).unwrap();
            let mode = file.unix_mode().unwrap() & 0o777;
            (name, mode, data)
        })
        .collect()
}

fn names(zip: &[u8]) -> Vec<String> {
    entries(zip).into_iter().map(|(n, _, _)| n).collect()
}

fn python_folder() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "fn.py",
        "import helper\n\ndef fn(input, headers):\n    return helper.greet(input)\n",
    );
    write(
        dir.path(),
        "lib/data.txt",
        "not imported, but kept in its folder",
    );
    write(
        dir.path(),
        "helper.py",
        "import os\n\ndef greet(input):\n    if input == 'boom':\n        raise ValueError('boom was asked for')\n    \
         return f\"hello {input!r} {os.environ.get('GREETING', '-')} {os.path.isdir('lib')}\"\n",
    );
    write(dir.path(), "tool.sh", "#!/bin/sh\n");
    std::fs::set_permissions(
        dir.path().join("tool.sh"),
        std::fs::Permissions::from_mode(0o700),
    )
    .unwrap();
    dir
}

fn node_folder(manifest: Option<&str>) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "index.js",
        "module.exports = (req, res) => {\n  if (req.body === 'boom') return res.status(500).send('boom was asked for');\n  \
         res.send(`hello ${JSON.stringify(req.body)} ${process.env.GREETING || '-'} ${require('fs').existsSync('index.js')}`);\n};\n",
    );
    if let Some(text) = manifest {
        write(dir.path(), "package.json", text);
    }
    dir
}

#[test]
fn tinyfaas_zips_list_folders_first_keep_modes_and_add_requirements() {
    let dir = python_folder();
    let zip = tinyfaas_zip(dir.path(), Runtime::Python3).unwrap().unwrap();
    let got = entries(&zip);
    let listed: Vec<(&str, u32)> = got.iter().map(|(n, m, _)| (n.as_str(), *m)).collect();
    assert_eq!(
        listed,
        [
            ("fn.py", 0o644),
            ("helper.py", 0o644),
            ("lib/", 0o755),
            ("tool.sh", 0o755),
            ("lib/data.txt", 0o644),
            ("requirements.txt", 0o644),
        ]
    );
    assert_eq!(got[0].2, std::fs::read(dir.path().join("fn.py")).unwrap());
    assert!(got[5].2.is_empty(), "an empty requirements.txt");
    // Same folder, same bytes (fixed times, sorted names).
    assert_eq!(
        zip,
        tinyfaas_zip(dir.path(), Runtime::Python3).unwrap().unwrap()
    );

    // A folder's own requirements.txt is kept as it is.
    write(dir.path(), "requirements.txt", "requests\n");
    let got = entries(&tinyfaas_zip(dir.path(), Runtime::Python3).unwrap().unwrap());
    let req: Vec<_> = got.iter().filter(|e| e.0 == "requirements.txt").collect();
    assert_eq!(req.len(), 1);
    assert_eq!(req[0].2, b"requests\n");
}

#[test]
fn tinyfaas_node_folders_get_a_manifest_named_fn() {
    let plain = node_folder(None);
    let got = entries(
        &tinyfaas_zip(plain.path(), Runtime::Nodejs)
            .unwrap()
            .unwrap(),
    );
    let manifest = &got.iter().find(|e| e.0 == "package.json").unwrap().2;
    let manifest: Value = serde_json::from_slice(manifest).unwrap();
    assert_eq!(manifest["name"], "fn");
    assert_eq!(manifest["main"], "index.js");

    let named = node_folder(Some(
        r#"{"name": "hello-node", "main": "index.js", "x": [1]}"#,
    ));
    let got = entries(
        &tinyfaas_zip(named.path(), Runtime::Nodejs)
            .unwrap()
            .unwrap(),
    );
    let manifests: Vec<_> = got.iter().filter(|e| e.0 == "package.json").collect();
    assert_eq!(
        manifests.len(),
        1,
        "the folder's manifest is replaced, not doubled"
    );
    let manifest: Value = serde_json::from_slice(&manifests[0].2).unwrap();
    assert_eq!(
        manifest,
        json!({"name": "fn", "main": "index.js", "x": [1]})
    );

    let broken = node_folder(Some("[1, 2]"));
    assert!(matches!(
        tinyfaas_zip(broken.path(), Runtime::Nodejs),
        Err(PackError::Manifest(_))
    ));
}

#[test]
fn links_are_refused_and_wrapper_names_are_not_overwritten() {
    let dir = python_folder();
    std::os::unix::fs::symlink("/etc/passwd", dir.path().join("lib/passwd")).unwrap();
    let err = tinyfaas_zip(dir.path(), Runtime::Python3).unwrap_err();
    assert!(err.to_string().contains("lib/passwd"), "{err}");

    let dir = python_folder();
    write(dir.path(), "__main__.py", "");
    let err = openwhisk_zip(dir.path(), Runtime::Python3).unwrap_err();
    assert!(err.to_string().contains("__main__.py"), "{err}");
    write(dir.path(), "geofaas_handler.py", "");
    let err = lambda_zip(dir.path(), Runtime::Python3).unwrap_err();
    assert!(err.to_string().contains("geofaas_handler.py"), "{err}");

    assert!(openwhisk_zip(dir.path(), Runtime::Binary)
        .unwrap()
        .is_none());
    assert!(lambda_zip(dir.path(), Runtime::Binary).unwrap().is_none());
}

#[test]
fn node_wrappers_keep_the_folder_under_function() {
    let dir = node_folder(Some(
        r#"{"name": "x", "type": "commonjs", "main": "index.js"}"#,
    ));
    let ow = names(&openwhisk_zip(dir.path(), Runtime::Nodejs).unwrap().unwrap());
    assert_eq!(
        ow,
        [
            "package.json",
            "geofaas_handler.js",
            "function/",
            "function/index.js",
            "function/package.json"
        ]
    );
    let lambda = names(&lambda_zip(dir.path(), Runtime::Nodejs).unwrap().unwrap());
    assert_eq!(
        lambda,
        [
            "geofaas_handler.js",
            "function/",
            "function/index.js",
            "function/package.json"
        ]
    );
}

#[test]
fn wrapper_results_unwrap_and_other_results_do_not() {
    assert_eq!(
        unwrap_body(br#" { "geofaas_body": "Found 1229 primes" }"#),
        Some(Bytes::from_static(b"Found 1229 primes"))
    );
    assert_eq!(
        unwrap_body(br#"{"geofaas_body_base64": "/wA="}"#),
        Some(Bytes::from_static(&[0xff, 0]))
    );
    for other in [
        &br#"{"geofaas_body": "x", "more": 1}"#[..],
        br#"{"geofaas_body": 7}"#,
        br#"{"n": 1}"#,
        br#""geofaas_body""#,
        b"",
    ] {
        assert_eq!(
            unwrap_body(other),
            None,
            "{}",
            String::from_utf8_lossy(other)
        );
    }
}

/// Unpacks `zip` and calls `entry` in it with `arg` (JSON) in a fresh interpreter, with `env`;
/// returns what the entry returned (JSON), or the error text it raised.
fn run_entry(
    zip: &[u8],
    interpreter: &str,
    module: &str,
    entry: &str,
    arg: &Value,
    env: &[(&str, &str)],
) -> Result<Value, String> {
    let dir = tempfile::tempdir().unwrap();
    zip::ZipArchive::new(std::io::Cursor::new(zip))
        .unwrap()
        .extract(dir.path())
        .unwrap();
    let arg = arg.to_string();
    let (program, script) = match interpreter {
        "python3" => (
            "python3",
            format!(
                "import json, runpy, sys\nsys.path.insert(0, {dir:?})\n\
                 entry = runpy.run_path({dir:?} + '/{module}')['{entry}']\n\
                 try:\n    out = entry(json.loads(sys.argv[1])) if '{entry}' == 'main' else entry(json.loads(sys.argv[1]), None)\n\
                 except Exception as e:\n    print('ERROR ' + str(e)); sys.exit(0)\nprint(json.dumps(out))\n",
                dir = dir.path().to_str().unwrap()
            ),
        ),
        _ => (
            "node",
            format!(
                "const m = require({dir:?} + '/{module}');\n\
                 Promise.resolve(m['{entry}'](JSON.parse(process.argv[1])))\n\
                 .then(out => console.log(JSON.stringify(out)), e => console.log('ERROR ' + e.message));\n",
                dir = dir.path().to_str().unwrap()
            ),
        ),
    };
    let flag = if program == "python3" { "-c" } else { "-e" };
    let out = Command::new(program)
        .args([flag, &script, &arg])
        .current_dir("/")
        .envs(env.iter().copied())
        .output()
        .expect("python3 and node are installed");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let last = stdout.lines().last().unwrap_or_default().to_owned();
    assert!(
        out.status.success(),
        "{program} failed: {}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    match last.strip_prefix("ERROR ") {
        Some(message) => Err(message.to_owned()),
        None => Ok(serde_json::from_str(&last).unwrap_or_else(|e| panic!("{e}: {last}"))),
    }
}

/// Runs the OpenWhisk action in `zip` on `body` as the adapter would send it.
fn openwhisk_call(zip: &[u8], runtime: Runtime, body: &'static [u8]) -> Result<Bytes, String> {
    let params = crate::openwhisk::params(&Bytes::from_static(body));
    let (interpreter, module) = match runtime {
        Runtime::Python3 => ("python3", "__main__.py"),
        _ => ("node", "geofaas_handler.js"),
    };
    let env = [("GREETING", "hi")];
    let result = run_entry(zip, interpreter, module, "main", &params, &env)?;
    Ok(unwrap_result(&result).unwrap_or_else(|| panic!("not a wrapper result: {result}")))
}

/// Runs the Lambda function in `zip` on `body` as the adapter would send it.
fn lambda_call(zip: &[u8], runtime: Runtime, body: &'static [u8]) -> Result<Bytes, String> {
    let payload = crate::lambda::payload(&Bytes::from_static(body));
    let event: Value = serde_json::from_slice(&payload).unwrap();
    let (interpreter, module) = match runtime {
        Runtime::Python3 => ("python3", "geofaas_handler.py"),
        _ => ("node", "geofaas_handler.js"),
    };
    let env = [("GREETING", "hi")];
    let result = run_entry(zip, interpreter, module, "handler", &event, &env)?;
    // Lambda sends the handler's return value as JSON: the adapter unwraps the reply body.
    Ok(unwrap_body(result.to_string().as_bytes())
        .unwrap_or_else(|| panic!("not a wrapper result: {result}")))
}

type Call = fn(&[u8], Runtime, &'static [u8]) -> Result<Bytes, String>;

/// Each platform's archive of `dir` with the call that runs it.
fn platforms(dir: &Path, runtime: Runtime) -> [(Vec<u8>, Call); 2] {
    [
        (
            openwhisk_zip(dir, runtime).unwrap().unwrap(),
            openwhisk_call,
        ),
        (lambda_zip(dir, runtime).unwrap().unwrap(), lambda_call),
    ]
}

fn text(out: Result<Bytes, String>) -> String {
    String::from_utf8(out.expect("the call succeeds").to_vec()).unwrap()
}

#[test]
fn python_wrappers_call_fn_like_the_local_runtime() {
    let dir = python_folder();
    for (zip, call) in platforms(dir.path(), Runtime::Python3) {
        let run = |body| text(call(&zip, Runtime::Python3, body));
        assert_eq!(run(b"world"), "hello 'world' hi True");
        assert_eq!(run(b""), "hello None hi True", "an empty body is None");
        assert_eq!(run(br#"{"n":1}"#), r#"hello '{"n":1}' hi True"#);
        let err = call(&zip, Runtime::Python3, b"boom").unwrap_err();
        assert!(err.contains("boom was asked for"), "{err}");
    }
}

#[test]
fn node_wrappers_call_the_handler_like_the_local_runtime() {
    let dir = node_folder(Some(r#"{"name": "hello", "main": "index.js"}"#));
    for (zip, call) in platforms(dir.path(), Runtime::Nodejs) {
        let run = |body| text(call(&zip, Runtime::Nodejs, body));
        assert_eq!(run(b"world"), r#"hello "world" hi true"#);
        assert_eq!(run(b""), r#"hello "" hi true"#);
        assert_eq!(run(br#"{"n":1}"#), r#"hello "{\"n\":1}" hi true"#);
        let err = call(&zip, Runtime::Nodejs, b"boom").unwrap_err();
        assert!(err.contains("boom was asked for"), "{err}");
    }
}

/// A function written for the platform (a Lambda `handler(event, context)`, an OpenWhisk
/// `main(params)`) is deployed as it is: the wrapper passes the event and the answer through,
/// so `event = "http"` gets the function-URL answer the handler wrote.
#[test]
fn platform_handlers_are_called_as_the_platform_calls_them() {
    let event = serde_json::json!({
        "version": "2.0", "rawPath": "/users/7",
        "requestContext": {"http": {"method": "PUT"}},
    });
    let py = tempfile::tempdir().unwrap();
    write(
        py.path(),
        "fn.py",
        "def handler(event, context):\n    return {'statusCode': 201, 'cookies': ['a=1', 'b=2'],\n            \
         'body': event['requestContext']['http']['method'] + ' ' + event['rawPath']}\n",
    );
    let js = tempfile::tempdir().unwrap();
    write(
        js.path(),
        "index.js",
        "exports.handler = async (event) => ({statusCode: 201, cookies: ['a=1', 'b=2'],\n  \
         body: `${event.requestContext.http.method} ${event.rawPath}`});\n",
    );
    let want =
        serde_json::json!({"statusCode": 201, "cookies": ["a=1", "b=2"], "body": "PUT /users/7"});
    let zip = lambda_zip(py.path(), Runtime::Python3).unwrap().unwrap();
    let got = run_entry(
        &zip,
        "python3",
        "geofaas_handler.py",
        "handler",
        &event,
        &[],
    );
    assert_eq!(got.unwrap(), want);
    let zip = lambda_zip(js.path(), Runtime::Nodejs).unwrap().unwrap();
    let got = run_entry(&zip, "node", "geofaas_handler.js", "handler", &event, &[]);
    assert_eq!(got.unwrap(), want);

    // An OpenWhisk web action's main(params), and a raw fn.py whose own main() is not taken.
    let ow = tempfile::tempdir().unwrap();
    write(
        ow.path(),
        "fn.py",
        "def main(params):\n    return {'statusCode': 404, 'body': params['__ow_path']}\n",
    );
    let zip = openwhisk_zip(ow.path(), Runtime::Python3).unwrap().unwrap();
    let params = serde_json::json!({"__ow_path": "/x", "__ow_method": "get"});
    let got = run_entry(&zip, "python3", "__main__.py", "main", &params, &[]);
    assert_eq!(
        got.unwrap(),
        serde_json::json!({"statusCode": 404, "body": "/x"})
    );
    write(
        ow.path(),
        "fn.py",
        "def main():\n    print('cli')\n\ndef fn(input):\n    return 'raw ' + input\n",
    );
    let zip = openwhisk_zip(ow.path(), Runtime::Python3).unwrap().unwrap();
    let got = run_entry(
        &zip,
        "python3",
        "__main__.py",
        "main",
        &serde_json::json!({"__ow_body": "x"}),
        &[],
    );
    assert_eq!(got.unwrap(), serde_json::json!({"geofaas_body": "raw x"}));
}
