//! Property tests of the two parsers that take outside input: `X-Client-Location` and the
//! topology file. Raw and structured inputs; the parsers must never panic, must accept what
//! they print, and must keep every accepted value in range. (The libFuzzer targets in `fuzz/`
//! run the same properties for longer: `scripts/fuzz.sh`.)

use proptest::prelude::*;

use crate::{LatLon, Topology};

/// The structure of a location header, with junk mixed in.
fn location_like() -> impl Strategy<Value = String> {
    let number = prop_oneof![
        any::<f64>().prop_map(|f| f.to_string()),
        (-200.0f64..200.0).prop_map(|f| format!("{f:.5}")),
        Just("nan".to_owned()),
        Just("inf".to_owned()),
        Just("-0".to_owned()),
        "[0-9eE+.-]{0,12}",
    ];
    (number.clone(), number.clone(), "[ ,;=a-z0-9.]{0,8}", number)
        .prop_map(|(lat, lon, sep, acc)| format!("{lat},{lon}{sep};acc={acc}"))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 4096, ..ProptestConfig::default() })]

    #[test]
    fn location_parser_never_panics_on_raw_text(s in "\\PC{0,64}") {
        if let Ok(p) = s.parse::<LatLon>() {
            prop_assert!((-90.0..=90.0).contains(&p.lat) && (-180.0..=180.0).contains(&p.lon));
        }
    }

    #[test]
    fn location_parser_keeps_accepted_values_in_range(s in location_like()) {
        if let Ok(p) = s.parse::<LatLon>() {
            prop_assert!(p.lat.is_finite() && p.lon.is_finite());
            prop_assert!((-90.0..=90.0).contains(&p.lat) && (-180.0..=180.0).contains(&p.lon));
        }
    }

    #[test]
    fn printed_locations_parse_back(lat in -90.0f64..=90.0, lon in -180.0f64..=180.0) {
        let p = LatLon::new(lat, lon).unwrap();
        prop_assert_eq!(p.to_string().parse::<LatLon>().unwrap(), p);
    }
}

/// A topology made of the Berlin example with one line replaced or inserted: structured
/// mutations that reach validation, not only the TOML parser.
fn mutated_topology() -> impl Strategy<Value = String> {
    let base = include_str!("../../examples/berlin.toml");
    let lines: Vec<String> = base.lines().map(str::to_owned).collect();
    let n = lines.len();
    let value = prop_oneof![
        "[a-z_]{1,12} = [-0-9.e]{1,10}",
        "[a-z_.]{1,12} = \"[^\"\\\\]{0,20}\"",
        "(area|location|listen|public_url|role|id|name|slo_ms|cpu_ms) = \"[ -~]{0,30}\"",
        "\\[\\[?[a-z.]{1,10}\\]\\]?",
        "area\\.(wkt|circle|hexagon) = [ -~]{0,40}",
        "\\PC{0,30}",
    ];
    (0..n, value, any::<bool>()).prop_map(move |(i, v, replace)| {
        let mut l = lines.clone();
        if replace {
            l[i] = v;
        } else {
            l.insert(i, v);
        }
        l.join("\n")
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2048, ..ProptestConfig::default() })]

    #[test]
    fn topology_parser_never_panics_on_raw_text(s in "\\PC{0,400}") {
        let _ = Topology::parse(&s, "fuzz.toml", std::path::Path::new("."));
    }

    #[test]
    fn topology_errors_name_the_file(s in mutated_topology()) {
        match Topology::parse(&s, "fuzz.toml", std::path::Path::new("../examples")) {
            Ok(t) => {
                // Whatever is accepted is a usable topology.
                prop_assert!(t.service_map().is_ok());
            }
            Err(e) => prop_assert!(e.to_string().contains("fuzz.toml"), "{e}"),
        }
    }
}
