#!/usr/bin/python3
"""Plots federated runs: test accuracy per round, one line per run.

usage: plot_federated.py OUT.png LABEL=FILE [LABEL=FILE ...]

FILE is a run's rounds.csv (geodesic launch RUN_DIR/rounds.csv) or
fedavg_reference.py's JSON output. docs/federated.md shows what to run.
"""
import csv
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def series(path):
    if path.endswith(".json"):
        rows = json.load(open(path))["rounds"]
    else:
        rows = [r for r in csv.DictReader(open(path)) if r["test_accuracy"]]
    return [int(r["round"]) for r in rows], [float(r["test_accuracy"]) for r in rows]


def main(out, runs):
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for run in runs:
        label, _, path = run.partition("=")
        if not path:
            raise SystemExit("give runs as LABEL=FILE, not " + run)
        x, y = series(path)
        ax.plot(x, y, label=label, linewidth=1.2)
    ax.set_xlabel("round")
    ax.set_ylabel("test accuracy")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    print("wrote " + out)


if __name__ == "__main__":
    if len(sys.argv) < 3:
        raise SystemExit(__doc__)
    main(sys.argv[1], sys.argv[2:])
