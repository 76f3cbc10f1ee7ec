//! `--netem`: real network delays with network namespaces and `tc netem`.
//!
//! Not implemented yet: the machine this was written on runs a kernel without `sch_netem`
//! ("Specified qdisc kind is unknown"), so the namespace set-up could not be tested. Until it
//! is, `--netem` stops with an error instead of silently running without delays. Without it,
//! `--spawn` uses the loadtest's own delay model ([`crate::delay`]) and `summary.json` says so.

use std::process::Command;

/// Fails with the reason `--netem` cannot run here.
pub fn check() -> anyhow::Result<()> {
    let supported = Command::new("tc")
        .args(["qdisc", "add", "dev", "lo", "root", "netem", "delay", "0ms"])
        .output()
        .map(|o| {
            let ok = o.status.success();
            if ok {
                let _ = Command::new("tc")
                    .args(["qdisc", "del", "dev", "lo", "root"])
                    .output();
            }
            ok
        })
        .unwrap_or(false);
    let kernel = if supported {
        "this kernel has sch_netem"
    } else {
        "this kernel (or user) cannot add a netem qdisc: root and sch_netem are needed"
    };
    anyhow::bail!(
        "--netem is not implemented yet ({kernel}); run without it: with --spawn the loadtest's \
         own delay model (TCP relays, --cloud-rtt-ms / --edge-rtt-ms) adds the delays, and the \
         summary records which model was used"
    )
}
