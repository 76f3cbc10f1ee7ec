//! The geofaas topology: nodes with their service areas and backends, the functions the
//! platform offers with the profile the scheduler plans with, and platform settings.
//!
//! Pure data and geometry, no I/O beyond reading files: [`Topology::load`] parses and
//! validates a TOML file (errors name the file, the field and the bad value), and
//! [`Topology::service_map`] builds the area lookup that the gateway and DNS route with.

#![forbid(unsafe_code)]

pub mod activations;
pub mod area;
pub mod backend;
pub mod deploy;
mod error;
pub mod fleet;
pub mod function;
pub mod geohash;
pub mod headers;
pub mod location;
pub mod prewarm;
pub mod queue;
pub mod registry;
pub mod security;
mod service_map;
mod topology;

pub use activations::ActivationSettings;
pub use area::{Area, AreaConfig};
pub use backend::{
    BackendConfig, EventStyle, LambdaBackend, LocalBackend, OpenwhiskBackend, TinyfaasBackend,
};
pub use deploy::DeploySettings;
pub use error::{ConfigError, ShapeError};
pub use fleet::{RegistrySettings, RegistryTls};
pub use function::FunctionConfig;
pub use geohash::{Geohash, GeohashError};
pub use location::{GeoLocator, LatLon, LocationError};
pub use prewarm::PrewarmSettings;
pub use queue::QueueSettings;
pub use security::{ApiKeyConfig, AuthSettings, LimitSettings};
pub use service_map::{NodeEntry, ServiceMap};
pub use topology::{
    AreaSettings, DnsSettings, GatewaySettings, GeoIpSettings, NodeConfig, Role, SchedulerPolicy,
    SchedulerSettings, SecuritySettings, TlsSettings, Topology,
};

#[cfg(test)]
mod tests;

#[cfg(test)]
mod properties;
