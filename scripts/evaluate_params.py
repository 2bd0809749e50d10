#!/usr/bin/python3
"""Loads a run's final_params.bin back into its TorchScript module and
reports its test accuracy, as the evaluator computes it (Fashion-MNIST,
CIFAR-10 binary or safetensors data, normalized as the job says).

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

DEFAULTS = {"fashion-mnist": ([0.2860], [0.3530]),
            "cifar10": ([0.4914, 0.4822, 0.4465], [0.2470, 0.2435, 0.2616])}


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    magic, = struct.unpack(">I", data[:4])
    dims = struct.unpack(">" + "I" * (magic & 0xFF), data[4:4 + 4 * (magic & 0xFF)])
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * len(dims)).reshape(dims)


def read_cifar(data_dir, split):
    base = data_dir
    if not os.path.exists(os.path.join(base, "test_batch.bin")):
        base = os.path.join(base, "cifar-10-batches-bin")
    files = ["test_batch.bin"] if split == "test" else [f"data_batch_{b}.bin" for b in range(1, 6)]
    parts = []
    for i, f in enumerate(files):
        path = os.path.join(base, f)
        if i > 0 and not os.path.exists(path):
            break
        parts.append(np.fromfile(path, dtype=np.uint8).reshape(-1, 3073))
    rec = np.concatenate(parts)
    return rec[:, 1:].reshape(-1, 3, 32, 32), rec[:, 0].astype(np.int64), {}


def read_safetensors(data_dir, split):
    with open(os.path.join(data_dir, f"{split}.safetensors"), "rb") as f:
        data = f.read()
    n, = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    out = {}
    for name in ("images", "labels"):
        t = header[name]
        dtype = {"U8": np.uint8, "F32": "<f4", "I32": "<i4", "I64": "<i8"}[t["dtype"]]
        begin, end = t["data_offsets"]
        out[name] = np.frombuffer(data[8 + n + begin:8 + n + end], dtype=dtype).reshape(t["shape"])
    x = out["images"]
    x = x.reshape(x.shape[0], 1, 1, -1) if x.ndim == 2 else x[:, None] if x.ndim == 3 else x
    return x, out["labels"].astype(np.int64), header.get("__metadata__", {})


def load(data, split):
    """Normalized samples [N, C, H, W] and labels of a split, as the workers compute them."""
    kind, path = data["dataset"], data["path"]
    if kind == "fashion-mnist":
        prefix = "train" if split == "train" else "t10k"
        x = read_idx(os.path.join(path, f"{prefix}-images-idx3-ubyte.gz"))[:, None]
        y, meta = read_idx(os.path.join(path, f"{prefix}-labels-idx1-ubyte.gz")).astype(np.int64), {}
    elif kind == "cifar10":
        x, y, meta = read_cifar(path, split)
    else:
        x, y, meta = read_safetensors(path, split)
    channels = x.shape[1]
    if data.get("mean"):
        mean, std = data["mean"], data["std"]
    elif kind in DEFAULTS:
        mean, std = DEFAULTS[kind]
    elif "mean" in meta:
        mean, std = [float(v) for v in meta["mean"].split(",")], [float(v) for v in meta["std"].split(",")]
    else:
        mean, std = [0.0] * channels, [1.0] * channels
    out = np.empty(x.shape, dtype=np.float32)
    for c in range(channels):
        m, s = np.float32(mean[c]), np.float32(std[c])
        if x.dtype == np.uint8:  # the workers' float32 multiply-add
            out[:, c] = x[:, c].astype(np.float32) * (np.float32(1) / (np.float32(255) * s)) - m / s
        else:
            out[:, c] = x[:, c] * (np.float32(1) / s) - m / s
    return torch.from_numpy(out), torch.from_numpy(y)


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


def set_parameters(module, params_file):
    """Copies a flat float32 file into the module's trainable parameters; returns their count."""
    trainable = [t for t in module.parameters() if t.requires_grad]
    flat = np.fromfile(params_file, dtype="<f4")
    want = sum(t.numel() for t in trainable)
    if flat.size != want:
        sys.exit(f"{params_file}: {flat.size} values, the module has {want} trainable parameters")
    if not np.isfinite(flat).all():
        sys.exit(f"{params_file}: holds values that are not finite")
    with torch.no_grad():
        off = 0
        for t in trainable:
            t.copy_(torch.from_numpy(flat[off:off + t.numel()].copy()).view_as(t))
            off += t.numel()
    return want


def job_settings(run_dir):
    import yaml
    with open(os.path.join(run_dir, "job.yaml")) as f:
        job = yaml.safe_load(f)
    model = job.get("model", {})
    if model.get("name") != "torchscript":
        sys.exit(f"{run_dir}/job.yaml: model.name is {model.get('name')!r}, not torchscript")
    ev = job.get("eval", {})
    data = {"dataset": "fashion-mnist", "path": "/usr/share/datasets/fashion-mnist"}
    data.update(job.get("data", {}))
    return {"module": model["path"], "params": os.path.join(run_dir, "final_params.bin"), "data": data,
            "buffer_samples": int(ev.get("buffer_samples", 4096)), "test_samples": int(ev.get("test_samples", 0))}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run_dir", nargs="?")
    p.add_argument("--module")
    p.add_argument("--params")
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--dataset", default="fashion-mnist", choices=["fashion-mnist", "cifar10", "safetensors"])
    p.add_argument("--buffer-samples", type=int, default=4096)
    p.add_argument("--test-samples", type=int, default=0)
    a = p.parse_args()
    s = job_settings(a.run_dir) if a.run_dir else {
        "module": a.module, "params": a.params, "data": {"dataset": a.dataset, "path": a.data},
        "buffer_samples": a.buffer_samples, "test_samples": a.test_samples}
    if not s["module"] or not s["params"]:
        sys.exit("give RUN_DIR, or --module and --params")
    torch.set_num_threads(os.cpu_count() or 1)
    module = torch.jit.load(s["module"])
    want = set_parameters(module, s["params"])
    recompute_buffers(module, load(s["data"], "train")[0], s["buffer_samples"])
    x, y = load(s["data"], "test")
    if 0 < s["test_samples"] < x.shape[0]:
        x, y = x[:s["test_samples"]], y[:s["test_samples"]]
    print(json.dumps({"parameters": want, "buffer_values": sum(b.numel() for b in module.buffers()),
                      "test_accuracy": accuracy(module, x, y)}))


if __name__ == "__main__":
    main()
