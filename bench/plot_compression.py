#!/usr/bin/python3
"""Plots test accuracy against bytes per step from `geodesic bench compression`'s CSV."""
import csv
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main(csv_path: str, png_path: str) -> None:
    with open(csv_path) as f:
        rows = list(csv.DictReader(f))
    fig, ax = plt.subplots(figsize=(9, 6))
    for r in rows:
        ef = r["error_feedback"] == "1"
        marker = "o" if ef or r["codec"].startswith("fp32") else "x"
        x, y = float(r["bytes_per_step"]), 100 * float(r["test_accuracy"])
        ax.scatter(x, y, marker=marker, s=40)
        ax.annotate(r["config"], (x, y), fontsize=7, xytext=(4, 2), textcoords="offset points")
    ax.set_xscale("log")
    ax.set_xlabel("bytes per worker step, push + pull (log scale)")
    ax.set_ylabel("test accuracy (%)")
    ax.set_title("Fashion-MNIST CNN, 4 workers, same steps: accuracy vs bytes (o: error feedback, x: without)")
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(png_path, dpi=120)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
