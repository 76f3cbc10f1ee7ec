#!/usr/bin/env python3
"""The plot of bench/scheduler/compare.sh, as an SVG written without plotting libraries: one panel
per workload, one bar per policy at its mean latency (the mean over runs) with the 95 % bootstrap
interval over runs as a whisker, and each run's mean as a dot. Reads OUT/compare.csv, which
compare_table.py writes. Usage: compare_plot.py OUT_DIR FILE.svg"""

import csv
import os
import random
import sys

ORDER = ["none", "greedy", "ppo"]
LABEL = {"none": "reactive", "greedy": "greedy", "ppo": "PPO"}
COLOUR = {"none": "#999999", "greedy": "#1f77b4", "ppo": "#d62728"}
W, H, PAD, TOP, BOTTOM = 260, 260, 50, 40, 40


def bootstrap(values, rng, n=10_000):
    m = sum(values) / len(values)
    if len(values) < 2:
        return m, m, m
    means = sorted(sum(rng.choice(values) for _ in values) / len(values) for _ in range(n))
    return m, means[int(0.025 * n)], means[int(0.975 * n) - 1]


def panel(x0, workload, runs, rng):
    top = max(max(v) for v in runs.values()) * 1.15 or 1.0
    y = lambda v: TOP + (H - TOP - BOTTOM) * (1 - v / top)
    out = [f'<text x="{x0 + W / 2}" y="20" text-anchor="middle" font-size="14">{workload}</text>',
           f'<line x1="{x0 + PAD}" y1="{y(0)}" x2="{x0 + W - 10}" y2="{y(0)}" stroke="black"/>',
           f'<line x1="{x0 + PAD}" y1="{TOP}" x2="{x0 + PAD}" y2="{y(0)}" stroke="black"/>']
    for i in range(5):
        v = top * i / 4
        out.append(f'<text x="{x0 + PAD - 4}" y="{y(v) + 4}" text-anchor="end" font-size="10">{v:.0f}</text>')
    policies = [p for p in ORDER if p in runs]
    slot = (W - PAD - 10) / max(len(policies), 1)
    for i, p in enumerate(policies):
        m, lo, hi = bootstrap(runs[p], rng)
        cx = x0 + PAD + slot * (i + 0.5)
        out.append(f'<rect x="{cx - slot * 0.3}" y="{y(m)}" width="{slot * 0.6}" height="{y(0) - y(m)}" '
                   f'fill="{COLOUR[p]}" fill-opacity="0.6"/>')
        out.append(f'<line x1="{cx}" y1="{y(lo)}" x2="{cx}" y2="{y(hi)}" stroke="black"/>')
        for v in (lo, hi):
            out.append(f'<line x1="{cx - 6}" y1="{y(v)}" x2="{cx + 6}" y2="{y(v)}" stroke="black"/>')
        for v in runs[p]:
            out.append(f'<circle cx="{cx + slot * 0.15}" cy="{y(v)}" r="2.5" fill="black"/>')
        out.append(f'<text x="{cx}" y="{H - 22}" text-anchor="middle" font-size="11">{LABEL[p]}</text>')
        out.append(f'<text x="{cx}" y="{H - 8}" text-anchor="middle" font-size="10">{m:.0f} ms</text>')
    return out


def main():
    out_dir, svg = sys.argv[1], sys.argv[2]
    runs = {}
    with open(os.path.join(out_dir, "compare.csv")) as f:
        for r in csv.DictReader(f):
            if r["mean_ms"] != "nan":
                runs.setdefault(r["workload"], {}).setdefault(r["policy"], []).append(float(r["mean_ms"]))
    rng = random.Random(2026)
    body = []
    for i, w in enumerate(sorted(runs)):
        body += panel(i * W, w, runs[w], rng)
    width = W * max(len(runs), 1)
    text = (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{H + 20}" '
            f'font-family="sans-serif"><rect width="100%" height="100%" fill="white"/>'
            + "".join(body)
            + f'<text x="{width / 2}" y="{H + 12}" text-anchor="middle" font-size="11">'
              'mean latency per run (dots), the mean over runs (bar) and its 95 % bootstrap interval (whisker), ms</text></svg>\n')
    with open(svg, "w") as f:
        f.write(text)


if __name__ == "__main__":
    main()
