#!/usr/bin/env python3
"""Compressed data-parallel gradients on the KJV model, measured: the same model trained for the
same steps with dp=2 (two MPI ranks), once with exact reduction and once with each compression
(int8, top-k 15%, sign), all with error feedback. Prints the final validation loss, its gap to
the uncompressed run, and the bytes each rank sent per step and their ratio to uncompressed.

    apt-get install bible-kjv
    bench/dist/bench_grad_compress.py [--steps 400] [--work bench/dist/work]

The KJV text, tokenizer and shards are made once in --work (git-ignored).
"""
import argparse
import json
import pathlib
import re
import sys

from common import ROOT, kjv_tokenizer, run


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--syslm", default=str(ROOT / "build" / "syslm"))
    ap.add_argument("--work", default=str(ROOT / "bench" / "dist" / "work"))
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--warmup", type=int, default=100,
                    help="exact steps before compression starts (1-bit Adam's warm-up)")
    ap.add_argument("--topk-ratio", type=float, default=0.15)
    ap.add_argument("--kinds", default="none,int8,topk,sign")
    a = ap.parse_args()
    text, tok = kjv_tokenizer(a.syslm, a.work)
    data = pathlib.Path(a.work) / "data"
    if not (data / "meta.json").exists():
        run([a.syslm, "data", "prepare", "-f", text, "--tokenizer", tok, "-o", data, "--val",
             0.02, "--docs", "line"])
    results = {}
    for kind in a.kinds.split(","):
        cmd = ["mpirun", "-np", 2, "--oversubscribe", a.syslm, "train", "--arch", "llama",
               "--tokenizer", tok, "--layers", 4, "--dim", 192, "--heads", 6, "--ctx", 128,
               "--data", data, "--batch", 4, "--seq", 128, "--steps", a.steps, "--lr", "2e-3",
               "--min-lr", "2e-4", "--warmup", 30, "--threads", 1, "--eval-every", a.steps,
               "--eval-batches", 40, "--json", "--grad-compress", kind]
        if kind != "none":
            cmd += ["--grad-compress-warmup", a.warmup]
        if kind == "topk":
            cmd += ["--topk-ratio", a.topk_ratio]
        p = run(cmd)
        val = float(re.findall(r"val loss ([\d.]+)", p.stderr)[-1])
        mib = float(re.search(r"\(([\d.]+) MiB sent per rank in the last step\)", p.stderr).group(1))
        results[kind] = (val, mib, json.loads(p.stdout.strip().splitlines()[-1]))
        print(f"{kind}: val loss {val:.4f}, {mib:.3f} MiB per rank per step", file=sys.stderr)
    if "none" not in results:
        return
    base_val, base_mib, _ = results["none"]
    print(f"KJV, llama 4 x 192, dp=2 x 4 sequences of 128, {a.steps} steps, "
          f"compression after {a.warmup} exact steps, top-k keeps {100 * a.topk_ratio:g}%")
    print("| reduction | final val loss | vs exact | MiB / rank / step | fewer bytes | tokens/s |")
    print("|---|---:|---:|---:|---:|---:|")
    for kind, (val, mib, j) in results.items():
        print(f"| {kind} | {val:.4f} | {100 * (val - base_val) / base_val:+.2f}% | {mib:.3f} | "
              f"{base_mib / mib:.1f}x | {j['tokens_per_s']:.0f} |")


if __name__ == "__main__":
    main()
