//! Integration tests of the remote backends: tinyFaaS and OpenWhisk against protocol-faithful
//! fakes (`geofaas-test-support`), tinyFaaS's keep-alive connections also against nginx, Lambda
//! against real peers (serverless-offline, moto); deploys to each (`*_deploy`).
//!
//! The Lambda tests need `npm ci --prefix functions-adapter/tests/peers/serverless` and
//! `pip install 'moto[server]'`; without them they fail unless `GEOFAAS_SKIP_PEERS=1`.

mod deploy_support;
mod docs;
mod lambda_deploy;
mod lambda_errors;
mod lambda_moto;
mod lambda_serverless;
mod openwhisk;
mod openwhisk_deploy;
mod tinyfaas;
mod tinyfaas_connections;
mod tinyfaas_deploy;
mod tinyfaas_nginx;

use std::time::Duration;

use geofaas_functions::Invocation;

/// A call to `function` with `body` and a deadline `timeout` from now.
pub fn call(function: &str, body: &'static str, timeout: Duration) -> Invocation {
    Invocation::new(function, body, timeout)
}
