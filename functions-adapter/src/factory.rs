//! Builds the backend a topology entry describes, wrapped in [`Guarded`] (circuit breaker and
//! cached function list).

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use geofaas_config::{BackendConfig, FunctionConfig};

use crate::breaker::{BreakerSettings, Guarded};
use crate::lambda::LambdaAdapter;
use crate::local::LocalRuntime;
use crate::openwhisk::OpenwhiskAdapter;
use crate::tinyfaas::TinyfaasAdapter;
use crate::FunctionBackend;

/// How long the embedded runtime's folder list is cached, in seconds.
const LOCAL_LIST_REFRESH_S: u64 = 5;

/// Why a backend could not be built from its configuration.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BuildError {
    /// An environment variable the backend needs is not set.
    #[error("environment variable {0} is not set")]
    MissingEnv(String),
    /// The OpenWhisk API key is not `uuid:key`.
    #[error("the OpenWhisk API key in {0} is not of the form uuid:key")]
    BadApiKey(String),
    /// The HTTP client could not be set up.
    #[error("HTTP client: {0}")]
    Client(String),
    /// The embedded runtime could not start.
    #[error("local runtime: {0}")]
    Local(#[from] crate::local::LocalError),
}

impl BuildError {
    pub(crate) fn client(err: reqwest::Error) -> Self {
        Self::Client(err.to_string())
    }
}

fn guard<B: FunctionBackend + 'static>(
    backend: B,
    failures: u32,
    cooldown_ms: u64,
    refresh_s: u64,
) -> Arc<dyn FunctionBackend> {
    let breaker = BreakerSettings {
        failure_threshold: failures.max(1),
        cool_down: Duration::from_millis(cooldown_ms),
    };
    Arc::new(Guarded::new(
        backend,
        breaker,
        Duration::from_secs(refresh_s),
    ))
}

/// The backend `cfg` describes, behind a circuit breaker and a cached function list.
///
/// `base_dir` is the topology file's folder (relative paths resolve against it); `functions`
/// are the topology's functions (their failure markers apply to tinyFaaS replies, their `event`
/// to Lambda and OpenWhisk calls). Remote
/// credentials come from the environment (see `docs/backends.md`).
pub fn build_backend(
    cfg: &BackendConfig,
    base_dir: &Path,
    functions: &[FunctionConfig],
) -> Result<Arc<dyn FunctionBackend>, BuildError> {
    match cfg {
        BackendConfig::Tinyfaas(c) => Ok(guard(
            TinyfaasAdapter::new(c, functions)?,
            c.breaker_failures,
            c.breaker_cooldown_ms,
            c.list_refresh_s,
        )),
        BackendConfig::Openwhisk(c) => Ok(guard(
            OpenwhiskAdapter::from_env(c)?.with_functions(functions),
            c.breaker_failures,
            c.breaker_cooldown_ms,
            c.list_refresh_s,
        )),
        BackendConfig::Lambda(c) => Ok(guard(
            LambdaAdapter::from_env(c)?.with_functions(functions),
            c.breaker_failures,
            c.breaker_cooldown_ms,
            c.list_refresh_s,
        )),
        BackendConfig::Local(c) => {
            let defaults = BreakerSettings::default();
            Ok(guard(
                LocalRuntime::new(c, base_dir)?,
                defaults.failure_threshold,
                defaults.cool_down.as_millis() as u64,
                LOCAL_LIST_REFRESH_S,
            ))
        }
    }
}
