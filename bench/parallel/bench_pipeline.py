#!/usr/bin/env python3
"""Pipeline parallelism on this machine, measured: a llama (8 blocks x 256, the 4096-token KJV
vocabulary, so the head does not dwarf a stage) split into 2 stages (one MPI rank and thread
each), for 2, 4 and 8 micro-batches of 2 x 128 tokens under GPipe and 1F1B. Prints stage 0's
measured bubble (time waiting for its neighbour / time in the schedule) against the theoretical
(p - 1) / (m + p - 1), and tokens/s against one process with 2 threads on the same batches.

    apt-get install bible-kjv
    bench/parallel/bench_pipeline.py [--steps 8]
"""
import argparse
import json
import re

from common import ROOT, kjv_tokenizer, run


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--syslm", default=str(ROOT / "build" / "syslm"))
    ap.add_argument("--work", default=str(ROOT / "bench" / "parallel" / "work"))
    ap.add_argument("--steps", type=int, default=8)
    a = ap.parse_args()
    _, tok = kjv_tokenizer(a.syslm, a.work)
    common = [a.syslm, "train", "--arch", "llama", "--tokenizer", tok, "--layers", 8, "--dim",
              256, "--heads", 4, "--ctx", 128, "--synthetic-data", "--seq", 128, "--batch", 2,
              "--steps", a.steps, "--json"]
    print("llama 8 x 256, vocabulary 4096, micro-batches of 2 x 128 tokens, "
          f"{a.steps} steps, 2 stages")
    print("| micro-batches | schedule | bubble measured | theoretical | tokens/s | 1 process, 2 threads |")
    print("|---:|---|---:|---:|---:|---:|")
    for m in [2, 4, 8]:
        one = json.loads(run([*common, "--accum", m, "--threads", 2]).stdout.splitlines()[-1])
        for schedule in ["gpipe", "1f1b"]:
            p = run(["mpirun", "-np", 2, "--oversubscribe", "--bind-to", "core", *common, "--pp",
                     2, "--micro-batches", m, "--schedule", schedule, "--threads", 1])
            j = json.loads(p.stdout.splitlines()[-1])
            bubble = float(re.search(r"pipeline: ([\d.]+)% of stage 0", p.stderr).group(1))
            print(f"| {m} | {schedule} | {bubble:.1f}% | {100 / (m + 1):.1f}% | "
                  f"{j['tokens_per_s']:.0f} | {one['tokens_per_s']:.0f} |")


if __name__ == "__main__":
    main()
