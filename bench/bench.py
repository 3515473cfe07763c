#!/usr/bin/env python3
"""Benchmark syslm against llama.cpp on random-weight llama models (issue 3).

Generates the models once under bench/models/ (git-ignored): "L110M" (vocab 32000, dim 768,
12 layers, 12 heads, FFN 2048) and "L1B" (TinyLlama-1.1B shape: dim 2048, 22 layers, 32 heads,
4 KV heads, FFN 5632), random weights with the real llama SPM tokenizer, as F16 and quantized to
Q8_0, Q4_0 and Q4_K_M with `syslm quantize`. Then runs `syslm bench --json` on every file and,
when given a llama.cpp build directory, `llama-bench -o json` on the same file, interleaved
(syslm, llama.cpp, syslm, ...) so that a change in machine load hits both alike, and prints a
table of tokens/s with the ratios.

    bench/bench.py                                   # syslm only, both models, all types
    bench/bench.py --llama /tmp/llama.cpp/build      # with llama.cpp's llama-bench
    bench/bench.py --models L110M --types Q8_0,Q4_0 --rounds 3 --markdown results.md

Only the Python standard library is used.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VOCAB = ROOT / "tests" / "fixtures" / "vocab" / "ggml-vocab-llama-spm.gguf"

MODELS = {
    # name: syslm init arguments
    "L110M": ["--layers", "12", "--dim", "768", "--heads", "12", "--ff", "2048"],
    "L1B": ["--layers", "22", "--dim", "2048", "--heads", "32", "--kv-heads", "4", "--ff", "5632"],
}
TYPES = ["F16", "Q8_0", "Q4_0", "Q4_K_M"]


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def run(cmd, **kw):
    log("$ " + " ".join(str(c) for c in cmd))
    return subprocess.run([str(c) for c in cmd], check=True, **kw)


def model_file(models_dir, name, qtype):
    return models_dir / f"{name}-{qtype}.gguf"


def generate(syslm, models_dir, name, types, threads):
    """Creates the missing files of one model; the F16 file is the source of the others."""
    models_dir.mkdir(parents=True, exist_ok=True)
    f16 = model_file(models_dir, name, "F16")
    if not f16.exists():
        run([syslm, "init", "--vocab", VOCAB, "-o", f16, "--type", "f16", "--ctx", "4096",
             "--name", f"syslm bench {name}", *MODELS[name]])
    for t in types:
        out = model_file(models_dir, name, t)
        if out.exists():
            continue
        try:
            run([syslm, "quantize", f16, out, t, "-t", str(threads)], stdout=subprocess.DEVNULL)
        except subprocess.CalledProcessError:
            if t != "Q4_K_M":
                raise
            # Older syslm builds lack the Q4_K_M recipe: fall back to uniform Q4_K, and say so.
            log("syslm quantize has no Q4_K_M: writing uniform Q4_K instead")
            run([syslm, "quantize", f16, out, "Q4_K", "-t", str(threads)],
                stdout=subprocess.DEVNULL)


def syslm_bench(syslm, path, args):
    cmd = [syslm, "bench", "-m", path, "-p", args.n_prompt, "-n", args.n_gen, "-t", args.threads,
           "-r", args.reps, "--json"]
    out = run(cmd, stdout=subprocess.PIPE, text=True).stdout
    return {r["n_prompt"] and f"pp{r['n_prompt']}" or f"tg{r['n_gen']}": r for r in json.loads(out)}


def llama_bench(exe, path, args):
    cmd = [exe, "-m", path, "-p", args.n_prompt, "-n", args.n_gen, "-t", args.threads, "-r",
           args.reps, "-o", "json"]
    out = run(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True).stdout
    return {r["n_prompt"] and f"pp{r['n_prompt']}" or f"tg{r['n_gen']}": r for r in json.loads(out)}


def mean(xs):
    return statistics.fmean(xs) if xs else float("nan")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--syslm", default=str(ROOT / "build" / "syslm"), help="syslm binary")
    ap.add_argument("--llama", help="llama.cpp build directory (with bin/llama-bench)")
    ap.add_argument("--models", default="L110M,L1B", help="comma-separated: L110M, L1B")
    ap.add_argument("--types", default=",".join(TYPES), help="comma-separated tensor types")
    ap.add_argument("--models-dir", default=str(ROOT / "bench" / "models"))
    ap.add_argument("-p", "--n-prompt", type=int, default=512)
    ap.add_argument("-n", "--n-gen", type=int, default=128)
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("-r", "--reps", type=int, default=5, help="repetitions inside each run")
    ap.add_argument("--rounds", type=int, default=2,
                    help="interleaved runs of each engine per file; their means are averaged")
    ap.add_argument("--generate-only", action="store_true", help="only create the model files")
    ap.add_argument("--markdown", help="also write the table to this file")
    args = ap.parse_args()

    syslm = Path(args.syslm)
    if not syslm.exists():
        sys.exit(f"{syslm}: no syslm binary (build it, or pass --syslm)")
    if not VOCAB.exists():
        sys.exit(f"{VOCAB}: vocabulary file not found")
    llama = None
    if args.llama:
        llama = Path(args.llama) / "bin" / "llama-bench"
        if not llama.exists():
            sys.exit(f"{llama}: not found (build llama.cpp's llama-bench target in {args.llama})")
    models_dir = Path(args.models_dir)
    models = [m for m in args.models.split(",") if m]
    types = [t for t in args.types.split(",") if t]
    for m in models:
        if m not in MODELS:
            sys.exit(f"unknown model {m}: expected one of {', '.join(MODELS)}")
        generate(syslm, models_dir, m, [t for t in types if t != "F16"], args.threads)
    if args.generate_only:
        return

    rows = []
    for m in models:
        for t in types:
            path = model_file(models_dir, m, t)
            ours, theirs = {}, {}
            for rnd in range(args.rounds):
                # Alternate who goes first, so neither always runs on a warmer machine.
                order = ["syslm", "llama"] if rnd % 2 == 0 else ["llama", "syslm"]
                for who in order:
                    if who == "syslm":
                        for k, r in syslm_bench(syslm, path, args).items():
                            ours.setdefault(k, []).append(r)
                    elif llama:
                        for k, r in llama_bench(llama, path, args).items():
                            theirs.setdefault(k, []).append(r)
            for test in sorted(ours, key=lambda k: (k[:2] != "pp", k)):
                o = ours[test]
                row = {
                    "model": f"{m} {t}",
                    "test": test,
                    "syslm_ts": mean([r["avg_ts"] for r in o]),
                    "syslm_sd": mean([r["stddev_ts"] for r in o]),
                    "roofline": mean([r["roofline_fraction"] for r in o]),
                    "read_gbs": [r["read_gbs"] for r in o if r["n_gen"] > 0],
                    "llama_ts": mean([r["avg_ts"] for r in theirs.get(test, [])]),
                    "llama_sd": mean([r["stddev_ts"] for r in theirs.get(test, [])]),
                }
                row["ratio"] = row["syslm_ts"] / row["llama_ts"] if theirs.get(test) else float("nan")
                rows.append(row)
                log(f"{row['model']:>14} {test:>6}: syslm {row['syslm_ts']:.1f} t/s"
                    + (f", llama.cpp {row['llama_ts']:.1f} t/s, ratio {row['ratio']:.2f}"
                       if theirs.get(test) else ""))

    cpu = ""
    try:
        cpu = subprocess.run([str(syslm), "probe", "--json"], check=True, stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, text=True).stdout
        probe = json.loads(cpu)
        cpu = (f"{probe['cpu']}, {args.threads} threads; probe: read {probe['read_gbs']:.1f} GB/s, "
               f"FP32 {probe['fma_f32_gflops']:.0f} GFLOP/s, int8 {probe['int8_gops']:.0f} GOP/s")
    except (subprocess.CalledProcessError, ValueError, KeyError):
        pass
    # Decode's roofline is the read bandwidth syslm bench measured around each test: a shared
    # machine's drifts, so the probe's cached figure is shown for reference only.
    gbs = [g for r in rows for g in r["read_gbs"]]
    if gbs:
        cpu += (f"; decode's roofline: read bandwidth measured around each test, "
                f"{min(gbs):.1f}-{max(gbs):.1f} GB/s")
    lines = [
        f"pp{args.n_prompt} / tg{args.n_gen}, {args.threads} threads, {args.reps} repetitions x "
        f"{args.rounds} interleaved rounds, {time.strftime('%Y-%m-%d')}. {cpu}",
        "",
        "| model | test | syslm t/s | llama.cpp t/s | syslm / llama.cpp | syslm % of roofline |",
        "| --- | --- | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        lt = f"{r['llama_ts']:.1f} ± {r['llama_sd']:.1f}" if r["llama_ts"] == r["llama_ts"] else "-"
        ratio = f"{r['ratio']:.2f}x" if r["ratio"] == r["ratio"] else "-"
        lines.append(f"| {r['model']} | {r['test']} | {r['syslm_ts']:.1f} ± {r['syslm_sd']:.1f} | "
                     f"{lt} | {ratio} | {100 * r['roofline']:.0f}% |")
    text = "\n".join(lines)
    print(text)
    if args.markdown:
        Path(args.markdown).write_text(text + "\n")


if __name__ == "__main__":
    main()
