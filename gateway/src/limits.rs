//! Rate limits per client address and per API key (governor's GCRA, the generic cell rate
//! algorithm), answering `429 Too Many Requests` with `Retry-After`.
//!
//! Both are off unless `[limits] per_client_rps` / `per_key_rps` are set: the demo and the
//! load tests run every client from one loopback address.

use std::hash::Hash;
use std::net::IpAddr;
use std::num::NonZeroU32;
use std::time::Duration;

use axum::http::StatusCode;
use geofaas_config::LimitSettings;
use governor::clock::Clock;
use governor::{DefaultKeyedRateLimiter, Quota};

use crate::error::ApiError;

/// Limiters keyed by more than this many clients forget the idle ones.
const RETAIN_ABOVE: usize = 100_000;

/// The rate limits of a node.
#[derive(Default)]
pub struct RateLimits {
    per_client: Option<DefaultKeyedRateLimiter<IpAddr>>,
    per_key: Option<DefaultKeyedRateLimiter<String>>,
}

impl std::fmt::Debug for RateLimits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateLimits")
            .field("per_client", &self.per_client.is_some())
            .field("per_key", &self.per_key.is_some())
            .finish()
    }
}

fn quota(rps: f64, burst: u32) -> Option<Quota> {
    if rps <= 0.0 || !rps.is_finite() {
        return None;
    }
    let burst = if burst == 0 {
        (2.0 * rps).ceil().min(f64::from(u32::MAX)) as u32
    } else {
        burst
    };
    Quota::with_period(Duration::from_secs_f64(1.0 / rps))
        .map(|q| q.allow_burst(NonZeroU32::new(burst.max(1)).unwrap_or(NonZeroU32::MIN)))
}

impl RateLimits {
    /// The limits of `[limits]`.
    pub fn new(cfg: &LimitSettings) -> Self {
        Self {
            per_client: quota(cfg.per_client_rps, cfg.per_client_burst)
                .map(DefaultKeyedRateLimiter::keyed),
            per_key: quota(cfg.per_key_rps, cfg.per_key_burst).map(DefaultKeyedRateLimiter::keyed),
        }
    }

    /// One call from client address `ip`.
    pub fn client(&self, ip: IpAddr) -> Result<(), ApiError> {
        check(self.per_client.as_ref(), &ip, "this client address")
    }

    /// One call with API key `id`.
    pub fn key(&self, id: &str) -> Result<(), ApiError> {
        check(self.per_key.as_ref(), &id.to_owned(), "this API key")
    }
}

fn check<K: Hash + Eq + Clone>(
    limiter: Option<&DefaultKeyedRateLimiter<K>>,
    key: &K,
    who: &str,
) -> Result<(), ApiError> {
    let Some(limiter) = limiter else {
        return Ok(());
    };
    if limiter.len() > RETAIN_ABOVE {
        limiter.retain_recent();
    }
    limiter.check_key(key).map_err(|not_until| {
        let wait = not_until.wait_time_from(limiter.clock().now());
        ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            "rate_limited",
            format!("too many calls from {who}; retry after the time Retry-After gives"),
        )
        .retry_after(wait.as_secs() + u64::from(wait.subsec_nanos() > 0))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_then_429_with_retry_after_per_client() {
        let limits = RateLimits::new(&LimitSettings {
            per_client_rps: 0.5,
            per_client_burst: 3,
            ..Default::default()
        });
        let a: IpAddr = "192.0.2.1".parse().unwrap();
        let b: IpAddr = "192.0.2.2".parse().unwrap();
        for _ in 0..3 {
            limits.client(a).unwrap();
        }
        let e = limits.client(a).unwrap_err();
        assert_eq!(e.status, 429);
        let retry: u64 = e.headers[0].1.to_str().unwrap().parse().unwrap();
        assert!((1..=2).contains(&retry), "{retry}");
        limits.client(b).expect("another client has its own budget");
        limits.key("k").expect("no per-key limit configured");
    }
}
