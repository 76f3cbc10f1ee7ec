//! A call no client waits for (an accepted `202`, a cron tick, a queue message): the node's
//! state as the [`Host`] activations run their tries on.

use std::sync::Arc;

use axum::body::Body;
use axum::http::Response;
use futures::future::BoxFuture;
use futures::FutureExt as _;
use geofaas_config::ActivationSettings;

use crate::activations::Host;
use crate::call::{Call, CallCtx};
use crate::error::ApiError;
use crate::invoke;
use crate::metrics::NodeMetrics;
use crate::node::NodeState;
use crate::placement::Knows;

impl Host for NodeState {
    fn node_id(&self) -> &str {
        &self.place.id
    }

    fn settings(&self) -> &ActivationSettings {
        &self.place.topology.activations
    }

    fn retry_on_error(&self, function: &str) -> bool {
        self.place
            .topology
            .functions
            .iter()
            .any(|f| f.name == function && f.retry_on_error)
    }

    fn metrics(&self) -> &NodeMetrics {
        &self.telemetry.metrics
    }

    fn serves<'a>(&'a self, function: &'a str) -> BoxFuture<'a, bool> {
        async move {
            let here = !self.directory.local(function).await.is_empty();
            here || (self.links.outbound.is_some()
                && self.directory.cloud_serves(function) != Knows::No)
        }
        .boxed()
    }

    fn run(self: Arc<Self>, call: Call) -> BoxFuture<'static, Result<Response<Body>, ApiError>> {
        run_detached(self, call).boxed()
    }
}

/// One try of an accepted async call, in the background: the run and respond phases, observed
/// like a call a client waits for.
async fn run_detached(state: Arc<NodeState>, call: Call) -> Result<Response<Body>, ApiError> {
    let mut ctx = CallCtx::new(
        call.function.clone(),
        call.request_id.clone(),
        call.received,
    );
    ctx.background = true;
    let outcome = invoke::run(&state, &call).await;
    let answer = ctx.finish_run(&state.place.id_header, outcome);
    let status = match &answer {
        Ok(r) => r.status(),
        Err(e) => e.status,
    };
    state.telemetry.observers.finished(&ctx, status);
    answer
}
