#!/usr/bin/env python3
"""`syslm plan`'s cost model against the layouts this machine can run: calibrate once (a proxy
model's training rate, the data-parallel overlap, MPI all-reduce bandwidth and latency, under
`mpirun -np 2`), then for each layout train the target model for real and compare the measured
step time with the planner's prediction for that layout.

    bench/parallel/bench_plan.py [--steps 12]

Layouts (one thread per rank): 1 rank; dp=2 with ZeRO 0, 1 and 2; tp=2; pp=2 with 4
micro-batches under 1F1B (predicted with full recompute: syslm's stages re-run their forward
before the backward).
"""
import argparse
import json
import pathlib
import tempfile

from common import ROOT, VOCAB, run


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--syslm", default=str(ROOT / "build" / "syslm"))
    ap.add_argument("--steps", type=int, default=12)
    a = ap.parse_args()
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="syslm-plan-"))
    proxy, calib = tmp / "proxy.gguf", tmp / "calib.json"
    run([a.syslm, "init", "--vocab", VOCAB, "-o", proxy, "--layers", 4, "--dim", 128, "--heads",
         4, "--ctx", 128])
    mpi = ["mpirun", "-np", 2, "--oversubscribe", "--bind-to", "core"]
    run([*mpi, a.syslm, "plan", "--calibrate", calib, "-m", proxy, "--seq", 128,
         "--micro-batch", 4, "-t", 1, "--steps", 6])
    print("calibration:", calib.read_text().replace("\n", " "))
    seq, batch = 128, 8
    shape = ["--layers", 6, "--dim", 256, "--heads", 4, "--ffn", 688, "--vocab", 32000]
    train = ["train", "--arch", "llama", "--tokenizer", VOCAB, "--layers", 6, "--dim", 256,
             "--heads", 4, "--ffn", 688, "--ctx", seq, "--synthetic-data", "--seq", seq,
             "--steps", a.steps, "--json", "--threads", 1]
    rows = []
    # (name, ranks, train flags, planner layout, micro-batch of the plan)
    layouts = [("1 rank", 1, ["--batch", batch], "dp=1", batch),
               ("dp=2", 2, ["--batch", batch // 2], "dp=2", batch // 2),
               ("dp=2 ZeRO-1", 2, ["--batch", batch // 2, "--zero", 1], "dp=2,zero=1", batch // 2),
               ("dp=2 ZeRO-2", 2, ["--batch", batch // 2, "--zero", 2], "dp=2,zero=2", batch // 2),
               ("tp=2", 2, ["--batch", batch, "--tp", 2], "tp=2", batch),
               ("pp=2, 4 micro-batches, 1F1B", 2,
                ["--batch", batch // 4, "--pp", 2, "--micro-batches", 4, "--schedule", "1f1b"],
                "pp=2,recompute=full", batch // 4)]
    for name, ranks, flags, layout, micro in layouts:
        cmd = [a.syslm, *train, *flags]
        if ranks > 1:
            cmd = [*mpi, *cmd]
        out = json.loads(run(cmd).stdout.strip().splitlines()[-1])
        measured = batch * seq / out["tokens_per_s"]
        plan = json.loads(run([a.syslm, "plan", *shape, "--cluster", f"1 node x {ranks} cpu",
                               "--calibration", calib, "--seq", seq, "--batch", batch,
                               "--micro-batch", micro, "--precision", "f32", "--layout",
                               layout, "--json"]))[0]
        rows.append((name, plan["step_s"], measured))
    print("| layout | predicted step s | measured step s | error |")
    print("|---|---:|---:|---:|")
    for name, pred, meas in rows:
        print(f"| {name} | {pred:.3f} | {meas:.3f} | {100 * (pred - meas) / meas:+.0f}% |")


if __name__ == "__main__":
    main()
