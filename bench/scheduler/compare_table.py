#!/usr/bin/env python3
"""Tables of bench/scheduler/compare.sh. For each workload and policy, over its runs (one run =
one fresh fleet): the mean and the P99 latency of the answered calls, each as the mean over runs
with a 95 % percentile-bootstrap interval over runs (10 000 resamples, seeded); SLO violations
(answered later than the function's slo_ms, or not answered) pooled over runs; and, paired by
round, each policy's mean over greedy's mean with its bootstrap interval; and the median of the
nodes' prediction error (geofaas_prediction_error_ratio, actual over predicted, from the
metrics-<node>.txt each run keeps), pooled over the runs' nodes, interpolated inside its
histogram bucket, and the share of those calls whose ratio lies in (0.8, 1.25] (bucket bounds);
the same pooled over every workload and policy at the end. The mixed workload's SLO is the run's own (summary.json, --slo-ms). A mobility run's background clients (background.csv) get a table of their own, without prediction columns (the nodes' histograms pool their calls with the walk's). Also writes
OUT/compare.csv (one line per run). Usage: compare_table.py OUT_DIR EXAMPLES_DIR"""

import csv
import os
import random
import re
import sys

WORKLOADS = {
    "highload": ("berlin-small-edge.toml", "sievehard"),
    "mobility": ("berlin.toml", "sieve"),
    "mixed": ("berlin.toml", None),
    "coldmix": ("berlin.toml", None),
}
ORDER = ["none", "greedy", "ppo"]


def slo_ms(topology, function):
    text = open(topology).read()
    for block in text.split("[[function]]")[1:]:
        if re.search(rf'^name\s*=\s*"{function}"', block, re.M):
            m = re.search(r"^slo_ms\s*=\s*([0-9.]+)", block, re.M)
            if m:
                return float(m.group(1))
    return float("inf")


def run_slo(run_dir):
    """The SLO a mixed run was measured against (its summary.json), and its workload in words."""
    import json
    m = json.load(open(os.path.join(run_dir, "summary.json")))["mode_results"]
    return float(m["slo_ms"]), f"{len(m['functions'])} functions, Zipf {m['zipf_exponent']}"


def prediction_buckets(run_dir):
    """Cumulative counts of geofaas_prediction_error_ratio per bucket bound, summed over the
    run's nodes: {le: count}."""
    buckets = {}
    for name in os.listdir(run_dir):
        if not (name.startswith("metrics-") and name.endswith(".txt")):
            continue
        for line in open(os.path.join(run_dir, name)):
            if not line.startswith("geofaas_prediction_error_ratio_bucket{"):
                continue
            le = re.search(r'le="([^"]+)"', line).group(1)
            le = float("inf") if le == "+Inf" else float(le)
            buckets[le] = buckets.get(le, 0.0) + float(line.rsplit(" ", 1)[1])
    return buckets


def histogram_median(buckets):
    """The median of a cumulative histogram, linear inside its bucket (nan when empty); and
    the count."""
    bounds = sorted(buckets)
    total = buckets[bounds[-1]] if bounds else 0.0
    if total == 0:
        return float("nan"), 0
    half, lo, below = total / 2, 0.0, 0.0
    for le in bounds:
        c = buckets[le]
        if c >= half:
            if le == float("inf"):
                return lo, int(total)
            return lo + (le - lo) * (half - below) / max(c - below, 1e-9), int(total)
        lo, below = le, c
    return float("nan"), int(total)


def share_within(buckets, lo=0.8, hi=1.25):
    """The share of the histogram's calls with lo < actual / predicted <= hi (both bucket
    bounds, so exact)."""
    total = buckets.get(float("inf"), 0.0)
    if not total or lo not in buckets or hi not in buckets:
        return float("nan")
    return (buckets[hi] - buckets[lo]) / total


def p99(values):
    values = sorted(values)
    return values[min(len(values) - 1, int(0.99 * len(values)))] if values else float("nan")


def mean(values):
    return sum(values) / len(values) if values else float("nan")


def bootstrap(values, rng, n=10_000):
    """Mean of `values` and the 2.5 / 97.5 percentiles of the means of resamples."""
    if len(values) < 2:
        return mean(values), float("nan"), float("nan")
    means = sorted(mean([rng.choice(values) for _ in values]) for _ in range(n))
    return mean(values), means[int(0.025 * n)], means[int(0.975 * n) - 1]


def run_stats(path, slo):
    rows = list(csv.DictReader(open(path)))
    ok = [r for r in rows if r["status"] == "200"]
    lat = [float(r["latency_ms"]) for r in ok]
    late = sum(1 for r in rows if r["status"] != "200" or float(r["latency_ms"]) > slo)
    where = {}
    for r in ok:
        where[r["served_by"]] = where.get(r["served_by"], 0) + 1
    return {"calls": len(rows), "ok": len(ok), "mean": mean(lat), "p99": p99(lat),
            "late": late, "where": where}


def print_table(w, what, slo, runs, errors, rng):
    """One workload's table; `errors` None: no prediction columns (calls the nodes' histograms
    pool with another table's)."""
    print(f"### {w} ({what}, SLO {slo:.0f} ms)\n")
    print("| policy | runs | calls | mean ms (95 % CI) | P99 ms (95 % CI) | SLO violations | mean / greedy's (95 % CI) | median actual / predicted (calls) | within 0.8-1.25 | served by |")
    print("|---|---:|---:|---|---|---:|---|---|---|---|")
    greedy = runs.get("greedy", {})
    for policy in sorted(runs, key=lambda p: ORDER.index(p) if p in ORDER else 9):
        rs = runs[policy]
        m = bootstrap([s["mean"] for s in rs.values()], rng)
        p = bootstrap([s["p99"] for s in rs.values()], rng)
        calls = sum(s["calls"] for s in rs.values())
        late = sum(s["late"] for s in rs.values())
        paired = [rs[r]["mean"] / greedy[r]["mean"] for r in rs if r in greedy]
        ratio = bootstrap(paired, rng) if paired else (float("nan"),) * 3
        where = {}
        for s in rs.values():
            for k, v in s["where"].items():
                where[k] = where.get(k, 0) + v
        med, counted = histogram_median((errors or {}).get(policy, {}))
        within = share_within((errors or {}).get(policy, {}))
        med = f"{med:.2f} ({counted}) | {100 * within:.0f} %" if counted else "- | -"
        print(f"| {policy} | {len(rs)} | {calls} | {m[0]:.0f} ({m[1]:.0f}-{m[2]:.0f}) | "
              f"{p[0]:.0f} ({p[1]:.0f}-{p[2]:.0f}) | {late} ({100 * late / max(calls, 1):.1f} %) | "
              f"{ratio[0]:.3f} ({ratio[1]:.3f}-{ratio[2]:.3f}) | {med} | "
              + ", ".join(f"{k} {v}" for k, v in sorted(where.items())) + " |")
    print()


def background_runs(workload_dir, examples):
    """The background clients' calls of a workload's runs (background.csv, mobility with
    --background-clients): (function, its SLO, {policy: {round: stats}}), or None."""
    paths = {}
    for policy in os.listdir(workload_dir):
        for r in os.listdir(os.path.join(workload_dir, policy)):
            path = os.path.join(workload_dir, policy, r, "background.csv")
            if os.path.exists(path):
                paths[(policy, int(r))] = path
    first = next((row for p in paths.values() for row in csv.DictReader(open(p))), None)
    if first is None:
        return None
    function = first["function"]
    slo = slo_ms(os.path.join(examples, "berlin.toml"), function)
    runs = {}
    for (policy, r), path in paths.items():
        runs.setdefault(policy, {})[r] = run_stats(path, slo)
    return function, slo, runs


def main():
    out, examples = sys.argv[1], sys.argv[2]
    rng = random.Random(2026)
    lines = []
    everything = {}
    for w in sorted(os.listdir(out)):
        if w not in WORKLOADS:
            continue
        topo, function = WORKLOADS[w]
        slo = slo_ms(os.path.join(examples, topo), function) if function else None
        what = function
        runs = {}
        errors = {}
        for policy in os.listdir(os.path.join(out, w)):
            for r in os.listdir(os.path.join(out, w, policy)):
                run_dir = os.path.join(out, w, policy, r)
                path = os.path.join(run_dir, "requests.csv")
                if os.path.exists(path):
                    if function is None:
                        slo, what = run_slo(run_dir)
                    s = run_stats(path, slo)
                    runs.setdefault(policy, {})[int(r)] = s
                    pooled = errors.setdefault(policy, {})
                    for le, c in prediction_buckets(run_dir).items():
                        pooled[le] = pooled.get(le, 0.0) + c
                        everything[le] = everything.get(le, 0.0) + c
                    lines.append([w, policy, r, s["calls"], s["ok"], f"{s['mean']:.1f}",
                                  f"{s['p99']:.1f}", s["late"],
                                  " ".join(f"{k}={v}" for k, v in sorted(s["where"].items()))])
        print_table(w, what, slo, runs, errors, rng)
        background = background_runs(os.path.join(out, w), examples)
        if background:
            function, bslo, bruns = background
            print_table(f"{w}, its background clients", function, bslo, bruns, None, rng)
    med, counted = histogram_median(everything)
    if counted:
        print(f"Every placed call of every workload and policy: median actual / predicted "
              f"{med:.2f}, {100 * share_within(everything):.0f} % within 0.8-1.25 ({counted} calls).\n")
    with open(os.path.join(out, "compare.csv"), "w", newline="") as f:
        cw = csv.writer(f)
        cw.writerow(["workload", "policy", "round", "calls", "ok", "mean_ms", "p99_ms", "slo_violations", "served_by"])
        cw.writerows(lines)


if __name__ == "__main__":
    main()
