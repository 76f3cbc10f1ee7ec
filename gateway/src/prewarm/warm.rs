//! The pre-warm request between nodes: `POST /node/warm/{function}` (served by
//! `routes::node`), and the metric label of its answer.

/// The path a node asks another to warm `function` at.
pub fn warm_path(function: &str) -> String {
    format!("/node/warm/{function}")
}

/// The metric label of an answer's `result` (bounded: anything unexpected is `other`).
pub fn outcome_label(result: &str) -> &'static str {
    match result {
        "started" => "started",
        "already_warm" => "already_warm",
        "full" => "full",
        "cannot_warm" => "cannot_warm",
        "unknown_function" => "unknown_function",
        "failed" => "failed",
        _ => "other",
    }
}
