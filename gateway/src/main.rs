//! The `geofaas` binary.
fn main() {}
