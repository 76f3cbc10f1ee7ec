//! The client's routing state, without I/O: which node to call next (the handover cache), and
//! when a failed attempt is retried at the cloud.
//!
//! Rules, as the paper's GeoFaaS client:
//! - Calls go to the cached node: first the entry node, then whichever node answered last. A
//!   `307` moves the cache to the node it names, so after a handover the client talks to the
//!   new node directly and pays the redirect only once.
//! - A call whose attempt timed out or could not connect (or lost its connection) is retried
//!   once, at the cloud, with `X-GeoFaaS-Retry: 1`. An HTTP answer of any status is an answer
//!   and is never retried: the gateway already failed over to the cloud where it could.
//! - After a node failed, calls go straight to the cloud (with the retry header) for
//!   `fallback_ttl`; the next call after that tries the failed node again.

use std::time::{Duration, Instant};

use url::Url;

/// Why an attempt got no HTTP answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Failure {
    /// No answer within the attempt's timeout.
    Timeout,
    /// The connection could not be set up (refused, unreachable, TLS handshake failed).
    Connect,
    /// The connection broke while the request or its answer was in flight.
    Transport,
    /// The request could not be built or sent for a reason that a retry does not fix
    /// (a bad URL, a redirect loop).
    Client,
}

impl Failure {
    /// Whether the paper's client retries after this failure.
    pub fn is_retryable(self) -> bool {
        matches!(
            self,
            Failure::Timeout | Failure::Connect | Failure::Transport
        )
    }
}

/// Where the next attempt goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// Origin (`https://host:port`) of the node to call.
    pub node: Url,
    /// Whether to send `X-GeoFaaS-Retry: 1` (only ever to the cloud).
    pub retry_header: bool,
}

/// The handover cache and the retry rules of one client.
#[derive(Clone, Debug)]
pub struct RouteCache {
    current: Url,
    cloud: Url,
    down_until: Option<Instant>,
    fallback_ttl: Duration,
    retry: bool,
}

impl RouteCache {
    /// Starts at `entry`; retries (if `retry`) go to `cloud`.
    pub fn new(entry: &Url, cloud: &Url, retry: bool, fallback_ttl: Duration) -> Self {
        Self {
            current: origin(entry),
            cloud: origin(cloud),
            down_until: None,
            fallback_ttl,
            retry,
        }
    }

    /// The cached node (origin URL).
    pub fn current(&self) -> &Url {
        &self.current
    }

    /// Where the first attempt of a call starting at `now` goes.
    pub fn first_target(&self, now: Instant) -> Target {
        match self.down_until {
            Some(until) if now < until => Target {
                node: self.cloud.clone(),
                retry_header: true,
            },
            _ => Target {
                node: self.current.clone(),
                retry_header: false,
            },
        }
    }

    /// A `307` named `location`: the responsible node becomes the cached one; returns its origin.
    pub fn on_redirect(&mut self, location: &Url) -> Url {
        let node = origin(location);
        self.current = node.clone();
        node
    }

    /// An attempt at `target` got an HTTP answer. An answer from the cached node (or from a node a
    /// redirect led to) keeps it cached; a retry answered by the cloud leaves the failed node
    /// cached so it is tried again once the fallback has expired.
    pub fn on_answer(&mut self, target: &Target) {
        if !target.retry_header {
            self.current = target.node.clone();
            self.down_until = None;
        }
    }

    /// Attempt number `attempt` (1-based) at `target` failed with `failure` at `now`: the retry
    /// target, if the rules allow another attempt.
    pub fn on_failure(
        &mut self,
        target: &Target,
        attempt: u32,
        failure: Failure,
        now: Instant,
    ) -> Option<Target> {
        if !target.retry_header || target.node != self.cloud {
            // The node we meant to reach is down: skip it for a while.
            self.down_until = Some(now + self.fallback_ttl);
        }
        if !self.retry || attempt >= 2 || !failure.is_retryable() {
            return None;
        }
        Some(Target {
            node: self.cloud.clone(),
            retry_header: true,
        })
    }
}

/// `scheme://host:port/` of a URL: the node, without path or query.
pub fn origin(url: &Url) -> Url {
    let mut u = url.clone();
    u.set_path("/");
    u.set_query(None);
    u.set_fragment(None);
    u
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(s: &str) -> Url {
        Url::parse(s).unwrap()
    }

    fn cache() -> RouteCache {
        RouteCache::new(
            &url("https://edge-a:8443/fn/sieve"),
            &url("https://cloud:8443"),
            true,
            Duration::from_secs(5),
        )
    }

    #[test]
    fn starts_at_the_entry_node_without_the_retry_header() {
        let c = cache();
        let t = c.first_target(Instant::now());
        assert_eq!(t.node, url("https://edge-a:8443/"));
        assert!(!t.retry_header);
    }

    #[test]
    fn a_redirect_moves_the_cache_to_the_named_node() {
        let mut c = cache();
        let next = c.on_redirect(&url("https://edge-b:9443/fn/sieve?n=1"));
        assert_eq!(next, url("https://edge-b:9443/"));
        c.on_answer(&Target {
            node: next,
            retry_header: false,
        });
        // The next call talks to edge-b directly.
        assert_eq!(
            c.first_target(Instant::now()).node,
            url("https://edge-b:9443/")
        );
    }

    #[test]
    fn timeouts_and_connection_failures_are_retried_once_at_the_cloud() {
        for failure in [Failure::Timeout, Failure::Connect, Failure::Transport] {
            let mut c = cache();
            let now = Instant::now();
            let first = c.first_target(now);
            let retry = c.on_failure(&first, 1, failure, now).expect("retried");
            assert_eq!(retry.node, url("https://cloud:8443/"));
            assert!(retry.retry_header);
            assert_eq!(c.on_failure(&retry, 2, failure, now), None, "only once");
        }
    }

    #[test]
    fn client_errors_and_disabled_retries_are_not_retried() {
        let mut c = cache();
        let now = Instant::now();
        let first = c.first_target(now);
        assert_eq!(c.on_failure(&first, 1, Failure::Client, now), None);
        let mut off = RouteCache::new(
            &url("https://edge-a:8443"),
            &url("https://cloud:8443"),
            false,
            Duration::from_secs(5),
        );
        assert_eq!(off.on_failure(&first, 1, Failure::Connect, now), None);
    }

    #[test]
    fn after_a_failure_calls_go_to_the_cloud_until_the_fallback_expires() {
        let mut c = cache();
        let t0 = Instant::now();
        let first = c.first_target(t0);
        let retry = c.on_failure(&first, 1, Failure::Connect, t0).unwrap();
        c.on_answer(&retry);
        let during = c.first_target(t0 + Duration::from_secs(4));
        assert_eq!(during.node, url("https://cloud:8443/"));
        assert!(during.retry_header);
        c.on_answer(&during);
        // Expired: the failed edge is tried again, directly.
        let after = c.first_target(t0 + Duration::from_secs(5));
        assert_eq!(after.node, url("https://edge-a:8443/"));
        assert!(!after.retry_header);
    }

    #[test]
    fn an_answer_from_the_cached_node_clears_the_fallback() {
        let mut c = cache();
        let t0 = Instant::now();
        let first = c.first_target(t0);
        c.on_failure(&first, 1, Failure::Timeout, t0);
        let probe = c.first_target(t0 + Duration::from_secs(6));
        c.on_answer(&probe);
        assert!(!c.first_target(t0 + Duration::from_secs(6)).retry_header);
    }

    #[test]
    fn origin_drops_path_and_query() {
        assert_eq!(
            origin(&url("https://127.0.0.1:8443/fn/x?y=1#z")),
            url("https://127.0.0.1:8443/")
        );
    }
}
