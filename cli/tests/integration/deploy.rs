//! `geofaas deploy`, `rollback` and `functions` against a real `geofaas up` (a child process)
//! on a Melbourne topology, called the way users call them: the binary from the folder `up`
//! runs in, and `curl` over HTTP/1.1 and HTTP/2 for the function calls.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use geofaas_gateway::access::sha256_hex;

use crate::answer::Answer;

pub(crate) const BIN: &str = env!("CARGO_BIN_EXE_geofaas");
const ADMIN: &str = "ops-admin-secret";
const APP: &str = "app-caller-secret";

/// Node ids and a location inside each one's area.
const PLACES: [(&str, &str); 3] = [
    ("cbd", "-37.8136,144.9631"),
    ("carlton", "-37.7840,144.9670"),
    ("cloud", "0,0"),
];

/// A `geofaas up` running from its own scratch folder.
pub(crate) struct Up {
    child: Option<Child>,
    pub(crate) dir: tempfile::TempDir,
    pub(crate) ports: Vec<u16>,
    keys: bool,
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn topology(ports: &[u16], keys: bool) -> String {
    let node = |id: &str, role: &str, area: &str, lat: f64, lon: f64, port: u16| {
        format!(
            "[[node]]\nid = \"{id}\"\nrole = \"{role}\"\nlocation = {{ lat = {lat}, lon = {lon} }}\n{area}\n\
             public_url = \"https://127.0.0.1:{port}\"\nlisten = \"127.0.0.1:{port}\"\n\
             [[node.backend]]\nkind = \"local\"\nfunctions_dir = \"functions\"\n\n"
        )
    };
    let mut text = format!(
        "zone = \"melbourne.test.\"\n\n[dns]\nlisten = \"127.0.0.1:{}\"\n\n",
        free_port()
    );
    if keys {
        for (id, secret, admin) in [("ops", ADMIN, true), ("app", APP, false)] {
            text.push_str(&format!(
                "[[auth.key]]\nid = \"{id}\"\nsha256 = \"{}\"\nfunctions = [\"*\"]\nadmin = {admin}\n\n",
                sha256_hex(secret)
            ));
        }
    }
    text.push_str(&node(
        "cbd",
        "edge",
        "area.circle = { center = { lat = -37.8136, lon = 144.9631 }, radius_km = 2 }",
        -37.8136,
        144.9631,
        ports[0],
    ));
    text.push_str(&node(
        "carlton",
        "edge",
        "area.circle = { center = { lat = -37.7840, lon = 144.9670 }, radius_km = 1 }",
        -37.7840,
        144.9670,
        ports[1],
    ));
    text.push_str(&node(
        "cloud",
        "cloud",
        "area = \"world\"",
        -33.87,
        151.21,
        ports[2],
    ));
    text
}

impl Up {
    pub(crate) fn start(keys: bool) -> Self {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("functions")).unwrap();
        let ports = vec![free_port(), free_port(), free_port()];
        std::fs::write(dir.path().join("melbourne.toml"), topology(&ports, keys)).unwrap();
        let mut up = Self {
            child: None,
            dir,
            ports,
            keys,
        };
        up.launch();
        up
    }

    fn launch(&mut self) {
        let _ = std::fs::remove_file(self.dir.path().join(".geofaas/up.json"));
        let child = Command::new(BIN)
            .args(["up", "--config", "melbourne.toml", "--no-dns"])
            .current_dir(self.dir.path())
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("geofaas up starts");
        self.child = Some(child);
        for _ in 0..300 {
            let ready = self.dir.path().join(".geofaas/up.json").is_file()
                && (0..3).all(|i| self.curl_status(i, "/readyz") == "200");
            if ready {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("geofaas up did not come up");
    }

    /// Stops `up` with SIGINT (Ctrl-C) and waits for it.
    fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = Command::new("kill")
                .args(["-INT", &child.id().to_string()])
                .status();
            let _ = child.wait();
        }
    }

    fn path(&self, p: &str) -> PathBuf {
        self.dir.path().join(p)
    }

    pub(crate) fn ca(&self) -> PathBuf {
        self.path(".geofaas/ca.pem")
    }

    /// Runs `geofaas ARGS` from the `up` folder, with `env`.
    pub(crate) fn geofaas(&self, args: &[&str], env: &[(&str, &str)]) -> Output {
        Command::new(BIN)
            .args(args)
            .current_dir(self.dir.path())
            .envs(env.iter().copied())
            .output()
            .expect("geofaas runs")
    }

    /// `geofaas deploy ARGS` that must succeed; its stdout.
    pub(crate) fn deploy(&self, args: &[&str]) -> String {
        let mut all = vec!["deploy"];
        all.extend_from_slice(args);
        let env: &[(&str, &str)] = if self.keys {
            &[("GEOFAAS_ADMIN_KEY", ADMIN)]
        } else {
            &[]
        };
        let out = self.geofaas(&all, env);
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "deploy {args:?} failed:\n{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        stdout
    }

    fn curl_status(&self, node: usize, path: &str) -> String {
        let out = Command::new("curl")
            .args(["-sS", "-o", "/dev/null", "-w", "%{http_code}", "--cacert"])
            .arg(self.ca())
            .arg(format!("https://127.0.0.1:{}{path}", self.ports[node]))
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Calls `function` at node `node` with `curl` (HTTP/2 when `h2`), from inside its area.
    pub(crate) fn call(&self, node: usize, function: &str, h2: bool, extra: &[&str]) -> Answer {
        let out = Command::new("curl")
            .args(["-sS", "-i", if h2 { "--http2" } else { "--http1.1" }])
            .arg("--cacert")
            .arg(self.ca())
            .args(["-H", &format!("X-Client-Location: {}", PLACES[node].1)])
            .args(extra)
            .args(["-d", "hi"])
            .arg(format!(
                "https://127.0.0.1:{}/fn/{function}",
                self.ports[node]
            ))
            .output()
            .unwrap();
        Answer::parse(&String::from_utf8_lossy(&out.stdout))
    }

    /// The version folders of `function` under node `node`'s state folder.
    fn stored(&self, node: &str, function: &str) -> Vec<String> {
        let dir = self.path(&format!(
            ".geofaas/nodes/{node}/functions/{function}/versions"
        ));
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .map(|d| {
                d.filter_map(Result::ok)
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        names.sort();
        names
    }
}

impl Drop for Up {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The deployed version that answered.
trait Version {
    fn version(&self) -> &str;
}

impl Version for Answer {
    fn version(&self) -> &str {
        self.header("x-function-version")
    }
}

/// Writes a python3 function that answers `text`, the value of `$GREETING` and whether
/// `$TOKEN` is set.
fn python_fn(root: &Path, name: &str, text: &str) -> PathBuf {
    let dir = root.join(name);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("fn.py"),
        format!(
            "import os\n\ndef fn(input, headers):\n    \
             return '{text} ' + os.environ.get('GREETING', '-') + ' ' + \
             ('token' if os.environ.get('TOKEN') == 'shh-42' else 'no-token')\n"
        ),
    )
    .unwrap();
    dir
}

/// The version id `geofaas deploy` printed.
pub(crate) fn printed_version(stdout: &str) -> String {
    let at = stdout.find(" version ").expect("a version in the output") + 9;
    stdout[at..at + 12].to_owned()
}

#[test]
fn a_deploy_reaches_every_node_with_one_version_its_env_and_secrets() {
    let up = Up::start(false);
    python_fn(up.dir.path(), "greet", "v1");
    // The secret's value comes from the deploying shell: without it the deploy is refused.
    let missing = up.geofaas(&["deploy", "./greet", "--secret", "TOKEN=UNSET_VAR_X"], &[]);
    assert!(!missing.status.success());
    assert!(String::from_utf8_lossy(&missing.stderr).contains("UNSET_VAR_X"));
    let with_secret = up.geofaas(
        &[
            "deploy",
            "./greet",
            "--env",
            "GREETING=hello",
            "--secret",
            "TOKEN=MY_TOKEN",
        ],
        &[("MY_TOKEN", "shh-42")],
    );
    let stdout = String::from_utf8_lossy(&with_secret.stdout).into_owned();
    assert!(with_secret.status.success(), "{stdout}");
    let version = printed_version(&stdout);
    for id in ["cbd", "carlton", "cloud"] {
        assert!(stdout.contains(id), "{stdout}");
    }
    for (node, (id, _)) in PLACES.iter().enumerate() {
        for h2 in [false, true] {
            let a = up.call(node, "greet", h2, &[]);
            assert_eq!(a.status, 200, "{a:?}");
            assert_eq!(a.body, "v1 hello token");
            assert_eq!(a.version(), version);
            assert_eq!(a.headers["x-served-by"], *id);
        }
    }
    // An edge client outside every area is handed to the cloud; offloaded answers carry the
    // cloud's version too (the function is only at the cloud: removed at cbd).
    let rm = up.geofaas(&["functions", "rm", "greet", "--node", "cbd"], &[]);
    assert!(
        rm.status.success(),
        "{}",
        String::from_utf8_lossy(&rm.stdout)
    );
    let offloaded = up.call(0, "greet", true, &[]);
    assert_eq!(offloaded.status, 200, "{offloaded:?}");
    assert_eq!(offloaded.headers["x-offloaded-from"], "cbd");
    assert_eq!(offloaded.version(), version);
    let back = up.geofaas(
        &[
            "deploy",
            "./greet",
            "--node",
            "cbd",
            "--env",
            "GREETING=hello",
            "--secret",
            "TOKEN=MY_TOKEN",
        ],
        &[("MY_TOKEN", "shh-42")],
    );
    assert!(back.status.success());
    assert_eq!(up.call(0, "greet", false, &[]).version(), version);
    // `functions ls` shows the version on every node and never the secret's value.
    let ls = up.geofaas(&["functions", "ls"], &[]);
    let table = String::from_utf8_lossy(&ls.stdout);
    assert!(ls.status.success(), "{table}");
    assert_eq!(table.matches(&version).count(), 3, "{table}");
    let listed = Command::new("curl")
        .args(["-sS", "--cacert"])
        .arg(up.ca())
        .arg(format!("https://127.0.0.1:{}/admin/functions", up.ports[0]))
        .output()
        .unwrap();
    let json = String::from_utf8_lossy(&listed.stdout);
    assert!(
        json.contains("\"TOKEN\"") && json.contains("hello"),
        "{json}"
    );
    assert!(!json.contains("shh-42"), "{json}");
    // The same folder deployed again is the same version.
    let again = up.deploy(&["./greet", "--env", "GREETING=hello"]);
    let plain = printed_version(&again);
    assert_ne!(plain, version);
    let again2 = up.deploy(&["./greet", "--env", "GREETING=hello"]);
    assert_eq!(printed_version(&again2), plain);
}

#[test]
fn redeploys_and_rollbacks_under_load_fail_no_call_and_never_go_back() {
    let up = Up::start(false);
    python_fn(up.dir.path(), "steady", "one");
    let v1 = printed_version(&up.deploy(&["./steady"]));
    python_fn(up.dir.path(), "steady", "two");
    // Calls at every node, one client per node, recorded in the order each node answered.
    let log: Arc<Mutex<Vec<(usize, u16, String)>>> = Arc::default();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let load: Vec<_> = (0..3)
        .map(|node| {
            let (log, stop) = (log.clone(), stop.clone());
            let ca = up.ca();
            let port = up.ports[node];
            std::thread::spawn(move || {
                // One curl process, many calls on one connection: about a hundred a second.
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let url = format!("https://127.0.0.1:{port}/fn/steady");
                    let mut cmd = Command::new("curl");
                    cmd.args(["-sS", "--http2", "--cacert"]).arg(&ca);
                    for i in 0..20 {
                        if i > 0 {
                            cmd.arg("--next").args(["--cacert"]).arg(&ca);
                        }
                        cmd.args([
                            "-H",
                            &format!("X-Client-Location: {}", PLACES[node].1),
                            "-d",
                            "x",
                            "-w",
                            "\n%{http_code} %header{x-function-version}\n",
                            &url,
                        ]);
                    }
                    let out = cmd.output().unwrap();
                    let text = String::from_utf8_lossy(&out.stdout);
                    let mut log = log.lock().unwrap();
                    for line in text
                        .lines()
                        .filter(|l| l.len() > 3 && !l.contains("one ") && !l.contains("two "))
                    {
                        let (code, version) = line.split_once(' ').unwrap_or((line, ""));
                        log.push((node, code.parse().unwrap_or(0), version.to_owned()));
                    }
                }
            })
        })
        .collect();
    let started = std::time::Instant::now();
    std::thread::sleep(Duration::from_millis(500));
    let v2 = printed_version(&up.deploy(&["./steady"]));
    std::thread::sleep(Duration::from_millis(500));
    let rolled = up.geofaas(&["rollback", "steady"], &[]);
    assert!(
        rolled.status.success(),
        "{}",
        String::from_utf8_lossy(&rolled.stdout)
    );
    std::thread::sleep(Duration::from_millis(500));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for t in load {
        t.join().unwrap();
    }
    eprintln!("load ran for {:?}", started.elapsed());
    let log = log.lock().unwrap();
    eprintln!(
        "{} calls across the nodes through a deploy and a rollback",
        log.len()
    );
    assert!(log.len() > 60, "too few calls to tell: {}", log.len());
    for node in 0..3 {
        let seen: Vec<&str> = log
            .iter()
            .filter(|(n, _, _)| *n == node)
            .map(|(_, code, v)| {
                assert_eq!(*code, 200, "a call failed at node {node}");
                v.as_str()
            })
            .collect();
        // v1, then v2 (the deploy), then v1 again (the rollback): once a node answered with the
        // next version, no later answer of it carries the one before.
        let mut phases: Vec<&str> = seen.clone();
        phases.dedup();
        assert!(
            phases == [v1.as_str(), v2.as_str(), v1.as_str()],
            "node {node} went {phases:?}"
        );
    }
}

#[test]
fn a_percent_rollout_takes_a_stable_share_of_callers_until_promoted() {
    let up = Up::start(false);
    python_fn(up.dir.path(), "split", "old");
    let v1 = printed_version(&up.deploy(&["./split"]));
    python_fn(up.dir.path(), "split", "new");
    let v2 = printed_version(&up.deploy(&["./split", "--percent", "20"]));
    let ls = up.geofaas(&["functions", "ls", "--node", "cbd"], &[]);
    assert!(String::from_utf8_lossy(&ls.stdout).contains(&format!("{v2} 20%")));
    let version_of = |caller: usize| {
        let a = up.call(
            0,
            "split",
            false,
            &["-H", &format!("X-Client-Id: user-{caller}")],
        );
        assert_eq!(a.status, 200);
        a.version().to_owned()
    };
    let first: Vec<String> = (0..100).map(version_of).collect();
    let on_new = first.iter().filter(|v| **v == v2).count();
    assert!(
        (8..=35).contains(&on_new),
        "{on_new} of 100 callers on the rollout"
    );
    assert!(first.iter().all(|v| *v == v1 || *v == v2));
    // Each caller keeps its version.
    let second: Vec<String> = (0..100).map(version_of).collect();
    assert_eq!(first, second);
    // Promoted: the same folder again without --percent.
    up.deploy(&["./split"]);
    assert!((0..30).map(version_of).all(|v| v == v2));
}

#[test]
fn versions_survive_a_restart_of_up() {
    let mut up = Up::start(false);
    python_fn(up.dir.path(), "durable", "kept");
    let v1 = printed_version(&up.deploy(&["./durable"]));
    python_fn(up.dir.path(), "durable", "later");
    let v2 = printed_version(&up.deploy(&["./durable"]));
    up.stop();
    up.launch();
    for node in 0..3 {
        let a = up.call(node, "durable", true, &[]);
        assert_eq!((a.status, a.version()), (200, v2.as_str()), "{a:?}");
    }
    // The older version is still there to roll back to.
    let back = up.geofaas(&["rollback", "durable", "--to", &v1], &[]);
    assert!(
        back.status.success(),
        "{}",
        String::from_utf8_lossy(&back.stdout)
    );
    assert_eq!(up.call(1, "durable", false, &[]).body, "kept - no-token");
}

#[test]
fn bad_bundles_are_refused_by_name_and_the_live_version_keeps_serving() {
    let up = Up::start(false);
    python_fn(up.dir.path(), "guarded", "live");
    let live = printed_version(&up.deploy(&["./guarded"]));
    let stored = up.stored("cbd", "guarded");
    let put = |body: &Path| {
        let out = Command::new("curl")
            .args(["-sS", "-X", "PUT", "-H", "Content-Type: application/gzip"])
            .arg("--cacert")
            .arg(up.ca())
            .arg("--data-binary")
            .arg(format!("@{}", body.display()))
            .args(["-w", "\n%{http_code}"])
            .arg(format!(
                "https://127.0.0.1:{}/admin/functions/guarded",
                up.ports[0]
            ))
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let evil = up.path("evil");
    std::fs::create_dir_all(evil.join("pkg")).unwrap();
    std::fs::write(evil.join("fn.py"), "def fn(i, h): return 'evil'\n").unwrap();
    std::os::unix::fs::symlink("/etc/passwd", evil.join("pkg/passwd")).unwrap();
    let tar = |args: &[&str], out: &str| {
        let status = Command::new("tar")
            .arg("-czf")
            .arg(up.path(out))
            .args(args)
            .current_dir(&evil)
            .status()
            .unwrap();
        assert!(status.success());
        up.path(out)
    };
    let cases = [
        (tar(&["fn.py", "pkg/passwd"], "link.tgz"), "link"),
        (
            tar(&["--absolute-names", "fn.py", "/etc/hostname"], "abs.tgz"),
            "absolute path",
        ),
        (
            tar(
                &["--absolute-names", "fn.py", "../evil/fn.py"],
                "dotdot.tgz",
            ),
            "leaves its folder",
        ),
    ];
    let corrupt = up.path("corrupt.tgz");
    std::fs::write(&corrupt, b"\x1f\x8b\x08\x00garbage").unwrap();
    let norun = up.path("norun");
    std::fs::create_dir_all(&norun).unwrap();
    std::fs::write(norun.join("README"), "no entry point").unwrap();
    let norun_tgz = up.path("norun.tgz");
    Command::new("tar")
        .args(["-czf"])
        .arg(&norun_tgz)
        .args(["-C"])
        .arg(&norun)
        .arg("README")
        .status()
        .unwrap();
    let more = [
        (corrupt, "not a valid gzip'd tar"),
        (norun_tgz, "no entry point"),
    ];
    for (body, words) in cases.iter().chain(&more) {
        let answer = put(body);
        assert!(answer.ends_with("\n400"), "{}: {answer}", body.display());
        assert!(answer.contains(words), "{}: {answer}", body.display());
        assert_eq!(up.stored("cbd", "guarded"), stored, "{}", body.display());
    }
    // A function that cannot even start: the deploy fails, naming it, and the live one stays.
    let broken = up.path("guarded");
    std::fs::write(broken.join("fn.py"), "def fn(i, h)\n    return 'broken'\n").unwrap();
    let out = up.geofaas(&["deploy", "./guarded"], &[]);
    assert!(!out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("cbd") && text.contains("FAILED"), "{text}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("cbd"));
    assert_eq!(up.stored("cbd", "guarded"), stored);
    for node in 0..3 {
        let a = up.call(node, "guarded", false, &[]);
        assert_eq!((a.status, a.version()), (200, live.as_str()));
    }
    // A name that is not a function name, from the CLI.
    let bad = up.geofaas(&["deploy", "./guarded", "--name", "no/slash"], &[]);
    assert!(!bad.status.success());
    assert!(!up.path(".geofaas/nodes/cbd/functions/no").exists());
}

#[test]
fn deploys_need_the_admin_key_where_nodes_have_keys() {
    let up = Up::start(true);
    python_fn(up.dir.path(), "locked", "x");
    let none = up.geofaas(&["deploy", "./locked"], &[]);
    assert!(!none.status.success());
    assert!(String::from_utf8_lossy(&none.stdout).contains("401"));
    let caller = up.geofaas(&["deploy", "./locked"], &[("GEOFAAS_ADMIN_KEY", APP)]);
    assert!(!caller.status.success());
    assert!(String::from_utf8_lossy(&caller.stdout).contains("403"));
    assert!(up.stored("cbd", "locked").is_empty());
    up.deploy(&["./locked"]);
    let a = up.call(
        2,
        "locked",
        true,
        &["-H", &format!("Authorization: Bearer {APP}")],
    );
    assert_eq!((a.status, a.body.as_str()), (200, "x - no-token"));
}

#[test]
fn a_nodejs_function_deploys_keeps_no_state_between_versions_and_sees_its_env() {
    let up = Up::start(false);
    let dir = up.path("counter-js");
    std::fs::create_dir_all(&dir).unwrap();
    let write = |label: &str| {
        std::fs::write(
            dir.join("index.js"),
            format!(
                "let n = 0;\nmodule.exports = (req, res) => {{ n += 1; \
                 res.send('{label} ' + process.env.WHO + ' ' + n); }};\n"
            ),
        )
        .unwrap();
    };
    write("one");
    let v1 = printed_version(&up.deploy(&["./counter-js", "--env", "WHO=mel"]));
    let a = up.call(1, "counter-js", true, &[]);
    assert_eq!((a.status, a.version()), (200, v1.as_str()), "{a:?}");
    assert_eq!(a.body, "one mel 1");
    assert_eq!(up.call(1, "counter-js", false, &[]).body, "one mel 2");
    write("two");
    let v2 = printed_version(&up.deploy(&["./counter-js", "--env", "WHO=mel"]));
    let b = up.call(1, "counter-js", true, &[]);
    assert_eq!(
        (b.status, b.version(), b.body.as_str()),
        (200, v2.as_str(), "two mel 1")
    );
}
