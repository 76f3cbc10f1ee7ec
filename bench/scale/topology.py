"""A topology of N edges for bench/scale: circles of 5 km on a grid 0.2 degrees apart over
Europe (from 36N 9W) and a cloud in Frankfurt. edge-0 listens on PORT, the cloud on PORT+1 and
edge-i on PORT+1+i, all on 127.0.0.1; run.sh starts only edge-0 (the others' ports refuse),
fleet.sh every node, with --registry URL (an etcd, lease 5 s).

With --hosts every node's public_url names its own loopback address instead (edge-i
127.10.((i + 1) / 256).((i + 1) % 256), the cloud 127.9.0.1), so the geo DNS's answers tell the nodes apart.

Usage: python3 topology.py N PORT TLS_DIR [--registry URL] [--hosts] > topology.toml
       (TLS_DIR/../functions: the functions)
Prints, on stderr, a point inside the last edge's area (lat,lon): a client there is handed over
(and given the last edge by the geo DNS).
"""
import math
import sys

n, port, tls = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
registry = sys.argv[sys.argv.index("--registry") + 1] if "--registry" in sys.argv else None
hosts = "--hosts" in sys.argv


def host(i):
    """The host of edge-i's public_url (None: the cloud)."""
    if not hosts:
        return "127.0.0.1"
    return "127.9.0.1" if i is None else f"127.10.{(i + 1) // 256}.{(i + 1) % 256}"


# Every node serves the (empty) functions folder beside the TLS folder on the embedded runtime.
backend = ["[[node.backend]]", 'kind = "local"', f'functions_dir = "{tls}/../functions"']
side = math.ceil(math.sqrt(n))
out = [
    'zone = "scale.test."',
    "[gateway]",
    "max_concurrent_calls = 1024",
    "[scheduler]",
    'policy = "greedy"',
    "[tls]",
    f'cert = "{tls}/cert.pem"',
    f'key = "{tls}/key.pem"',
    f'ca = "{tls}/ca.pem"',
]
if registry:
    out += ["[registry]", f'etcd = ["{registry}"]', "lease_ttl_s = 5"]
for i in range(n):
    lat, lon = 36.0 + (i // side) * 0.2, -9.0 + (i % side) * 0.2
    p = port if i == 0 else port + 1 + i
    out += [
        "[[node]]",
        f'id = "edge-{i}"',
        'role = "edge"',
        f"location = {{ lat = {lat:.4f}, lon = {lon:.4f} }}",
        f"area = {{ circle = {{ center = {{ lat = {lat:.4f}, lon = {lon:.4f} }}, radius_km = 5.0 }} }}",
        f'public_url = "https://{host(i)}:{p}"',
        f'listen = "127.0.0.1:{p}"',
    ] + backend
out += [
    "[[node]]",
    'id = "cloud"',
    'role = "cloud"',
    "location = { lat = 50.1, lon = 8.7 }",
    'area = "world"',
    f'public_url = "https://{host(None)}:{port + 1}"',
    f'listen = "127.0.0.1:{port + 1}"',
] + backend
print("\n".join(out))
last = n - 1
print(f"{36.0 + (last // side) * 0.2 + 0.01:.4f},{-9.0 + (last % side) * 0.2:.4f}", file=sys.stderr)
