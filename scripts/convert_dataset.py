#!/usr/bin/python3
"""Converts datasets to the formats Geodesic reads (docs/datasets.md), and
generates small CIFAR-10-format datasets for tests.

  fashion-mnist SRC OUT   Fashion-MNIST's IDX files in SRC (Debian:
                          /usr/share/datasets/fashion-mnist) to
                          OUT/train.safetensors and OUT/test.safetensors:
                          images U8 [N, 1, 28, 28], labels U8 [N], metadata
                          classes, mean and std (Fashion-MNIST's published
                          values). Lossless: a job reads the same samples.
  cifar10 SRC OUT         CIFAR-10's binary batches in SRC (data_batch_N.bin,
                          test_batch.bin) to OUT/{train,test}.safetensors:
                          images U8 [N, 3, 32, 32]. Lossless.
  generate-cifar10 OUT    A learnable CIFAR-10-format dataset in OUT
                          (data_batch_1.bin .. and test_batch.bin): each class
                          a colour and a stripe direction, with noise
                          (--train, --test samples, --batches files, --seed).

Needs only Python 3 and NumPy (Debian's python3-numpy).
"""
import argparse
import gzip
import json
import os
import struct
import sys

import numpy as np

FASHION = {"mean": "0.2860", "std": "0.3530"}
CIFAR = {"mean": "0.4914,0.4822,0.4465", "std": "0.2470,0.2435,0.2616"}


def write_safetensors(path, tensors, metadata):
    """tensors: name -> contiguous little-endian NumPy array (uint8, int32, int64 or float32)."""
    dtypes = {np.dtype(np.uint8): "U8", np.dtype("<i4"): "I32", np.dtype("<i8"): "I64", np.dtype("<f4"): "F32"}
    header, offset, blobs = {"__metadata__": metadata}, 0, []
    for name, a in tensors.items():
        a = np.ascontiguousarray(a)
        header[name] = {"dtype": dtypes[a.dtype], "shape": list(a.shape), "data_offsets": [offset, offset + a.nbytes]}
        offset += a.nbytes
        blobs.append(a.tobytes())
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # the data starts 8-byte aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    magic, = struct.unpack(">I", data[:4])
    ndim = magic & 0xFF
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def fashion_mnist(src, out):
    os.makedirs(out, exist_ok=True)
    for split, prefix in (("train", "train"), ("test", "t10k")):
        x = read_idx(os.path.join(src, f"{prefix}-images-idx3-ubyte.gz"))
        y = read_idx(os.path.join(src, f"{prefix}-labels-idx1-ubyte.gz"))
        write_safetensors(os.path.join(out, f"{split}.safetensors"),
                          {"images": x.reshape(-1, 1, 28, 28), "labels": y}, dict(FASHION, classes="10"))
        print(f"{out}/{split}.safetensors: {x.shape[0]} images 1x28x28")


def cifar_files(src, split):
    if split == "test":
        return [os.path.join(src, "test_batch.bin")]
    files = []
    for b in range(1, 6):
        f = os.path.join(src, f"data_batch_{b}.bin")
        if b > 1 and not os.path.exists(f):
            break
        files.append(f)
    return files


def cifar10(src, out):
    os.makedirs(out, exist_ok=True)
    for split in ("train", "test"):
        raw = np.concatenate([np.fromfile(f, dtype=np.uint8) for f in cifar_files(src, split)])
        if raw.size % 3073:
            sys.exit(f"{src}: {split} files are not whole 3073-byte records")
        rec = raw.reshape(-1, 3073)
        write_safetensors(os.path.join(out, f"{split}.safetensors"),
                          {"images": rec[:, 1:].reshape(-1, 3, 32, 32), "labels": rec[:, 0].copy()},
                          dict(CIFAR, classes="10"))
        print(f"{out}/{split}.safetensors: {rec.shape[0]} images 3x32x32")


def generate_cifar10(out, train, test, batches, seed):
    """Class c: a base colour and stripes at one of 5 angles, plus noise."""
    rng = np.random.default_rng(seed)
    colours = 128 + rng.integers(-6, 7, size=(10, 3))
    yy, xx = np.mgrid[0:32, 0:32]

    def samples(n):
        labels = rng.integers(0, 10, size=n).astype(np.uint8)
        img = np.empty((n, 3, 32, 32), dtype=np.float64)
        for i, c in enumerate(labels):
            angle = np.pi * (c % 5) / 5
            stripes = 6 * np.sin((xx * np.cos(angle) + yy * np.sin(angle)) * (0.5 + 0.1 * (c // 5)))
            img[i] = colours[c][:, None, None] + stripes[None] + rng.normal(0, 70, size=(3, 32, 32))
        return labels, np.clip(img, 0, 255).astype(np.uint8)

    def write(path, n):
        labels, img = samples(n)
        rec = np.concatenate([labels[:, None], img.reshape(n, -1)], axis=1)
        rec.tofile(path)

    os.makedirs(out, exist_ok=True)
    for b in range(batches):
        write(os.path.join(out, f"data_batch_{b + 1}.bin"), train // batches + (b < train % batches))
    write(os.path.join(out, "test_batch.bin"), test)
    print(f"{out}: {train} training and {test} test samples in CIFAR-10 format")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="what", required=True)
    for name in ("fashion-mnist", "cifar10"):
        s = sub.add_parser(name)
        s.add_argument("src")
        s.add_argument("out")
    g = sub.add_parser("generate-cifar10")
    g.add_argument("out")
    g.add_argument("--train", type=int, default=5000)
    g.add_argument("--test", type=int, default=1000)
    g.add_argument("--batches", type=int, default=5)
    g.add_argument("--seed", type=int, default=1)
    a = p.parse_args()
    if a.what == "fashion-mnist":
        fashion_mnist(a.src, a.out)
    elif a.what == "cifar10":
        cifar10(a.src, a.out)
    else:
        generate_cifar10(a.out, a.train, a.test, min(5, max(1, a.batches)), a.seed)


if __name__ == "__main__":
    main()
