#!/usr/bin/python3
"""Plots `geodesic bench wan`'s results: test accuracy against wall time for
every configuration (left) and the bytes each link carried (right).

usage: plot_wan.py DIR   (reads DIR/curves.csv and DIR/links.csv, writes DIR/wan.png)
"""
import csv
import sys
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main(out: str) -> None:
    curves = defaultdict(list)
    with open(f"{out}/curves.csv") as f:
        for r in csv.DictReader(f):
            curves[r["config"]].append((float(r["seconds"]), float(r["accuracy"])))
    links = defaultdict(dict)
    with open(f"{out}/links.csv") as f:
        for r in csv.DictReader(f):
            links[r["config"]][f'{r["from"]}->{r["to"]}'] = float(r["bytes"] or 0) / 1e6
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 5))
    # One colour per configuration in both panels.
    colour = {name: f"C{i}" for i, name in enumerate(list(curves) + [n for n in links if n not in curves])}
    for name, pts in curves.items():
        pts.sort()
        left.plot([p[0] for p in pts], [p[1] for p in pts], marker=".", label=name, color=colour[name])
    left.axhline(0.88, color="grey", linestyle=":", linewidth=1)
    # DDP over the WAN runs far longer than the rest: linear to 30 s, log beyond.
    left.set_xscale("symlog", linthresh=30)
    left.set_xlim(left=0)
    left.set_xlabel("training wall time (s; log scale beyond 30 s)")
    left.set_ylabel("test accuracy")
    left.set_ylim(0.6, 0.95)
    left.legend()
    left.set_title("accuracy vs wall time")
    names = [n for n in links if links[n]]
    pairs = sorted({p for n in names for p in links[n]})
    width = 0.8 / max(1, len(names))
    for i, n in enumerate(names):
        right.bar([j + i * width for j in range(len(pairs))], [links[n].get(p, 0) for p in pairs], width, label=n,
                  color=colour[n])
    right.set_xticks([j + 0.4 - width / 2 for j in range(len(pairs))])
    right.set_xticklabels(pairs, rotation=30, ha="right")
    right.set_ylabel("MB carried")
    right.set_title("bytes per link")
    if names:
        right.legend()
    fig.tight_layout()
    fig.savefig(f"{out}/wan.png", dpi=110)


if __name__ == "__main__":
    main(sys.argv[1])
