#!/usr/bin/python3
"""Exports example models as TorchScript for `model: {name: torchscript, path: ...}`.

Runs on Debian's python3-torch and python3-torchvision (the same LibTorch
version as the C++ build). The image models take [N, C, 28, 28] images
(C = --channels, default 1) and return [N, 10] logits, as Fashion-MNIST
jobs need.

  cnn       the built-in CNN's architecture (docs/models.md), scripted
  cnn-bn    a small CNN with BatchNorm: buffers at low cost (tests)
  resnet18  torchvision's ResNet-18 for small images: a 3x3 stride-1 stem,
            no max-pool, 10 classes
  gpt       a decoder-only transformer for byte-level token data
            (convert_dataset.py text): token and learned position
            embeddings, pre-norm blocks of causal multi-head self-attention
            and a GELU MLP (4 x dim), a final LayerNorm and a linear head
            (no bias, no weight tying, no dropout, no buffers). GPT-2's
            initialisation, seeded by --seed. Sizes (--size, vocab 256):
              tiny    dim 64, 2 layers, 2 heads, context 64        136,960 parameters
              small   dim 128, 4 layers, 4 heads, context 128      875,264 (the default)
              medium  dim 384, 8 layers, 6 heads, context 256   14,491,392
            --vocab, --context, --layers, --dim and --heads override them.
            Module API (TorchScript):
              forward(idx) -> logits   idx int64 [B, T], T <= context;
                                       logits float32 [B, T, vocab]
              loss(idx, targets)       mean cross entropy over all B*T
                                       positions, a 0-dim float32 tensor
              vocab_size, context      int attributes
                                       (module.attr("context").toInt())
            Parameters are ordered embeddings, blocks 0..L-1, final norm,
            head.
  trained   the module a finished run trained: RUN_DIR/job.yaml's module
            with RUN_DIR/final_params.bin's values (--run RUN_DIR), so that
            another job can start where that one ended (a pretrained start,
            docs/language-models.md). Buffers that a train-mode forward
            keeps as running averages (BatchNorm) are recomputed as the
            evaluator does (scripts/evaluate_params.py); a token-data module
            with such buffers is refused.

Usage: scripts/export_model.py MODEL OUT.pt [--seed N] [--channels C]
           [--size S] [--vocab V] [--context T] [--layers L] [--dim D] [--heads H]
       scripts/export_model.py trained OUT.pt --run RUN_DIR
"""
import argparse
import math
import os
import sys

import torch
from torch import nn
from torch.nn import functional as F


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


class CausalSelfAttention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.qkv(x).split(C, dim=2)
        q = q.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        k = k.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        v = v.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(C // self.heads))
        causal = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
        weights = torch.softmax(scores.masked_fill(~causal, float("-inf")), dim=-1)
        return self.proj((weights @ v).transpose(1, 2).reshape(B, T, C))


class Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.ln1 = nn.LayerNorm(dim)
        self.attn = CausalSelfAttention(dim, heads)
        self.ln2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    vocab_size: int
    context: int

    def __init__(self, vocab, context, layers, dim, heads):
        super().__init__()
        self.vocab_size = vocab
        self.context = context
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(context, dim)
        self.blocks = nn.ModuleList([Block(dim, heads) for _ in range(layers)])
        self.ln = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, 0.0, 0.02)
            if isinstance(m, nn.Linear) and m.bias is not None:
                nn.init.zeros_(m.bias)
        for b in self.blocks:
            for residual in (b.attn.proj, b.mlp[2]):
                nn.init.normal_(residual.weight, 0.0, 0.02 / math.sqrt(2 * layers))

    def forward(self, idx):
        T = idx.size(1)
        assert T <= self.context, "sequence longer than the context"
        x = self.tok(idx) + self.pos(torch.arange(T, device=idx.device))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln(x))

    @torch.jit.export
    def loss(self, idx, targets):
        logits = self.forward(idx)
        return F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))


GPT_SIZES = {
    "tiny": {"dim": 64, "layers": 2, "heads": 2, "context": 64},
    "small": {"dim": 128, "layers": 4, "heads": 4, "context": 128},
    "medium": {"dim": 384, "layers": 8, "heads": 6, "context": 256},
}
IMAGE_MODELS = {"cnn": cnn, "cnn-bn": cnn_bn, "resnet18": resnet18}


def export_image(a):
    module = torch.jit.script(IMAGE_MODELS[a.model](a.channels))
    module.eval()
    with torch.no_grad():
        out = module(torch.zeros(2, a.channels, 28, 28))
    if tuple(out.shape) != (2, 10):
        sys.exit(f"{a.model}: output {tuple(out.shape)}, expected (2, 10)")
    return module, ""


def export_gpt(a):
    size = dict(GPT_SIZES[a.size])
    size.update({k: getattr(a, k) for k in size if getattr(a, k) is not None})
    if size["dim"] % size["heads"]:
        sys.exit(f"gpt: dim {size['dim']} is not a multiple of heads {size['heads']}")
    module = torch.jit.script(GPT(a.vocab, **size))
    module.eval()
    zeros = torch.zeros(2, size["context"], dtype=torch.int64)
    with torch.no_grad():
        out = module(zeros)
        loss = module.loss(zeros, zeros)
    if tuple(out.shape) != (2, size["context"], a.vocab):
        sys.exit(f"gpt: output {tuple(out.shape)}, expected {(2, size['context'], a.vocab)}")
    if loss.dim() != 0 or not torch.isfinite(loss):
        sys.exit(f"gpt: loss {loss}, expected a finite scalar")
    return module, (f" {a.size}, vocab {a.vocab}, context {size['context']}, {size['layers']} layers,"
                    f" dim {size['dim']}, {size['heads']} heads")


def export_trained(a):
    """The run's module with its final parameters (and recomputed buffers)."""
    if not a.run:
        sys.exit("trained: give --run RUN_DIR (a finished run's directory)")
    import evaluate_params
    s = evaluate_params.job_settings(a.run)
    for key in ("module", "params"):
        if not os.path.isfile(s[key]):
            sys.exit(f"trained: {s[key]}: no such file (is {a.run} a finished run?)")
    module = torch.jit.load(s["module"])
    evaluate_params.set_parameters(module, s["params"])
    if any(b.is_floating_point() for b in module.buffers()):
        if s["data"]["dataset"] == "tokens":
            sys.exit(f"trained: {s['module']} has floating buffers; they are recomputed from image data only")
        evaluate_params.recompute_buffers(module, evaluate_params.load(s["data"], "train")[0],
                                          s["buffer_samples"])
    return module, f" from {s['params']} ({s['module']})"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", choices=sorted(IMAGE_MODELS) + ["gpt", "trained"])
    p.add_argument("out")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--channels", type=int, default=1, help="image models")
    p.add_argument("--size", choices=list(GPT_SIZES), default="small", help="gpt")
    p.add_argument("--vocab", type=int, default=256, help="gpt")
    for name in ("context", "layers", "dim", "heads"):
        p.add_argument(f"--{name}", type=int, help="gpt: overrides the size's")
    p.add_argument("--run", help="trained: the finished run's directory")
    a = p.parse_args()
    torch.manual_seed(a.seed)
    exporters = {"gpt": export_gpt, "trained": export_trained}
    module, detail = exporters.get(a.model, export_image)(a)
    module.train()
    torch.jit.save(module, a.out)
    params = sum(t.numel() for t in module.parameters() if t.requires_grad)
    buffers = sum(t.numel() for t in module.buffers())
    print(f"{a.out}: {a.model}{detail}, {params} trainable parameters, {buffers} buffer values")


if __name__ == "__main__":
    main()
