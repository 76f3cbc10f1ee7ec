//! Backends a node runs functions on, one variant per kind (`kind = "local"`, ...).
//!
//! Credentials never live here: remote backends name the environment variables they read.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use url::Url;

/// One backend of a node. A call goes to the first healthy backend serving the function.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum BackendConfig {
    /// The embedded runtime: tinyFaaS-format function folders run as local worker processes.
    Local(LocalBackend),
    /// A tinyFaaS node.
    Tinyfaas(TinyfaasBackend),
    /// An Apache OpenWhisk deployment.
    Openwhisk(OpenwhiskBackend),
    /// AWS Lambda (or an endpoint speaking its Invoke API).
    Lambda(LambdaBackend),
}

impl BackendConfig {
    /// Short label of the kind, for logs and errors.
    pub fn kind(&self) -> &'static str {
        match self {
            BackendConfig::Local(_) => "local",
            BackendConfig::Tinyfaas(_) => "tinyfaas",
            BackendConfig::Openwhisk(_) => "openwhisk",
            BackendConfig::Lambda(_) => "lambda",
        }
    }

    /// What is wrong with this entry for a running platform: (field, value, reason), the
    /// field relative to the backend (e.g. `role`).
    pub(crate) fn check(&self) -> Result<(), crate::security::Problem> {
        match self {
            BackendConfig::Lambda(b) => b.check(),
            BackendConfig::Tinyfaas(b) if b.threads == 0 => {
                Err(("threads".into(), "0".into(), "must be at least 1".into()))
            }
            _ => Ok(()),
        }
    }

    /// The functions the topology says this backend serves, where it lists them (`local` and
    /// `lambda` backends); `None` when the backend is asked at run time.
    pub fn functions(&self) -> Option<&[String]> {
        match self {
            BackendConfig::Local(b) => b.functions.as_deref(),
            BackendConfig::Lambda(b) => b.functions.as_deref(),
            BackendConfig::Tinyfaas(_) | BackendConfig::Openwhisk(_) => None,
        }
    }
}

/// The embedded local runtime.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LocalBackend {
    /// Folder of function folders (`<dir>/<name>/fn.py`, `index.js` or `fn.sh`), relative to the
    /// topology file. Default `functions`.
    #[serde(default = "default_functions_dir")]
    pub functions_dir: PathBuf,
    /// Functions to serve; default: every function folder found.
    #[serde(default)]
    pub functions: Option<Vec<String>>,
    /// Most warm instances per function. Default 4.
    #[serde(default = "default_max_instances")]
    pub max_instances: usize,
    /// An idle instance is stopped after this many seconds. Default 300.
    #[serde(default = "default_keep_alive_s")]
    pub keep_alive_s: u64,
    /// Per-call timeout in milliseconds (the gateway's deadline still applies). Default 10000.
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: u64,
    /// Largest accepted function output in bytes. Default 6 MiB.
    #[serde(default = "default_max_output_bytes")]
    pub max_output_bytes: usize,
    /// Address-space limit of each worker process in MiB (RLIMIT_AS). Default 1024.
    #[serde(default = "default_memory_limit_mb")]
    pub memory_limit_mb: u64,
    /// Fork every `python3` process from one zygote per runtime (an interpreter started with
    /// the runtime, holding the worker but no function): a version's first instance is a fork
    /// that imports the function, later ones are forks of the version's fork server (a fork
    /// that imported it once), so no call waits for an interpreter start (60-200 ms), a
    /// function's first included. False starts the interpreter for each instance (with the
    /// version's environment from its start). Default true.
    #[serde(default = "default_true")]
    pub fork_server: bool,
    /// Generic `nodejs` workers kept started per runtime (node and the worker loaded, no
    /// function), so a new instance of any function, its first included, takes one and loads
    /// the module (milliseconds) instead of starting node (about 190 ms). A taken worker serves
    /// that function only; a replacement starts in the background after its first call. The
    /// workers start with the runtime and stay until it stops; they are processes on top of
    /// `max_instances` (about 40 MB resident each, most of it node's shared binary). A second
    /// one absorbs a slow refill on a busy machine. 0 turns them off (node starts per
    /// instance); at most 16. Default 2.
    #[serde(default = "default_node_spares")]
    pub node_spares: usize,
}

fn default_functions_dir() -> PathBuf {
    PathBuf::from("functions")
}
fn default_max_instances() -> usize {
    4
}
fn default_keep_alive_s() -> u64 {
    300
}
fn default_timeout_ms() -> u64 {
    10_000
}
fn default_max_output_bytes() -> usize {
    6 * 1024 * 1024
}
fn default_node_spares() -> usize {
    2
}
fn default_true() -> bool {
    true
}
fn default_memory_limit_mb() -> u64 {
    1024
}

impl Default for LocalBackend {
    fn default() -> Self {
        Self {
            functions_dir: default_functions_dir(),
            functions: None,
            max_instances: default_max_instances(),
            keep_alive_s: default_keep_alive_s(),
            timeout_ms: default_timeout_ms(),
            max_output_bytes: default_max_output_bytes(),
            memory_limit_mb: default_memory_limit_mb(),
            fork_server: true,
            node_spares: default_node_spares(),
        }
    }
}

/// A tinyFaaS node (proxy on :8000, manager on :8080).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TinyfaasBackend {
    /// Base URL of the function proxy, e.g. `http://10.0.0.5:8000`.
    pub url: Url,
    /// Base URL of the management service, e.g. `http://10.0.0.5:8080`.
    pub manager_url: Url,
    /// Per-call timeout in milliseconds (tinyFaaS has none of its own). Default 10000.
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: u64,
    /// Count an empty 200 body as a failed call (tinyFaaS answers 200 with an empty body when a
    /// function crashed). Per-function `failure_marker`s apply in addition. Default false.
    #[serde(default)]
    pub fail_on_empty: bool,
    /// Seconds between refreshes of the cached function list. Default 30.
    #[serde(default = "default_list_refresh_s")]
    pub list_refresh_s: u64,
    /// Consecutive backend or network failures that open the circuit breaker. Default 5.
    #[serde(default = "default_breaker_failures")]
    pub breaker_failures: u32,
    /// Milliseconds an open breaker skips the backend before one probe call is let through.
    /// Default 5000.
    #[serde(default = "default_breaker_cooldown_ms")]
    pub breaker_cooldown_ms: u64,
    /// `geofaas deploy` uploads functions here too (`POST {manager_url}/upload`), beside the
    /// node's embedded runtime. tinyFaaS takes only alphanumeric function names. Default false.
    #[serde(default)]
    pub deploy: bool,
    /// Handler containers tinyFaaS starts for a deployed function (the upload's `threads`),
    /// at least 1. Default 1.
    #[serde(default = "default_threads")]
    pub threads: u32,
}

fn default_threads() -> u32 {
    1
}

/// Platform runtime names for the folder runtimes a deploy can carry, where the platform's
/// default is not wanted (`runtimes = { python3 = "python3.13" }`). A field left out takes the
/// platform's default, which the backend's `runtimes` field documents.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeployRuntimes {
    /// For `python3` folders (`fn.py`).
    #[serde(default)]
    pub python3: Option<String>,
    /// For `nodejs` folders (`index.js` or `package.json`).
    #[serde(default)]
    pub nodejs: Option<String>,
}

/// An Apache OpenWhisk deployment.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OpenwhiskBackend {
    /// API host, e.g. `https://openwhisk.example.org`.
    pub api_host: Url,
    /// Namespace. Default `_` (the key's own namespace).
    #[serde(default = "default_namespace")]
    pub namespace: String,
    /// Package holding the actions, if any.
    #[serde(default)]
    pub package: Option<String>,
    /// Environment variable holding the `uuid:key` API key. Default `OPENWHISK_API_KEY`.
    #[serde(default = "default_ow_key_env")]
    pub api_key_env: String,
    /// Per-call timeout in milliseconds. Default 10000.
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: u64,
    /// `"http"`: actions are called as web actions (raw HTTP parameters) and answer as web
    /// actions do; `"raw"`: a JSON body is the parameters, the result the body. A
    /// `[[function]]`'s `event` overrides it. Default `"raw"`.
    #[serde(default)]
    pub event: EventStyle,
    /// Milliseconds between polls of an activation after a 202 (blocking wait ran out). Default 200.
    #[serde(default = "default_poll_interval_ms")]
    pub poll_interval_ms: u64,
    /// Seconds between refreshes of the cached function list. Default 30.
    #[serde(default = "default_list_refresh_s")]
    pub list_refresh_s: u64,
    /// Consecutive backend or network failures that open the circuit breaker. Default 5.
    #[serde(default = "default_breaker_failures")]
    pub breaker_failures: u32,
    /// Milliseconds an open breaker skips the backend before one probe call is let through.
    /// Default 5000.
    #[serde(default = "default_breaker_cooldown_ms")]
    pub breaker_cooldown_ms: u64,
    /// `geofaas deploy` installs functions here too, as actions created or replaced with
    /// `PUT …/actions/[{package}/]{name}?overwrite=true` (python3 and nodejs folders; see
    /// `docs/backends.md`). Default false.
    #[serde(default)]
    pub deploy: bool,
    /// Action kinds for deployed folders. Default `python3 = "python:default"`,
    /// `nodejs = "nodejs:default"` (the controller's blessed versions).
    #[serde(default)]
    pub runtimes: DeployRuntimes,
}

fn default_namespace() -> String {
    "_".to_owned()
}
fn default_ow_key_env() -> String {
    "OPENWHISK_API_KEY".to_owned()
}
fn default_poll_interval_ms() -> u64 {
    200
}
fn default_list_refresh_s() -> u64 {
    30
}
fn default_breaker_failures() -> u32 {
    5
}
fn default_breaker_cooldown_ms() -> u64 {
    5_000
}

/// What a remote function is sent and answers (docs/functions.md).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EventStyle {
    /// The request body in, the result out as the body of a `200`.
    #[default]
    Raw,
    /// The platform's own HTTP convention: Lambda's function-URL event (payload format 2.0)
    /// and `{statusCode, headers, cookies, body, isBase64Encoded}` answer, OpenWhisk's web
    /// action parameters (`__ow_method`, `__ow_headers`, `__ow_path`, `__ow_query`,
    /// `__ow_body`) and `{statusCode, headers, body}` answer.
    Http,
}

/// How Lambda runs a call: wait for the result, or queue it and answer 202 at once.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum LambdaInvocationType {
    /// Synchronous: the answer carries the function's result.
    #[default]
    RequestResponse,
    /// Asynchronous: Lambda queues the event and answers 202 with an empty body.
    Event,
}

/// AWS Lambda; credentials come from the standard `AWS_*` environment variables.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LambdaBackend {
    /// AWS region, e.g. `eu-central-1`.
    pub region: String,
    /// Endpoint override (e.g. serverless-offline); default `https://lambda.<region>.amazonaws.com`.
    #[serde(default)]
    pub endpoint: Option<Url>,
    /// Per-call timeout in milliseconds. Default 10000.
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: u64,
    /// `RequestResponse` or `Event`. Default `RequestResponse`.
    #[serde(default)]
    pub invocation_type: LambdaInvocationType,
    /// `"http"`: functions get the function-URL event and answer as a function URL does;
    /// `"raw"`: the body as the event, the result as the body. A `[[function]]`'s `event`
    /// overrides it. Default `"raw"`.
    #[serde(default)]
    pub event: EventStyle,
    /// Functions this backend serves, by platform name; default: asked from Lambda's
    /// ListFunctions (names that carry `function_prefix`, with the prefix removed).
    #[serde(default)]
    pub functions: Option<Vec<String>>,
    /// Prepended to a platform name to get the Lambda function name: with
    /// `function_prefix = "myservice-prod-"`, `/fn/resize` invokes `myservice-prod-resize`
    /// (serverless framework names are `<service>-<stage>-<function>`). Default none.
    #[serde(default)]
    pub function_prefix: Option<String>,
    /// Lambda names of single functions, overriding `function_prefix`:
    /// `lambda_names = { resize = "image-resizer-v2" }`. Default none.
    #[serde(default)]
    pub lambda_names: std::collections::BTreeMap<String, String>,
    /// Seconds between refreshes of the cached function list. Default 30.
    #[serde(default = "default_list_refresh_s")]
    pub list_refresh_s: u64,
    /// Consecutive backend or network failures that open the circuit breaker. Default 5.
    #[serde(default = "default_breaker_failures")]
    pub breaker_failures: u32,
    /// Milliseconds an open breaker skips the backend before one probe call is let through.
    /// Default 5000.
    #[serde(default = "default_breaker_cooldown_ms")]
    pub breaker_cooldown_ms: u64,
    /// `geofaas deploy` installs functions here too: CreateFunction, or UpdateFunctionCode and
    /// UpdateFunctionConfiguration when the function exists (python3 and nodejs folders; see
    /// `docs/backends.md`). Needs `role`. Default false.
    #[serde(default)]
    pub deploy: bool,
    /// ARN of the execution role deployed functions run as
    /// (`arn:aws:iam::<account>:role/<name>`); required when `deploy = true`. Default none.
    #[serde(default)]
    pub role: Option<String>,
    /// Lambda runtimes for deployed folders. Default `python3 = "python3.12"`,
    /// `nodejs = "nodejs20.x"`.
    #[serde(default)]
    pub runtimes: DeployRuntimes,
    /// Memory of a deployed function in MB (128-10240); default Lambda's own (128).
    #[serde(default)]
    pub memory_mb: Option<u32>,
}

impl LambdaBackend {
    fn check(&self) -> Result<(), crate::security::Problem> {
        let problem = |field: &str, value: &str, reason: &str| {
            Err((field.to_owned(), value.to_owned(), reason.to_owned()))
        };
        match (&self.role, self.deploy) {
            (None, true) => {
                return problem(
                    "role",
                    "(missing)",
                    "deploy = true needs the ARN of the execution role deployed functions run as",
                )
            }
            (Some(role), _) if !role.starts_with("arn:") || !role.contains(":role/") => {
                return problem(
                    "role",
                    role,
                    "an IAM role ARN, e.g. arn:aws:iam::123456789012:role/geofaas-functions",
                )
            }
            _ => {}
        }
        match self.memory_mb {
            Some(mb) if !(128..=10_240).contains(&mb) => {
                problem("memory_mb", &mb.to_string(), "Lambda takes 128 to 10240 MB")
            }
            _ => Ok(()),
        }
    }
}
