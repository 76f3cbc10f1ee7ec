//! The loader on the real sample rows of the Huawei private 2023 trace (`testdata/huawei/`).

use super::*;
use crate::workload::function_catalogue;

const REQUESTS_MINUTE: &str =
    include_str!("../../testdata/huawei/private2023_requests_minute_head_tail.csv");
const REQUESTS_SECOND: &str =
    include_str!("../../testdata/huawei/private2023_requests_second_selected_fns_head_tail.csv");
const CPU_LIMIT: &str =
    include_str!("../../testdata/huawei/private2023_cpu_limit_minute_head_tail.csv");

#[test]
fn parses_the_minute_request_sample() {
    let t = TraceTable::parse(REQUESTS_MINUTE, "requests_minute").unwrap();
    let mut ids: Vec<u32> = (0..8).collect();
    ids.extend(190..200);
    assert_eq!(t.functions, ids);
    assert_eq!(
        t.rows.len(),
        10,
        "5 head + 5 tail rows, the '...' row skipped"
    );
    let first = &t.rows[0];
    assert_eq!((first.day, first.time_s), (0, 0));
    assert_eq!(first.values[0], None);
    assert_eq!(first.values[4], Some(6.0));
    assert_eq!(first.values[6], Some(98.0));
    // Column 194 (index 8 + 4) holds 2891 in the first row and 26644 in the last.
    assert_eq!(first.values[12], Some(2891.0));
    let last = t.rows.last().unwrap();
    assert_eq!((last.day, last.time_s), (234, 20_303_940));
    assert_eq!(last.values[12], Some(26644.0));
    assert_eq!(t.period_s(), 60);
}

#[test]
fn parses_the_second_request_sample_and_the_cpu_limits() {
    let t = TraceTable::parse(REQUESTS_SECOND, "requests_second").unwrap();
    assert_eq!(
        t.functions,
        vec![28, 33, 55, 66, 72, 75, 150, 160, 161, 164]
    );
    assert_eq!(t.period_s(), 1);
    assert_eq!(t.rows[0].values[0], Some(816.0));
    assert_eq!(t.rows[9].time_s, 20_303_999);
    assert_eq!(t.rows[9].values[1], Some(68053.0));
    let c = TraceTable::parse(CPU_LIMIT, "cpu_limit").unwrap();
    assert_eq!(c.rows[0].values[4], Some(0.45));
    assert_eq!(c.rows[0].values[17], Some(1.95));
}

#[test]
fn the_plain_documented_layout_parses_too() {
    let text = "day,time,0,1,2\n0,0,5,,NaN\n0,60,1,2,3\n";
    let t = TraceTable::parse(text, "plain").unwrap();
    assert_eq!(t.functions, vec![0, 1, 2]);
    assert_eq!(t.rows[0].values, vec![Some(5.0), None, None]);
    assert!(TraceTable::parse("time,day\n", "bad").is_err());
    assert!(TraceTable::parse("day,time,0\n0,0,x\n", "bad").is_err());
}

#[test]
fn sample_rows_become_a_sorted_workload() {
    let t = TraceTable::parse(REQUESTS_MINUTE, "requests_minute").unwrap();
    let fs = function_catalogue(200, 1);
    let src = [GeoPoint::new(0.0, 0.0)];
    let cfg = WorkloadConfig {
        requests: usize::MAX,
        ..Default::default()
    };
    let w = t.to_workload(fs, &src, 0.01, &cfg);
    // First row: functions 4, 5, 6, 190, 194, 195, 199 with 6, 6, 98, 833, 2891, 24, 23 calls.
    let first_minute = w
        .requests
        .iter()
        .filter(|r| r.arrival_ms < 60_000.0)
        .count();
    let expected: f64 = [6.0, 6.0, 98.0, 833.0, 2891.0, 24.0, 23.0]
        .iter()
        .map(|v| (v * 0.01_f64).round())
        .sum();
    assert_eq!(first_minute as f64, expected);
    assert!(w
        .requests
        .windows(2)
        .all(|p| p[0].arrival_ms <= p[1].arrival_ms));
    assert!(w.requests.iter().all(|r| r.function < 200));
}
