#!/usr/bin/python3
"""Plain PyTorch DiLoCo, the reference for Geodesic's rounds of local steps.

It replays one finished Geodesic run of synchronous DiLoCo (K workers,
training.local_steps H > 1, training.overlap_rounds false, one fragment,
fp32 both ways, BSP) in a single process, with nothing shared but inputs:

- the same module file (model.path, torch.jit.load) loaded once per worker,
  so every worker starts from the same parameters, trained through the
  module's own `loss(x, y)`;
- each worker's windows and order: line k of `geodesic partition JOB
  --out DIR`'s indices.txt, visited as worker/batcher.cc's BatchSampler
  visits them with SamplerSeed(seed, k) (bench/lm_reference.py);
- the inner step: clip_grad_norm_ to optimizer.clip_norm, then torch.optim's
  AdamW (or Adam, SGD) with Geodesic's schedule over the global step; every
  worker keeps its inner optimizer's state across rounds (DiLoCo);
- a round: every worker starts from the global model, takes H steps, and
  its pseudo-gradient is where it started minus where it ended; the outer
  step averages them in worker order and applies torch.optim.SGD's rule
  with training.outer_lr, outer_momentum and outer_nesterov (dampening 0).

It scores the global model at every round's start on the same validation
windows as the run's evaluator, and prints each against the run's curve
(snapshots of the global model at step c * H), then the final model
against the run's final validation loss. Writes --out (JSON). A job it does
not implement is refused. Needs Debian's python3-torch and python3-yaml.
"""
import json
import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fedavg_reference import batch_order  # noqa: E402
from lm_reference import (lr_factor, optimizer, read_run_job, reference_args, sampler_seed,  # noqa: E402
                          validation_loss, windows)


def read_job(run_dir):
    """The run's resolved job, checked to be synchronous DiLoCo as implemented here."""
    job = read_run_job(run_dir, lambda job: {
        "training.overlap_rounds": (job["training"].get("overlap_rounds", True), False),
        "training.fragments": (job["training"].get("fragments", 1), 1),
    })
    if job["training"].get("local_steps", 1) <= 1:
        raise SystemExit("training.local_steps must be above 1 (bench/lm_reference.py replays data parallel)")
    return job


class Worker:
    """One worker's model, data, batch order and inner optimizer."""

    def __init__(self, job, k, part):
        d, opt = job["data"], job["optimizer"]
        self.model = torch.jit.load(job["model"]["path"])
        self.model.train()
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.x, self.y = windows(os.path.join(d["path"], "train.bin"), d["token_bytes"], d["context"], ids=part)
        self.order = batch_order(range(len(part)), d["batch_size"], job["training"]["steps"],
                                 sampler_seed(job["seed"], k))
        self.inner = optimizer(self.model, opt)

    def round(self, job, start, steps, model):
        """Steps [start, start + steps) from `model`; returns the pseudo-gradient (start minus end)."""
        opt, total = job["optimizer"], job["training"]["steps"]
        clip = opt.get("clip_norm", 0)
        with torch.no_grad():
            for p, g in zip(self.params, model):
                p.copy_(g)
        for s in range(start, start + steps):
            sel = torch.tensor(self.order[s])
            self.inner.zero_grad(set_to_none=False)
            self.model.loss(self.x[sel], self.y[sel]).backward()
            if clip > 0:
                torch.nn.utils.clip_grad_norm_(self.params, clip)
            for g in self.inner.param_groups:
                g["lr"] = opt["lr"] * lr_factor(opt, s, total)
            self.inner.step()
        with torch.no_grad():
            return [g - p for g, p in zip(model, self.params)]


def outer_step(train, model, buf, pushes):
    """The shards' outer SGD on the workers' mean pseudo-gradient (server/optimizer.cc's Sgd)."""
    lr, mu = float(train.get("outer_lr", 1.0)), float(train.get("outer_momentum", 0.0))
    nesterov = train.get("outer_nesterov", False)
    scale = torch.tensor(1.0 / len(pushes), dtype=torch.float32)
    with torch.no_grad():
        for i, g in enumerate(model):
            d = pushes[0][i].clone()
            for p in pushes[1:]:
                d += p[i]
            d *= scale
            if mu > 0:
                buf[i].mul_(mu).add_(d)
                g.sub_(lr * (d + mu * buf[i]) if nesterov else lr * buf[i])
            else:
                g.sub_(lr * d)


def train(job, parts):
    t, e, d = job["training"], job["eval"], job["data"]
    steps, h = t["steps"], t["local_steps"]
    workers = [Worker(job, k, part) for k, part in enumerate(parts)]
    vx, vy = windows(os.path.join(d["path"], "val.bin"), d["token_bytes"], d["context"],
                     limit=e.get("test_samples", 0))
    scorer = workers[0].model
    model = [p.detach().clone() for p in workers[0].params]
    buf = [torch.zeros_like(p) for p in model]

    def score():
        with torch.no_grad():
            for p, g in zip(workers[0].params, model):
                p.copy_(g)
        return validation_loss(scorer, vx, vy, e.get("batch", 128))

    curve = {}
    for c in range(math.ceil(steps / h)):
        curve[c * h] = score()
        print("step %d: validation loss %.6f" % (c * h, curve[c * h]), flush=True)
        n = min(h, steps - c * h)
        outer_step(t, model, buf, [w.round(job, c * h, n, model) for w in workers])
    return curve, score()


def main():
    a = reference_args(__doc__, "a finished geodesic run directory (synchronous DiLoCo)",
                       "indices.txt from geodesic partition --out (a line per worker)")
    job = read_job(a.run)
    with open(a.indices) as f:
        parts = [[int(v) for v in line.split()] for line in f if line.strip()]
    workers = sum(r.get("workers", 0) for r in job["regions"].values())
    if len(parts) != workers:
        raise SystemExit("%s has %d parts for %d workers" % (a.indices, len(parts), workers))
    with open(os.path.join(a.run, "summary.json")) as f:
        summary = json.load(f)
    curve, final = train(job, parts)
    geodesic = {int(p[1]): p[2] for p in summary["loss_curve"]}
    rows = [{"step": k, "geodesic": geodesic[k], "pytorch": curve[k], "diff": geodesic[k] - curve[k]}
            for k in sorted(curve) if k in geodesic]
    rows.append({"step": "final", "geodesic": summary["test_loss"], "pytorch": final,
                 "diff": summary["test_loss"] - final})
    out = {"curve": rows, "largest_difference": max(abs(r["diff"]) for r in rows), "workers": workers,
           "local_steps": job["training"]["local_steps"]}
    with open(a.out, "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
