"""A training run against PyTorch: 200 steps of a small llama on KJV shards prepared by syslm,
from the same initial weights and in the same data order, with AdamW, warm-up + cosine and
clipping; the two loss curves agree within 1% at every step.

PyTorch reads syslm's shards itself (the format of src/data/shards.hpp) and visits the windows
in the loader's documented order (src/data/loader.hpp: SplitMix64 Fisher-Yates per epoch),
written out independently below.
"""
import json
import math
import re
import shutil
import struct
import subprocess

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import tiny_hf_models

B, T, STEPS, SEED = 4, 32, 200, 7
LR, WARMUP, CLIP, WD = 3e-3, 10, 1.0, 0.1
M64 = (1 << 64) - 1


def mix64(z):
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


class SplitMix64:
    def __init__(self, state):
        self.state = state

    def next(self):
        self.state = (self.state + 0x9E3779B97F4A7C15) & M64
        return mix64(self.state)

    def below(self, n):  # Lemire's multiply-shift with rejection
        m = self.next() * n
        if (m & M64) < n:
            threshold = ((1 << 64) - n) % n
            while (m & M64) < threshold:
                m = self.next() * n
        return m >> 64


def epoch_order(seed, epoch, n):
    order = list(range(n))
    rng = SplitMix64(mix64(seed) ^ mix64((epoch + 0x9E3779B97F4A7C15) & M64))
    for i in range(n, 1, -1):
        j = rng.below(i)
        order[i - 1], order[j] = order[j], order[i - 1]
    return order


def read_shard(path):
    data = path.read_bytes()
    magic, version, dtype, _flags, count = struct.unpack_from("<4sIIIQ", data)
    assert magic == b"SYTK" and version == 1
    width = {1: np.uint16, 2: np.uint32}[dtype]
    return np.frombuffer(data, dtype=width, count=count, offset=32).astype(np.int64)


def batches(data_dir):
    meta = json.loads((data_dir / "meta.json").read_text())
    shards = [read_shard(data_dir / name) for name in meta["train_shards"]]
    windows = [(k, s) for k, tokens in enumerate(shards)
               for s in range(0, len(tokens) - (T + 1) + 1, T)]
    epoch, index, order = 0, 0, epoch_order(SEED, 0, len(windows))
    while True:
        rows = []
        for _ in range(B):
            k, s = windows[order[index]]
            rows.append(shards[k][s:s + T + 1])
            index += 1
            if index == len(windows):
                epoch, index = epoch + 1, 0
                order = epoch_order(SEED, epoch, len(windows))
        yield torch.tensor(np.stack(rows))


def schedule(step):
    if step < WARMUP:
        return (step + 1) / WARMUP
    return 0.5 * (1 + math.cos(math.pi * min(1.0, (step - WARMUP) / (STEPS - WARMUP - 1))))


def test_order_matches_the_loaders_pinned_values():
    # The C++ test pins these (tests/data/loader_test.cpp).
    assert epoch_order(1234, 5, 10) == [4, 8, 9, 6, 2, 3, 1, 0, 5, 7]
    assert epoch_order(0, 0, 12) == [2, 0, 9, 8, 10, 4, 1, 6, 5, 3, 11, 7]


def test_loss_curve_matches_pytorch(tmp_path, run_syslm):
    try:
        text = subprocess.run(["bible", "-f", "Genesis1:1-Exodus40:38"], capture_output=True,
                              text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("Debian's bible-kjv is not installed")
    corpus = tmp_path / "kjv.txt"
    corpus.write_text(re.sub(r"(?m)^\S+ ", "", text))

    hf_dir = tiny_hf_models.build("llama", tmp_path / "hf")
    model = tiny_hf_models.load(hf_dir)
    model_path = tmp_path / "model.gguf"
    run_syslm("convert", "--hf", hf_dir, "-o", model_path)
    data = tmp_path / "data"
    run_syslm("data", "prepare", "-f", corpus, "--tokenizer", model_path, "-o", data,
              "--val", 0.02, "--docs", "line")
    metrics = tmp_path / "m.jsonl"
    run_syslm("train", "--init", model_path, "--data", data, "--batch", B, "--seq", T,
              "--steps", STEPS, "--lr", LR, "--warmup", WARMUP, "--clip", CLIP,
              "--weight-decay", WD, "--seed", SEED, "--metrics", metrics, "-t", 2)
    got = [j["loss"] for j in map(json.loads, metrics.read_text().splitlines()) if "loss" in j]
    assert len(got) == STEPS

    model.train()
    named = list(model.named_parameters())
    decays = lambda n, p: p.dim() >= 2 and "embed_tokens" not in n
    opt = torch.optim.AdamW(
        [dict(params=[p for n, p in named if decays(n, p)], weight_decay=WD),
         dict(params=[p for n, p in named if not decays(n, p)], weight_decay=0.0)],
        lr=LR, betas=(0.9, 0.999), eps=1e-8, foreach=False)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, schedule)
    want = []
    stream = batches(data)
    for _ in range(STEPS):
        ids = next(stream)
        opt.zero_grad()
        logits = model(input_ids=ids[:, :T]).logits
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
        opt.step()
        sched.step()
        want.append(loss.item())
    rel = np.abs(np.array(got) - np.array(want)) / np.array(want)
    print(f"loss {want[0]:.4f} -> {want[-1]:.4f}; max rel. difference {rel.max():.2e} "
          f"(step {int(rel.argmax()) + 1})")
    assert want[-1] < 0.8 * want[0], "the run did not learn: the comparison would be vacuous"
    assert rel.max() < 0.01
