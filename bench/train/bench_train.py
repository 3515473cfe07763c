#!/usr/bin/env python3
"""Training speed: syslm against PyTorch (and llm.c when given), side by side, same machine.

Shapes (issue 4):
  gpt2-124M  vocab 50257, 12 layers, 12 heads, dim 768, B=4, T=64    (llm.c's train_gpt2 shape)
  small      vocab 8192, 6 layers, 6 heads, dim 384, B=8, T=256
Each measures tokens/s of full training steps (forward + backward + AdamW step) on random
tokens, 2 threads, after warm-up steps, in FP32 and in BF16 mixed precision (syslm
--precision bf16 against PyTorch's BF16 autocast), and prints the ratios, peak RSS and the MFU
against `syslm probe`'s FP32 peak, or for BF16 the peak of the engine its training GEMMs
chose (AMX tiles or vdpbf16ps; see `syslm probe`) (6 x matrix parameters per token + attention, the same
count for every engine).

    bench/train/bench_train.py --syslm build/syslm [--torch] [--llmc /path/to/llm.c]

--torch runs HF transformers' GPT2LMHeadModel (the architecture syslm trains as `gpt2`) in
PyTorch FP32 and with BF16 autocast, from the Python running this script (install torch and
transformers). --llmc runs llm.c's `train_gpt2` binary from that directory, as built there by
its own Makefile (`make train_gpt2`); it runs in a temporary directory where this script writes
the inputs llm.c reads, in llm.c's own formats: a random-initialised GPT-2 124M checkpoint
(`gpt2_124M.bin`, header version 3) and random token files (`dev/data/tinyshakespeare/*.bin`,
header magic 20240520), so no GPT-2 weights need downloading — speed does not depend on the
values. The
vocabulary files come from tests/fixtures/vocab (gpt-2) and, for the 8192 vocabulary, a BPE
tokenizer syslm trains on the KJV Bible (Debian's bible-kjv) into a temporary directory.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SHAPES = {
    "gpt2-124M": dict(vocab=50257, layers=12, heads=12, dim=768, B=4, T=64, ctx=1024),
    "small": dict(vocab=8192, layers=6, heads=6, dim=384, B=8, T=256, ctx=256),
}


def syslm_run(syslm, shape, tokenizer, steps, threads, precision):
    s = SHAPES[shape]
    cmd = [syslm, "train", "--arch", "gpt2", "--tokenizer", tokenizer, "--layers", s["layers"],
           "--heads", s["heads"], "--dim", s["dim"], "--ctx", s["ctx"], "--vocab", s["vocab"],
           "--synthetic-data", "--batch", s["B"], "--seq", s["T"], "--steps", steps,
           "-t", threads, "--precision", precision, "--json"]
    out = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def torch_run(shape, steps, threads, bf16):
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.set_num_threads(threads)
    s = SHAPES[shape]
    cfg = GPT2Config(vocab_size=s["vocab"], n_embd=s["dim"], n_layer=s["layers"],
                     n_head=s["heads"], n_positions=s["ctx"], resid_pdrop=0.0, embd_pdrop=0.0,
                     attn_pdrop=0.0, activation_function="gelu_new")
    model = GPT2LMHeadModel(cfg)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
    g = torch.Generator().manual_seed(1)
    times = []
    for i in range(steps):
        ids = torch.randint(0, s["vocab"], (s["B"], s["T"] + 1), generator=g)
        t0 = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = model(input_ids=ids[:, :-1], labels=ids[:, 1:]).loss
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        times.append(time.perf_counter() - t0)
    per_step = sum(times[1:]) / max(1, len(times) - 1)
    return {"tokens_per_s": s["B"] * s["T"] / per_step}


def llmc_inputs(work):
    """llm.c's inputs, random: checkpoint (llm.c train_gpt2.c gpt2_build_from_checkpoint: 256
    int32 header, magic 20240326, version 3, then the f32 tensors in its order) and token files
    (llmc/dataloader.h: 256 int32 header, magic 20240520, version 1, count; uint16 tokens)."""
    import numpy as np
    maxT, V, Vp, L, NH, C = 1024, 50257, 50304, 12, 12, 768
    header = np.zeros(256, dtype=np.int32)
    header[:8] = [20240326, 3, maxT, V, L, NH, C, Vp]
    rng = np.random.default_rng(1)
    sizes = [Vp * C, maxT * C, L * C, L * C, L * 3 * C * C, L * 3 * C, L * C * C, L * C, L * C,
             L * C, L * 4 * C * C, L * 4 * C, L * C * 4 * C, L * C, C, C]
    ones = {2, 8, 14}  # layer-norm weights
    with open(work / "gpt2_124M.bin", "wb") as f:
        f.write(header.tobytes())
        for i, n in enumerate(sizes):
            t = np.ones(n, np.float32) if i in ones else (0.02 * rng.standard_normal(n)).astype(np.float32)
            f.write(t.tobytes())
    data = work / "dev" / "data" / "tinyshakespeare"
    data.mkdir(parents=True)
    for split, n in (("train", 1 << 20), ("val", 1 << 16)):
        h = np.zeros(256, dtype=np.int32)
        h[:3] = [20240520, 1, n]
        with open(data / f"tiny_shakespeare_{split}.bin", "wb") as f:
            f.write(h.tobytes())
            f.write(rng.integers(0, V, n, dtype=np.uint16).tobytes())


def llmc_run(llmc_dir, threads, tmp):
    """llm.c's train_gpt2 prints 'step N: train loss X (took Y ms)'; B=4, T=64 are its defaults."""
    work = Path(tmp) / "llmc"
    work.mkdir()
    llmc_inputs(work)
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    proc = subprocess.Popen([str(Path(llmc_dir).resolve() / "train_gpt2")], cwd=work,
                            stdout=subprocess.PIPE, text=True, env=env)
    took = []
    for line in proc.stdout:
        m = re.search(r"step (\d+): train loss [\d.]+ \(took ([\d.]+) ms\)", line)
        if m:
            took.append(float(m.group(2)))
            if len(took) >= 6:
                proc.kill()
                break
    proc.wait()
    per_step = sum(took[1:]) / (len(took) - 1) / 1e3
    return {"tokens_per_s": 4 * 64 / per_step}


def kjv_tokenizer(syslm, tmp):
    text = subprocess.run(["bible", "-f", "Genesis1:1-Revelation22:21"], capture_output=True,
                          text=True, check=True).stdout
    corpus = Path(tmp) / "kjv.txt"
    corpus.write_text(re.sub(r"(?m)^\S+ ", "", text))
    tok = Path(tmp) / "tok8192.gguf"
    subprocess.run([str(a) for a in [syslm, "tokenizer", "train", "-f", corpus, "--vocab", 8192, "-o", tok]],
                   check=True, capture_output=True)
    return tok


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--syslm", default=str(ROOT / "build" / "syslm"))
    ap.add_argument("--torch", action="store_true", help="also run PyTorch (FP32 and BF16 autocast)")
    ap.add_argument("--llmc", help="llm.c directory with a built train_gpt2 (124M shape only)")
    ap.add_argument("--shapes", default="gpt2-124M,small")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("-t", "--threads", type=int, default=2)
    args = ap.parse_args()

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for shape in args.shapes.split(","):
            if shape == "small":
                tokenizer = kjv_tokenizer(args.syslm, tmp)
            else:
                tokenizer = ROOT / "tests" / "fixtures" / "vocab" / "ggml-vocab-gpt-2.gguf"
            r = syslm_run(args.syslm, shape, tokenizer, args.steps, args.threads, "f32")
            rb = syslm_run(args.syslm, shape, tokenizer, args.steps, args.threads, "bf16")
            row = {"shape": shape, "syslm": r["tokens_per_s"], "mfu": r["mfu"],
                   "rss": r["peak_rss_mib"], "syslm_bf16": rb["tokens_per_s"],
                   "mfu_bf16": rb["mfu"], "rss_bf16": rb["peak_rss_mib"]}
            if args.torch:
                row["torch"] = torch_run(shape, args.steps, args.threads, False)["tokens_per_s"]
                row["torch_bf16"] = torch_run(shape, args.steps, args.threads, True)["tokens_per_s"]
            if args.llmc and shape == "gpt2-124M":
                row["llmc"] = llmc_run(args.llmc, args.threads, tmp)["tokens_per_s"]
            rows.append(row)
            print(json.dumps(row), file=sys.stderr)

    print("| shape | syslm FP32 tok/s | MFU | RSS MiB | PyTorch FP32 | syslm / PyTorch | "
          "syslm BF16 tok/s | MFU (BF16 engine peak) | RSS MiB | PyTorch BF16 autocast | "
          "syslm / PyTorch (BF16) | llm.c | syslm / llm.c |")
    print("| --- |" + " ---: |" * 12)
    for r in rows:
        def cell(k, fmt="{:.0f}"):
            return fmt.format(r[k]) if k in r else "-"

        def ratio(a, b):
            return f"{r[a] / r[b]:.2f}x" if b in r else "-"
        print(f"| {r['shape']} | {r['syslm']:.0f} | {100 * r['mfu']:.1f}% | {r['rss']:.0f} | "
              f"{cell('torch')} | {ratio('syslm', 'torch')} | {r['syslm_bf16']:.0f} | "
              f"{100 * r['mfu_bf16']:.1f}% | {r['rss_bf16']:.0f} | {cell('torch_bf16')} | "
              f"{ratio('syslm_bf16', 'torch_bf16')} | {cell('llmc')} | {ratio('syslm', 'llmc')} |")


if __name__ == "__main__":
    main()
