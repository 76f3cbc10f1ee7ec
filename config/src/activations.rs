//! `[activations]`: how a node keeps, retries and gives up on asynchronous calls
//! (`Prefer: respond-async`, docs/events.md).

use serde::{Deserialize, Serialize};

/// Attempts, backoff and retention of asynchronous calls.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ActivationSettings {
    /// Tries of one asynchronous call, the first included, before it is dead-lettered; only a
    /// failure that may be retried (as for failover) is tried again. Default 3.
    #[serde(default = "default_max_attempts")]
    pub max_attempts: u32,
    /// Wait before the second try, in milliseconds; doubled before each later one. Default 1000.
    #[serde(default = "default_retry_backoff_ms")]
    pub retry_backoff_ms: u64,
    /// An accepted call not finished this many seconds after it was accepted is not tried
    /// again but dead-lettered. Default 21600 (six hours, as Lambda's maximum event age).
    #[serde(default = "default_max_age_s")]
    pub max_age_s: u64,
    /// How long a finished call's answer is kept for `GET /activations/{id}`, in seconds.
    /// Default 600.
    #[serde(default = "default_retention_s")]
    pub retention_s: u64,
    /// How long a dead-lettered call (with every attempt's error) is kept for
    /// `geofaas activations retry`, in seconds. Default 604800 (a week).
    #[serde(default = "default_dead_letter_retention_s")]
    pub dead_letter_retention_s: u64,
    /// Where `X-Callback-Url` may point: URL prefixes such as `"https://hooks.example.com/"`.
    /// A callback URL that starts with none of them is refused (`400`) before the call is
    /// accepted. Default none: no callbacks.
    #[serde(default)]
    pub callback_allow: Vec<String>,
}

fn default_max_attempts() -> u32 {
    3
}
fn default_retry_backoff_ms() -> u64 {
    1000
}
fn default_max_age_s() -> u64 {
    6 * 3600
}
fn default_retention_s() -> u64 {
    600
}
fn default_dead_letter_retention_s() -> u64 {
    7 * 24 * 3600
}

impl Default for ActivationSettings {
    fn default() -> Self {
        Self {
            max_attempts: default_max_attempts(),
            retry_backoff_ms: default_retry_backoff_ms(),
            max_age_s: default_max_age_s(),
            retention_s: default_retention_s(),
            dead_letter_retention_s: default_dead_letter_retention_s(),
            callback_allow: Vec::new(),
        }
    }
}

impl ActivationSettings {
    /// What is wrong with these settings: (field, value, reason).
    pub(crate) fn check(&self) -> Result<(), crate::security::Problem> {
        let problem = |field: &str, value: u64, reason: &str| {
            Err((
                format!("activations.{field}"),
                value.to_string(),
                reason.to_owned(),
            ))
        };
        if !(1..=100).contains(&self.max_attempts) {
            return problem(
                "max_attempts",
                self.max_attempts.into(),
                "must be 1 to 100 (1: never tried again)",
            );
        }
        if self.retry_backoff_ms > 3_600_000 {
            return problem(
                "retry_backoff_ms",
                self.retry_backoff_ms,
                "must be at most 3600000 (an hour)",
            );
        }
        for (field, value) in [
            ("max_age_s", self.max_age_s),
            ("retention_s", self.retention_s),
            ("dead_letter_retention_s", self.dead_letter_retention_s),
        ] {
            if value == 0 || value > 366 * 24 * 3600 {
                return problem(field, value, "must be 1 s to a year");
            }
        }
        for prefix in &self.callback_allow {
            let ok = url::Url::parse(prefix).is_ok_and(|u| {
                matches!(u.scheme(), "http" | "https") && u.has_host() && u.username().is_empty()
            });
            if !ok {
                return Err((
                    "activations.callback_allow".into(),
                    prefix.clone(),
                    "must be an http:// or https:// URL prefix with a host, e.g. \"https://hooks.example.com/\"".into(),
                ));
            }
        }
        Ok(())
    }

    /// Whether `X-Callback-Url` `url` (already parsed and printed back) is allowed.
    pub fn allows_callback(&self, url: &str) -> bool {
        self.callback_allow.iter().any(|prefix| {
            // Compared as URLs print: `https://Hooks.example.com` is `https://hooks.example.com/`.
            url::Url::parse(prefix).is_ok_and(|p| url.starts_with(p.as_str()))
        })
    }

    /// The wait before try `attempt` (2 for the second): the backoff doubled per earlier retry,
    /// at most an hour.
    pub fn backoff_before(&self, attempt: u32) -> std::time::Duration {
        let doublings = attempt.saturating_sub(2).min(20);
        let ms = self.retry_backoff_ms.saturating_mul(1 << doublings);
        std::time::Duration::from_millis(ms.min(3_600_000))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_pass_and_bad_values_are_named() {
        assert!(ActivationSettings::default().check().is_ok());
        let s = ActivationSettings {
            max_attempts: 0,
            ..ActivationSettings::default()
        };
        assert_eq!(s.check().unwrap_err().0, "activations.max_attempts");
        let s = ActivationSettings {
            retention_s: 0,
            ..ActivationSettings::default()
        };
        assert_eq!(s.check().unwrap_err().0, "activations.retention_s");
        let s = ActivationSettings {
            callback_allow: vec!["ftp://x/".into()],
            ..ActivationSettings::default()
        };
        assert_eq!(s.check().unwrap_err().1, "ftp://x/");
    }

    #[test]
    fn callbacks_go_only_under_an_allowed_prefix() {
        let s = ActivationSettings {
            callback_allow: vec![
                "https://Hooks.example.com".into(),
                "http://127.0.0.1:9000/cb/".into(),
            ],
            ..ActivationSettings::default()
        };
        assert!(s.allows_callback("https://hooks.example.com/done"));
        assert!(s.allows_callback("http://127.0.0.1:9000/cb/1"));
        assert!(!s.allows_callback("http://127.0.0.1:9000/other"));
        assert!(!s.allows_callback("https://hooks.example.com.evil.test/"));
        assert!(!ActivationSettings::default().allows_callback("https://hooks.example.com/"));
    }

    #[test]
    fn backoff_doubles_from_the_second_try() {
        let s = ActivationSettings {
            retry_backoff_ms: 100,
            ..ActivationSettings::default()
        };
        let ms = |a| s.backoff_before(a).as_millis();
        assert_eq!((ms(2), ms(3), ms(4)), (100, 200, 400));
        assert_eq!(ms(60), 3_600_000);
    }
}
