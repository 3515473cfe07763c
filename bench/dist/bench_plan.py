#!/usr/bin/env python3
"""`syslm plan`'s cost model against the layouts this machine can run: calibrate once (a proxy
model's training rate, the data-parallel overlap, MPI all-reduce bandwidth and latency, under
`mpirun -np 2`), then for each layout train the target model for real and compare the measured
step time with the planner's prediction for that layout.

    bench/dist/bench_plan.py [--steps 12]

Layouts: 1 rank (dp=1), and dp=2 with ZeRO 0, 1 and 2 (one thread per rank). Tensor and
pipeline parallelism are not built yet, so their predictions cannot be checked here.
"""
import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[2]
VOCAB = ROOT.parent / "shared" / "data" / "vocab" / "ggml-vocab-llama-spm.gguf"


def run(cmd, env):
    p = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, env=env)
    if p.returncode != 0:
        sys.exit(f"failed: {' '.join(map(str, cmd))}\n{p.stderr[-3000:]}")
    return p.stdout


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--syslm", default=str(ROOT / "build" / "syslm"))
    ap.add_argument("--steps", type=int, default=12)
    a = ap.parse_args()
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="syslm-plan-"))
    proxy, calib = tmp / "proxy.gguf", tmp / "calib.json"
    run([a.syslm, "init", "--vocab", VOCAB, "-o", proxy, "--layers", 4, "--dim", 128, "--heads",
         4, "--ctx", 128], env)
    mpi = ["mpirun", "-np", 2, "--oversubscribe", "--bind-to", "core"]
    run([*mpi, a.syslm, "plan", "--calibrate", calib, "-m", proxy, "--seq", 128,
         "--micro-batch", 4, "-t", 1, "--steps", 6], env)
    print("calibration:", calib.read_text().replace("\n", " "))
    seq, batch = 128, 8
    shape = ["--layers", 6, "--dim", 256, "--heads", 4, "--ffn", 688, "--vocab", 32000]
    train = ["train", "--arch", "llama", "--tokenizer", VOCAB, "--layers", 6, "--dim", 256,
             "--heads", 4, "--ffn", 688, "--ctx", seq, "--synthetic-data", "--seq", seq,
             "--steps", a.steps, "--json", "--threads", 1]
    rows = []
    for dp, zero in [(1, 0), (2, 0), (2, 1), (2, 2)]:
        cmd = [a.syslm, *train, "--batch", batch // dp]
        if dp > 1:
            cmd = [*mpi, *cmd, "--zero", zero]
        out = json.loads(run(cmd, env).strip().splitlines()[-1])
        measured = batch * seq / out["tokens_per_s"]
        plan = json.loads(run([a.syslm, "plan", *shape, "--cluster", f"1 node x {dp} cpu",
                               "--calibration", calib, "--seq", seq, "--batch", batch,
                               "--micro-batch", batch // dp, "--precision", "f32", "--layout",
                               f"dp={dp},zero={zero}", "--json"], env))[0]
        rows.append((dp, zero, plan["step_s"], measured))
    print("| layout | predicted step s | measured step s | error |")
    print("|---|---:|---:|---:|")
    for dp, zero, pred, meas in rows:
        print(f"| dp={dp} zero={zero} | {pred:.3f} | {meas:.3f} | {100 * (pred - meas) / meas:+.0f}% |")


if __name__ == "__main__":
    main()
