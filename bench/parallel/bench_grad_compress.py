#!/usr/bin/env python3
"""Compressed data-parallel gradients on the KJV model, measured: the same model trained for the
same steps with dp=2 (two MPI ranks), once with exact reduction and once with each compression
(int8, top-k 15%, sign), all with error feedback. Prints the final validation loss, its gap to
the uncompressed run, and the bytes each rank sent per step and their ratio to uncompressed.

    apt-get install bible-kjv
    bench/parallel/bench_grad_compress.py [--steps 400] [--work bench/parallel/work] [--seeds 1,2,3]

With several seeds (initialisation and data order) every run is repeated per seed and the table
gives each compression's gap per seed and its largest.

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
    ap.add_argument("--work", default=str(ROOT / "bench" / "parallel" / "work"))
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--warmup", type=int, default=100,
                    help="exact steps before compression starts (1-bit Adam's warm-up)")
    ap.add_argument("--topk-ratio", type=float, default=0.15)
    ap.add_argument("--kinds", default="none,int8,topk,sign")
    ap.add_argument("--seeds", default="1", help="comma-separated training seeds")
    a = ap.parse_args()
    text, tok = kjv_tokenizer(a.syslm, a.work)
    data = pathlib.Path(a.work) / "data"
    if not (data / "meta.json").exists():
        run([a.syslm, "data", "prepare", "-f", text, "--tokenizer", tok, "-o", data, "--val",
             0.02, "--docs", "line"])
    seeds = [int(x) for x in a.seeds.split(",")]
    kinds = a.kinds.split(",")
    results = {}  # (kind, seed) -> (val, MiB per rank per step, --json line)
    for seed in seeds:
        for kind in kinds:
            cmd = ["mpirun", "-np", 2, "--oversubscribe", a.syslm, "train", "--arch", "llama",
                   "--tokenizer", tok, "--layers", 4, "--dim", 192, "--heads", 6, "--ctx", 128,
                   "--data", data, "--batch", 4, "--seq", 128, "--steps", a.steps, "--lr", "2e-3",
                   "--min-lr", "2e-4", "--warmup", 30, "--threads", 1, "--eval-every", a.steps,
                   "--eval-batches", 40, "--json", "--grad-compress", kind, "--seed", seed]
            if kind != "none":
                cmd += ["--grad-compress-warmup", a.warmup]
            if kind == "topk":
                cmd += ["--topk-ratio", a.topk_ratio]
            p = run(cmd)
            val = float(re.findall(r"val loss ([\d.]+)", p.stderr)[-1])
            mib = float(re.search(r"\(([\d.]+) MiB sent per rank in the last step\)",
                                  p.stderr).group(1))
            results[kind, seed] = (val, mib, json.loads(p.stdout.strip().splitlines()[-1]))
            print(f"seed {seed} {kind}: val loss {val:.4f}, {mib:.3f} MiB per rank per step",
                  file=sys.stderr)
    if "none" not in kinds:
        return
    print(f"KJV, llama 4 x 192, dp=2 x 4 sequences of 128, {a.steps} steps, "
          f"compression after {a.warmup} exact steps, top-k keeps {100 * a.topk_ratio:g}%"
          + (f", seeds {a.seeds}" if len(seeds) > 1 else ""))
    if len(seeds) == 1:
        print("| reduction | final val loss | vs exact | MiB / rank / step | fewer bytes | tokens/s |")
        print("|---|---:|---:|---:|---:|---:|")
    else:
        print("| reduction | " + " | ".join(f"vs exact, seed {s}" for s in seeds) +
              " | largest | MiB / rank / step | fewer bytes |")
        print("|---|" + "---:|" * (len(seeds) + 3))
    for kind in kinds:
        gaps = []
        for seed in seeds:
            base = results["none", seed][0]
            gaps.append(100 * (results[kind, seed][0] - base) / base)
        val, mib, j = results[kind, seeds[0]]
        ratio = results["none", seeds[0]][1] / mib
        if len(seeds) == 1:
            print(f"| {kind} | {val:.4f} | {gaps[0]:+.2f}% | {mib:.3f} | {ratio:.1f}x | "
                  f"{j['tokens_per_s']:.0f} |")
        else:
            print(f"| {kind} | " + " | ".join(f"{g:+.2f}%" for g in gaps) +
                  f" | {max(gaps):+.2f}% | {mib:.3f} | {ratio:.1f}x |")


if __name__ == "__main__":
    main()
