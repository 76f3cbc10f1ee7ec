//! Where a tracked client is heading: its velocity from its last locations, and the first
//! other node's area its path enters within the horizon.
//!
//! Pure functions over the fixes and the topology's [`ServiceMap`], tested on their own. The
//! model is constant velocity on the sphere: the great-circle bearing and speed from the oldest
//! kept fix to the newest, extrapolated along that bearing from the newest.

use std::time::{Duration, Instant};

use geo::{Bearing, Destination, Distance, Haversine};
use geofaas_config::{LatLon, NodeEntry, ServiceMap};

/// One location of a client and when this node received it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Fix {
    /// When the call that carried it arrived.
    pub at: Instant,
    /// Where the client was.
    pub point: LatLon,
}

/// A client's velocity.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Heading {
    /// Where the client was last seen.
    pub from: LatLon,
    /// Degrees clockwise from north.
    pub bearing_deg: f64,
    /// Metres per second.
    pub speed_mps: f64,
}

/// Where a client's path leaves this node's area.
#[derive(Debug, Clone, Copy)]
pub struct Crossing<'a> {
    /// The node responsible for the first point of the path outside this node's area.
    pub target: &'a NodeEntry,
    /// In how many seconds the client is expected there.
    pub in_s: f64,
    /// Where the client is expected then: the first sampled point of the path in `target`'s
    /// area.
    pub point: LatLon,
}

/// Fewest and most points sampled along the path, and the spacing aimed at between them.
const MIN_SAMPLES: usize = 8;
const MAX_SAMPLES: usize = 128;
const SAMPLE_SPACING_M: f64 = 25.0;

/// The client's velocity from the oldest of `fixes` to the newest (in arrival order), or
/// `None` when it stands still: fewer than two fixes, no time between them, or slower than
/// `min_speed_mps`.
pub fn heading(fixes: &[Fix], min_speed_mps: f64) -> Option<Heading> {
    let (first, last) = (fixes.first()?, fixes.last()?);
    let dt = last.at.checked_duration_since(first.at)?.as_secs_f64();
    if dt <= 0.0 {
        return None;
    }
    let (a, b) = (first.point.point(), last.point.point());
    let speed_mps = Haversine.distance(a, b) / dt;
    if !speed_mps.is_finite() || speed_mps < min_speed_mps || speed_mps == 0.0 {
        return None;
    }
    Some(Heading {
        from: last.point,
        bearing_deg: Haversine.bearing(a, b),
        speed_mps,
    })
}

/// Where the client is `after` from its last fix, if it keeps its heading.
pub fn ahead(h: &Heading, after: Duration) -> LatLon {
    let p = Haversine.destination(
        h.from.point(),
        h.bearing_deg,
        h.speed_mps * after.as_secs_f64(),
    );
    let lon = (p.x() + 540.0).rem_euclid(360.0) - 180.0;
    LatLon {
        lat: p.y().clamp(-90.0, 90.0),
        lon,
    }
}

/// The first node other than `me` whose area the path enters within `horizon`, sampled every
/// ~25 m of the path (8 to 128 samples); `None` when the client is not in `me`'s area now (it
/// is served here for another reason) or stays in it.
pub fn crossing<'a>(
    map: &'a ServiceMap,
    me: &str,
    h: &Heading,
    horizon: Duration,
) -> Option<Crossing<'a>> {
    if map.responsible(h.from).id != me {
        return None;
    }
    let length_m = h.speed_mps * horizon.as_secs_f64();
    let samples = ((length_m / SAMPLE_SPACING_M).ceil() as usize).clamp(MIN_SAMPLES, MAX_SAMPLES);
    (1..=samples).find_map(|k| {
        let after = horizon.mul_f64(k as f64 / samples as f64);
        let point = ahead(h, after);
        let target = map.responsible(point);
        (target.id != me).then_some(Crossing {
            target,
            in_s: after.as_secs_f64(),
            point,
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use geofaas_config::Topology;

    /// Two square edges side by side on Melbourne's latitude (west: 144.90-144.96, east:
    /// 144.96-145.02, both -37.84 to -37.78), the cloud in Sydney.
    fn map() -> ServiceMap {
        let text = r#"
[[node]]
id = "west"
role = "edge"
location = { lat = -37.81, lon = 144.93 }
area.wkt = "ENVELOPE (144.90, 144.96, -37.78, -37.84)"
public_url = "https://127.0.0.1:1"
listen = "127.0.0.1:1"

[[node]]
id = "east"
role = "edge"
location = { lat = -37.81, lon = 144.99 }
area.wkt = "ENVELOPE (144.96, 145.02, -37.78, -37.84)"
public_url = "https://127.0.0.1:2"
listen = "127.0.0.1:2"

[[node]]
id = "cloud"
role = "cloud"
location = { lat = -33.87, lon = 151.21 }
area = "world"
public_url = "https://127.0.0.1:3"
listen = "127.0.0.1:3"
"#;
        Topology::parse(text, "path.toml", std::path::Path::new("."))
            .unwrap()
            .service_map()
            .unwrap()
    }

    fn walk(points: &[(f64, f64)], every: Duration) -> Vec<Fix> {
        let t0 = Instant::now();
        points
            .iter()
            .enumerate()
            .map(|(i, &(lat, lon))| Fix {
                at: t0 + every * i as u32,
                point: LatLon { lat, lon },
            })
            .collect()
    }

    #[test]
    fn a_walker_heading_east_is_measured_at_walking_pace_and_bearing() {
        // 0.0001° of longitude at -37.81° is about 8.8 m: 8.8 m per 5 s is ~1.76 m/s.
        let fixes = walk(
            &[(-37.81, 144.9500), (-37.81, 144.9501)],
            Duration::from_secs(5),
        );
        let h = heading(&fixes, 0.5).unwrap();
        assert!((h.speed_mps - 1.757).abs() < 0.01, "{h:?}");
        assert!((h.bearing_deg - 90.0).abs() < 0.1, "{h:?}");
        assert_eq!(h.from, fixes[1].point);
    }

    #[test]
    fn standing_still_or_too_few_fixes_is_no_heading() {
        let d = Duration::from_secs(1);
        assert_eq!(heading(&[], 0.5), None);
        assert_eq!(heading(&walk(&[(-37.81, 144.95)], d), 0.5), None);
        let still = walk(&[(-37.81, 144.95); 4], d);
        assert_eq!(heading(&still, 0.5), None);
        assert_eq!(
            heading(&still, 0.0),
            None,
            "zero speed is standing at any threshold"
        );
        // 1 m in 3 s is under 0.5 m/s: GPS jitter, not a walk.
        let jitter = walk(
            &[(-37.81, 144.95), (-37.81, 144.950_011_3)],
            Duration::from_secs(3),
        );
        assert_eq!(heading(&jitter, 0.5), None);
        assert!(heading(&jitter, 0.1).is_some());
        // Two fixes at the same instant give no speed.
        let same = walk(&[(-37.81, 144.95), (-37.81, 144.96)], Duration::ZERO);
        assert_eq!(heading(&same, 0.5), None);
    }

    #[test]
    fn extrapolation_follows_the_bearing_and_distance() {
        let h = Heading {
            from: LatLon {
                lat: -37.81,
                lon: 144.95,
            },
            bearing_deg: 0.0,
            speed_mps: 10.0,
        };
        let p = ahead(&h, Duration::from_secs(100));
        assert!((p.lon - 144.95).abs() < 1e-9);
        assert!((p.distance_km(h.from) - 1.0).abs() < 1e-3, "{p:?}");
        assert!(p.lat > h.from.lat);
        // Across the antimeridian the longitude wraps into -180..180.
        let wrap = Heading {
            from: LatLon {
                lat: 0.0,
                lon: 179.999,
            },
            bearing_deg: 90.0,
            speed_mps: 1000.0,
        };
        let q = ahead(&wrap, Duration::from_secs(1));
        assert!((-180.0..-179.99).contains(&q.lon), "{q:?}");
    }

    #[test]
    fn a_path_that_enters_the_next_area_within_the_horizon_names_it() {
        let map = map();
        // 100 m west of the boundary at 144.96, walking east at 10 m/s: there in ~10 s.
        let h = Heading {
            from: LatLon {
                lat: -37.81,
                lon: 144.9589,
            },
            bearing_deg: 90.0,
            speed_mps: 10.0,
        };
        let c = crossing(&map, "west", &h, Duration::from_secs(15)).unwrap();
        assert_eq!(c.target.id, "east");
        assert!((9.0..=11.5).contains(&c.in_s), "{}", c.in_s);
        assert!(
            crossing(&map, "west", &h, Duration::from_secs(8)).is_none(),
            "beyond the horizon"
        );
        // Heading west, away from the boundary, the path stays in west's area...
        let away = Heading {
            bearing_deg: 270.0,
            ..h
        };
        assert!(crossing(&map, "west", &away, Duration::from_secs(15)).is_none());
        // ... until it leaves every edge: the cloud is next.
        let c = crossing(&map, "west", &away, Duration::from_secs(600)).unwrap();
        assert_eq!(c.target.id, "cloud");
    }

    #[test]
    fn a_client_outside_this_nodes_area_is_not_predicted_here() {
        let map = map();
        let h = Heading {
            from: LatLon {
                lat: -37.81,
                lon: 144.97,
            },
            bearing_deg: 90.0,
            speed_mps: 10.0,
        };
        assert!(crossing(&map, "west", &h, Duration::from_secs(600)).is_none());
        assert_eq!(
            crossing(&map, "east", &h, Duration::from_secs(600))
                .unwrap()
                .target
                .id,
            "cloud"
        );
    }

    #[test]
    fn measured_fixes_predict_the_crossing_end_to_end() {
        let map = map();
        // Four fixes 5 m apart, one a second, heading east towards 144.96 from ~60 m west of it.
        let lons = [144.95912, 144.95918, 144.95924, 144.9593];
        let pts: Vec<(f64, f64)> = lons.iter().map(|&lon| (-37.81, lon)).collect();
        let fixes = walk(&pts, Duration::from_secs(1));
        let h = heading(&fixes, 0.5).unwrap();
        let c = crossing(&map, "west", &h, Duration::from_secs(10));
        assert!(c.is_none(), "~60 m at ~5 m/s is ~12 s away: {c:?}");
        let c = crossing(&map, "west", &h, Duration::from_secs(20)).unwrap();
        assert_eq!(c.target.id, "east");
    }
}
