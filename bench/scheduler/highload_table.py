#!/usr/bin/env python3
"""Tables of bench/scheduler/highload.sh: per policy and round, calls, mean and P99 latency of the
answered calls, SLO violations (answered later than the function's slo_ms, or not answered), and
where the calls ran. Usage: highload_table.py OUT_DIR TOPOLOGY"""

import csv
import os
import re
import sys


def slo_ms(topology, function="sievehard"):
    text = open(topology).read()
    for block in text.split("[[function]]")[1:]:
        if re.search(rf'^name\s*=\s*"{function}"', block, re.M):
            m = re.search(r"^slo_ms\s*=\s*(\d+)", block, re.M)
            if m:
                return float(m.group(1))
    return float("inf")


def p99(values):
    values = sorted(values)
    return values[min(len(values) - 1, int(0.99 * len(values)))] if values else float("nan")


def main():
    out, topology = sys.argv[1], sys.argv[2]
    slo = slo_ms(topology)
    print(f"SLO of sievehard: {slo:.0f} ms\n")
    print("| policy | clients | calls | mean ms | P99 ms | SLO violations | ran at the home edge / another edge / cloud | failed |")
    print("|---|---:|---:|---:|---:|---:|---|---:|")
    for policy in sorted(os.listdir(out), key=lambda p: ["none", "greedy", "ppo"].index(p) if p in ("none", "greedy", "ppo") else 9):
        path = os.path.join(out, policy, "requests.csv")
        if not os.path.exists(path):
            continue
        rounds = {}
        for row in csv.DictReader(open(path)):
            rounds.setdefault(int(row["round"]), []).append(row)
        for n in sorted(rounds):
            rows = rounds[n]
            ok = [r for r in rows if r["status"] == "200"]
            lat = [float(r["latency_ms"]) for r in ok]
            late = sum(1 for r in rows if r["status"] != "200" or float(r["latency_ms"]) > slo)
            cloud = sum(1 for r in ok if r["served_by"] == "cloud")
            home = sum(1 for r in ok if r["served_by"] == "potsdam")
            other = len(ok) - cloud - home
            mean = sum(lat) / len(lat) if lat else float("nan")
            print(f"| {policy} | {n} | {len(rows)} | {mean:.0f} | {p99(lat):.0f} | {late} | {home} / {other} / {cloud} | {len(rows) - len(ok)} |")


if __name__ == "__main__":
    main()
