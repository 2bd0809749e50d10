#!/usr/bin/python3
"""Plain PyTorch FedAvg, the reference for Geodesic's federated rounds.

It replays one Geodesic federated run (a finished `geodesic launch` run
directory) in a single PyTorch process, with nothing shared but inputs:

- the same model, started from the run's round-0 snapshot
  (snapshots/snap-0000000000.bin): the CNN (conv 1->32 5x5, ReLU, maxpool
  2, conv 32->64 5x5, ReLU, maxpool 2, linear 1024->128, ReLU, linear
  128->10) on Fashion-MNIST, or, for token data (data.dataset tokens), the
  job's TorchScript module (model.path, torch.jit.load) with its own
  loss(x, y) on the same windows of train.bin (window i: tokens
  [i * context, (i + 1) * context] and their next tokens);
- the same split: `geodesic partition JOB --out DIR`'s indices.txt, one
  client a line;
- the same clients each round: the run's summary.json federated.rounds[r]
  .clients;
- the same local training, read from the run's job.yaml: plain SGD
  (federated.local_lr) over federated.local_epochs of whole batches of
  data.batch_size (or federated.local_steps), each client's batch order
  drawn as Geodesic draws it
  (mt19937_64 seeded by DrawKey(seed, "batch", client, round), a
  Fisher-Yates shuffle per epoch), inputs normalized with mean 0.2860 and
  std 0.3530;
- the same aggregation: x += sum_i w_i (y_i - x) / sum_i w_i, w_i the
  samples client i trained on.

Each round's training is timed (evaluation excluded), then the model is
evaluated: images on the whole 10k test set (test_accuracy), token data on
the first eval.test_samples windows of val.bin as Geodesic's evaluator
takes them (test_loss, the mean over windows). Writes --out (JSON) with the
per-round score and seconds. A job this reference does not implement (another
model, strategy or server step, local momentum, FedProx, DP) is refused.
Needs Debian's python3-torch and python3-yaml.
"""
import argparse
import gzip
import json
import os
import struct
import time

import numpy as np
import torch
import yaml
import torch.nn as nn
import torch.nn.functional as F

MEAN, STD = 0.2860, 0.3530
MASK = (1 << 64) - 1
BATCH_STREAM = 0x6261746368  # "batch", as worker/client_executor.cc keys client batch orders


def mix64(z):
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return z ^ (z >> 31)


def draw_key(parts):
    k = None
    for p in parts:
        k = mix64(p & MASK if k is None else (k ^ p) & MASK)
    return k


class MT19937_64:
    """std::mt19937_64, as the C++ standard defines it."""

    def __init__(self, seed):
        self.mt = [0] * 312
        self.mt[0] = seed & MASK
        for i in range(1, 312):
            prev = self.mt[i - 1]
            self.mt[i] = (6364136223846793005 * (prev ^ (prev >> 62)) + i) & MASK
        self.i = 312

    def _twist(self):
        mt = self.mt
        for i in range(312):
            x = (mt[i] & 0xFFFFFFFF80000000) | (mt[(i + 1) % 312] & 0x7FFFFFFF)
            xa = x >> 1
            if x & 1:
                xa ^= 0xB5026F5AA96619E9
            mt[i] = mt[(i + 156) % 312] ^ xa
        self.i = 0

    def __call__(self):
        if self.i >= 312:
            self._twist()
        y = self.mt[self.i]
        self.i += 1
        y ^= (y >> 29) & 0x5555555555555555
        y ^= (y << 17) & 0x71D67FFFEDA60000
        y ^= (y << 37) & 0xFFF7EEE000000000
        y ^= y >> 43
        return y & MASK


def batch_order(indices, batch, steps, seed):
    """The first `steps` batches worker/batcher.cc's BatchSampler gives."""
    rng = MT19937_64(seed)
    order, out, pos = list(indices), [], 0

    def shuffle():
        for i in range(len(order) - 1, 0, -1):
            j = rng() % (i + 1)
            order[i], order[j] = order[j], order[i]

    shuffle()
    for _ in range(steps):
        if pos + batch > len(order):
            shuffle()
            pos = 0
        out.append(order[pos:pos + batch])
        pos += batch
    return out


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    dims = int.from_bytes(data[0:4], "big") & 0xFF
    shape = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


def load(data_dir, split):
    prefix = "train" if split == "train" else "t10k"
    x = read_idx(os.path.join(data_dir, prefix + "-images-idx3-ubyte.gz"))
    y = read_idx(os.path.join(data_dir, prefix + "-labels-idx1-ubyte.gz"))
    images = torch.from_numpy(x.astype(np.float32)).unsqueeze(1) / 255.0
    return (images - MEAN) / STD, torch.from_numpy(y.astype(np.int64))


def cnn():
    return nn.Sequential(nn.Conv2d(1, 32, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(32, 64, 5), nn.ReLU(),
                         nn.MaxPool2d(2), nn.Flatten(), nn.Linear(1024, 128), nn.ReLU(), nn.Linear(128, 10))


def read_snapshot(path):
    with open(path, "rb") as f:
        data = f.read()
    if data[:8] != b"GDSNAP01":
        raise SystemExit(path + ": not a Geodesic snapshot")
    (count,) = struct.unpack_from("<q", data, 24)
    return torch.from_numpy(np.frombuffer(data, dtype="<f4", offset=32, count=count).copy())


def get_flat(model):
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def set_flat(model, flat):
    off = 0
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(flat[off:off + p.numel()].view_as(p))
            off += p.numel()
    if off != flat.numel():
        raise SystemExit("snapshot has %d values, the model %d" % (flat.numel(), off))


class Images:
    """Fashion-MNIST and the CNN: cross entropy, scored by test accuracy."""
    metric = "test_accuracy"

    def __init__(self, job):
        self.x, self.y = load(job["data"]["path"], "train")
        self.test_x, self.test_y = load(job["data"]["path"], "test")
        self.model = cnn()

    def loss(self, x, y):
        return F.cross_entropy(self.model(x), y)

    def score(self):
        self.model.eval()
        correct = 0
        with torch.no_grad():
            for i in range(0, len(self.test_y), 1000):
                correct += (self.model(self.test_x[i:i + 1000]).argmax(1) == self.test_y[i:i + 1000]).sum().item()
        self.model.train()
        return correct / len(self.test_y)


class Tokens:
    """Token windows and the job's TorchScript module: its own loss, scored by validation loss."""
    metric = "test_loss"

    def __init__(self, job):
        from lm_reference import validation_loss, windows  # bench/lm_reference.py
        d = job["data"]
        self.x, self.y = windows(os.path.join(d["path"], "train.bin"), d["token_bytes"], d["context"])
        self.test_x, self.test_y = windows(os.path.join(d["path"], "val.bin"), d["token_bytes"], d["context"],
                                           limit=job["eval"].get("test_samples", 0))
        self.batch = job["eval"].get("batch", 128)
        self.validation_loss = validation_loss
        self.model = torch.jit.load(job["model"]["path"])
        self.model.train()

    def loss(self, x, y):
        return self.model.loss(x, y)

    def score(self):
        return self.validation_loss(self.model, self.test_x, self.test_y, self.batch)


def train_client(data, x, batches, lr):
    model = data.model
    set_flat(model, x)
    for b in batches:
        sel = torch.tensor(b)
        model.zero_grad(set_to_none=False)
        data.loss(data.x[sel], data.y[sel]).backward()
        with torch.no_grad():
            for p in model.parameters():
                p.add_(p.grad, alpha=-lr)
    return get_flat(model)


def read_job(run_dir):
    """The run's resolved job, checked to be one this reference implements."""
    with open(os.path.join(run_dir, "job.yaml")) as f:
        job = yaml.safe_load(f)
    fed, train = job["federated"], job["training"]
    tokens = job["data"].get("dataset") == "tokens"
    plain = {
        "model.name": (job["model"]["name"], "torchscript" if tokens else "cnn"),
        "federated.strategy": (fed.get("strategy", "fedavg"), "fedavg"),
        "federated.local_momentum": (fed["local_momentum"], 0),
        "federated.prox_mu": (fed["prox_mu"], 0),
        "federated.dp_clip_norm": (fed.get("dp_clip_norm", 0), 0),
        "training.outer_lr": (train.get("outer_lr", 1), 1),
        "training.outer_momentum": (train.get("outer_momentum", 0), 0),
    }
    for key, (got, want) in plain.items():
        if got != want:
            raise SystemExit("%s is %s; the reference implements only %s" % (key, got, want))
    return job


def client_steps(job, size):
    fed, batch = job["federated"], job["data"]["batch_size"]
    if fed["local_steps"] > 0:
        return fed["local_steps"]
    return max(1, int(fed["local_epochs"] * (size // batch)))


def run_round(data, x, r, clients, parts, job):
    total, acc = 0.0, torch.zeros_like(x, dtype=torch.float64)
    batch = job["data"]["batch_size"]
    for c in clients:
        steps = client_steps(job, len(parts[c]))
        batches = batch_order(parts[c], batch, steps, draw_key([job["seed"], BATCH_STREAM, c, r]))
        y = train_client(data, x, batches, job["federated"]["local_lr"])
        w = float(steps * batch)
        acc += w * (y - x).double()
        total += w
    return x + (acc / total).float() if total > 0 else x


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--run", required=True, help="a finished geodesic federated run directory")
    ap.add_argument("--indices", required=True, help="indices.txt from geodesic partition --out")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=0, help="0: as many as the run has")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    job = read_job(a.run)
    with open(a.indices) as f:
        parts = [[int(v) for v in line.split()] for line in f]
    with open(os.path.join(a.run, "summary.json")) as f:
        rounds = json.load(f)["federated"]["rounds"]
    if a.rounds:
        rounds = rounds[:a.rounds]
    data = Tokens(job) if job["data"].get("dataset") == "tokens" else Images(job)
    x = read_snapshot(os.path.join(a.run, "snapshots", "snap-0000000000.bin"))
    out = {"metric": data.metric, "rounds": []}
    for row in rounds:
        t0 = time.perf_counter()
        x = run_round(data, x, row["round"] - 1, row["clients"], parts, job)
        seconds = time.perf_counter() - t0
        set_flat(data.model, x)
        score = data.score()
        out["rounds"].append({"round": row["round"], data.metric: score, "train_seconds": seconds})
        print("round %d: %s %.6f, %.2f s" % (row["round"], data.metric, score, seconds), flush=True)
    with open(a.out, "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
