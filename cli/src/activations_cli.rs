//! `geofaas activations ls|show|retry`: the asynchronous calls every node keeps, its dead
//! letters, and putting one back to run ([`geofaas_gateway::admin::activations`]).

use serde_json::Value;

use crate::deploy_cli::{Nodes, Target};

/// Subcommands of `geofaas activations`.
#[derive(Debug, clap::Subcommand)]
pub enum ActivationsCommand {
    /// The asynchronous calls each node keeps (waiting, running, done, failed), newest first.
    Ls {
        /// Only the dead letters: calls that failed every try, or in a way not tried again.
        #[arg(long)]
        failed: bool,
        /// Which nodes.
        #[command(flatten)]
        target: Target,
    },
    /// One activation with every failed try's error, from the node that keeps it.
    Show {
        /// Activation id (from the 202's Location, or `ls`).
        id: String,
        /// Which nodes.
        #[command(flatten)]
        target: Target,
    },
    /// Run a dead-lettered call again, at the node that keeps it.
    Retry {
        /// Activation id of the dead letter.
        id: String,
        /// Which nodes.
        #[command(flatten)]
        target: Target,
    },
}

/// Runs `geofaas activations ...`.
pub async fn run(cmd: ActivationsCommand) -> anyhow::Result<()> {
    match cmd {
        ActivationsCommand::Ls { failed, target } => {
            let nodes = Nodes::resolve(&target).await?;
            let path = format!("/admin/activations?failed={failed}");
            let results = nodes
                .each(|n| nodes.request(reqwest::Method::GET, n, &path))
                .await;
            println!(
                "{:<12} {:<32} {:<16} {:<8} {:>5}  {:<24} LAST ERROR",
                "NODE", "ID", "FUNCTION", "STATUS", "TRIES", "ACCEPTED"
            );
            let mut failed_nodes = Vec::new();
            for (node, result) in &results {
                let json = match result {
                    Ok(json) => json,
                    Err(e) => {
                        eprintln!("{}: {e}", node.id);
                        failed_nodes.push(node.id.as_str());
                        continue;
                    }
                };
                for a in json["activations"].as_array().into_iter().flatten() {
                    println!(
                        "{:<12} {:<32} {:<16} {:<8} {:>5}  {:<24} {}",
                        node.id,
                        text(&a["id"]),
                        text(&a["function"]),
                        text(&a["status"]),
                        a["tries"].as_u64().unwrap_or(0),
                        text(&a["accepted"]),
                        a["last_error"].as_str().unwrap_or("-"),
                    );
                }
            }
            anyhow::ensure!(
                failed_nodes.is_empty(),
                "no answer from {}",
                failed_nodes.join(", ")
            );
            Ok(())
        }
        ActivationsCommand::Show { id, target } => {
            let (node, json) = at_the_node(&target, reqwest::Method::GET, &id, "").await?;
            let a = &json["activation"];
            println!("activation {} at {}", text(&a["id"]), node);
            for field in ["function", "status", "tries", "accepted", "finished"] {
                if !a[field].is_null() {
                    println!("  {field:<9} {}", text(&a[field]));
                }
            }
            if let Some(answer) = a.get("answer") {
                println!(
                    "  answer    {} {}",
                    answer["status"],
                    answer["body"].as_str().unwrap_or_default().trim_end()
                );
            }
            for (i, e) in a["attempts"].as_array().into_iter().flatten().enumerate() {
                println!(
                    "  try {}     {} {} {}: {}",
                    i + 1,
                    text(&e["at"]),
                    e["status"],
                    text(&e["code"]),
                    text(&e["message"])
                );
            }
            Ok(())
        }
        ActivationsCommand::Retry { id, target } => {
            let (node, _) = at_the_node(&target, reqwest::Method::POST, &id, "/retry").await?;
            println!("activation {id} runs again at {node}; its answer: GET /activations/{id}");
            Ok(())
        }
    }
}

/// Asks every node for activation `id` (`suffix` after its path); the answer of the one that
/// keeps it.
async fn at_the_node(
    target: &Target,
    method: reqwest::Method,
    id: &str,
    suffix: &str,
) -> anyhow::Result<(String, Value)> {
    let nodes = Nodes::resolve(target).await?;
    let path = format!("/admin/activations/{id}{suffix}");
    let results = nodes
        .each(|n| nodes.request(method.clone(), n, &path))
        .await;
    let mut errors = Vec::new();
    for (node, result) in results {
        match result {
            Ok(json) => return Ok((node.id, json)),
            Err(e) => errors.push(format!("{}: {e}", node.id)),
        }
    }
    anyhow::bail!("no node has activation {id}: {}", errors.join("; "))
}

fn text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "-".into(),
        other => other.to_string(),
    }
}
