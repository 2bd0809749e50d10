#!/usr/bin/python3
"""Plots test accuracy against bytes per step from `geodesic bench compression`'s CSV.

usage: plot_compression.py CSV PNG [bytes_per_step|push_bytes_per_step|pull_bytes_per_step]
Left: every configuration; right: the same, zoomed to the accurate ones.
Colour: codec; marker: o error feedback, s error feedback + zstd,
x no error feedback, + no error feedback + zstd, D momentum correction.
"""
import csv
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

FAMILIES = ["fp32", "fp16", "bf16", "int8", "int4", "sign", "topk", "randk"]


def marker(r):
    if r.get("momentum_correction") == "1":
        return "D"
    ef, z = r["error_feedback"] == "1", r["zstd"] == "1"
    if r["codec"].startswith("fp32"):
        return "s" if z else "o"
    return {(True, False): "o", (True, True): "s", (False, False): "x", (False, True): "+"}[(ef, z)]


def main(csv_path: str, png_path: str, column: str = "bytes_per_step") -> None:
    with open(csv_path) as f:
        rows = list(csv.DictReader(f))
    label = {"bytes_per_step": "bytes per worker step, push + pull",
             "push_bytes_per_step": "bytes pushed per worker step",
             "pull_bytes_per_step": "bytes pulled per worker step"}[column]
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    fig, axes = plt.subplots(1, 2, figsize=(13, 5.5))
    best = max(100 * float(r["test_accuracy"]) for r in rows)
    for ax, zoom in zip(axes, (False, True)):
        for r in rows:
            family = r["codec"].split(":")[0].split("+")[0]
            x, y = float(r[column]), 100 * float(r["test_accuracy"])
            if zoom and y < best - 5:
                continue
            ax.scatter(x, y, marker=marker(r), s=45, color=colors[FAMILIES.index(family) % len(colors)])
            if zoom:
                ax.annotate(r["config"], (x, y), fontsize=6, xytext=(3, 2), textcoords="offset points")
        ax.set_xscale("log")
        ax.set_xlabel(label + " (log scale)")
        ax.set_ylabel("test accuracy (%)")
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_title("every configuration")
    axes[1].set_title("within 5 points of the best")
    handles = [plt.Line2D([], [], color=colors[i % len(colors)], marker="o", linestyle="", label=f)
               for i, f in enumerate(FAMILIES)]
    handles += [plt.Line2D([], [], color="gray", marker=m, linestyle="", label=t)
                for m, t in [("o", "error feedback"), ("s", "EF + zstd"), ("x", "no EF"), ("+", "no EF + zstd"),
                             ("D", "momentum correction")]]
    axes[0].legend(handles=handles, fontsize=7, loc="lower left")
    fig.suptitle("Fashion-MNIST CNN, 4 workers, 2 shards, BSP, same steps: test accuracy against bytes")
    fig.tight_layout()
    fig.savefig(png_path, dpi=110)


if __name__ == "__main__":
    main(*sys.argv[1:4])
