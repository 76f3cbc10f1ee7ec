//! Client locations from CSV files with `name,lat,lon` rows (a header line is optional), as
//! the paper's mobility path and static clients.

use std::path::Path;

use anyhow::Context;
use geofaas_config::LatLon;

/// A named client location.
#[derive(Clone, Debug, PartialEq)]
pub struct Point {
    /// The row's name, e.g. `Kleinmachnow-0`.
    pub name: String,
    /// Where it is.
    pub location: LatLon,
}

/// Reads `name,lat,lon` rows; blank lines and `#` comments are skipped.
pub fn read_points(path: &Path) -> anyhow::Result<Vec<Point>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let mut points = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let fields: Vec<&str> = line.split(',').map(str::trim).collect();
        if i == 0 && fields.get(1).is_some_and(|f| f.eq_ignore_ascii_case("lat")) {
            continue;
        }
        let [name, lat, lon] = fields[..] else {
            anyhow::bail!(
                "{}:{}: expected name,lat,lon, found {line:?}",
                path.display(),
                i + 1
            );
        };
        let location = format!("{lat},{lon}")
            .parse::<LatLon>()
            .with_context(|| format!("{}:{}: bad location {lat},{lon}", path.display(), i + 1))?;
        points.push(Point {
            name: name.to_owned(),
            location,
        });
    }
    anyhow::ensure!(!points.is_empty(), "{}: no locations", path.display());
    Ok(points)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_paper_format_with_or_without_a_header() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("p.csv");
        std::fs::write(&p, "name,lat,lon\nA,52.5,13.4\n\n# note\nB, 52.4 ,13.0\n").unwrap();
        let pts = read_points(&p).unwrap();
        assert_eq!(pts.len(), 2);
        assert_eq!(pts[1].name, "B");
        assert_eq!(pts[1].location.lat, 52.4);
        std::fs::write(&p, "A,52.5,13.4\n").unwrap();
        assert_eq!(read_points(&p).unwrap().len(), 1);
        std::fs::write(&p, "A,95,13.4\n").unwrap();
        let err = format!("{:#}", read_points(&p).unwrap_err());
        assert!(err.contains("p.csv:1"), "{err}");
    }
}
