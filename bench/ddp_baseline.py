#!/usr/bin/python3
"""PyTorch DistributedDataParallel (gloo) baseline for Geodesic's comparisons.

Trains the reference CNN of docs/architecture.md (conv 1->32 5x5, ReLU, maxpool 2,
conv 32->64 5x5, ReLU, maxpool 2, linear 1024->128, ReLU, linear 128->10;
inputs normalized with mean 0.2860, std 0.3530; SGD lr 0.05, momentum 0.9;
batch 64 per worker) on Fashion-MNIST with an IID partition (a fixed
shuffle, rank r takes every world-size-th sample), one thread per process.
Synchronous: every step all-reduces the mean gradient, as Geodesic's BSP.

Rank 0 evaluates on the whole 10k test set (as Geodesic's evaluator does by
default; --eval-samples N: a fixed random subset of N, cheaper but noisy: a
2,000-sample subset's accuracy is +-0.7% around the full set's, enough to
cross 0.88 early) each time its training
clock passes another --eval-every-s seconds; evaluation time is excluded from
the clock (the other ranks wait in the next all-reduce meanwhile, so the
whole job's clock stops). The run stops after the step at which the subset
accuracy reached --target, or after --epochs; then rank 0 evaluates the whole
10k test set (final_test_accuracy) and writes --out:
  accuracy_curve [[seconds, step, accuracy], ...], seconds_to_target (or
  null), final_test_accuracy (10k), train_seconds, steps, samples, ...

Stopping needs every rank to stop at the same step (DDP all-reduces each
step). Rank 0's decision rides in the gradient all-reduce itself (one extra
float in the last bucket, via a DDP communication hook), so it costs no
extra round trip across the WAN.

Run one process per rank, e.g. bench/ddp_netns.sh; needs python3-torch.
"""
import argparse
import datetime
import gzip
import json
import os
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

MEAN, STD = 0.2860, 0.3530


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    magic = int.from_bytes(data[0:4], "big")
    dims = magic & 0xFF
    shape = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
    arr = np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims)
    return arr.reshape(shape)


def load(data_dir, split):
    prefix = "train" if split == "train" else "t10k"
    x = read_idx(os.path.join(data_dir, prefix + "-images-idx3-ubyte.gz"))
    y = read_idx(os.path.join(data_dir, prefix + "-labels-idx1-ubyte.gz"))
    x = (torch.from_numpy(x.astype(np.float32) / 255.0) - MEAN) / STD
    return x.unsqueeze(1).contiguous(), torch.from_numpy(y.astype(np.int64))


class ReferenceCnn(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 5)
        self.conv2 = nn.Conv2d(32, 64, 5)
        self.fc1 = nn.Linear(1024, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = F.relu(self.fc1(x.flatten(1)))
        return self.fc2(x)


@torch.no_grad()
def accuracy(model, x, y, batch=1000):
    model.eval()
    correct = 0
    for i in range(0, len(x), batch):
        correct += (model(x[i:i + batch]).argmax(1) == y[i:i + batch]).sum().item()
    model.train()
    return correct / len(x)


class StopFlag:
    """Rank 0's stop request, carried through the gradient all-reduce."""

    def __init__(self, world_size):
        self.world_size = world_size
        self.request = 0.0  # set by rank 0 before a step
        self.agreed = False  # true on every rank after that step's all-reduce


def allreduce_with_flag(state, bucket):
    # The default all-reduce hook (mean of the gradients), plus one float in
    # the last bucket: the sum of the ranks' stop requests.
    buf = bucket.buffer()
    if not bucket.is_last():
        buf.div_(state.world_size)
        fut = dist.all_reduce(buf, async_op=True).get_future()
        return fut.then(lambda f: f.value()[0])
    t = torch.cat([buf.div(state.world_size), torch.tensor([state.request], dtype=buf.dtype)])
    fut = dist.all_reduce(t, async_op=True).get_future()

    def unpack(f):
        out = f.value()[0]
        state.agreed = out[-1].item() > 0
        buf.copy_(out[:-1])
        return buf

    return fut.then(unpack)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--world-size", type=int, required=True)
    p.add_argument("--master-addr", default="127.0.0.1")
    p.add_argument("--master-port", type=int, default=29500)
    p.add_argument("--epochs", type=float, default=3.0, help="passes over the training set (all ranks together)")
    p.add_argument("--target", type=float, default=0.88)
    p.add_argument("--eval-every-s", type=float, default=2.0, help="seconds of training between evaluations")
    p.add_argument("--eval-samples", type=int, default=0, help="fixed test subset for the curve; 0: all 10k")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--max-train-s", type=float, default=0,
                   help="> 0: stop after this many seconds of training (a time cap; the target may be unreached)")
    p.add_argument("--timeout-s", type=float, default=600, help="gloo's timeout for one collective")
    p.add_argument("--out", default="result.json", help="rank 0 writes its result here")
    a = p.parse_args()

    torch.set_num_threads(1)
    torch.manual_seed(a.seed)
    rank, world = a.rank, a.world_size
    x_train, y_train = load(a.data, "train")
    if rank == 0:
        x_test, y_test = load(a.data, "test")
        g = torch.Generator().manual_seed(0)
        subset = torch.randperm(len(x_test), generator=g)[:a.eval_samples] if a.eval_samples > 0 else None
        x_eval, y_eval = (x_test[subset], y_test[subset]) if subset is not None else (x_test, y_test)

    # IID partition: one fixed shuffle, rank r takes every world-th sample.
    perm = torch.randperm(len(x_train), generator=torch.Generator().manual_seed(a.seed))
    mine = perm[rank::world]
    steps_per_epoch = len(mine) // a.batch_size
    total_steps = int(round(a.epochs * steps_per_epoch))

    t_init = time.time()
    dist.init_process_group("gloo", init_method=f"tcp://{a.master_addr}:{a.master_port}", rank=rank,
                            world_size=world, timeout=datetime.timedelta(seconds=a.timeout_s))
    model = ReferenceCnn()
    ddp = DDP(model)  # broadcasts rank 0's parameters
    flag = StopFlag(world)
    ddp.register_comm_hook(flag, allreduce_with_flag)
    opt = torch.optim.SGD(ddp.parameters(), lr=a.lr, momentum=a.momentum)
    dist.barrier()
    init_s = time.time() - t_init

    curve, seconds_to_target, capped = [], None, False
    train_s, eval_s, next_eval = 0.0, 0.0, a.eval_every_s
    step, epoch = 0, 0
    order = None
    start = time.time()

    def evaluate():
        nonlocal eval_s, seconds_to_target
        t0 = time.time()
        acc = accuracy(model, x_eval, y_eval)
        eval_s += time.time() - t0
        curve.append([round(train_s, 3), step, acc])
        print(f"[{train_s:7.1f}s] step {step}/{total_steps} accuracy {acc:.4f}", flush=True)
        if acc >= a.target and seconds_to_target is None:
            seconds_to_target = train_s
            flag.request = 1.0

    if rank == 0:
        evaluate()
    while step < total_steps and not flag.agreed:
        i = step % steps_per_epoch
        if i == 0:
            order = mine[torch.randperm(len(mine), generator=torch.Generator().manual_seed(a.seed * 1000 + epoch))]
            epoch += 1
        idx = order[i * a.batch_size:(i + 1) * a.batch_size]
        t0 = time.time()
        loss = F.cross_entropy(ddp(x_train[idx]), y_train[idx])
        opt.zero_grad(set_to_none=True)
        loss.backward()  # the all-reduce (and the stop flag) happen here
        opt.step()
        step += 1
        train_s += time.time() - t0
        if rank == 0 and (train_s >= next_eval or step == total_steps) and not flag.request:
            evaluate()
            next_eval = train_s + a.eval_every_s
        if rank == 0 and 0 < a.max_train_s <= train_s and not flag.request:
            evaluate()
            capped = True
            flag.request = 1.0
    wall = time.time() - start

    if rank == 0:
        t0 = time.time()
        final = accuracy(model, x_test, y_test)
        result = {
            "system": "pytorch-ddp-gloo",
            "world_size": world,
            "epochs": a.epochs,
            "steps": step,
            "samples": step * a.batch_size * world,
            "target_accuracy": a.target,
            "seconds_to_target": seconds_to_target,
            "accuracy_curve": curve,
            "eval_samples": len(x_eval),
            "final_test_accuracy": final,
            "train_seconds": train_s,
            "eval_seconds": eval_s,
            "wall_seconds": wall,
            "init_seconds": init_s,
            "samples_per_second": step * a.batch_size * world / train_s if train_s > 0 else 0,
            "stopped_at_target": bool(flag.agreed) and not capped,
            "stopped_at_time_cap": capped,
            "max_train_seconds": a.max_train_s,
            "torch": torch.__version__,
        }
        with open(a.out, "w") as f:
            json.dump(result, f, indent=2)
        print(f"final test accuracy {final:.4f} after {train_s:.1f} s of training ({step} steps); "
              f"reached {a.target} at {seconds_to_target} s; eval {time.time() - t0 + eval_s:.1f} s", flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
