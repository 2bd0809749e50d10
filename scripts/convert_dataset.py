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
  text OUT FILE...        Byte-level token data for `data.dataset: tokens`.
                          Documents: each FILE whole, or with --separator S
                          the text between lines that consist only of S (as
                          in fortune files: %), separator lines dropped; blank
                          documents skipped, the rest kept byte for byte.
                          A --val-share (0.1) of them, picked by a shuffle
                          seeded by --seed (1), is validation; each split
                          keeps the input order. Writes in OUT, per split
                          (train, val):
                            SPLIT.bin     <u2 tokens: the documents
                                          concatenated, one token per byte,
                                          the byte's value (vocabulary 256)
                            SPLIT.docs    <u8 each document's start offset
                                          in tokens (the first 0)
                            SPLIT.groups  <u4 each document's FILE index, its
                                          group for non-IID splits
                          and meta.json: tokenizer "bytes", vocab 256,
                          token_bytes 2, groups (the FILEs' basenames),
                          train and val {tokens, documents}, sources (the
                          FILE paths).

Needs only Python 3 and NumPy (Debian's python3-numpy).
"""
import argparse
import gzip
import json
import os
import re
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


def read_documents(paths, separator):
    """(file index, bytes) of each non-blank document, in input order."""
    docs = []
    for group, path in enumerate(paths):
        with open(path, "rb") as f:
            data = f.read()
        if separator is None:
            parts = [data]
        else:
            parts = re.split(rb"(?m)^" + re.escape(separator) + rb"\r?(?:\n|\Z)", data)
        docs += [(group, d) for d in parts if d.strip()]
    return docs


def write_tokens(out, split, docs):
    lengths = np.array([len(d) for _, d in docs], dtype="<u8")
    tokens = np.frombuffer(b"".join(d for _, d in docs), dtype=np.uint8).astype("<u2")
    tokens.tofile(os.path.join(out, f"{split}.bin"))
    starts = np.zeros(len(docs), dtype="<u8")
    starts[1:] = np.cumsum(lengths)[:-1]
    starts.tofile(os.path.join(out, f"{split}.docs"))
    groups = np.array([g for g, _ in docs], dtype="<u4")
    groups.tofile(os.path.join(out, f"{split}.groups"))
    print(f"{out}/{split}.bin: {tokens.size} tokens, {len(docs)} documents, {np.unique(groups).size} groups")
    return {"tokens": int(tokens.size), "documents": len(docs)}


def text(out, paths, separator, val_share, seed):
    docs = read_documents(paths, None if separator is None else separator.encode())
    if len(docs) < 2:
        sys.exit(f"text: {len(docs)} documents, need at least 2 (one per split)")
    n_val = min(len(docs) - 1, max(1, round(val_share * len(docs))))
    is_val = np.zeros(len(docs), dtype=bool)
    is_val[np.random.default_rng(seed).permutation(len(docs))[:n_val]] = True
    os.makedirs(out, exist_ok=True)
    meta = {"tokenizer": "bytes", "vocab": 256, "token_bytes": 2,
            "groups": [os.path.basename(f) for f in paths]}
    for split, want in (("train", False), ("val", True)):
        meta[split] = write_tokens(out, split, [d for d, v in zip(docs, is_val) if v == want])
    meta["sources"] = list(paths)
    with open(os.path.join(out, "meta.json"), "w") as f:
        json.dump(meta, f, indent=1)
        f.write("\n")


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
    t = sub.add_parser("text")
    t.add_argument("out")
    t.add_argument("files", nargs="+")
    t.add_argument("--separator")
    t.add_argument("--val-share", type=float, default=0.1)
    t.add_argument("--seed", type=int, default=1)
    a = p.parse_args()
    if a.what == "fashion-mnist":
        fashion_mnist(a.src, a.out)
    elif a.what == "cifar10":
        cifar10(a.src, a.out)
    elif a.what == "text":
        text(a.out, a.files, a.separator, a.val_share, a.seed)
    else:
        generate_cifar10(a.out, a.train, a.test, min(5, max(1, a.batches)), a.seed)


if __name__ == "__main__":
    main()
