#!/usr/bin/python3
"""Loads a run's final_params.bin back into its TorchScript module and
reports its Fashion-MNIST test accuracy, as the evaluator computes it.

The flat file is the module's trainable parameters (requires_grad), in
module.parameters() order, float32 little-endian. Buffers (BatchNorm's
running statistics) are recomputed first as Geodesic does: each buffer that
a train-mode forward keeps as a running average is set to the plain average
of its batch values over the first BUFFER_SAMPLES training images, in
batches of 256 (docs/models.md, "Buffers").

Usage: scripts/evaluate_params.py RUN_DIR   (reads RUN_DIR/job.yaml)
   or: scripts/evaluate_params.py --module M.pt --params P.bin [--data DIR]
Prints one JSON line: parameters, buffer_values, test_accuracy.
"""
import argparse
import gzip
import json
import os
import struct
import sys

import numpy as np
import torch

MEAN, STD = np.float32(0.2860), np.float32(0.3530)


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    magic, = struct.unpack(">I", data[:4])
    dims = struct.unpack(">" + "I" * (magic & 0xFF), data[4:4 + 4 * (magic & 0xFF)])
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * len(dims)).reshape(dims)


def images(data_dir, split):
    raw = read_idx(os.path.join(data_dir, f"{split}-images-idx3-ubyte.gz"))
    scale = np.float32(1) / (np.float32(255) * STD)
    x = raw.astype(np.float32) * scale - MEAN / STD
    return torch.from_numpy(x).unsqueeze(1)


def labels(data_dir, split):
    return torch.from_numpy(read_idx(os.path.join(data_dir, f"{split}-labels-idx1-ubyte.gz")).astype(np.int64))


@torch.no_grad()
def recompute_buffers(module, train_images, samples):
    buffers = list(module.buffers())
    if not buffers:
        return
    module.train()
    head = train_images[:samples]
    size = min(256, head.shape[0])
    batches = head.shape[0] // size
    saved = [b.clone() for b in buffers]
    floating = [b.is_floating_point() for b in buffers]
    for b, f, s in zip(buffers, floating, saved):
        b.copy_(torch.ones_like(b) if f else s)
    module(head[:size])
    from_ones = [b.clone() for b in buffers]
    m = [0.0] * len(buffers)
    sums = [None] * len(buffers)
    for k in range(batches):
        for b, f in zip(buffers, floating):
            if f:
                b.zero_()
        module(head[k * size:(k + 1) * size])
        for i, (b, f) in enumerate(zip(buffers, floating)):
            if not f:
                continue
            if k == 0:
                m[i] = 1.0 - (from_ones[i] - b).mean().item()
            if m[i] < 1e-6:
                continue
            v = b / m[i]
            sums[i] = v if k == 0 else sums[i] + v
    for i, b in enumerate(buffers):
        b.copy_(saved[i] if m[i] < 1e-6 else sums[i] / float(batches))


@torch.no_grad()
def accuracy(module, x, y, batch=1000):
    module.eval()
    correct = 0
    for i in range(0, x.shape[0], batch):
        correct += int((module(x[i:i + batch]).argmax(1) == y[i:i + batch]).sum())
    return correct / x.shape[0] if x.shape[0] else 0.0


def job_settings(run_dir):
    import yaml
    with open(os.path.join(run_dir, "job.yaml")) as f:
        job = yaml.safe_load(f)
    model = job.get("model", {})
    if model.get("name") != "torchscript":
        sys.exit(f"{run_dir}/job.yaml: model.name is {model.get('name')!r}, not torchscript")
    ev = job.get("eval", {})
    return {"module": model["path"], "params": os.path.join(run_dir, "final_params.bin"),
            "data": job.get("data", {}).get("path", "/usr/share/datasets/fashion-mnist"),
            "buffer_samples": int(ev.get("buffer_samples", 4096)), "test_samples": int(ev.get("test_samples", 0))}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run_dir", nargs="?")
    p.add_argument("--module")
    p.add_argument("--params")
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--buffer-samples", type=int, default=4096)
    p.add_argument("--test-samples", type=int, default=0)
    a = p.parse_args()
    s = job_settings(a.run_dir) if a.run_dir else {
        "module": a.module, "params": a.params, "data": a.data,
        "buffer_samples": a.buffer_samples, "test_samples": a.test_samples}
    if not s["module"] or not s["params"]:
        sys.exit("give RUN_DIR, or --module and --params")
    torch.set_num_threads(os.cpu_count() or 1)
    module = torch.jit.load(s["module"])
    trainable = [t for t in module.parameters() if t.requires_grad]
    flat = np.fromfile(s["params"], dtype="<f4")
    want = sum(t.numel() for t in trainable)
    if flat.size != want:
        sys.exit(f"{s['params']}: {flat.size} values, the module has {want} trainable parameters")
    with torch.no_grad():
        off = 0
        for t in trainable:
            t.copy_(torch.from_numpy(flat[off:off + t.numel()].copy()).view_as(t))
            off += t.numel()
    recompute_buffers(module, images(s["data"], "train"), s["buffer_samples"])
    x, y = images(s["data"], "t10k"), labels(s["data"], "t10k")
    if 0 < s["test_samples"] < x.shape[0]:
        x, y = x[:s["test_samples"]], y[:s["test_samples"]]
    print(json.dumps({"parameters": want, "buffer_values": sum(b.numel() for b in module.buffers()),
                      "test_accuracy": accuracy(module, x, y)}))


if __name__ == "__main__":
    main()
