//! Cron triggers: `geofaas deploy DIR --cron "*/5 * * * *"` calls the function on a schedule.
//!
//! A schedule is a cron expression in UTC: the five standard fields (minute, hour, day of
//! month, month, day of week), six with seconds first (`*/2 * * * * *`), or a nickname
//! (`@hourly`); [`parse`] checks it with croner (names, lists, ranges, steps, `L`, `#`, `W`)
//! and refuses one that never fires (`0 0 30 2 *`). The schedules are kept with the version
//! (`deploy::store::VersionEnv::cron`), so a rollback brings back the version's own and a
//! removed function has none.
//!
//! Every node that keeps a deployed function with schedules watches them (`tasks::cron`). At each
//! tick each such node tries to claim it ([`Claims`]), and only the winner runs it, so a tick
//! runs once across the fleet however many nodes watch it, also while nodes die and come
//! back: in etcd with a registry (one key per schedule holding its last claimed tick, moved
//! forward only, in a transaction), else in a file per schedule under the folder the nodes on
//! the machine share (`up`'s or `geofaas node`'s `--state-dir`), under a lock. Nodes on
//! different machines with neither each run every tick.
//!
//! A claimed tick becomes an asynchronous call of the function (`activations`): journaled,
//! retried and dead-lettered like any accepted `202`, with the tick's id as its idempotency
//! key. It is a `POST /fn/{name}` with the JSON body `{"trigger": "cron", "schedule",
//! "tick", "scheduled_at"}` and the headers `X-Geofaas-Trigger: cron` and `X-Geofaas-Tick`
//! (which no client can send: the gateway drops a client's own). Ticks that fell due while no
//! node watched are not run: the first node back logs how many were missed and counts them
//! (`geofaas_cron_ticks_total{outcome="missed"}`). A node that dies between its claim and
//! the journal's sync loses that tick; once journaled, it runs at least once.

use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use chrono::{DateTime, SubsecRound as _, Utc};
use croner::parser::{CronParser, Seconds, Year};
use croner::Cron;

/// Parses a schedule, with an error naming it and what is wrong.
pub fn parse(expr: &str) -> Result<Cron, String> {
    let fields = expr.split_whitespace().count();
    if !expr.trim_start().starts_with('@') && !(5..=6).contains(&fields) {
        return Err(format!(
            "cron expression {expr:?} has {fields} fields; give five (minute hour day-of-month \
             month day-of-week) or six with seconds first"
        ));
    }
    let cron = CronParser::builder()
        .seconds(Seconds::Optional)
        .year(Year::Disallowed)
        .build()
        .parse(expr)
        .map_err(|e| format!("cron expression {expr:?}: {e}"))?;
    if cron.find_next_occurrence(&Utc::now(), false).is_err() {
        return Err(format!("cron expression {expr:?} never fires"));
    }
    Ok(cron)
}

/// A schedule's short stable id: the first 8 bytes of its expression's SHA-256, in hex.
pub fn schedule_id(expr: &str) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, expr.trim().as_bytes());
    digest.as_ref()[..8]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The ticks of `cron` after `after`, on whole seconds: a tick must have one time on every
/// node, and croner keeps the start's fraction of a second. (Its own iterator skips every
/// other tick of `* * * * * *` in 3.0.1, so this steps with `find_next_occurrence`.)
pub fn ticks_after(cron: &Cron, after: DateTime<Utc>) -> impl Iterator<Item = DateTime<Utc>> + '_ {
    let mut at = after.trunc_subsecs(0);
    std::iter::from_fn(move || {
        at = cron.find_next_occurrence(&at, false).ok()?;
        Some(at)
    })
}

/// Where the nodes agree which of them runs a tick.
#[derive(Clone, Debug)]
pub enum Claims {
    /// The fleet's etcd.
    Registry(Arc<geofaas_fleet::Fleet>),
    /// Files under a folder the nodes share, one per schedule.
    Files(PathBuf),
}

impl Claims {
    /// Claims the tick at `at_ms` of `schedule` (`{function}/{id}`): whether this node won it
    /// (no node claimed it, nor a later one, before).
    pub async fn claim(&self, schedule: &str, at_ms: u64) -> Result<bool, String> {
        match self {
            Self::Registry(fleet) => fleet
                .claim_tick(schedule, at_ms)
                .await
                .map_err(|e| format!("etcd: {e}")),
            Self::Files(dir) => {
                let (dir, name) = (dir.clone(), file_name(schedule));
                tokio::task::spawn_blocking(move || claim_file(&dir, &name, at_ms))
                    .await
                    .map_err(|e| e.to_string())?
                    .map_err(|e| format!("{}: {e}", dir_display(self)))
            }
        }
    }

    /// The last claimed tick of `schedule`, if any.
    pub async fn last(&self, schedule: &str) -> Result<Option<u64>, String> {
        match self {
            Self::Registry(fleet) => fleet
                .last_tick(schedule)
                .await
                .map_err(|e| format!("etcd: {e}")),
            Self::Files(dir) => {
                let path = dir.join(file_name(schedule));
                match std::fs::read_to_string(&path) {
                    Ok(text) => Ok(text.trim().parse().ok()),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
                    Err(e) => Err(format!("{}: {e}", path.display())),
                }
            }
        }
    }
}

fn dir_display(claims: &Claims) -> String {
    match claims {
        Claims::Registry(_) => "etcd".into(),
        Claims::Files(dir) => dir.display().to_string(),
    }
}

/// `{function}/{id}` as a file name (function names hold no `/` or `.`).
fn file_name(schedule: &str) -> String {
    schedule.replace('/', ".")
}

/// Moves the file's last claimed tick forward to `at_ms` under an exclusive lock; false when
/// it already was there or past it.
fn claim_file(dir: &Path, name: &str, at_ms: u64) -> std::io::Result<bool> {
    std::fs::create_dir_all(dir)?;
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(dir.join(name))?;
    file.lock()?;
    let mut text = String::new();
    file.read_to_string(&mut text)?;
    if text.trim().parse::<u64>().is_ok_and(|last| last >= at_ms) {
        return Ok(false);
    }
    file.set_len(0)?;
    file.rewind()?;
    writeln!(file, "{at_ms}")?;
    file.sync_data()?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::SecondsFormat;
    use chrono::TimeZone;
    use std::collections::HashSet;

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    fn next_after(expr: &str, from: &str, n: usize) -> Vec<String> {
        ticks_after(&parse(expr).unwrap(), at(from))
            .take(n)
            .map(|t| t.to_rfc3339_opts(SecondsFormat::Millis, true))
            .map(|t| t.replace(".000Z", "Z"))
            .collect()
    }

    #[test]
    fn ticks_fall_on_whole_seconds_whenever_the_watcher_looks() {
        assert_eq!(
            next_after("* * * * * *", "2026-12-06T13:02:03.287Z", 2),
            ["2026-12-06T13:02:04Z", "2026-12-06T13:02:05Z"]
        );
        assert_eq!(
            next_after("*/5 * * * *", "2026-12-06T13:04:59.999Z", 1),
            ["2026-12-06T13:05:00Z"]
        );
    }

    #[test]
    fn five_fields_are_minutes_and_six_put_seconds_first() {
        assert_eq!(
            next_after("*/5 * * * *", "2026-12-06T13:02:30Z", 2),
            ["2026-12-06T13:05:00Z", "2026-12-06T13:10:00Z"]
        );
        assert_eq!(
            next_after("*/2 * * * * *", "2026-12-06T13:02:59Z", 3),
            [
                "2026-12-06T13:03:00Z",
                "2026-12-06T13:03:02Z",
                "2026-12-06T13:03:04Z"
            ]
        );
        assert_eq!(
            next_after("@hourly", "2026-12-06T13:02:00Z", 1),
            ["2026-12-06T14:00:00Z"]
        );
    }

    #[test]
    fn edge_cases_of_the_calendar() {
        // The last day of February, in a leap year and not.
        assert_eq!(
            next_after("0 0 L 2 *", "2027-01-01T00:00:00Z", 2),
            ["2027-02-28T00:00:00Z", "2028-02-29T00:00:00Z"]
        );
        // The 29th of February only in leap years.
        assert_eq!(
            next_after("0 12 29 2 *", "2026-12-06T00:00:00Z", 1),
            ["2028-02-29T12:00:00Z"]
        );
        // Sunday as 0 and as 7, and by name.
        let sunday = next_after("0 9 * * 0", "2026-12-06T10:00:00Z", 1);
        assert_eq!(sunday, ["2026-12-13T09:00:00Z"]);
        assert_eq!(next_after("0 9 * * 7", "2026-12-06T10:00:00Z", 1), sunday);
        assert_eq!(next_after("0 9 * * SUN", "2026-12-06T10:00:00Z", 1), sunday);
        // Day of month and day of week together: either matches (Vixie cron).
        assert_eq!(
            next_after("0 0 13 * FRI", "2026-12-06T00:00:00Z", 2),
            ["2026-12-11T00:00:00Z", "2026-12-13T00:00:00Z"]
        );
        // The end of a year.
        assert_eq!(
            next_after("59 23 31 12 *", "2026-12-31T23:59:00Z", 1),
            ["2027-12-31T23:59:00Z"]
        );
    }

    #[test]
    fn bad_expressions_are_refused_naming_them() {
        for (expr, says) in [
            ("* * * *", "has 4 fields"),
            ("* * * * * * *", "has 7 fields"),
            ("61 * * * *", "\"61 * * * *\""),
            ("*/0 * * * *", "\"*/0 * * * *\""),
            ("0 0 30 2 *", "never fires"),
            ("every minute", "has 2 fields"),
            ("@sometimes", "\"@sometimes\""),
        ] {
            let e = parse(expr).unwrap_err();
            assert!(e.contains(says), "{expr}: {e}");
        }
    }

    #[test]
    fn a_schedules_id_is_stable_and_tells_expressions_apart() {
        assert_eq!(schedule_id("*/5 * * * *"), schedule_id(" */5 * * * * "));
        assert_eq!(schedule_id("*/5 * * * *").len(), 16);
        assert_ne!(schedule_id("*/5 * * * *"), schedule_id("*/6 * * * *"));
    }

    #[test]
    fn a_file_claim_is_won_once_and_only_forward() {
        let dir = tempfile::tempdir().unwrap();
        let claims = dir.path().join("cron");
        let t = Utc.timestamp_millis_opt(1_700_000_000_000).unwrap();
        let ms = t.timestamp_millis() as u64;
        assert!(claim_file(&claims, "f.1", ms).unwrap());
        assert!(!claim_file(&claims, "f.1", ms).unwrap());
        assert!(!claim_file(&claims, "f.1", ms - 2000).unwrap());
        assert!(claim_file(&claims, "f.2", ms).unwrap());
        assert!(claim_file(&claims, "f.1", ms + 2000).unwrap());
    }

    #[test]
    fn of_many_threads_claiming_the_same_ticks_none_is_won_twice() {
        let dir = tempfile::tempdir().unwrap();
        let claims = dir.path().to_path_buf();
        let won: Vec<u64> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..4)
                .map(|_| {
                    let claims = &claims;
                    s.spawn(move || {
                        (0..50u64)
                            .map(|t| 1000 + t)
                            .filter(|t| claim_file(claims, "f.x", *t).unwrap())
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            handles
                .into_iter()
                .flat_map(|h| h.join().unwrap())
                .collect()
        });
        let distinct: HashSet<u64> = won.iter().copied().collect();
        assert_eq!(distinct.len(), won.len(), "a tick won twice: {won:?}");
        assert!(
            distinct.contains(&1049),
            "the last tick is always won by someone"
        );
    }
}
