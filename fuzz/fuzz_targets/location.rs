//! `X-Client-Location` values: never a panic, accepted positions always in range.
#![no_main]

use geofaas_config::LatLon;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        if let Ok(p) = text.parse::<LatLon>() {
            assert!((-90.0..=90.0).contains(&p.lat), "{text:?}");
            assert!((-180.0..=180.0).contains(&p.lon), "{text:?}");
            assert_eq!(p.to_string().parse::<LatLon>(), Ok(p));
        }
    }
});
