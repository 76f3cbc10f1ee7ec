//! What a deploy checks and how it says no: names, environment entries, and the errors of the
//! admin API.

use std::time::{SystemTime, UNIX_EPOCH};

use axum::http::StatusCode;
use geofaas_config::function::valid_function_name;

use crate::error::ApiError;

pub(super) fn check_name(name: &str) -> Result<(), ApiError> {
    if valid_function_name(name) {
        Ok(())
    } else {
        Err(bad_request(
            "bad_function_name",
            format!(
                "{:?} is not a function name (letters, digits, '-' and '_', at most 64)",
                name.escape_debug().to_string()
            ),
        ))
    }
}

/// An environment entry a process can be given: a POSIX name that does not override what the
/// runtime sets itself, and a value without NUL.
pub(super) fn check_env(key: &str, value: &str) -> Result<(), ApiError> {
    let mut chars = key.chars();
    let name_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !name_ok {
        return Err(bad_request(
            "bad_env",
            format!(
                "environment name {:?} is not of the form [A-Za-z_][A-Za-z0-9_]*",
                key.escape_debug().to_string()
            ),
        ));
    }
    if key.starts_with("GEOFAAS_") || key.starts_with("PYTHON") || key == "PATH" {
        return Err(bad_request(
            "bad_env",
            format!("environment name {key:?} is reserved for the runtime"),
        ));
    }
    if value.contains('\0') {
        return Err(bad_request(
            "bad_env",
            format!("the value of {key:?} holds a NUL byte"),
        ));
    }
    Ok(())
}

/// The reason of a function folder's error, without the temporary path it was checked at.
pub(super) fn reason_of(e: &geofaas_functions::LocalError) -> String {
    match e {
        geofaas_functions::LocalError::BadFunction { reason, .. } => reason.clone(),
        other => other.to_string(),
    }
}

pub(super) fn bad_request(code: &'static str, message: String) -> ApiError {
    ApiError::new(StatusCode::BAD_REQUEST, code, message)
}

pub(super) fn disk_error(e: &std::io::Error) -> ApiError {
    tracing::error!(error = %e, "deploy: state folder");
    if e.kind() == std::io::ErrorKind::StorageFull {
        return ApiError::new(
            StatusCode::INSUFFICIENT_STORAGE,
            "disk_full",
            format!("the node could not write the version to its state folder: the disk is full ({e}); nothing of it was kept and the live version still serves; free space and deploy again"),
        );
    }
    ApiError::new(
        StatusCode::INTERNAL_SERVER_ERROR,
        "state_folder",
        "the node could not read or write its state folder",
    )
}

pub(super) fn now_s() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}
