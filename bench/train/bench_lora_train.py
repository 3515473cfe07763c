#!/usr/bin/env python3
"""LoRA and QLoRA training against full fine-tuning: peak memory and speed, same machine.

A random llama of 110M parameters (12 layers, dim 768, 12 heads, FFN 2048, vocabulary 32000;
`syslm init`) is stored as F16, Q8_0 and Q4_0. On random tokens (B=4, T=128, 2 threads) this
measures `syslm train`:
  full      full fine-tuning of the F16 file (f32 master weights, gradients, AdamW moments)
  lora-*    --lora 16 on every projection (q, k, v, o, gate, up, down), the base frozen in its
            file's type: F16, Q8_0 (QLoRA-style), Q4_0 (QLoRA-style)
and prints each run's peak RSS (VmHWM, the model file's mapped pages included) and tokens/s, as
ratios to full fine-tuning's. MFU counts the work each does (LoRA: forward and input gradient of
the frozen matrices, 4 FLOPs per weight and token, plus the adapters' 6).

With --torch, the same model in HF transformers + PEFT (LoraConfig r=16, alpha=16, the same
targets, FP32 base) is timed from this Python (install torch, transformers and peft) as the peer.

    bench/train/bench_lora_train.py --syslm build/syslm [--torch] [--steps 6]
"""
import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SHAPE = dict(layers=12, dim=768, heads=12, ff=2048, vocab=32000, ctx=512)
B, T = 4, 128


def run(syslm, *args):
    return subprocess.run([str(syslm), *map(str, args)], capture_output=True, text=True,
                          check=True)


def train(syslm, model, steps, threads, extra=()):
    out = run(syslm, "train", "--init", model, "--synthetic-data", "--batch", B, "--seq", T,
              "--steps", steps, "-t", threads, "--json", *extra)
    return json.loads(out.stdout.strip().splitlines()[-1])


def torch_peft(steps, threads):
    """PEFT LoRA on an FP32 HF llama of the same shape, in a child process (its own peak RSS)."""
    code = f"""
import json, resource, time, torch
from transformers import LlamaConfig, LlamaForCausalLM
import peft
torch.set_num_threads({threads})
torch.manual_seed(0)
cfg = LlamaConfig(vocab_size={SHAPE['vocab']}, hidden_size={SHAPE['dim']},
                  intermediate_size={SHAPE['ff']}, num_hidden_layers={SHAPE['layers']},
                  num_attention_heads={SHAPE['heads']}, max_position_embeddings={SHAPE['ctx']})
model = LlamaForCausalLM(cfg)
pm = peft.get_peft_model(model, peft.LoraConfig(r=16, lora_alpha=16, lora_dropout=0.0,
    target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]))
opt = torch.optim.AdamW([p for p in pm.parameters() if p.requires_grad], lr=1e-4)
times = []
for step in range({steps}):
    ids = torch.randint(0, {SHAPE['vocab']}, ({B}, {T} + 1))
    t0 = time.perf_counter()
    loss = pm(input_ids=ids[:, :-1], labels=ids[:, :-1]).loss
    loss.backward()
    opt.step()
    opt.zero_grad()
    times.append(time.perf_counter() - t0)
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({{"tokens_per_s": {B * T} / (sum(times[1:]) / len(times[1:])),
                  "peak_rss_mib": rss}}))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--syslm", default="build/syslm")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--torch", action="store_true")
    a = ap.parse_args()
    cpu = run(a.syslm, "probe").stdout.splitlines()
    print(next((l for l in cpu if l.startswith("CPU")), "CPU ?"))
    with tempfile.TemporaryDirectory() as d:
        d = Path(d)
        f32 = d / "f32.gguf"
        run(a.syslm, "init", "--vocab-size", SHAPE["vocab"], "-o", f32, "--layers",
            SHAPE["layers"], "--dim", SHAPE["dim"], "--heads", SHAPE["heads"], "--ff", SHAPE["ff"],
            "--ctx", SHAPE["ctx"])
        files = {}
        for q in ("F16", "Q8_0", "Q4_0"):
            files[q] = d / f"{q}.gguf"
            run(a.syslm, "quantize", f32, files[q], q)
        f32.unlink()
        lora = ["--lora", 16, "--lora-alpha", 16]
        runs = {"full (F16 file, f32 master)": train(a.syslm, files["F16"], a.steps, a.threads)}
        for q in ("F16", "Q8_0", "Q4_0"):
            runs[f"lora r16, {q} base"] = train(a.syslm, files[q], a.steps, a.threads, lora)
            runs[f"lora r16, {q} base"]["file_mib"] = files[q].stat().st_size / 2**20
    if a.torch:
        runs["PEFT r16 (PyTorch FP32)"] = torch_peft(a.steps, a.threads)
    full = runs["full (F16 file, f32 master)"]
    print(f"llama 110M (vocabulary 32000), B={B} T={T}, {a.threads} threads, {a.steps} steps")
    print(f"{'run':32s} {'peak RSS MiB':>12s} {'x full':>7s} {'tok/s':>8s} {'x full':>7s} "
          f"{'MFU':>6s}")
    for name, r in runs.items():
        mfu = f"{100 * r['mfu']:.1f}%" if "mfu" in r else "-"
        print(f"{name:32s} {r['peak_rss_mib']:12.0f} {r['peak_rss_mib'] / full['peak_rss_mib']:7.2f} "
              f"{r['tokens_per_s']:8.0f} {r['tokens_per_s'] / full['tokens_per_s']:7.2f} {mfu:>6s}")


if __name__ == "__main__":
    main()
