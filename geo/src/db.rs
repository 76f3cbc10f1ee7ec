//! IP geolocation from a MaxMind-format database (`.mmdb`).
//!
//! Two record schemas are read: GeoIP2/GeoLite2 City (`location.latitude`, `location.longitude`) and
//! DB-IP City Lite's flat one (`latitude`, `longitude` at the top level). A lookup walks the search tree
//! first and reports the matched network; the record is decoded only when the caller's cache has no entry
//! for that network, so the cache holds one entry per database network, not one per client address.

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use geofaas_config::LatLon;
use maxminddb::Reader;
use serde::Deserialize;

use crate::error::GeoError;

/// A matched database network: its address with the host bits cleared, and its prefix length.
pub type NetKey = (IpAddr, u8);

/// An opened `.mmdb` file.
#[derive(Debug)]
pub struct GeoDb {
    reader: Reader<Vec<u8>>,
    path: PathBuf,
}

/// The fields of either schema that carry a position; every other field is skipped unread.
#[derive(Debug, Deserialize)]
struct Record {
    /// GeoIP2 City.
    location: Option<Coordinates>,
    /// DB-IP Lite flat schema.
    latitude: Option<Degrees>,
    /// DB-IP Lite flat schema.
    longitude: Option<Degrees>,
}

#[derive(Debug, Deserialize)]
struct Coordinates {
    latitude: Option<Degrees>,
    longitude: Option<Degrees>,
}

/// A coordinate stored as either MMDB number type: GeoIP2 writes `double`, DB-IP writes `float`, and
/// maxminddb's `f64` decoding accepts only `double`.
#[derive(Clone, Copy, Debug)]
struct Degrees(f64);

impl<'de> Deserialize<'de> for Degrees {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Number;
        impl serde::de::Visitor<'_> for Number {
            type Value = Degrees;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a number of degrees")
            }
            fn visit_f64<E>(self, v: f64) -> Result<Degrees, E> {
                Ok(Degrees(v))
            }
            fn visit_f32<E>(self, v: f32) -> Result<Degrees, E> {
                // Through the shortest decimal form, so 52.4f32 becomes 52.4, not 52.400001525878906.
                Ok(Degrees(v.to_string().parse().unwrap_or(f64::from(v))))
            }
            fn visit_i64<E>(self, v: i64) -> Result<Degrees, E> {
                Ok(Degrees(v as f64))
            }
            fn visit_u64<E>(self, v: u64) -> Result<Degrees, E> {
                Ok(Degrees(v as f64))
            }
        }
        d.deserialize_any(Number)
    }
}

impl Record {
    fn position(&self) -> Option<LatLon> {
        let (lat, lon) = match &self.location {
            Some(Coordinates {
                latitude: Some(lat),
                longitude: Some(lon),
            }) => (lat.0, lon.0),
            _ => (self.latitude?.0, self.longitude?.0),
        };
        // A record with coordinates out of range is treated as unlocated, not as an error.
        LatLon::new(lat, lon).ok()
    }
}

impl GeoDb {
    /// Opens and checks the database file.
    pub fn open(path: &Path) -> Result<Self, GeoError> {
        let reader = Reader::open_readfile(path).map_err(|e| GeoError::GeoIp {
            path: path.to_owned(),
            message: e.to_string(),
        })?;
        Ok(Self {
            reader,
            path: path.to_owned(),
        })
    }

    /// The file this database was read from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The network of the database that contains `ip`, and the position recorded for it (`None` when
    /// the network has no record or no coordinates).
    pub fn locate(&self, ip: IpAddr) -> Result<(NetKey, Option<LatLon>), GeoError> {
        self.locate_with(ip, |_| None, |loc| loc)
            .map(|(key, loc, _)| (key, loc))
    }

    /// Like [`GeoDb::locate`], but asks `cached` first with the matched network and calls `build` with
    /// the decoded position only on a miss; returns the network, the cached or built value, and whether
    /// it was built (a cache miss the caller should store).
    pub fn locate_with<V>(
        &self,
        ip: IpAddr,
        cached: impl FnOnce(&NetKey) -> Option<V>,
        build: impl FnOnce(Option<LatLon>) -> V,
    ) -> Result<(NetKey, V, bool), GeoError> {
        let hit = self
            .reader
            .lookup(ip)
            .map_err(|e| GeoError::Lookup(e.to_string()))?;
        let network = hit.network().map_err(|e| GeoError::Lookup(e.to_string()))?;
        let key = (network.network(), network.prefix());
        if let Some(v) = cached(&key) {
            return Ok((key, v, false));
        }
        let record: Option<Record> = hit.decode().map_err(|e| GeoError::Lookup(e.to_string()))?;
        Ok((key, build(record.and_then(|r| r.position())), true))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::write::{demo_entries, write_mmdb, MmdbSchema};

    #[test]
    fn both_schemas_give_the_position_and_the_matched_network() {
        let dir = tempfile::tempdir().expect("tempdir");
        for schema in [MmdbSchema::GeoIp2City, MmdbSchema::DbIpFlat] {
            let path = dir.path().join(format!("{schema:?}.mmdb"));
            write_mmdb(&path, &demo_entries(), schema).expect("written");
            let db = GeoDb::open(&path).expect("opens");
            let (net, loc) = db
                .locate("198.51.100.77".parse().expect("ip"))
                .expect("lookup");
            assert_eq!(net, ("198.51.100.0".parse().expect("ip"), 24), "{schema:?}");
            let loc = loc.expect("located");
            assert!(
                (loc.lat - 52.40).abs() < 1e-4 && (loc.lon - 13.06).abs() < 1e-4,
                "{schema:?}: {loc}"
            );
            let (_, none) = db
                .locate("100.64.0.1".parse().expect("ip"))
                .expect("lookup");
            assert_eq!(none, None);
        }
    }
}
