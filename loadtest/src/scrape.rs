//! Each spawned node's `/metrics` at the end of a run, kept beside the run's results
//! (`metrics-<node>.txt`), so what the nodes counted (placements, cold starts, the scheduler's
//! prediction error) can be read after the nodes are gone.

use anyhow::Context;

use crate::cli::Ctx;

/// Writes `metrics-<node>.txt` into the output folder for every node this run started
/// (reached directly, not through the delay relays); nothing without `--spawn`. A node that
/// does not answer is named in the error after the others were written.
pub async fn save_metrics(ctx: &Ctx) -> anyhow::Result<()> {
    let Some(spawned) = ctx.spawned.as_ref() else {
        return Ok(());
    };
    let http = reqwest::Client::builder()
        .use_rustls_tls()
        .add_root_certificate(reqwest::Certificate::from_pem(&spawned.ca_pem)?)
        .build()?;
    let mut failed = Vec::new();
    for node in ctx.map.nodes() {
        let url = spawned
            .entry_url(&node.id)
            .unwrap_or_else(|| node.public_url.clone())
            .join("metrics")?;
        let text = async { http.get(url).send().await?.error_for_status()?.text().await }.await;
        match text {
            Ok(text) => {
                let path = ctx.out_file(&format!("metrics-{}.txt", node.id));
                std::fs::write(&path, text)
                    .with_context(|| format!("cannot write {}", path.display()))?;
            }
            Err(e) => failed.push(format!("{}: {e}", node.id)),
        }
    }
    anyhow::ensure!(failed.is_empty(), "no /metrics from {}", failed.join("; "));
    Ok(())
}
