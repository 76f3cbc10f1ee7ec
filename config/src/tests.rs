//! Tests of the example topology, area lookup on the paper's exact hexagon edges, and validation messages.

use std::path::Path;

use crate::{ConfigError, LatLon, RegistrySettings, Role, Topology};

const BERLIN: &str = include_str!("../../examples/berlin.toml");

fn berlin() -> Topology {
    Topology::parse(BERLIN, "berlin.toml", Path::new("examples"))
        .expect("example topology is valid")
}

fn at(lat: f64, lon: f64) -> LatLon {
    LatLon::new(lat, lon).unwrap()
}

fn invalid(text: &str) -> ConfigError {
    Topology::parse(text, "bad.toml", Path::new(".")).expect_err("topology must be rejected")
}

/// The Berlin example with `pattern` replaced, for one-field variations.
fn berlin_with(pattern: &str, replacement: &str) -> String {
    assert!(BERLIN.contains(pattern), "{pattern}");
    BERLIN.replacen(pattern, replacement, 1)
}

#[test]
fn example_topology_routes_the_papers_points() {
    let map = berlin().service_map().unwrap();
    assert_eq!(map.responsible(at(52.51, 13.32)).id, "tu-berlin");
    assert_eq!(map.responsible(at(52.40, 13.06)).id, "potsdam");
    assert_eq!(map.responsible(at(51.5074, -0.1278)).id, "cloud");
    assert_eq!(map.cloud().role, Role::Cloud);
}

#[test]
fn hexagon_vertices_and_edges_are_inside_and_just_beyond_is_not() {
    let map = berlin().service_map().unwrap();
    // East vertex of tu-berlin and the midpoint of its north edge: on the boundary counts as inside.
    assert_eq!(
        map.responsible(at(52.510057, 13.504706056823904)).id,
        "tu-berlin"
    );
    assert_eq!(
        map.responsible(at(52.6656495800945, 13.325043)).id,
        "tu-berlin"
    );
    // A hair (about 1 m) beyond them is nobody's edge: the cloud.
    assert_eq!(map.responsible(at(52.510057, 13.50472)).id, "cloud");
    assert_eq!(map.responsible(at(52.66566, 13.325043)).id, "cloud");
    // South vertex region of potsdam.
    assert_eq!(map.responsible(at(52.1986064199055, 13.0)).id, "potsdam");
    assert_eq!(map.responsible(at(52.19859, 13.0)).id, "cloud");
}

#[test]
fn shared_edge_sliver_is_tolerated_and_resolved_to_the_nearer_centre() {
    let map = berlin().service_map().unwrap();
    assert_eq!(map.warnings().len(), 1, "{:?}", map.warnings());
    let w = &map.warnings()[0];
    assert!(w.contains("tu-berlin") && w.contains("potsdam"), "{w}");
    // Midpoint of tu-berlin's south-west edge lies in both hexagons.
    let mid = at(
        (52.354464419905504 + 52.510057) / 2.0,
        (13.235211471588048 + 13.145379943176097) / 2.0,
    );
    let tu = map.node("tu-berlin").unwrap();
    let pd = map.node("potsdam").unwrap();
    assert!(tu.area.contains(mid) && pd.area.contains(mid));
    let nearer = if mid.distance_km(tu.location) < mid.distance_km(pd.location) {
        "tu-berlin"
    } else {
        "potsdam"
    };
    assert_eq!(map.responsible(mid).id, nearer);
    // 200 m to either side of the shared edge the answer is unambiguous.
    assert_eq!(
        map.responsible(at(mid.lat, mid.lon + 0.003)).id,
        "tu-berlin"
    );
    assert_eq!(map.responsible(at(mid.lat, mid.lon - 0.003)).id, "potsdam");
}

#[test]
fn sliver_wider_than_the_tolerance_is_an_error_naming_both_nodes() {
    let err = invalid(&berlin_with(
        "sliver_tolerance_m = 50",
        "sliver_tolerance_m = 5",
    ));
    let msg = err.to_string();
    assert!(msg.contains("bad.toml"), "{msg}");
    assert!(
        msg.contains("node[tu-berlin].area") && msg.contains("node[potsdam].area"),
        "{msg}"
    );
    assert!(msg.contains("sliver_tolerance_m"), "{msg}");
}

#[test]
fn overlapping_edges_name_both_nodes() {
    // Potsdam's hexagon moved onto tu-berlin's centre.
    let text = berlin_with("location = { lat = 52.354199, lon = 13.055874 }\narea.wkt", "location = { lat = 52.354199, lon = 13.055874 }\narea.hexagon = { center = { lat = 52.5, lon = 13.3 }, circumradius_deg = 0.1 }\nx.wkt");
    let text = text.replacen("x.wkt = \"POLYGON ((12.966", "# \"POLYGON ((12.966", 1);
    let msg = invalid(&text).to_string();
    assert!(
        msg.contains("node[tu-berlin].area = \"overlaps node[potsdam].area by"),
        "{msg}"
    );
}

#[test]
fn validation_names_file_field_and_value() {
    let cases = [
        (
            berlin_with(
                "public_url = \"https://127.0.0.12:8443\"",
                "public_url = \"http://127.0.0.12:8443\"",
            ),
            "node[potsdam].public_url",
            "http://127.0.0.12:8443/",
        ),
        (
            berlin_with("id = \"potsdam\"", "id = \"tu-berlin\""),
            "node[tu-berlin].id",
            "tu-berlin",
        ),
        (
            berlin_with("role = \"cloud\"", "role = \"edge\"").replace(
                "area = \"world\"",
                "area.wkt = \"ENVELOPE (-1, 1, 52, 51)\"",
            ),
            "node.role",
            "none is",
        ),
        (
            berlin_with(
                "area.wkt = \"POLYGON ((12.966",
                "area.wkt = \"POLYGN ((12.966",
            ),
            "node[potsdam].area",
            "POLYGN",
        ),
        (
            berlin_with("id = \"potsdam\"", "id = \"Potsdam!\""),
            "node.id",
            "Potsdam!",
        ),
        (
            berlin_with("name = \"echo\"", "name = \"sieve\""),
            "function[sieve].name",
            "sieve",
        ),
        (
            berlin_with("zone = \"geofaas.test.\"", "zone = \"geofaas.test\""),
            "zone",
            "geofaas.test",
        ),
        (
            berlin_with("id = \"potsdam\"", "id = \"potsdam\"\ncores = 0"),
            "node[potsdam].cores",
            "0",
        ),
        (
            berlin_with("id = \"potsdam\"", "id = \"potsdam\"\nmemory_gb = -2"),
            "node[potsdam].memory_gb",
            "-2",
        ),
        (
            berlin_with("id = \"cloud\"", "id = \"cloud\"\nbandwidth = nan"),
            "node[cloud].bandwidth",
            "NaN",
        ),
        (
            berlin_with(
                "policy = \"none\"",
                "policy = \"none\"\nload_interval_ms = 0",
            ),
            "scheduler.load_interval_ms",
            "0",
        ),
        (
            berlin_with("policy = \"none\"", "policy = \"ppo\"\nmargin = -0.5"),
            "scheduler.margin",
            "-0.5",
        ),
        (
            berlin_with(
                "policy = \"none\"",
                "policy = \"ppo\"\nmargin = 0.25\nbusy_margin = inf",
            ),
            "scheduler.busy_margin",
            "inf",
        ),
    ];
    for (text, field, value) in cases {
        let err = invalid(&text);
        assert_eq!(err.field(), Some(field), "{err}");
        let msg = err.to_string();
        assert!(msg.starts_with("bad.toml: "), "{msg}");
        assert!(msg.contains(value), "{msg} should quote {value}");
    }
}

#[test]
fn node_capacities_default_by_role_and_the_file_overrides_them() {
    let t = berlin();
    let caps = |id: &str| {
        let n = t.node(id).unwrap();
        (n.cores(), n.memory_gb(), n.bandwidth())
    };
    assert_eq!(caps("tu-berlin"), (8.0, 16.0, 1000.0));
    assert_eq!(caps("cloud"), (64.0, 256.0, 10_000.0));
    assert_eq!(t.scheduler.load_interval_ms, 1000);
    assert_eq!(t.scheduler.weights, None);
    let text = berlin_with(
        "id = \"potsdam\"",
        "id = \"potsdam\"\ncores = 2\nmemory_gb = 0.5\nbandwidth = 250",
    )
    .replace(
        "policy = \"none\"",
        "policy = \"ppo\"\nweights = \"w/potsdam.safetensors\"",
    );
    let t = Topology::parse(&text, "t.toml", Path::new("examples")).unwrap();
    let n = t.node("potsdam").unwrap();
    assert_eq!((n.cores(), n.memory_gb(), n.bandwidth()), (2.0, 0.5, 250.0));
    assert_eq!(
        t.resolve(t.scheduler.weights.as_deref().unwrap()),
        Path::new("examples/w/potsdam.safetensors")
    );
}

#[test]
fn unknown_fields_and_bad_types_are_parse_errors_with_the_field_name() {
    let msg = invalid(&berlin_with("ttl_s = 30", "ttl_s = 30\nttl_seconds = 5")).to_string();
    assert!(
        msg.contains("bad.toml") && msg.contains("ttl_seconds"),
        "{msg}"
    );
    let msg = invalid(&berlin_with("ttl_s = 30", "ttl_s = \"thirty\"")).to_string();
    assert!(msg.contains("ttl_s") || msg.contains("thirty"), "{msg}");
    let msg = invalid(&berlin_with("kind = \"local\"", "kind = \"kubernetes\"")).to_string();
    assert!(msg.contains("kubernetes"), "{msg}");
}

#[test]
fn edge_without_area_and_world_edge_are_rejected() {
    let text = berlin_with("area = \"world\"", "");
    assert!(
        Topology::parse(&text, "ok.toml", Path::new("examples")).is_ok(),
        "the cloud's area defaults to the world"
    );
    let err = invalid(&BERLIN.replacen("area.wkt = \"POLYGON ((12.966", "#", 1));
    assert_eq!(err.field(), Some("node[potsdam].area"), "{err}");
}

#[test]
fn registry_areas_match_the_inline_polygons() {
    let text = berlin_with(
        "area.wkt = \"POLYGON ((12.966",
        "area.registry = { file = \"disgb-registry.json\", broker = \"Potsdam\" }\n#",
    );
    let topo = Topology::parse(&text, "reg.toml", Path::new("testdata")).unwrap();
    let inline = berlin().service_map().unwrap();
    let imported = topo.service_map().unwrap();
    assert_eq!(
        imported.node("potsdam").unwrap().area,
        inline.node("potsdam").unwrap().area
    );
    let err = Topology::parse(
        &text.replace("broker = \"Potsdam\"", "broker = \"Spandau\""),
        "reg.toml",
        Path::new("testdata"),
    )
    .unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("Spandau") && msg.contains("TUBerlin"), "{msg}");
}

#[test]
fn envelope_circle_and_multipolygon_areas() {
    use crate::area::{parse_wkt, Area};
    assert_eq!(
        parse_wkt("ENVELOPE (-180, 180, 90, -90)").unwrap(),
        Area::World
    );
    let env = parse_wkt("ENVELOPE (13.0, 13.5, 52.6, 52.3)").unwrap();
    assert!(env.contains(at(52.5, 13.3)) && !env.contains(at(52.7, 13.3)));
    let multi = parse_wkt(
        "MULTIPOLYGON (((0 0, 1 0, 1 1, 0 1, 0 0)), ((10 10, 11 10, 11 11, 10 11, 10 10)))",
    )
    .unwrap();
    assert!(
        multi.contains(at(10.5, 10.5))
            && multi.contains(at(0.5, 0.5))
            && !multi.contains(at(5.0, 5.0))
    );
    assert!(parse_wkt("POINT (1 2)").unwrap_err().0.contains("POINT"));
    assert!(parse_wkt("POLYGON ((0 0, 200 0, 1 1, 0 0))")
        .unwrap_err()
        .0
        .contains("longitude"));
    let circle = crate::AreaConfig::Circle {
        center: at(52.5, 13.4),
        radius_km: 10.0,
    }
    .build(Path::new("."))
    .unwrap();
    assert!(
        circle.contains(at(52.5 + 0.08, 13.4)),
        "8.9 km north is inside"
    );
    assert!(
        !circle.contains(at(52.5 + 0.1, 13.4)),
        "11.1 km north is outside"
    );
}

#[test]
fn readme_backend_snippets_parse() {
    let readme = include_str!("../../README.md");
    let snippets: Vec<&str> = readme
        .split("```toml\n")
        .skip(1)
        .filter_map(|s| s.split_once("```").map(|(block, _)| block))
        .filter(|block| block.starts_with("[[node.backend]]"))
        .collect();
    assert_eq!(snippets.len(), 4, "one snippet per backend kind");
    let auth: Vec<&str> = readme
        .split("```toml\n")
        .skip(1)
        .filter_map(|s| s.split_once("```").map(|(block, _)| block))
        .filter(|block| block.starts_with("[[auth.key]]"))
        .collect();
    assert_eq!(auth.len(), 1, "the callers and limits snippet");
    let t = Topology::parse(
        &format!("{}\n[[node]]\nid = \"cloud\"\nrole = \"cloud\"\nlocation = {{ lat = 0, lon = 0 }}\npublic_url = \"https://cloud.example\"\nlisten = \"0.0.0.0:8443\"\n", auth[0]),
        "README.md",
        Path::new("."),
    )
    .unwrap_or_else(|e| panic!("{e}\n{}", auth[0]));
    assert_eq!(t.limits.per_client_rps, 50.0);
    for snippet in snippets {
        let text = format!(
            "[[node]]\nid = \"cloud\"\nrole = \"cloud\"\nlocation = {{ lat = 0, lon = 0 }}\npublic_url = \"https://cloud.example\"\nlisten = \"0.0.0.0:8443\"\n{snippet}"
        );
        Topology::parse(&text, "README.md", Path::new("."))
            .unwrap_or_else(|e| panic!("{e}\n{snippet}"));
    }
}

#[test]
fn queue_section_has_defaults_and_clear_errors() {
    let t = Topology::parse(
        &berlin_with(
            "[dns]",
            "[queue]\nnats = [\"nats://127.0.0.1:4222\"]\n\n[dns]",
        ),
        "fleet.toml",
        Path::new("examples"),
    )
    .unwrap();
    let q = t.queue.expect("queue section");
    assert_eq!(q.stream, "GEOFAAS_CALLS");
    assert_eq!(q.answers, "GEOFAAS_ACTIVATIONS");
    assert_eq!(q.ack_wait_s, 30);
    assert_eq!(q.max_in_flight, 256);
    assert!(berlin().queue.is_none(), "no section, no queue");
    for (section, field, words) in [
        ("nats = []", "queue.nats", "at least one"),
        ("nats = [\"http://a:4222\"]", "queue.nats", "nats://"),
        (
            "nats = [\"nats://a:1\"]\nstream = \"a.b\"",
            "queue.stream",
            "stream name",
        ),
        (
            "nats = [\"nats://a:1\"]\nanswers = \"GEOFAAS_CALLS\"",
            "queue.answers",
            "differ",
        ),
        (
            "nats = [\"nats://a:1\"]\nack_wait_s = 0",
            "queue.ack_wait_s",
            "1 to 3600",
        ),
        (
            "nats = [\"nats://a:1\"]\nreplicas = 2",
            "queue.replicas",
            "1, 3 or 5",
        ),
        (
            "nats = [\"nats://a:1\"]\nmax_in_flight = 0",
            "queue.max_in_flight",
            "1 to 10000",
        ),
        (
            "nats = [\"nats://a:1\"]\nsubject = \"x\"",
            "",
            "unknown field",
        ),
    ] {
        let err = invalid(&berlin_with(
            "[dns]",
            &format!("[queue]\n{section}\n\n[dns]"),
        ));
        if !field.is_empty() {
            assert_eq!(err.field(), Some(field), "{err}");
        }
        assert!(err.to_string().contains(words), "{err}");
    }
}

#[test]
fn registry_section_has_defaults_and_clear_errors() {
    let t = Topology::parse(
        &berlin_with(
            "[dns]",
            "[registry]\netcd = [\"http://127.0.0.1:2379\"]\n\n[dns]",
        ),
        "fleet.toml",
        Path::new("examples"),
    )
    .unwrap();
    let r = t.registry.expect("registry section");
    assert_eq!(r.lease_ttl_s, 20);
    assert_eq!(r.prefix, "/geofaas/");
    assert_eq!(r.load_interval_ms, 1000);
    assert!(berlin().registry.is_none(), "no section, no registry");
    for (section, field, words) in [
        ("etcd = []", "registry.etcd", "at least one"),
        ("etcd = [\"ftp://x:1\"]", "registry.etcd", "http://"),
        (
            "etcd = [\"http://a:1\"]\nlease_ttl_s = 0",
            "registry.lease_ttl_s",
            "at least 1",
        ),
        (
            "etcd = [\"http://a:1\"]\nprefix = \"geofaas\"",
            "registry.prefix",
            "'/'",
        ),
        (
            "etcd = [\"http://a:1\"]\ncall_record_max_bytes = 9999999",
            "registry.call_record_max_bytes",
            "1 MiB",
        ),
        ("etcd = [\"https://a:1\"]", "registry.tls", "CA file"),
        (
            "etcd = [\"http://a:1\"]\n[registry.tls]\nca = \"ca.pem\"",
            "registry.tls",
            "https://",
        ),
        (
            "etcd = [\"https://a:1\", \"http://b:1\"]",
            "registry.etcd",
            "all https://",
        ),
        (
            "etcd = [\"https://a:1\"]\n[registry.tls]\nca = \"ca.pem\"\ncert = \"c.pem\"",
            "registry.tls.key",
            "needs its key",
        ),
        (
            "etcd = [\"http://a:1\"]\nuser_env = \"ETCD_USER\"",
            "registry.password_env",
            "needs password_env",
        ),
        (
            "etcd = [\"http://a:1\"]\nuser_env = \"etcd user\"\npassword_env = \"P\"",
            "registry.user_env",
            "environment variable",
        ),
        (
            "etcd = [\"http://a:1\"]\ncall_record_wait_ms = 0",
            "registry.call_record_wait_ms",
            "at least 1",
        ),
    ] {
        let err = invalid(&berlin_with(
            "[dns]",
            &format!("[registry]\n{section}\n\n[dns]"),
        ));
        assert_eq!(err.field(), Some(field), "{err}");
        assert!(err.to_string().contains(words), "{err}");
    }
    let err = invalid(&berlin_with(
        "[dns]",
        "[registry]\netcd = [\"http://a:1\"]\nttl = 3\n\n[dns]",
    ));
    assert!(
        err.to_string().contains("ttl"),
        "unknown field named: {err}"
    );
}

#[test]
fn registry_tls_paths_are_relative_to_the_file_and_credentials_come_from_the_environment() {
    let t = Topology::parse(
        &berlin_with(
            "[dns]",
            "[registry]\netcd = [\"https://127.0.0.1:2379\"]\nuser_env = \"GEOFAAS_TEST_ETCD_U\"\npassword_env = \"GEOFAAS_TEST_ETCD_P\"\n[registry.tls]\nca = \"etcd/ca.pem\"\ncert = \"etcd/c.pem\"\nkey = \"etcd/k.pem\"\n\n[dns]",
        ),
        "fleet.toml",
        Path::new("/srv/geofaas"),
    )
    .unwrap();
    let r = t.registry.expect("registry section");
    let tls = r.tls.as_ref().unwrap();
    assert_eq!(tls.ca, Path::new("/srv/geofaas/etcd/ca.pem"));
    assert_eq!(
        tls.key.as_deref(),
        Some(Path::new("/srv/geofaas/etcd/k.pem"))
    );
    // Unset variables are an error naming the field (this test owns these two names).
    let (field, reason) = r.credentials().unwrap_err();
    assert_eq!(field, "registry.user_env");
    assert!(reason.contains("GEOFAAS_TEST_ETCD_U"), "{reason}");
    assert_eq!(RegistrySettings::new(vec![]).credentials(), Ok(None));
}

/// The Berlin example with a second backend at the cloud node.
fn berlin_with_cloud_backend(backend: &str) -> String {
    let cloud =
        "[[node.backend]]\nkind = \"local\"\nfunctions_dir = \"../functions\"\n\n[[function]]";
    berlin_with(
        cloud,
        &format!(
            "[[node.backend]]\nkind = \"local\"\nfunctions_dir = \"../functions\"\n\
             [[node.backend]]\n{backend}\n\n[[function]]"
        ),
    )
}

#[test]
fn remote_deploys_are_off_by_default_and_lambda_deploys_need_a_role() {
    let lambda = "kind = \"lambda\"\nregion = \"eu-central-1\"";
    let t = Topology::parse(
        &berlin_with_cloud_backend(lambda),
        "bad.toml",
        Path::new("examples"),
    )
    .expect("a lambda backend without deploy needs no role");
    let crate::BackendConfig::Lambda(b) = &t.node("cloud").unwrap().backends[1] else {
        panic!("second cloud backend is the lambda one");
    };
    assert!(!b.deploy);
    assert_eq!(b.role, None);
    assert_eq!(b.runtimes, crate::backend::DeployRuntimes::default());

    let err = invalid(&berlin_with_cloud_backend(&format!(
        "{lambda}\ndeploy = true"
    )));
    assert_eq!(err.field(), Some("node[cloud].backend[1].role"), "{err}");
    assert!(err.to_string().contains("execution role"), "{err}");

    let err = invalid(&berlin_with_cloud_backend(&format!(
        "{lambda}\ndeploy = true\nrole = \"geofaas-functions\""
    )));
    assert_eq!(err.field(), Some("node[cloud].backend[1].role"), "{err}");
    assert!(err.to_string().contains("geofaas-functions"), "{err}");

    let err = invalid(&berlin_with_cloud_backend(&format!(
        "{lambda}\ndeploy = true\nrole = \"arn:aws:iam::123456789012:role/f\"\nmemory_mb = 64"
    )));
    assert_eq!(
        err.field(),
        Some("node[cloud].backend[1].memory_mb"),
        "{err}"
    );

    let ok = berlin_with_cloud_backend(&format!(
        "{lambda}\ndeploy = true\nrole = \"arn:aws:iam::123456789012:role/f\"\n\
         runtimes = {{ python3 = \"python3.13\" }}"
    ));
    let t = Topology::parse(&ok, "ok.toml", Path::new("examples")).expect("valid");
    let crate::BackendConfig::Lambda(b) = &t.node("cloud").unwrap().backends[1] else {
        panic!("lambda");
    };
    assert!(b.deploy);
    assert_eq!(b.runtimes.python3.as_deref(), Some("python3.13"));
    assert_eq!(b.runtimes.nodejs, None);
}

#[test]
fn tinyfaas_and_openwhisk_deploy_fields_have_defaults_and_are_checked() {
    let tiny = "kind = \"tinyfaas\"\nurl = \"http://10.0.0.5:8000\"\nmanager_url = \"http://10.0.0.5:8080\"";
    let t = Topology::parse(
        &berlin_with_cloud_backend(&format!("{tiny}\ndeploy = true")),
        "ok.toml",
        Path::new("examples"),
    )
    .expect("valid");
    let crate::BackendConfig::Tinyfaas(b) = &t.node("cloud").unwrap().backends[1] else {
        panic!("tinyfaas");
    };
    assert!(b.deploy);
    assert_eq!(b.threads, 1);
    let err = invalid(&berlin_with_cloud_backend(&format!("{tiny}\nthreads = 0")));
    assert_eq!(err.field(), Some("node[cloud].backend[1].threads"), "{err}");

    let ow = "kind = \"openwhisk\"\napi_host = \"https://ow.example\"\ndeploy = true\n\
              runtimes = { nodejs = \"nodejs:18\" }";
    let t = Topology::parse(
        &berlin_with_cloud_backend(ow),
        "ok.toml",
        Path::new("examples"),
    )
    .expect("valid");
    let crate::BackendConfig::Openwhisk(b) = &t.node("cloud").unwrap().backends[1] else {
        panic!("openwhisk");
    };
    assert!(b.deploy);
    assert_eq!(b.runtimes.nodejs.as_deref(), Some("nodejs:18"));
    let err = invalid(&berlin_with_cloud_backend(
        "kind = \"openwhisk\"\napi_host = \"https://ow.example\"\nruntimes = { binary = \"blackbox\" }",
    ));
    assert!(err.to_string().contains("binary"), "{err}");
}
