#!/usr/bin/python3
"""Plain PyTorch training of a language model, the reference for Geodesic's.

It replays one Geodesic run of one worker in BSP (a finished `geodesic
launch` run directory) in a single PyTorch loop, with nothing shared but
inputs:

- the same module file (model.path, torch.jit.load) and so the same initial
  parameters, trained through its own `loss(x, y)`;
- the same token files (data.path: train.bin, val.bin, uint16 or uint32 per
  data.token_bytes) and the same windows: window i is tokens
  [i * context, i * context + context] with next-token targets;
- the same split and order: `geodesic partition JOB --out DIR`'s
  indices.txt (the worker's windows), visited as worker/batcher.cc's
  BatchSampler visits them (mt19937_64 seeded by SamplerSeed(seed, 0), a
  Fisher-Yates shuffle per epoch, whole batches);
- the same step: gradient clipping to optimizer.clip_norm as
  torch.nn.utils.clip_grad_norm_, then torch.optim's SGD, Adam or AdamW
  with the learning rate scaled per step by Geodesic's schedule
  (LearningRateFactor in config/job.cc: linear warm-up, then cosine or
  step decay, over training.steps).

At every step the run's loss curve has a point for (its snapshots, taken
before that step's update), it scores the model on the same validation
windows (the first eval.test_samples of val.bin, in batches of eval.batch)
and prints both losses and their difference. Its training loop is timed
apart from the scoring: tokens per second, with --threads threads.
Writes --out (JSON). A job it does not implement is refused.
Needs Debian's python3-torch and python3-yaml.
"""
import argparse
import json
import math
import os
import sys
import time

import numpy as np
import torch
import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fedavg_reference import MASK, batch_order  # noqa: E402


def sampler_seed(job_seed, worker):
    return (job_seed * 0x9E3779B97F4A7C15 + worker * 1000003 + 17) & MASK


def lr_factor(opt, step, steps):
    """config/job.cc's LearningRateFactor."""
    if steps <= 0:
        return 1.0
    n, k = float(steps), float(min(max(step, 0), steps))
    warm = math.ceil(opt.get("warmup", 0) * n)
    if k < warm:
        return (k + 1) / warm
    schedule = opt.get("schedule", "constant")
    if schedule == "cosine":
        u = (k - warm) / (n - warm) if n > warm else 1.0
        return 0.5 * (1.0 + math.cos(math.pi * u))
    if schedule == "step":
        f = 1.0
        for m in opt.get("milestones", []):
            if k >= m * n:
                f *= opt.get("gamma", 0.1)
        return f
    return 1.0


def read_run_job(run_dir, extra):
    """The run's resolved job, refused unless it is what a replay implements: token data, BSP, fp32 both
    ways, a fixed number of steps, and the keys `extra(job)` gives as {key: (got, want)}."""
    with open(os.path.join(run_dir, "job.yaml")) as f:
        job = yaml.safe_load(f)
    train, comp = job["training"], job.get("compression", {})
    plain = {
        "data.dataset": (job["data"]["dataset"], "tokens"),
        "training.staleness_bound": (train["staleness_bound"], 0),
        "compression.push": (comp.get("push", "fp32"), "fp32"),
        "compression.pull": (comp.get("pull", "fp32"), "fp32"),
        **extra(job),
    }
    for key, (got, want) in plain.items():
        if got != want:
            raise SystemExit("%s is %s; the reference implements only %s" % (key, got, want))
    if train.get("steps", 0) <= 0:
        raise SystemExit("training.steps must be set (the reference replays a fixed number of steps)")
    return job


def read_job(run_dir):
    """The run's resolved job, checked to be one worker in data parallel."""
    return read_run_job(run_dir, lambda job: {
        "workers": (sum(r.get("workers", 0) for r in job["regions"].values()), 1),
        "training.local_steps": (job["training"].get("local_steps", 1), 1),
    })


def windows(path, width, context, ids=None, limit=0):
    """Inputs and targets [n, context] (int64) of the windows `ids` (all, or the first `limit`)."""
    tokens = np.fromfile(path, dtype="<u2" if width == 2 else "<u4").astype(np.int64)
    count = (len(tokens) - 1) // context
    if ids is None:
        ids = np.arange(count if limit <= 0 else min(limit, count))
    starts = np.asarray(ids, dtype=np.int64)[:, None] * context + np.arange(context + 1)[None, :]
    w = torch.from_numpy(tokens[starts])
    return w[:, :-1].contiguous(), w[:, 1:].contiguous()


def optimizer(model, opt):
    params = [p for p in model.parameters() if p.requires_grad]
    # float(): PyYAML reads "1e-08" (no dot) as a string.
    name, lr, wd = opt.get("name", "sgd"), float(opt["lr"]), float(opt.get("weight_decay", 0.0))
    betas, eps = (float(opt.get("beta1", 0.9)), float(opt.get("beta2", 0.999))), float(opt.get("eps", 1e-8))
    if name == "adamw":
        return torch.optim.AdamW(params, lr=lr, betas=betas, eps=eps, weight_decay=wd)
    if name == "adam":
        return torch.optim.Adam(params, lr=lr, betas=betas, eps=eps, weight_decay=wd)
    return torch.optim.SGD(params, lr=lr, momentum=float(opt.get("momentum", 0.9)),
                           nesterov=opt.get("nesterov", False), weight_decay=wd)


def validation_loss(model, x, y, batch):
    model.eval()
    total = 0.0
    with torch.no_grad():
        for i in range(0, len(x), batch):
            total += model.loss(x[i:i + batch], y[i:i + batch]).item() * len(x[i:i + batch])
    model.train()
    return total / len(x)


def train(job, model, part, curve_steps, a):
    d, opt = job["data"], job["optimizer"]
    steps, batch = job["training"]["steps"], d["batch_size"]
    tx, ty = windows(os.path.join(d["path"], "train.bin"), d["token_bytes"], d["context"], ids=part)
    vx, vy = windows(os.path.join(d["path"], "val.bin"), d["token_bytes"], d["context"],
                     limit=job["eval"].get("test_samples", 0))
    order = batch_order(range(len(part)), batch, steps, sampler_seed(job["seed"], 0))
    sgd, clip = optimizer(model, opt), opt.get("clip_norm", 0)
    params = [p for p in model.parameters() if p.requires_grad]
    curve, seconds = {}, 0.0
    for k in range(steps + 1):
        if k in curve_steps:
            curve[k] = validation_loss(model, vx, vy, job["eval"].get("batch", 128))
            print("step %d: validation loss %.6f" % (k, curve[k]), flush=True)
        if k == steps:
            break
        t0 = time.perf_counter()
        sel = torch.tensor(order[k])
        sgd.zero_grad(set_to_none=False)
        model.loss(tx[sel], ty[sel]).backward()
        if clip > 0:
            torch.nn.utils.clip_grad_norm_(params, clip)
        for g in sgd.param_groups:
            g["lr"] = opt["lr"] * lr_factor(opt, k, steps)
        sgd.step()
        seconds += time.perf_counter() - t0
    return curve, seconds


def reference_args(doc, run_help, indices_help):
    """--run, --indices, --threads (set for torch here) and --out, the replays' common flags."""
    ap = argparse.ArgumentParser(description=doc.split("\n")[0])
    ap.add_argument("--run", required=True, help=run_help)
    ap.add_argument("--indices", required=True, help=indices_help)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    return a


def main():
    a = reference_args(__doc__, "a finished geodesic run directory (one worker, BSP)",
                       "indices.txt from geodesic partition --out")
    job = read_job(a.run)
    with open(a.indices) as f:
        part = [int(v) for v in f.readline().split()]
    with open(os.path.join(a.run, "summary.json")) as f:
        summary = json.load(f)
    geodesic = {int(p[1]): p[2] for p in summary["loss_curve"]}
    model = torch.jit.load(job["model"]["path"])
    model.train()
    curve, seconds = train(job, model, part, set(geodesic), a)
    d = job["data"]
    tokens = job["training"]["steps"] * d["batch_size"] * d["context"]
    rows = [{"step": k, "geodesic": geodesic[k], "pytorch": curve[k], "diff": geodesic[k] - curve[k]}
            for k in sorted(curve)]
    out = {"curve": rows, "largest_difference": max(abs(r["diff"]) for r in rows),
           "train_seconds": seconds, "tokens": tokens, "tokens_per_second": tokens / seconds, "threads": a.threads}
    with open(a.out, "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
