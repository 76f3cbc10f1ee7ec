//! The `Sec-CH-Geohash` client hint (draft-pauly-httpbis-geohash-hint): a structured-field
//! string holding a geohash of 1-12 characters, e.g. `"u336x"` (with the double quotes).
//!
//! The structured-field syntax is read by the `sfv` crate (RFC 8941/9651: quotes required,
//! only `\"` and `\\` escaped, printable ASCII; parameters, which the draft defines none of,
//! are ignored), the geohash by the `geohash` crate. Only the lower-case base32 alphabet
//! `0123456789bcdefghjkmnpqrstuvwxyz` is accepted: geohashes are defined in lower case, and
//! one spelling per cell keeps `Vary: Sec-CH-Geohash` caches and logs unambiguous.
//!
//! A geohash names a cell, not a point: [`Geohash::centre`] is the position a call is
//! located at, [`Geohash::accuracy_m`] the distance from it to the cell's farthest corner.

use std::fmt;

use geo::Rect;

use crate::location::LatLon;

/// Most characters a geohash may have (60 bits: cells of about 3.7 cm × 1.9 cm).
pub const MAX_LEN: usize = 12;

/// The geohash alphabet (base32 without `a`, `i`, `l` and `o`).
const ALPHABET: &str = "0123456789bcdefghjkmnpqrstuvwxyz";

/// A geohash cell from a `Sec-CH-Geohash` value.
#[derive(Clone, Debug, PartialEq)]
pub struct Geohash {
    hash: String,
    cell: Rect<f64>,
}

/// Why a `Sec-CH-Geohash` value was rejected.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum GeohashError {
    /// Not a structured-field string (`"..."` with only `\"` and `\\` escaped, printable ASCII).
    #[error("expected a structured-field string such as \"u336x\" (with the double quotes): {0}")]
    NotAString(String),
    /// The string is empty.
    #[error("the geohash is empty")]
    Empty,
    /// More than [`MAX_LEN`] characters.
    #[error("the geohash has {0} characters; at most 12 are allowed")]
    TooLong(usize),
    /// A character outside the geohash alphabet.
    #[error("{0:?} is not a geohash character (0-9 and b-z without i, l, o; lower case)")]
    BadCharacter(char),
}

impl Geohash {
    /// Parses a `Sec-CH-Geohash` header value (the structured-field string, quotes included).
    pub fn from_header(value: &[u8]) -> Result<Self, GeohashError> {
        let item: sfv::Item = sfv::Parser::new(value)
            .parse()
            .map_err(|e| GeohashError::NotAString(e.to_string()))?;
        match item.bare_item {
            sfv::BareItem::String(s) => Self::parse(s.as_str()),
            _ => Err(GeohashError::NotAString("the value is not a string".into())),
        }
    }

    /// Parses a bare geohash (no quotes).
    pub fn parse(hash: &str) -> Result<Self, GeohashError> {
        if hash.is_empty() {
            return Err(GeohashError::Empty);
        }
        if let Some(c) = hash.chars().find(|c| !ALPHABET.contains(*c)) {
            return Err(GeohashError::BadCharacter(c));
        }
        if hash.len() > MAX_LEN {
            return Err(GeohashError::TooLong(hash.len()));
        }
        // Length and alphabet were checked above, which are all the crate refuses.
        let cell = geohash::decode_bbox(hash)
            .map_err(|_| GeohashError::NotAString(format!("{hash:?} does not decode")))?;
        Ok(Self {
            hash: hash.to_owned(),
            cell,
        })
    }

    /// The geohash of `p` with `len` characters (clamped to 1-12); `None` for a point off the
    /// earth (not finite, or beyond ±90°/±180°).
    pub fn encode(p: LatLon, len: usize) -> Option<Self> {
        if !p.lat.is_finite() || !p.lon.is_finite() {
            return None;
        }
        // The crate maps exactly 90° and 180° onto -90° and -180° (its fixed-point conversion
        // overflows there); a point a nanodegree inside lies in the same 12-character cell.
        let c = geo::Coord {
            x: p.lon.min(180.0 - 1e-9),
            y: p.lat.min(90.0 - 1e-9),
        };
        let hash = geohash::encode(c, len.clamp(1, MAX_LEN)).ok()?;
        Self::parse(&hash).ok()
    }

    /// The geohash's characters.
    pub fn as_str(&self) -> &str {
        &self.hash
    }

    /// The value to send as `Sec-CH-Geohash`: the geohash as a structured-field string.
    pub fn header_value(&self) -> String {
        // The alphabet needs no escaping.
        format!("\"{}\"", self.hash)
    }

    /// The cell, in geo's (x = lon, y = lat) order.
    pub fn cell(&self) -> Rect<f64> {
        self.cell
    }

    /// The cell's centre: where a client sending this geohash is taken to be.
    pub fn centre(&self) -> LatLon {
        let c = self.cell.center();
        LatLon { lat: c.y, lon: c.x }
    }

    /// Whether `p` lies in the cell (its edges included).
    pub fn contains(&self, p: LatLon) -> bool {
        let (min, max) = (self.cell.min(), self.cell.max());
        (min.y..=max.y).contains(&p.lat) && (min.x..=max.x).contains(&p.lon)
    }

    /// The accuracy in metres: the great-circle distance from the centre to the cell's
    /// farthest corner, so every point of the cell lies within it of [`Geohash::centre`]
    /// (5 characters: about 3.4 km; 7: about 108 m at the equator).
    pub fn accuracy_m(&self) -> f64 {
        let centre = self.centre();
        let (min, max) = (self.cell.min(), self.cell.max());
        [
            (min.y, min.x),
            (min.y, max.x),
            (max.y, min.x),
            (max.y, max.x),
        ]
        .into_iter()
        .map(|(lat, lon)| centre.distance_km(LatLon { lat, lon }) * 1000.0)
        .fold(0.0, f64::max)
    }
}

impl fmt::Display for Geohash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.hash)
    }
}

#[cfg(test)]
mod tests;
