#!/usr/bin/env python3
"""Data-parallel training on this machine, measured: dp=2 (two MPI ranks, one thread each, the
batch split between them) against one process with two threads on the whole batch, for the same
model, global batch and steps. Prints the scaling efficiency (tokens/s of dp=2 / tokens/s of one
process), the share of gradient-reduction time hidden behind the backward, and the bytes each
rank sends per step against the ring all-reduce's 2(p-1)/p x gradient bytes.

    bench/parallel/bench_data_parallel.py [--layers 6 --dim 256 --batch 8 --seq 128 --steps 30]

Needs OpenMPI (`scripts/install_deps.sh` installs it) and a built build/syslm.
"""
import argparse
import json
import re
import sys

from common import ROOT, VOCAB, run


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--syslm", default=str(ROOT / "build" / "syslm"))
    ap.add_argument("--vocab", default=str(VOCAB))
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--dim", type=int, default=256)
    ap.add_argument("--batch", type=int, default=8, help="global batch (sequences per step)")
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    common = ["train", "--arch", "llama", "--tokenizer", a.vocab, "--layers", str(a.layers),
              "--dim", str(a.dim), "--heads", str(a.dim // 64), "--ctx", str(a.seq),
              "--synthetic-data", "--seq", str(a.seq), "--steps", str(a.steps), "--json"]
    best = {}
    for _ in range(a.repeats):  # alternate the two, keep each one's best
        one = run([a.syslm, *common, "--batch", str(a.batch), "--threads", "2"])
        two = run(["mpirun", "-np", "2", "--oversubscribe", "--bind-to", "core", a.syslm, *common,
                   "--batch", str(a.batch // 2), "--threads", "1"])
        for name, p in (("one", one), ("dp2", two)):
            j = json.loads(p.stdout.strip().splitlines()[-1])
            if name not in best or j["tokens_per_s"] > best[name][0]["tokens_per_s"]:
                best[name] = (j, p.stderr)
    one, dp2 = best["one"][0], best["dp2"][0]
    m = re.search(r"([\d.]+) s reducing gradients \(([\d.]+) MiB sent per rank in the last step\), "
                  r"(\d+)% of it hidden", best["dp2"][1])
    if not m:
        sys.exit("no data-parallel summary in the dp=2 run's output")
    comm_s, mib, hidden = float(m.group(1)), float(m.group(2)), int(m.group(3))
    print(f"model {a.layers} x {a.dim}, global batch {a.batch} x {a.seq}, {a.steps} steps "
          f"(best of {a.repeats})")
    print(f"| run | tokens/s | MFU | final loss |\n|---|---:|---:|---:|")
    print(f"| 1 process, 2 threads | {one['tokens_per_s']:.0f} | {100 * one['mfu']:.1f}% | "
          f"{one['final_loss']:.6f} |")
    print(f"| dp=2 (MPI), 1 thread each | {dp2['tokens_per_s']:.0f} | {100 * dp2['mfu']:.1f}% | "
          f"{dp2['final_loss']:.6f} |")
    print(f"scaling efficiency (dp=2 / one process): {dp2['tokens_per_s'] / one['tokens_per_s']:.2f}")
    print(f"gradient reduction: {comm_s:.2f} s over the run, {hidden}% hidden behind the backward, "
          f"{mib:.2f} MiB sent per rank per step")


if __name__ == "__main__":
    main()
