//! Writes a GeoIP2-City database from lines of `NETWORK LAT LON`, for benchmarks and trials on
//! topologies other than the demo's; used by `bench/scale/run.sh`.
//!
//! `echo "10.1.0.0/24 52.52 13.40" | cargo run --release -p geofaas-dns --example mmdb -- /tmp/my.mmdb`

use geofaas_dns::{write_mmdb, MmdbEntry, MmdbSchema};
use std::io::BufRead;
use std::process::ExitCode;

fn main() -> ExitCode {
    match run() {
        Ok(n) => {
            eprintln!("wrote {n} networks");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<usize, String> {
    let Some(out) = std::env::args().nth(1) else {
        return Err("usage: mmdb OUT.mmdb < lines of `NETWORK LAT LON`".into());
    };
    let mut entries = Vec::new();
    for (i, line) in std::io::stdin().lock().lines().enumerate() {
        let line = line.map_err(|e| format!("stdin: {e}"))?;
        let fields: Vec<&str> = line.split_whitespace().collect();
        let [net, lat, lon] = fields[..] else {
            return Err(format!("line {}: {line:?} is not `NETWORK LAT LON`", i + 1));
        };
        let bad = |what: &str, v: &str| format!("line {}: {what} {v:?} is not valid", i + 1);
        entries.push(MmdbEntry {
            network: net.parse().map_err(|_| bad("network", net))?,
            city: format!("point {}", i + 1),
            country: "ZZ".into(),
            lat: lat.parse().map_err(|_| bad("latitude", lat))?,
            lon: lon.parse().map_err(|_| bad("longitude", lon))?,
        });
    }
    write_mmdb(std::path::Path::new(&out), &entries, MmdbSchema::GeoIp2City)
        .map_err(|e| e.to_string())?;
    Ok(entries.len())
}
