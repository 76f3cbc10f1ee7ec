#!/usr/bin/env bash
# Installs what the tests need (Debian packages, the Python and npm test peers) and runs the
# whole test suite. This is the README's test command and what CI (.ci/run) calls.
#
#   scripts/test.sh              # every test
#   scripts/test.sh -p geofaas-dns   # extra arguments go to `cargo nextest run`
#
# The libFuzzer targets run on their own (scripts/fuzz.sh); .ci/run runs them after this.
set -euo pipefail
cd "$(dirname "$0")/.."

# Debian packages: the real clients the tests call with (curl for HTTP/1.1 and HTTP/2, dig, kdig)
# and the real etcd the fleet tests start (and freeze with kill -STOP).
apt_pkgs=()
command -v curl >/dev/null || apt_pkgs+=(curl)
command -v dig >/dev/null || apt_pkgs+=(dnsutils)
command -v kdig >/dev/null || apt_pkgs+=(knot-dnsutils)
command -v etcd >/dev/null || apt_pkgs+=(etcd-server)
# nats-server: the JetStream the fleet's queue tests start (cli/tests/integration/queue.rs).
[ -x /usr/sbin/nats-server ] || command -v nats-server >/dev/null || apt_pkgs+=(nats-server)
# libfaketime: the fault test that runs a node with its clock five minutes ahead.
[ -e /usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1 ] || apt_pkgs+=(libfaketime)
# nginx: the HTTP/1.1 server the tinyFaaS adapter's connections are tested against.
command -v nginx >/dev/null || [ -x /usr/sbin/nginx ] || apt_pkgs+=(nginx)
# promtool (Debian's prometheus): checks the shipped scrape configuration (deploy/prometheus).
command -v promtool >/dev/null || apt_pkgs+=(prometheus)
# /usr/bin/kill (not the shell's builtin): the fleet tests freeze etcd with SIGSTOP.
[ -x /usr/bin/kill ] || [ -x /bin/kill ] || apt_pkgs+=(procps)
# chromium: the browser the operator page's test drives headless (cli/tests/browser).
[ -x /usr/bin/chromium ] || apt_pkgs+=(chromium)
if [ ${#apt_pkgs[@]} -gt 0 ]; then
  echo "== installing ${apt_pkgs[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${apt_pkgs[@]}" >/dev/null
fi

# Test peers: moto (AWS Lambda API with SigV4 checking) and serverless-offline (real handlers).
python3 -c 'import moto.server' 2>/dev/null || { echo "== pip install moto[server]"; python3 -m pip install -q -r functions-adapter/tests/peers/requirements.txt; }
peer=functions-adapter/tests/peers/serverless
[ -x "$peer/node_modules/.bin/serverless" ] || [ -d "$peer/node_modules/serverless-offline" ] || { echo "== npm ci ($peer)"; npm ci --prefix "$peer" --no-audit --no-fund --loglevel=error; }
# Playwright's core (no browser download: it drives the Debian chromium above).
browser=cli/tests/browser
[ -d "$browser/node_modules/playwright-core" ] || { echo "== npm ci ($browser)"; npm ci --prefix "$browser" --no-audit --no-fund --loglevel=error; }

if ! cargo nextest --version >/dev/null 2>&1; then
  echo "== cargo-nextest missing: running cargo test instead"
  cargo test --workspace "$@"
else
  cargo nextest run --workspace --no-fail-fast "$@"
fi
