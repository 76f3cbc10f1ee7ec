//! A per-thread cache in front of the shared location cache: client address → (prefix of the database
//! network that matched, ranking), so that a repeated client costs one small hash lookup instead of a
//! database tree walk and a lookup in the shared cache, with nothing shared between the UDP threads.
//!
//! Entries never go stale: a handler's database and routing table do not change during its life, and
//! health is applied per query by the caller. Keys carry the handler's id because one process may run
//! several handlers (tests do). The map is cleared when it reaches [`LOCAL_ENTRIES`].

use std::cell::RefCell;
use std::collections::HashMap;
use std::hash::BuildHasherDefault;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};

use super::Fnv;
use crate::route::Ranking;

/// Client addresses kept per thread.
const LOCAL_ENTRIES: usize = 16_384;

/// The prefix of the matched database network (`None`: not located) and the node ranking.
pub(super) type Located = (Option<u8>, Ranking);

type Map = HashMap<(u64, IpAddr), Located, BuildHasherDefault<Fnv>>;

thread_local! {
    static LOCAL: RefCell<Map> = RefCell::default();
}

/// A process-unique id for a new handler.
pub(super) fn next_id() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// Calls `f` with what is known about `ip` for handler `id`, computing it with `miss` when this thread
/// has not seen it.
pub(super) fn with<R>(
    id: u64,
    ip: IpAddr,
    miss: impl FnOnce() -> Located,
    f: impl FnOnce(Option<u8>, &[u16]) -> R,
) -> R {
    let hit = LOCAL.with_borrow(|m| m.get(&(id, ip)).map(|(p, r)| (*p, r.clone())));
    let (prefix, ranking) = match hit {
        Some(v) => v,
        None => {
            let v = miss();
            LOCAL.with_borrow_mut(|m| {
                if m.len() >= LOCAL_ENTRIES {
                    m.clear();
                }
                m.insert((id, ip), v.clone());
            });
            v
        }
    };
    f(prefix, &ranking)
}
