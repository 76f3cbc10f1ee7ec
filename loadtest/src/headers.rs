//! The HTTP header names of the gateway contract that the client sends and reads: the
//! platform's one list, `geofaas_config::headers`, shared with the gateway and the adapters.

pub use geofaas_config::headers::{
    CLIENT_ID, CLIENT_LOCATION, COLD_START, GEOHASH, IDEMPOTENCY_KEY, OFFLOADED_FROM, RETRY,
    SERVED_BY, SERVER_TIMING,
};
