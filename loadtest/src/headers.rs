//! The HTTP header names of the gateway contract that the client sends and reads, in one place
//! so a grep finds every use (the gateway defines the same names on its side).

/// Request: where the client is, `<lat>,<lon>` in decimal degrees.
pub const CLIENT_LOCATION: &str = "x-client-location";
/// Request: a client retrying at the cloud asks to be served there (`1`).
pub const RETRY: &str = "x-geofaas-retry";
/// Request: makes a retried call return the first answer instead of running twice.
pub const IDEMPOTENCY_KEY: &str = "idempotency-key";
/// Response: the node that ran the function.
pub const SERVED_BY: &str = "x-served-by";
/// Response: the edge that offloaded the call to the cloud.
pub const OFFLOADED_FROM: &str = "x-offloaded-from";
/// Response: route/queue/cold/exec durations as the gateway measured them.
pub const SERVER_TIMING: &str = "server-timing";
