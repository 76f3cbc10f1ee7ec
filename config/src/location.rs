//! Points on the earth: WGS84 latitude/longitude, great-circle distance, and the
//! `X-Client-Location` header syntax (`<lat>,<lon>` with an optional `;acc=<metres>`).

use std::fmt;
use std::str::FromStr;

use geo::{Distance, Haversine, Point};
use serde::{Deserialize, Serialize};

/// A WGS84 position in decimal degrees.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LatLon {
    /// Latitude in degrees, -90..=90.
    pub lat: f64,
    /// Longitude in degrees, -180..=180.
    pub lon: f64,
}

/// Why a location string was rejected.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LocationError {
    /// Not of the form `<lat>,<lon>[;acc=<metres>]`.
    #[error("expected \"<lat>,<lon>\" in decimal degrees, e.g. \"52.51,13.32\"")]
    Syntax,
    /// A number is outside its range or not finite.
    #[error("{0} out of range")]
    Range(&'static str),
}

impl LatLon {
    /// A checked position.
    pub fn new(lat: f64, lon: f64) -> Result<Self, LocationError> {
        if !lat.is_finite() || !(-90.0..=90.0).contains(&lat) {
            return Err(LocationError::Range("latitude"));
        }
        if !lon.is_finite() || !(-180.0..=180.0).contains(&lon) {
            return Err(LocationError::Range("longitude"));
        }
        Ok(Self { lat, lon })
    }

    /// The point in geo's (x = lon, y = lat) order.
    pub fn point(self) -> Point<f64> {
        Point::new(self.lon, self.lat)
    }

    /// Parses an `X-Client-Location` value, `<lat>,<lon>` with an optional `;acc=<metres>`,
    /// into the position and the accuracy, when given.
    pub fn parse_with_accuracy(s: &str) -> Result<(Self, Option<f64>), LocationError> {
        let mut parts = s.split(';');
        let coords = parts.next().unwrap_or_default();
        let mut accuracy = None;
        for param in parts {
            let (key, value) = param.split_once('=').ok_or(LocationError::Syntax)?;
            if key.trim() != "acc" {
                return Err(LocationError::Syntax);
            }
            let acc: f64 = value.trim().parse().map_err(|_| LocationError::Syntax)?;
            if !acc.is_finite() || acc < 0.0 {
                return Err(LocationError::Range("accuracy"));
            }
            accuracy = Some(acc);
        }
        let (lat, lon) = coords.split_once(',').ok_or(LocationError::Syntax)?;
        let lat: f64 = lat.trim().parse().map_err(|_| LocationError::Syntax)?;
        let lon: f64 = lon.trim().parse().map_err(|_| LocationError::Syntax)?;
        Ok((Self::new(lat, lon)?, accuracy))
    }

    /// Great-circle distance in kilometres (haversine, mean earth radius).
    pub fn distance_km(self, other: LatLon) -> f64 {
        Haversine.distance(self.point(), other.point()) / 1000.0
    }
}

/// Maps an IP address to a position (an mmdb, a static table in tests).
///
/// Shared by the gateway (clients without a location header) and the DNS server (resolvers and
/// ECS subnets), so both place a client the same way.
pub trait GeoLocator: Send + Sync + fmt::Debug {
    /// The position of `ip`, or `None` when the database does not know it.
    fn locate(&self, ip: std::net::IpAddr) -> Option<LatLon>;
}

impl FromStr for LatLon {
    type Err = LocationError;

    /// Parses `<lat>,<lon>` with an optional `;acc=<metres>` suffix (the accuracy is checked
    /// and dropped; [`LatLon::parse_with_accuracy`] keeps it).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse_with_accuracy(s).map(|(p, _)| p)
    }
}

impl fmt::Display for LatLon {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{},{}", self.lat, self.lon)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_header_forms() {
        assert_eq!(
            "52.51,13.32".parse(),
            Ok(LatLon {
                lat: 52.51,
                lon: 13.32
            })
        );
        assert_eq!(
            " 52.51 , 13.32 ;acc=20".parse(),
            Ok(LatLon {
                lat: 52.51,
                lon: 13.32
            })
        );
        assert_eq!("52.51".parse::<LatLon>(), Err(LocationError::Syntax));
        assert_eq!("north,east".parse::<LatLon>(), Err(LocationError::Syntax));
        assert_eq!(
            "52.5,13.3;foo=1".parse::<LatLon>(),
            Err(LocationError::Syntax)
        );
        assert_eq!(
            "95,13".parse::<LatLon>(),
            Err(LocationError::Range("latitude"))
        );
        assert_eq!(
            "52,181".parse::<LatLon>(),
            Err(LocationError::Range("longitude"))
        );
        assert_eq!(
            "NaN,1".parse::<LatLon>(),
            Err(LocationError::Range("latitude"))
        );
    }

    #[test]
    fn accuracy_is_kept_when_given() {
        let p = LatLon::new(52.51, 13.32).unwrap();
        assert_eq!(
            LatLon::parse_with_accuracy("52.51,13.32;acc=25.5"),
            Ok((p, Some(25.5)))
        );
        assert_eq!(LatLon::parse_with_accuracy("52.51,13.32"), Ok((p, None)));
        assert_eq!(
            LatLon::parse_with_accuracy("52.51,13.32;acc=-1"),
            Err(LocationError::Range("accuracy"))
        );
    }

    #[test]
    fn berlin_to_london_is_about_930_km() {
        let berlin = LatLon::new(52.52, 13.405).unwrap();
        let london = LatLon::new(51.5074, -0.1278).unwrap();
        let d = berlin.distance_km(london);
        assert!((925.0..940.0).contains(&d), "{d}");
    }
}
