//! A function backend whose functions take known times: each function sleeps its execution
//! time per call and, on its first call, its cold-start time too, and reports both as a real
//! backend would (`InvokeOutput::exec`, `cold`, `cold_start`). Each function has one instance
//! once started, idle unless a call runs ([`FunctionBackend::stats`]), so a scheduler sees
//! warm and new as with the embedded runtime. Tests of the live profiles check that a node's
//! learned figures converge to these.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use geofaas_functions::{
    FunctionBackend, Health, Invocation, InvokeError, InvokeOutput, PoolStats,
};

/// Functions with fixed execution and cold-start times.
#[derive(Debug, Default)]
pub struct DelayBackend {
    functions: HashMap<String, (Duration, Duration)>,
    started: Mutex<HashSet<String>>,
    running: Mutex<HashMap<String, usize>>,
}

impl DelayBackend {
    /// A backend without functions.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `name`, which runs for `exec_ms` per call and starts in `cold_ms` on its first.
    pub fn with(mut self, name: &str, exec_ms: u64, cold_ms: u64) -> Self {
        self.functions.insert(
            name.to_owned(),
            (
                Duration::from_millis(exec_ms),
                Duration::from_millis(cold_ms),
            ),
        );
        self
    }
}

#[async_trait]
impl FunctionBackend for DelayBackend {
    fn kind(&self) -> &'static str {
        "delays"
    }

    async fn invoke(&self, call: Invocation) -> Result<InvokeOutput, InvokeError> {
        let Some(&(exec, cold)) = self.functions.get(&call.function) else {
            return Err(InvokeError::UnknownFunction(call.function));
        };
        let first = self.started.lock().unwrap().insert(call.function.clone());
        let cold = if first { cold } else { Duration::ZERO };
        *self
            .running
            .lock()
            .unwrap()
            .entry(call.function.clone())
            .or_default() += 1;
        tokio::time::sleep(cold + exec).await;
        if let Some(n) = self.running.lock().unwrap().get_mut(&call.function) {
            *n -= 1;
        }
        Ok(InvokeOutput {
            body: Bytes::from(call.function).into(),
            cold_start: first,
            cold,
            exec,
            ..Default::default()
        })
    }

    async fn list(&self) -> Result<Vec<String>, InvokeError> {
        Ok(self.functions.keys().cloned().collect())
    }

    async fn health(&self) -> Health {
        Health::Healthy
    }

    fn stats(&self, function: &str) -> Option<PoolStats> {
        self.functions.get(function)?;
        let started = self.started.lock().unwrap().contains(function);
        let busy = self
            .running
            .lock()
            .unwrap()
            .get(function)
            .copied()
            .unwrap_or(0);
        Some(PoolStats {
            idle: usize::from(started && busy == 0),
            busy,
            max: usize::MAX,
        })
    }
}
