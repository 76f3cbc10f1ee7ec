//! The measured memory of a function's instances (`LocalRuntime::memory`, the PSS of its
//! workers sampled after calls): a function holding 50 MiB is measured that much above one
//! holding nothing, and nothing is measured before a call left a worker idle.

use std::time::Duration;

use geofaas_functions::local::MemoryFigure;

use crate::{ok_text, runtime, write_function};

/// 50 MiB, every page touched so that it is resident, kept across calls.
const HOG: &str = r#"keep = []


def fn(input, headers):
    if not keep:
        b = bytearray(50 * 1024 * 1024)
        for i in range(0, len(b), 4096):
            b[i] = 1
        keep.append(b)
    return 'ok'
"#;
const SMALL: &str = "def fn(input, headers):\n    return 'ok'\n";

/// Calls `function` until its figure rests on 3 samples (bounded: 200 calls, 20 s).
async fn measured(rt: &geofaas_functions::local::LocalRuntime, function: &str) -> MemoryFigure {
    for _ in 0..200 {
        ok_text(rt, function, "").await;
        if let Some(m) = rt.memory(function).filter(|m| m.samples >= 3) {
            return m;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!(
        "{function}: no 3 memory samples after 200 calls: {:?}",
        rt.memory(function)
    );
}

#[tokio::test]
async fn a_function_holding_50_mib_is_measured_50_mib_above_an_empty_one() {
    let dir = tempfile::tempdir().unwrap();
    write_function(dir.path(), "hog", "fn.py", HOG);
    write_function(dir.path(), "small", "fn.py", SMALL);
    let rt = runtime(&crate::empty(dir.path()));
    assert_eq!(rt.memory("hog"), None, "no call yet: nothing measured");
    assert_eq!(rt.memory("nothing-here"), None);
    let small = measured(&rt, "small").await;
    let hog = measured(&rt, "hog").await;
    let mib50 = 50.0 * 1024.0 * 1024.0 / 1e6;
    let extra = hog.median_mb - small.median_mb;
    println!("hog {hog:?}, small {small:?}: {extra:.2} MB more");
    assert!(
        (0.9 * mib50..1.15 * mib50).contains(&extra),
        "hog {hog:?}, small {small:?}: {extra:.1} MB more, expected about {mib50:.1}"
    );
    // An instance of a plain Python function shares the interpreter with its zygote and
    // fork server: well under the 50 MiB.
    assert!(small.median_mb > 0.1 && small.median_mb < 30.0, "{small:?}");
}
