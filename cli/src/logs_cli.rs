//! `geofaas logs [FUNCTION] [--follow] [--since DURATION]`: what functions wrote to stdout and
//! stderr, from every node's `GET /admin/logs` ([`geofaas_gateway::logs`]), merged in time order, one
//! line each: `TIME NODE FUNCTION@VERSION REQUEST_ID STREAM: TEXT`.
//!
//! The nodes come from the running `geofaas up` of the folder, or `--config` and its registry,
//! exactly as for `geofaas deploy` ([`crate::deploy_cli::Target`]). With `--follow` the kept
//! lines of all nodes are merged first, then each new line is printed as it arrives.

use std::collections::HashSet;
use std::io::Write;
use std::time::SystemTime;

use anyhow::Context;
use serde::Deserialize;
use tokio::sync::mpsc;

use crate::deploy_cli::{describe, Node, Nodes, Target};

/// Flags of `geofaas logs`.
#[derive(Debug, clap::Args)]
pub struct LogsArgs {
    /// Only this function's lines (default: every function's).
    pub function: Option<String>,
    /// Keep printing new lines as functions write them (Ctrl-C to stop).
    #[arg(long, short)]
    pub follow: bool,
    /// Only lines written since then: a duration back from now (30s, 5m, 2h) or an RFC 3339
    /// time (2026-12-02T10:00:00Z).
    #[arg(long)]
    pub since: Option<String>,
    /// Which nodes.
    #[command(flatten)]
    pub target: Target,
}

/// One line as a node sends it (or one of its follow markers).
#[derive(Debug, Deserialize)]
struct Entry {
    #[serde(default)]
    ts: String,
    #[serde(default)]
    node: String,
    #[serde(default)]
    function: String,
    version: Option<String>,
    request_id: Option<String>,
    #[serde(default)]
    stream: String,
    #[serde(default)]
    line: String,
    #[serde(default)]
    caught_up: bool,
    lost: Option<u64>,
}

impl Entry {
    /// The line as `geofaas logs` prints it.
    fn render(&self) -> String {
        format!(
            "{} {} {}@{} {} {}: {}",
            self.ts,
            self.node,
            self.function,
            self.version.as_deref().unwrap_or("-"),
            self.request_id.as_deref().unwrap_or("-"),
            self.stream,
            self.line
        )
    }
}

/// What one node's answer brings.
enum Event {
    Line(Entry),
    CaughtUp,
    Lost(u64),
    /// The answer ended (with the reason, when it failed).
    Ended(Option<String>),
}

/// Runs `geofaas logs`; fails when a node could not be read.
pub async fn run(args: LogsArgs) -> anyhow::Result<()> {
    if let Some(f) = &args.function {
        anyhow::ensure!(
            geofaas_config::function::valid_function_name(f),
            "FUNCTION {f:?}: not a function name (1-64 letters, digits, '-', '_')"
        );
    }
    let mut query = Vec::new();
    if let Some(f) = &args.function {
        query.push(("function", f.clone()));
    }
    if let Some(text) = &args.since {
        let at_us = geofaas_gateway::logs::since(text, SystemTime::now())
            .map_err(|e| anyhow::anyhow!("--{e}"))?;
        // One instant for every node, whatever their clocks say "5m ago" is.
        query.push(("since", geofaas_gateway::logs::rfc3339(at_us)));
    }
    if args.follow {
        query.push(("follow", "1".to_owned()));
    }
    let timeout = (!args.follow).then_some(std::time::Duration::from_secs(60));
    let nodes = Nodes::resolve_with(&args.target, timeout).await?;
    anyhow::ensure!(!nodes.nodes.is_empty(), "no node to read logs from");
    let (tx, mut rx) = mpsc::channel::<(String, Event)>(1024);
    for node in &nodes.nodes {
        let req = nodes
            .request(reqwest::Method::GET, node, geofaas_gateway::logs::LOGS_PATH)
            .query(&query);
        tokio::spawn(read_node(node.clone(), req, tx.clone()));
    }
    drop(tx);
    let mut history = Vec::new();
    let mut catching_up: HashSet<String> = nodes.nodes.iter().map(|n| n.id.clone()).collect();
    let mut failed = Vec::new();
    let mut out = std::io::stdout();
    // The kept lines of every node, merged; with --follow then the new ones as they come.
    while let Some((node, event)) = rx.recv().await {
        match event {
            Event::Line(e) if !catching_up.is_empty() => history.push(e),
            Event::Line(e) => writeln!(out, "{}", e.render())?,
            Event::Lost(n) => {
                eprintln!("geofaas logs: {node}: {n} lines lost (reading too slowly)")
            }
            Event::CaughtUp => {
                catching_up.remove(&node);
            }
            Event::Ended(None) => {
                if !catching_up.remove(&node) && args.follow {
                    eprintln!("geofaas logs: {node}: the node ended the stream (stopping?)");
                }
            }
            Event::Ended(Some(why)) => {
                eprintln!("geofaas logs: {node}: {why}");
                catching_up.remove(&node);
                failed.push(node);
            }
        }
        if catching_up.is_empty() && !history.is_empty() {
            print_merged(&mut out, std::mem::take(&mut history))?;
        }
    }
    print_merged(&mut out, history)?;
    anyhow::ensure!(failed.is_empty(), "no logs from {}", failed.join(", "));
    Ok(())
}

/// Prints `lines` in time order (RFC 3339 UTC times with microseconds sort as text).
fn print_merged(out: &mut impl Write, mut lines: Vec<Entry>) -> anyhow::Result<()> {
    lines.sort_by(|a, b| (&a.ts, &a.node).cmp(&(&b.ts, &b.node)));
    for e in lines {
        writeln!(out, "{}", e.render())?;
    }
    out.flush()?;
    Ok(())
}

/// Reads one node's answer line by line into `tx`.
async fn read_node(node: Node, req: reqwest::RequestBuilder, tx: mpsc::Sender<(String, Event)>) {
    let ended = match stream_lines(&node, req, &tx).await {
        Ok(()) => None,
        Err(e) => Some(format!("{e:#}")),
    };
    let _ = tx.send((node.id, Event::Ended(ended))).await;
}

async fn stream_lines(
    node: &Node,
    req: reqwest::RequestBuilder,
    tx: &mpsc::Sender<(String, Event)>,
) -> anyhow::Result<()> {
    let mut resp = req
        .send()
        .await
        .map_err(|e| anyhow::anyhow!("{}", describe(&e)))?;
    let status = resp.status();
    if !status.is_success() {
        let body = resp.text().await.unwrap_or_default();
        let json: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
        let message = json["error"]["message"].as_str().unwrap_or(body.trim());
        anyhow::bail!("{status}: {message}");
    }
    let mut partial = Vec::new();
    while let Some(chunk) = resp
        .chunk()
        .await
        .map_err(|e| anyhow::anyhow!("{}", describe(&e)))?
    {
        partial.extend_from_slice(&chunk);
        while let Some(end) = partial.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = partial.drain(..=end).collect();
            let entry: Entry = serde_json::from_slice(&line)
                .with_context(|| format!("{}: a line that is not JSON", node.url))?;
            let event = match entry.lost {
                Some(n) => Event::Lost(n),
                None if entry.caught_up => Event::CaughtUp,
                None => Event::Line(entry),
            };
            if tx.send((node.id.clone(), event)).await.is_err() {
                return Ok(());
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(ts: &str, node: &str, line: &str) -> Entry {
        Entry {
            ts: ts.to_owned(),
            node: node.to_owned(),
            function: "talk".to_owned(),
            version: Some("abc".to_owned()),
            request_id: None,
            stream: "stdout".to_owned(),
            line: line.to_owned(),
            caught_up: false,
            lost: None,
        }
    }

    #[test]
    fn lines_of_several_nodes_print_in_time_order() {
        let mut out = Vec::new();
        let lines = vec![
            entry("2026-12-02T00:00:02.000000Z", "b", "second"),
            entry("2026-12-02T00:00:01.500000Z", "a", "first"),
            entry("2026-12-02T00:00:03.000000Z", "a", "third"),
        ];
        print_merged(&mut out, lines).unwrap();
        let text = String::from_utf8(out).unwrap();
        let order: Vec<&str> = text
            .lines()
            .map(|l| l.rsplit(' ').next().unwrap())
            .collect();
        assert_eq!(order, ["first", "second", "third"]);
        assert!(text.starts_with("2026-12-02T00:00:01.500000Z a talk@abc - stdout: first\n"));
    }
}
