//! The admin API, with the admin key when keys exist (`guard::Admin`): what an operator or
//! `geofaas deploy` / `geofaas activations` changes and reads on a node.
//!
//! - [`deploy`]: `/admin/functions`, deployed functions and their versions;
//! - [`activations`]: `/admin/activations`, asynchronous calls and dead letters.

pub mod activations;
pub mod deploy;

use std::sync::Arc;

use axum::Router;

use crate::node::Live;

/// The admin routes, for the gateway's router.
pub fn routes() -> Router<Arc<Live>> {
    Router::new()
        .merge(deploy::routes())
        .merge(activations::routes())
}
