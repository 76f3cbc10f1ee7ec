//! `--netem`: real network delays with network namespaces and `tc netem`.
//!
//! Not implemented yet: the machine this was written on runs a kernel without `sch_netem`
//! ("Specified qdisc kind is unknown"), so the namespace set-up could not be tested. Until it
//! is, `--netem` stops with an error instead of silently running without delays, and every
//! `summary.json` says that no delays were injected.

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
        "--netem is not implemented yet ({kernel}); run without it: the summary then records \
         that no network delays were injected"
    )
}
