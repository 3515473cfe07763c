#!/usr/bin/env python3
"""Pipeline parallelism on this machine, measured: a llama (8 blocks x 256, the 4096-token KJV
vocabulary, so the head does not dwarf a stage) split into 2 stages (one MPI rank and thread
each), for 2, 4 and 8 micro-batches of 2 x 128 tokens under GPipe and 1F1B. Prints stage 0's
measured bubble (time waiting for its neighbour / time in the schedule) against the theoretical
(p - 1) / (m + p - 1), and tokens/s against one process with 2 threads on the same batches.

    apt-get install bible-kjv
    bench/dist/bench_pipeline.py [--steps 8]
"""
import argparse
import json
import os
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]


def run(cmd, env):
    p = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, env=env)
    if p.returncode != 0:
        sys.exit(f"failed: {' '.join(map(str, cmd))}\n{p.stderr[-3000:]}")
    return p


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--syslm", default=str(ROOT / "build" / "syslm"))
    ap.add_argument("--work", default=str(ROOT / "bench" / "dist" / "work"))
    ap.add_argument("--steps", type=int, default=8)
    a = ap.parse_args()
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    work = pathlib.Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    text, tok = work / "kjv.txt", work / "tok.gguf"
    if not text.exists():
        verses = run(["bible", "-f", "Genesis1:1-Revelation22:21"], env).stdout
        text.write_text(re.sub(r"(?m)^\S+ ", "", verses))
    if not tok.exists():
        run([a.syslm, "tokenizer", "train", "-f", text, "--vocab", 4096, "-o", tok], env)
    common = [a.syslm, "train", "--arch", "llama", "--tokenizer", tok, "--layers", 8, "--dim",
              256, "--heads", 4, "--ctx", 128, "--synthetic-data", "--seq", 128, "--batch", 2,
              "--steps", a.steps, "--json"]
    print("llama 8 x 256, vocabulary 4096, micro-batches of 2 x 128 tokens, "
          f"{a.steps} steps, 2 stages")
    print("| micro-batches | schedule | bubble measured | theoretical | tokens/s | 1 process, 2 threads |")
    print("|---:|---|---:|---:|---:|---:|")
    for m in [2, 4, 8]:
        one = json.loads(run([*common, "--accum", m, "--threads", 2], env).stdout.splitlines()[-1])
        for schedule in ["gpipe", "1f1b"]:
            p = run(["mpirun", "-np", 2, "--oversubscribe", "--bind-to", "core", *common, "--pp",
                     2, "--micro-batches", m, "--schedule", schedule, "--threads", 1], env)
            j = json.loads(p.stdout.splitlines()[-1])
            bubble = float(re.search(r"pipeline: ([\d.]+)% of stage 0", p.stderr).group(1))
            print(f"| {m} | {schedule} | {bubble:.1f}% | {100 / (m + 1):.1f}% | "
                  f"{j['tokens_per_s']:.0f} | {one['tokens_per_s']:.0f} |")


if __name__ == "__main__":
    main()
