use proptest::prelude::*;

use super::*;

fn header(v: &str) -> Result<Geohash, GeohashError> {
    Geohash::from_header(v.as_bytes())
}

#[test]
fn every_length_from_1_to_12_parses_and_halves_the_cell() {
    let full = "u336xps7ekqz";
    let mut last_accuracy = f64::INFINITY;
    for n in 1..=MAX_LEN {
        let g = header(&format!("\"{}\"", &full[..n])).unwrap();
        assert_eq!(g.as_str(), &full[..n]);
        let acc = g.accuracy_m();
        assert!(acc < last_accuracy, "length {n}: {acc} m");
        last_accuracy = acc;
        // Each longer geohash is a sub-cell of the shorter one.
        assert!(
            header(&format!("\"{}\"", &full[..n.saturating_sub(1).max(1)]))
                .unwrap()
                .contains(g.centre())
        );
    }
    assert!(last_accuracy < 0.05, "{last_accuracy}");
}

#[test]
fn known_cells_decode_to_their_centres() {
    // Wikipedia's example: ezs42 is 42.583..42.627 N, 5.625..5.581 W.
    let g = header("\"ezs42\"").unwrap();
    let c = g.centre();
    assert!(
        (c.lat - 42.605).abs() < 0.001 && (c.lon + 5.603).abs() < 0.001,
        "{c}"
    );
    // 5 characters: 4.9 km × 4.9 km, half-diagonal about 3.4 km (a bit less away from the equator).
    assert!(
        (3_000.0..3_500.0).contains(&g.accuracy_m()),
        "{}",
        g.accuracy_m()
    );
    // u336x is in Berlin.
    let berlin = header("\"u336x\"").unwrap().centre();
    assert!(berlin.distance_km(LatLon::new(52.52, 13.40).unwrap()) < 10.0);
    // One character: an eighth of the world in longitude, a quarter in latitude.
    let world = header("\"s\"").unwrap();
    assert_eq!(world.centre(), LatLon::new(22.5, 22.5).unwrap());
}

#[test]
fn structured_field_string_rules() {
    // Spaces around the item are allowed (RFC 8941 §4.2), parameters are ignored.
    assert_eq!(header(" \"u336x\" ").unwrap().as_str(), "u336x");
    assert_eq!(header("\"u336x\";v=1").unwrap().as_str(), "u336x");
    for bad in [
        "u336x",            // unquoted: a token, not a string
        "\"u336x",          // unterminated
        "u336x\"",          // a token followed by junk
        "'u336x'",          // single quotes
        "\"u336x\" x",      // junk after the item
        r#""u33\6x""#,      // \6 is not an escape
        "\"u33\u{7f}6\"",   // DEL is not printable
        "\"u33\t6\"",       // neither is a tab
        "\"u336x\",\"u3\"", // a list, not an item
        "?1",               // a boolean
        ":dTMzNng=:",       // a byte sequence
        "",
    ] {
        assert!(
            matches!(header(bad), Err(GeohashError::NotAString(_))),
            "{bad:?}: {:?}",
            header(bad)
        );
    }
    // Escapes decode, and what they decode to is then checked as a geohash.
    assert_eq!(
        header(r#""u3\"6""#).unwrap_err(),
        GeohashError::BadCharacter('"')
    );
    assert_eq!(
        header(r#""u3\\6""#).unwrap_err(),
        GeohashError::BadCharacter('\\')
    );
    // Non-ASCII bytes are no structured field at all.
    assert!(matches!(
        Geohash::from_header("\"u33é\"".as_bytes()),
        Err(GeohashError::NotAString(_))
    ));
}

#[test]
fn empty_long_and_foreign_characters_are_refused() {
    assert_eq!(header("\"\"").unwrap_err(), GeohashError::Empty);
    assert_eq!(
        header("\"u336xps7ekqzu\"").unwrap_err(),
        GeohashError::TooLong(13)
    );
    assert_eq!(
        header(&format!("\"{}\"", "s".repeat(40))).unwrap_err(),
        GeohashError::TooLong(40)
    );
    for (bad, c) in [
        ("u33a", 'a'),
        ("u33i", 'i'),
        ("u33l", 'l'),
        ("u33o", 'o'),
        ("U336X", 'U'),
        ("u336X", 'X'),
        ("u3 3", ' '),
        ("u3-3", '-'),
    ] {
        assert_eq!(
            header(&format!("\"{bad}\"")).unwrap_err(),
            GeohashError::BadCharacter(c),
            "{bad}"
        );
    }
    // The whole alphabet is accepted.
    for c in ALPHABET.chars() {
        assert!(Geohash::parse(&c.to_string()).is_ok(), "{c}");
    }
}

#[test]
fn the_poles_and_the_antimeridian_encode_into_their_own_cells() {
    // The geohash crate alone puts 90° N into the southernmost cell.
    for (lat, lon) in [(90.0, 0.0), (0.0, 180.0), (90.0, 180.0), (-90.0, -180.0)] {
        let p = LatLon::new(lat, lon).unwrap();
        for n in [1, 6, 12] {
            let g = Geohash::encode(p, n).unwrap();
            assert!(g.contains(p), "{p} at {n}: {g} {:?}", g.cell());
        }
    }
    assert_eq!(
        Geohash::encode(
            LatLon {
                lat: f64::NAN,
                lon: 0.0
            },
            5
        ),
        None
    );
}

proptest! {
    /// A point encoded at length n decodes to a cell of length n that contains it, whose
    /// centre is within the stated accuracy of the point, and the header value round-trips.
    #[test]
    fn encoded_points_lie_in_their_decoded_cell(
        lat in -90.0f64..=90.0,
        lon in -180.0f64..=180.0,
        n in 1usize..=MAX_LEN,
    ) {
        let p = LatLon::new(lat, lon).unwrap();
        let g = Geohash::encode(p, n).unwrap();
        prop_assert_eq!(g.as_str().len(), n);
        let back = Geohash::from_header(g.header_value().as_bytes()).unwrap();
        prop_assert_eq!(&back, &g);
        prop_assert!(back.contains(p), "{} not in {} {:?}", p, g, g.cell());
        // 1 mm of slack for the rounding of the distance.
        prop_assert!(p.distance_km(back.centre()) * 1000.0 <= back.accuracy_m() + 0.001);
    }

    /// Any string of 1-12 alphabet characters parses, and any other character is refused.
    #[test]
    fn alphabet_strings_parse_and_others_do_not(
        hash in "[0-9b-hjkmnp-z]{1,12}",
        bad in "[^0-9b-hjkmnp-z]",
    ) {
        prop_assert!(Geohash::parse(&hash).is_ok());
        let spoiled = format!("{hash}{bad}");
        prop_assert!(Geohash::parse(&spoiled).is_err());
    }
}
