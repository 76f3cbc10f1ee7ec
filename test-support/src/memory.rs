//! An in-memory [`FunctionBackend`] whose functions are closures: router tests drive every
//! branch of the call path with it (`tower::ServiceExt::oneshot`), without processes or sockets.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use geofaas_functions::{FunctionBackend, Health, Invocation, InvokeError, InvokeOutput};

type Handler = Arc<dyn Fn(&Invocation) -> Result<InvokeOutput, InvokeError> + Send + Sync>;

/// Functions held in memory; each call is counted.
#[derive(Default)]
pub struct MemoryBackend {
    functions: HashMap<String, Handler>,
    calls: Mutex<HashMap<String, usize>>,
    total: AtomicUsize,
}

impl std::fmt::Debug for MemoryBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryBackend")
            .field("functions", &self.functions.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl MemoryBackend {
    /// A backend without functions.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a function run by `handler`.
    pub fn with(
        mut self,
        name: &str,
        handler: impl Fn(&Invocation) -> Result<InvokeOutput, InvokeError> + Send + Sync + 'static,
    ) -> Self {
        self.functions.insert(name.to_owned(), Arc::new(handler));
        self
    }

    /// Adds a function that answers its own body.
    pub fn with_echo(self, name: &str) -> Self {
        self.with(name, |inv| {
            Ok(InvokeOutput {
                body: inv.body.clone().into(),
                ..Default::default()
            })
        })
    }

    /// Calls of `function` so far.
    pub fn calls(&self, function: &str) -> usize {
        self.calls
            .lock()
            .unwrap()
            .get(function)
            .copied()
            .unwrap_or(0)
    }

    /// Calls of any function so far.
    pub fn total_calls(&self) -> usize {
        self.total.load(Ordering::SeqCst)
    }
}

#[async_trait]
impl FunctionBackend for MemoryBackend {
    fn kind(&self) -> &'static str {
        "memory"
    }

    async fn invoke(&self, call: Invocation) -> Result<InvokeOutput, InvokeError> {
        self.total.fetch_add(1, Ordering::SeqCst);
        *self
            .calls
            .lock()
            .unwrap()
            .entry(call.function.clone())
            .or_default() += 1;
        match self.functions.get(&call.function) {
            Some(handler) => handler(&call),
            None => Err(InvokeError::UnknownFunction(call.function)),
        }
    }

    async fn list(&self) -> Result<Vec<String>, InvokeError> {
        Ok(self.functions.keys().cloned().collect())
    }

    async fn health(&self) -> Health {
        Health::Healthy
    }
}
