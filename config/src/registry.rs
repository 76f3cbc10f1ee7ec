//! Import of GeoFaaS/DisGB broker registries (`disgb-registry.json`): a JSON array of
//! `{"responsibleBroker": {"brokerId", "ip", "port"}, "coveredArea": {"WKT"}}`.

use serde::Deserialize;

/// One entry of a DisGB registry.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RegistryEntry {
    /// The broker (node) responsible for the area.
    pub responsible_broker: Broker,
    /// The area it covers.
    pub covered_area: CoveredArea,
}

/// A broker of a DisGB registry.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Broker {
    /// Broker name, e.g. `TUBerlin`.
    pub broker_id: String,
    /// Address the broker listened on.
    #[serde(default)]
    pub ip: Option<String>,
    /// Port the broker listened on.
    #[serde(default)]
    pub port: Option<u16>,
}

/// The area of a registry entry.
#[derive(Clone, Debug, Deserialize)]
pub struct CoveredArea {
    /// WKT (POLYGON or ENVELOPE) in lon-lat order.
    #[serde(rename = "WKT")]
    pub wkt: String,
}

/// Parses a whole registry.
pub fn parse(text: &str) -> Result<Vec<RegistryEntry>, String> {
    serde_json::from_str(text).map_err(|e| format!("not a DisGB registry: {e}"))
}

/// The WKT of `broker`'s covered area.
pub fn broker_area(text: &str, broker: &str) -> Result<String, String> {
    let entries = parse(text)?;
    let known: Vec<&str> = entries
        .iter()
        .map(|e| e.responsible_broker.broker_id.as_str())
        .collect();
    entries
        .iter()
        .find(|e| e.responsible_broker.broker_id == broker)
        .map(|e| e.covered_area.wkt.clone())
        .ok_or_else(|| format!("no broker {broker:?} in the registry (it has {known:?})"))
}
