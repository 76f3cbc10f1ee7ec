//! Function names as the router sees them (percent-decoded path segments): the validator and
//! the header filter never panic, and an accepted name is always plain ASCII.
#![no_main]

use geofaas_config::function::valid_function_name;
use geofaas_config::headers::is_forwarded;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(name) = std::str::from_utf8(data) {
        if valid_function_name(name) {
            assert!(name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'));
            assert!(!name.contains("..") && !name.contains('/'));
        }
        let _ = is_forwarded(name);
    }
});
