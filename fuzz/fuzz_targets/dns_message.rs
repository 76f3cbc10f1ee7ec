//! DNS messages as they arrive over UDP: the ECS option finder and parser (the geo DNS's own
//! code before hickory's) never panic, and what they accept is a well-formed client subnet;
//! hickory's decoder, which every other query goes through, never panics either.
#![no_main]

use geofaas_dns::ecs::{find_client_subnet, parse_ecs};
use hickory_proto::op::Message;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = Message::from_vec(data);
    let _ = find_client_subnet(data);
    if let Ok(subnet) = parse_ecs(data) {
        let _ = format!("{subnet:?}");
    }
});
