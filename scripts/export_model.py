#!/usr/bin/python3
"""Exports example models as TorchScript for `model: {name: torchscript, path: ...}`.

Runs on Debian's python3-torch and python3-torchvision (the same LibTorch
version as the C++ build). Every model takes [N, 1, 28, 28] images and
returns [N, 10] logits, as Fashion-MNIST jobs need.

  cnn       the built-in CNN's architecture (docs/models.md), scripted
  cnn-bn    a small CNN with BatchNorm: buffers at low cost (tests)
  resnet18  torchvision's ResNet-18 for small images: a 3x3 stride-1 stem,
            no max-pool, 10 classes

Usage: scripts/export_model.py MODEL OUT.pt [--seed N] [--channels C]
"""
import argparse
import sys

import torch
from torch import nn


def cnn(channels):
    return nn.Sequential(
        nn.Conv2d(channels, 32, 5), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
        nn.Linear(1024, 128), nn.ReLU(), nn.Linear(128, 10))


def cnn_bn(channels):
    return nn.Sequential(
        nn.Conv2d(channels, 16, 3, bias=False), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, bias=False), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
        nn.Linear(32 * 5 * 5, 10))


def resnet18(channels):
    import torchvision
    m = torchvision.models.resnet18(num_classes=10)
    m.conv1 = nn.Conv2d(channels, 64, kernel_size=3, stride=1, padding=1, bias=False)
    m.maxpool = nn.Identity()
    return m


MODELS = {"cnn": cnn, "cnn-bn": cnn_bn, "resnet18": resnet18}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", choices=sorted(MODELS))
    p.add_argument("out")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--channels", type=int, default=1)
    a = p.parse_args()
    torch.manual_seed(a.seed)
    module = torch.jit.script(MODELS[a.model](a.channels))
    module.eval()
    with torch.no_grad():
        out = module(torch.zeros(2, a.channels, 28, 28))
    if tuple(out.shape) != (2, 10):
        sys.exit(f"{a.model}: output {tuple(out.shape)}, expected (2, 10)")
    module.train()
    torch.jit.save(module, a.out)
    params = sum(t.numel() for t in module.parameters() if t.requires_grad)
    buffers = sum(t.numel() for t in module.buffers())
    print(f"{a.out}: {a.model}, {params} trainable parameters, {buffers} buffer values")


if __name__ == "__main__":
    main()
