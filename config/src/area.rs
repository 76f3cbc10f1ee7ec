//! Service areas: how a topology writes them (WKT polygon or multipolygon, ENVELOPE,
//! hexagon, circle, world, or an entry of a GeoFaaS/DisGB registry) and the shape
//! the gateway and DNS test points against.

use std::path::{Path, PathBuf};

use geo::{
    BooleanOps, BoundingRect, Coord, Destination, Haversine, Intersects, LineString, MultiPolygon,
    Polygon, Rect,
};
use serde::{Deserialize, Serialize};

use crate::error::ShapeError;
use crate::location::LatLon;

/// A service area as written in the topology file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum AreaConfig {
    /// The whole earth (the cloud's area): `area = "world"`.
    World,
    /// WKT in lon-lat order: `POLYGON`, `MULTIPOLYGON`, or the registry's `ENVELOPE (minX, maxX, maxY, minY)`.
    Wkt(String),
    /// A hexagon regular in degree space, as GeoFaaS draws them: flat top, east/west vertices on the centre's latitude.
    Hexagon {
        /// Centre of the hexagon.
        center: LatLon,
        /// Distance from the centre to each vertex, in degrees.
        circumradius_deg: f64,
    },
    /// A circle on the earth's surface, drawn as a 64-gon.
    Circle {
        /// Centre of the circle.
        center: LatLon,
        /// Radius in kilometres.
        radius_km: f64,
    },
    /// The area of one broker in a GeoFaaS/DisGB registry JSON (`disgb-registry.json`).
    Registry {
        /// Path of the registry file, relative to the topology file.
        file: PathBuf,
        /// The `responsibleBroker.brokerId` whose `coveredArea` to use.
        broker: String,
    },
}

/// A parsed service area.
#[derive(Clone, Debug, PartialEq)]
pub enum Area {
    /// Every point on earth.
    World,
    /// A (multi)polygon in lon-lat degrees, with its bounding box for a fast reject.
    Shape {
        /// The polygons.
        shape: MultiPolygon<f64>,
        /// Bounding box of `shape`.
        bbox: Rect<f64>,
    },
}

impl Area {
    /// Whether the point lies in the area (a point on the boundary counts as inside).
    pub fn contains(&self, p: LatLon) -> bool {
        match self {
            Area::World => true,
            Area::Shape { shape, bbox } => {
                let c = Coord { x: p.lon, y: p.lat };
                let (min, max) = (bbox.min(), bbox.max());
                if c.x < min.x || c.x > max.x || c.y < min.y || c.y > max.y {
                    return false;
                }
                // `Contains` excludes the boundary; a client standing exactly on an edge must
                // still belong to someone, so boundaries count as inside.
                use geo::{coordinate_position::CoordPos, CoordinatePosition};
                shape.coordinate_position(&c) != CoordPos::Outside
            }
        }
    }

    /// Whether all of `cell` (in geo's x = lon, y = lat order) lies in the area, its boundary
    /// counting as inside (as in [`Area::contains`]).
    pub fn covers(&self, cell: &Rect<f64>) -> bool {
        match self {
            Area::World => true,
            Area::Shape { shape, bbox } => {
                let (min, max) = (bbox.min(), bbox.max());
                let (cmin, cmax) = (cell.min(), cell.max());
                if cmin.x < min.x || cmax.x > max.x || cmin.y < min.y || cmax.y > max.y {
                    return false;
                }
                use geo::Contains;
                shape.contains(cell)
            }
        }
    }

    /// Whether any point of `cell`, its edges included, lies in the area.
    pub fn touches(&self, cell: &Rect<f64>) -> bool {
        match self {
            Area::World => true,
            Area::Shape { shape, bbox } => bbox.intersects(cell) && shape.intersects(cell),
        }
    }

    /// Whether the area is the whole earth.
    pub fn is_world(&self) -> bool {
        matches!(self, Area::World)
    }

    /// The polygons, or `None` for the world.
    pub fn shape(&self) -> Option<&MultiPolygon<f64>> {
        match self {
            Area::World => None,
            Area::Shape { shape, .. } => Some(shape),
        }
    }

    /// The area as WKT (for `/registry` and logs).
    pub fn to_wkt(&self) -> String {
        match self {
            Area::World => "ENVELOPE (-180, 180, 90, -90)".to_owned(),
            Area::Shape { shape, .. } => {
                use wkt::ToWkt;
                shape.wkt_string()
            }
        }
    }

    /// Approximate width in metres of the overlap of two areas (`None` when they do not overlap).
    ///
    /// Width is estimated as 2·area/perimeter of the intersection in a local metric projection,
    /// which is exact for a long thin strip: the slivers between adjacent hexagons.
    pub fn overlap_width_m(&self, other: &Area) -> Option<f64> {
        let (Area::Shape { shape: a, bbox: ra }, Area::Shape { shape: b, bbox: rb }) =
            (self, other)
        else {
            return None;
        };
        if !ra.intersects(rb) {
            return None;
        }
        let inter = a.intersection(b);
        if inter.0.is_empty() {
            return None;
        }
        let metric = to_local_metres(&inter);
        use geo::{Area as _, Euclidean, Length};
        let area = metric.unsigned_area();
        if area <= 1e-6 {
            return None;
        }
        let perimeter: f64 = metric
            .0
            .iter()
            .map(|p| Euclidean.length(p.exterior()))
            .sum();
        Some(2.0 * area / perimeter)
    }

    pub(crate) fn from_shape(shape: MultiPolygon<f64>) -> Result<Self, ShapeError> {
        let bbox = shape
            .bounding_rect()
            .ok_or_else(|| ShapeError("the shape has no points".into()))?;
        Ok(Area::Shape { shape, bbox })
    }
}

/// Equirectangular projection around the shape's first vertex: good to well under 1% over a city.
fn to_local_metres(shape: &MultiPolygon<f64>) -> MultiPolygon<f64> {
    use geo::MapCoords;
    let origin = shape
        .0
        .first()
        .and_then(|p| p.exterior().0.first().copied())
        .unwrap_or(Coord { x: 0.0, y: 0.0 });
    let kx = 111_320.0 * origin.y.to_radians().cos();
    let ky = 110_540.0;
    shape.map_coords(|c| Coord {
        x: (c.x - origin.x) * kx,
        y: (c.y - origin.y) * ky,
    })
}

impl AreaConfig {
    /// Parses the area; registry paths are resolved against `base_dir`.
    pub fn build(&self, base_dir: &Path) -> Result<Area, ShapeError> {
        match self {
            AreaConfig::World => Ok(Area::World),
            AreaConfig::Wkt(text) => parse_wkt(text),
            AreaConfig::Hexagon {
                center,
                circumradius_deg,
            } => {
                positive(*circumradius_deg, "circumradius_deg")?;
                Area::from_shape(hexagon(*center, *circumradius_deg).into())
            }
            AreaConfig::Circle { center, radius_km } => {
                positive(*radius_km, "radius_km")?;
                Area::from_shape(circle(*center, *radius_km).into())
            }
            AreaConfig::Registry { file, broker } => {
                let path = base_dir.join(file);
                let text = std::fs::read_to_string(&path)
                    .map_err(|e| ShapeError(format!("cannot read {}: {e}", path.display())))?;
                let wkt = crate::registry::broker_area(&text, broker)
                    .map_err(|e| ShapeError(format!("{}: {e}", path.display())))?;
                parse_wkt(&wkt)
            }
        }
    }
}

fn positive(v: f64, name: &str) -> Result<(), ShapeError> {
    if v.is_finite() && v > 0.0 {
        Ok(())
    } else {
        Err(ShapeError(format!("{name} must be a positive number")))
    }
}

/// Parses WKT `POLYGON`/`MULTIPOLYGON` or the registry's `ENVELOPE (minX, maxX, maxY, minY)`.
pub fn parse_wkt(text: &str) -> Result<Area, ShapeError> {
    let trimmed = text.trim();
    if trimmed.len() >= 8 && trimmed[..8].eq_ignore_ascii_case("ENVELOPE") {
        return parse_envelope(&trimmed[8..]);
    }
    let geom: wkt::Wkt<f64> = trimmed
        .parse()
        .map_err(|e| ShapeError(format!("not valid WKT: {e}")))?;
    let geom: geo::Geometry<f64> = geom
        .try_into()
        .map_err(|e| ShapeError(format!("unsupported WKT: {e}")))?;
    let shape = match geom {
        geo::Geometry::Polygon(p) => MultiPolygon(vec![p]),
        geo::Geometry::MultiPolygon(m) => m,
        other => {
            return Err(ShapeError(format!(
                "expected POLYGON or MULTIPOLYGON, got {}",
                geometry_name(&other)
            )))
        }
    };
    for poly in &shape.0 {
        if poly.exterior().0.len() < 4 {
            return Err(ShapeError(
                "a polygon needs at least 3 distinct vertices".into(),
            ));
        }
        for c in poly.exterior().coords() {
            LatLon::new(c.y, c.x).map_err(|e| {
                ShapeError(format!(
                    "vertex ({} {}): {e} (WKT is lon lat order)",
                    c.x, c.y
                ))
            })?;
        }
    }
    Area::from_shape(shape)
}

fn geometry_name(g: &geo::Geometry<f64>) -> &'static str {
    match g {
        geo::Geometry::Point(_) => "POINT",
        geo::Geometry::Line(_) | geo::Geometry::LineString(_) => "LINESTRING",
        geo::Geometry::MultiPoint(_) => "MULTIPOINT",
        geo::Geometry::MultiLineString(_) => "MULTILINESTRING",
        _ => "another geometry",
    }
}

fn parse_envelope(rest: &str) -> Result<Area, ShapeError> {
    let inner = rest
        .trim()
        .strip_prefix('(')
        .and_then(|s| s.strip_suffix(')'))
        .ok_or_else(|| ShapeError("ENVELOPE must be ENVELOPE (minX, maxX, maxY, minY)".into()))?;
    let nums: Result<Vec<f64>, _> = inner.split(',').map(|n| n.trim().parse::<f64>()).collect();
    let nums = nums.map_err(|_| ShapeError("ENVELOPE takes four numbers".into()))?;
    let [min_x, max_x, max_y, min_y] = nums[..] else {
        return Err(ShapeError(
            "ENVELOPE takes four numbers: minX, maxX, maxY, minY".into(),
        ));
    };
    if min_x >= max_x || min_y >= max_y {
        return Err(ShapeError(
            "ENVELOPE is empty (min must be below max)".into(),
        ));
    }
    if min_x <= -180.0 && max_x >= 180.0 && min_y <= -90.0 && max_y >= 90.0 {
        return Ok(Area::World);
    }
    Area::from_shape(
        Rect::new((min_x, min_y), (max_x, max_y))
            .to_polygon()
            .into(),
    )
}

/// A hexagon regular in degree space with east/west vertices on the centre's latitude.
pub fn hexagon(center: LatLon, r: f64) -> Polygon<f64> {
    let (cx, cy) = (center.lon, center.lat);
    let h = r * 3f64.sqrt() / 2.0;
    let ring = vec![
        (cx - r / 2.0, cy - h),
        (cx + r / 2.0, cy - h),
        (cx + r, cy),
        (cx + r / 2.0, cy + h),
        (cx - r / 2.0, cy + h),
        (cx - r, cy),
        (cx - r / 2.0, cy - h),
    ];
    Polygon::new(LineString::from(ring), vec![])
}

/// A geodesic circle approximated by 64 vertices.
pub fn circle(center: LatLon, radius_km: f64) -> Polygon<f64> {
    let c = center.point();
    // 65 points exactly (the ring is closed): a fleet of 10 000 circles keeps them all.
    let mut ring: Vec<Coord<f64>> = Vec::with_capacity(65);
    ring.extend((0..64).map(|i| {
        Haversine
            .destination(c, f64::from(i) * 360.0 / 64.0, radius_km * 1000.0)
            .0
    }));
    ring.push(ring[0]);
    Polygon::new(LineString(ring), vec![])
}
