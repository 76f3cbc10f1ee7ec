//! `Sec-CH-Geohash` values: never a panic; an accepted geohash is 1-12 alphabet characters
//! whose cell holds its centre, and its header value reads back as the same cell.
#![no_main]

use geofaas_config::Geohash;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(g) = Geohash::from_header(data) {
        assert!((1..=12).contains(&g.as_str().len()), "{data:?}");
        assert!(g.contains(g.centre()), "{data:?}");
        assert!(g.accuracy_m().is_finite(), "{data:?}");
        assert_eq!(Geohash::from_header(g.header_value().as_bytes()), Ok(g));
    }
});
