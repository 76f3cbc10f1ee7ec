#!/usr/bin/env python3
"""Summarise bench/gateway/run.sh outputs: median of the runs per proxy and protocol, and the
gateway/nginx ratios; with a second gateway build (gwbase), the two builds compared run by run
(each run measures both back to back, so the machine's drift between runs cancels out).
Usage: summarize.py RESULTS_DIR DURATION_S"""

import glob
import math
import os
import random
import re
import statistics
import sys

# A run counts as quiet when other processes used at most this share of the proxy core.
QUIET = 0.10

UNITS = {"us": 1e-3, "ms": 1.0, "s": 1000.0}


def wrk(text):
    """Requests/s, p50 and p99 in ms, and errors from wrk --latency output."""
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", text).group(1))
    lat = {}
    for pct, val, unit in re.findall(r"^\s+(50|99)%\s+([\d.]+)(us|ms|s)\s*$", text, re.M):
        lat[pct] = float(val) * UNITS[unit]
    errors = 0
    m = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", text)
    if m:
        errors += int(m.group(1))
    m = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", text)
    if m:
        errors += sum(int(x) for x in m.groups())
    return rps, lat["50"], lat["99"], errors


def h2load(text, log):
    """Requests/s from h2load's summary, p50 and p99 in ms from its per-request log."""
    rps = float(re.search(r"finished in [\d.]+\w+, ([\d.]+) req/s", text).group(1))
    m = re.search(r"requests: \d+ total, \d+ started, \d+ done, \d+ succeeded, (\d+) failed, (\d+) errored", text)
    errors = int(m.group(1)) + int(m.group(2))
    m = re.search(r"status codes: (\d+) 2xx, (\d+) 3xx, (\d+) 4xx, (\d+) 5xx", text)
    errors += int(m.group(3)) + int(m.group(4))
    durations = []
    with open(log) as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 3:
                durations.append(int(parts[2]) / 1000.0)
    durations.sort()
    pick = lambda q: durations[min(len(durations) - 1, int(q * len(durations)))]
    return rps, pick(0.50), pick(0.99), errors


def main():
    results, duration = sys.argv[1], float(sys.argv[2])
    rows = {}
    runs = {}
    failed = False
    for path in sorted(glob.glob(os.path.join(results, "*-h?-*.txt"))):
        proxy, proto, run = os.path.basename(path)[:-4].split("-")
        text = open(path).read()
        if proto == "h1":
            rps, p50, p99, errors = wrk(text)
        else:
            rps, p50, p99, errors = h2load(text, path[:-4] + ".log")
        t = [int(x) for x in re.search(r"cpu_ticks (\d+) (\d+) (\d+) (\d+) (\d+)", text).groups()]
        proxy_s, core_s = (t[2] - t[0]) / t[4], (t[3] - t[1]) / t[4]
        util = proxy_s / duration
        others = max(0.0, core_s - proxy_s) / duration
        us_per_req = proxy_s / (rps * duration) * 1e6
        u = re.search(r"user_ticks (\d+) (\d+)", text)
        user_s = (int(u.group(2)) - int(u.group(1))) / t[4] if u else float("nan")
        user_us = user_s / (rps * duration) * 1e6
        if errors:
            print(f"{proxy} {proto} run {run}: {errors} failed requests", file=sys.stderr)
            failed = True
        rows.setdefault((proto, proxy), []).append(
            (rps, p50, p99, util, others, us_per_req, user_us, us_per_req - user_us)
        )
        runs.setdefault((proto, proxy), {})[int(run)] = (rps, us_per_req)
    report(rows, "all runs")
    paired(runs)
    quiet = {k: [r for r in v if r[4] <= QUIET] for k, v in rows.items()}
    quiet = {k: v for k, v in quiet.items() if v}
    if quiet and quiet != rows:
        print()
        report(quiet, f"only runs where other processes took at most {QUIET:.0%} of the proxy core")
    sys.exit(1 if failed else 0)


def geomean_interval(ratios, n=10_000):
    """Geometric mean of `ratios` and its 95 % percentile-bootstrap interval (seeded)."""
    logs = [math.log(r) for r in ratios]
    rng = random.Random(1)
    means = sorted(
        sum(rng.choice(logs) for _ in logs) / len(logs) for _ in range(n)
    )
    g = math.exp(sum(logs) / len(logs))
    return g, math.exp(means[int(0.025 * n)]), math.exp(means[int(0.975 * n) - 1])


def paired(runs):
    """gateway over gwbase, run by run: requests per second and CPU per request."""
    protos = sorted({p for p, proxy in runs if proxy == "gwbase"})
    if not protos:
        return
    print()
    print("**gateway over gwbase, paired by run** (geometric mean of the runs' ratios, 95 % bootstrap interval)")
    print()
    print("| protocol | runs | req/s ratio (95 % CI) | CPU per request ratio (95 % CI) | req/s ratio per run |")
    print("|---|---:|---|---|---|")
    for proto in protos:
        gw, base = runs.get((proto, "gateway"), {}), runs[(proto, "gwbase")]
        common = sorted(set(gw) & set(base))
        if not common:
            continue
        rps = [gw[r][0] / base[r][0] for r in common]
        cpu = [gw[r][1] / base[r][1] for r in common]
        g, lo, hi = geomean_interval(rps)
        c, clo, chi = geomean_interval(cpu)
        each = ", ".join(f"{x:.3f}" for x in rps)
        print(f"| {proto} | {len(common)} | {g:.3f} ({lo:.3f}-{hi:.3f}) | {c:.3f} ({clo:.3f}-{chi:.3f}) | {each} |")


def report(rows, title):
    """Prints the medians of `rows` and the gateway/nginx ratios as markdown tables."""
    print(f"**{title}**")
    print()
    med = {k: [statistics.median(col) for col in zip(*v)] for k, v in rows.items()}
    print("| protocol | proxy | req/s | p50 ms | p99 ms | proxy CPU µs/req | user / system µs/req | proxy core: proxy / others | runs (req/s) |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---|")
    for (proto, proxy), (rps, p50, p99, util, others, us, user, system) in sorted(med.items()):
        runs = ", ".join(f"{r[0]:.0f}" for r in rows[(proto, proxy)])
        print(f"| {proto} | {proxy} | {rps:.0f} | {p50:.3f} | {p99:.3f} | {us:.1f} | {user:.1f} / {system:.1f} | {util:.0%} / {others:.0%} | {runs} |")
    print()
    print("| protocol | gateway/nginx req/s | gateway/nginx p50 | gateway/nginx p99 | gateway/nginx CPU per req |")
    print("|---|---:|---:|---:|---:|")
    for gw in ("gateway", "gwbase"):
        for proto in sorted({p for p, _ in med}):
            g, n = med.get((proto, gw)), med.get((proto, "nginx"))
            if g and n:
                label = proto if gw == "gateway" else f"{proto} ({gw})"
                print(f"| {label} | {g[0] / n[0]:.2f} | {g[1] / n[1]:.2f} | {g[2] / n[2]:.2f} | {g[5] / n[5]:.2f} |")


if __name__ == "__main__":
    main()
