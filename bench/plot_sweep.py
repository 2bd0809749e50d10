#!/usr/bin/python3
"""Plots of a `geodesic sweep` output folder: test accuracy (validation loss
for language models) against training time and against the bytes the
workers exchanged, one line per run.

    /usr/bin/python3 bench/plot_sweep.py OUT

Reads OUT/results.json and OUT/curves.csv; writes OUT/accuracy_vs_time.png
and OUT/accuracy_vs_bytes.png (loss_vs_time.png and loss_vs_bytes.png for
runs without accuracy). Runs that differ only in a seed axis share a
colour (line styles tell the seeds apart); the legend names only the axes
whose values differ between runs. Needs python3-matplotlib."""
import csv
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

STYLES = ["-", "--", ":", "-."]


def is_seed(key):
    return key == "seed" or key.endswith(".seed")


def load(out):
    with open(out + "/results.json") as f:
        rows = json.load(f)
    curves = {}
    with open(out + "/curves.csv") as f:
        for r in csv.DictReader(f):
            c = curves.setdefault(int(r["index"]), [])
            c.append((float(r["seconds"]), float(r["bytes"]) if r["bytes"] else None, float(r["accuracy"])))
    return rows, curves


def labels(rows):
    """(config label, seed label) per run index: the axes that vary."""
    keys = []
    for r in rows:
        for k in r["axes"]:
            if k not in keys:
                keys.append(k)
    varying = [k for k in keys if len({r["axes"].get(k) for r in rows}) > 1]
    out = {}
    for r in rows:
        config = ", ".join(f"{k.split('.')[-1]}={r['axes'][k]}" for k in varying if not is_seed(k))
        seed = ", ".join(f"seed {r['axes'][k]}" for k in varying if is_seed(k))
        out[r["index"]] = (config or "run", seed)
    return out


def plot(rows, curves, x_of, xlabel, path, target, logx=False, ylabel="test accuracy"):
    names = labels(rows)
    configs = list(dict.fromkeys(names[r["index"]][0] for r in rows))
    seeds = list(dict.fromkeys(names[r["index"]][1] for r in rows))
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    fig, ax = plt.subplots(figsize=(9, 5.5))
    for r in rows:
        points = [(x_of(p), p[2]) for p in curves.get(r["index"], []) if x_of(p) is not None]
        if not points:
            continue
        config, seed = names[r["index"]]
        xs, ys = zip(*points)
        ax.plot(xs, ys, STYLES[seeds.index(seed) % len(STYLES)],
                color=colours[configs.index(config) % len(colours)],
                label=config + (f" ({seed})" if seed else ""), linewidth=1.3)
    if target:
        ax.axhline(target, color="grey", linewidth=0.8, linestyle=":")
    if logx:
        ax.set_xscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if ylabel == "test accuracy":
        ax.set_ylim(bottom=max(0.0, min((p[2] for c in curves.values() for p in c), default=0) - 0.02))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: plot_sweep.py OUT")
    out = sys.argv[1]
    rows, curves = load(out)
    # Curves hold accuracy, or validation loss for models without accuracy.
    loss = all(r.get("test_accuracy") is None and r.get("test_loss") is not None for r in rows)
    what, ylabel = ("loss", "validation loss (nats per token)") if loss else ("accuracy", "test accuracy")
    target = next((r["target_loss" if loss else "target_accuracy"] for r in rows
                   if r.get("target_loss" if loss else "target_accuracy")), None)
    plot(rows, curves, lambda p: p[0], "training time (s)", f"{out}/{what}_vs_time.png", target, ylabel=ylabel)
    plot(rows, curves, lambda p: p[1] if p[1] else None, "bytes exchanged by the workers (push + pull)",
         f"{out}/{what}_vs_bytes.png", target, logx=True, ylabel=ylabel)
    print(f"wrote {out}/{what}_vs_time.png and {out}/{what}_vs_bytes.png")


if __name__ == "__main__":
    main()
