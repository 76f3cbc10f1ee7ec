//! The latency model of the Scale paper (Eqs. 1-4) and its constraints.
//!
//! End-to-end latency of a request k placed on node v:
//! * cold start (Eq. 1), only when a new container is started: `image_mb / bandwidth_v + init_ms`;
//! * computation (Eq. 2): `cpu_ms / cores_k`, scaled by the node's clock against [`REF_GHZ`]
//!   (the paper's node types differ in CPU frequency, 2.4-3.6 GHz);
//! * communication (Eq. 3): `input_kb / link_rate(s, v)` plus propagation over the great-circle
//!   distance between the request's source and the node.

use serde::{Deserialize, Serialize};

/// Clock rate (GHz) at which function CPU times are expressed.
pub const REF_GHZ: f64 = 3.0;
/// Mean Earth radius in km (haversine).
const EARTH_RADIUS_KM: f64 = 6371.0088;

/// A WGS84 position in decimal degrees.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct GeoPoint {
    /// Latitude, degrees north.
    pub lat: f64,
    /// Longitude, degrees east.
    pub lon: f64,
}

impl GeoPoint {
    /// A point from latitude and longitude in degrees.
    pub const fn new(lat: f64, lon: f64) -> Self {
        Self { lat, lon }
    }

    /// Great-circle (haversine) distance to `other` in km.
    pub fn distance_km(&self, other: &GeoPoint) -> f64 {
        self.origin().distance_km(other)
    }

    /// This point as the origin of several distances: its latitude's cosine computed once.
    pub fn origin(&self) -> Origin {
        let lat = self.lat.to_radians();
        Origin {
            lat,
            cos_lat: lat.cos(),
            lon: self.lon,
        }
    }
}

/// A [`GeoPoint`] prepared by [`GeoPoint::origin`]; its distances are [`GeoPoint::distance_km`]'s,
/// bit for bit.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Origin {
    lat: f64,
    cos_lat: f64,
    lon: f64,
}

impl Origin {
    /// Great-circle (haversine) distance to `other` in km.
    pub fn distance_km(&self, other: &GeoPoint) -> f64 {
        let (p1, p2) = (self.lat, other.lat.to_radians());
        let dp = p2 - p1;
        let dl = (other.lon - self.lon).to_radians();
        let a = (dp / 2.0).sin().powi(2) + self.cos_lat * p2.cos() * (dl / 2.0).sin().powi(2);
        2.0 * EARTH_RADIUS_KM * a.sqrt().min(1.0).asin()
    }
}

/// What a function needs per request (the paper's p_k, f_k, c_k, s_k, alpha_k, d_k, O_k).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FunctionProfile {
    /// CPU time per request in ms at [`REF_GHZ`] (p_k).
    pub cpu_ms: f64,
    /// vCPU cores one request uses while it runs (f_k).
    pub cores: f64,
    /// Memory of one container in MB (c_k).
    pub memory_mb: f64,
    /// Container image size in MB (s_k).
    pub image_mb: f64,
    /// Container initialisation time in ms (alpha_k).
    pub init_ms: f64,
    /// Typical request payload in KB (d_k); a request may carry its own size.
    pub input_kb: f64,
    /// Default latency objective in ms (O_k); a request may carry its own.
    pub slo_ms: f64,
}

impl From<&geofaas_config::FunctionConfig> for FunctionProfile {
    /// The profile a topology's `[[function]]` declares (one core per instance).
    fn from(f: &geofaas_config::FunctionConfig) -> Self {
        Self {
            cpu_ms: f.cpu_ms,
            cores: 1.0,
            memory_mb: f.memory_mb,
            image_mb: f.image_mb,
            init_ms: f.init_ms,
            input_kb: f.input_kb,
            slo_ms: f.slo_ms,
        }
    }
}

/// One node's static capacity (F_v, C_v, B_v and its clock). Names live beside it
/// (`Topology::ids`) so that this stays `Copy` on the decision path.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct NodeSpec {
    /// Where the node is.
    pub location: GeoPoint,
    /// vCPU cores (F_v).
    pub cores: f64,
    /// CPU clock in GHz.
    pub ghz: f64,
    /// Memory in MB (C_v).
    pub memory_mb: f64,
    /// Bandwidth for pulling images in Mbit/s (B_v).
    pub bandwidth_mbps: f64,
    /// Extra one-way access delay in ms for reaching this node (e.g. a remote cloud region).
    pub access_ms: f64,
}

/// Link rate between a source and a node (the paper's epsilon_{s,v}) plus propagation.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LinkModel {
    /// Rate in Mbit/s when source and node are co-located (same site).
    pub local_mbps: f64,
    /// Rate in Mbit/s to a node at distance 0 over the backhaul; it halves every `halving_km`.
    pub remote_mbps: f64,
    /// Distance in km over which the backhaul rate halves.
    pub halving_km: f64,
    /// Distance below which source and node count as co-located, km.
    pub colocated_km: f64,
    /// Signal speed for propagation, km per ms (about 2/3 of c in fibre).
    pub km_per_ms: f64,
}

impl Default for LinkModel {
    fn default() -> Self {
        Self {
            local_mbps: 1000.0,
            remote_mbps: 400.0,
            halving_km: 1.0,
            colocated_km: 0.05,
            km_per_ms: 200.0,
        }
    }
}

impl LinkModel {
    /// Transmission rate in Mbit/s over `dist_km`.
    pub fn rate_mbps(&self, dist_km: f64) -> f64 {
        if dist_km <= self.colocated_km {
            self.local_mbps
        } else {
            self.remote_mbps / (1.0 + dist_km / self.halving_km)
        }
    }
}

/// The three latency terms of one placement, in ms.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct LatencyBreakdown {
    /// Cold-start latency (0 when a warm container is reused).
    pub cold_ms: f64,
    /// Wait for a busy warm container to finish its current work (0 unless queued).
    pub queue_ms: f64,
    /// Computation latency.
    pub comp_ms: f64,
    /// Communication latency.
    pub comm_ms: f64,
}

impl LatencyBreakdown {
    /// End-to-end latency (Eq. 4 summand).
    pub fn total(&self) -> f64 {
        self.cold_ms + self.queue_ms + self.comp_ms + self.comm_ms
    }
}

/// Cold start of `f` on a node with image bandwidth `bandwidth_mbps` (Eq. 1): pull + init.
pub fn cold_start_ms(f: &FunctionProfile, bandwidth_mbps: f64) -> f64 {
    f.image_mb * 8.0 / bandwidth_mbps * 1000.0 + f.init_ms
}

/// Computation time of `f` on a node clocked at `ghz` (Eq. 2).
pub fn compute_ms(f: &FunctionProfile, ghz: f64) -> f64 {
    f.cpu_ms / f.cores * (REF_GHZ / ghz)
}

/// Communication time of `input_kb` over `dist_km` (Eq. 3 plus propagation and access delay).
pub fn comm_ms(link: &LinkModel, input_kb: f64, dist_km: f64, access_ms: f64) -> f64 {
    input_kb * 8.0 / link.rate_mbps(dist_km) + dist_km / link.km_per_ms + access_ms
}

/// Full breakdown for a request of `f` with `input_kb` from `source` placed on `node`.
pub fn latency(
    link: &LinkModel,
    f: &FunctionProfile,
    input_kb: f64,
    source: &GeoPoint,
    node: &NodeSpec,
    new_container: bool,
) -> LatencyBreakdown {
    let dist = source.distance_km(&node.location);
    LatencyBreakdown {
        cold_ms: if new_container {
            cold_start_ms(f, node.bandwidth_mbps)
        } else {
            0.0
        },
        queue_ms: 0.0,
        comp_ms: compute_ms(f, node.ghz),
        comm_ms: comm_ms(link, input_kb, dist, node.access_ms),
    }
}

#[cfg(test)]
mod tests;
