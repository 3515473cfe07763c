#!/usr/bin/env python3
"""Serving many LoRA adapters at once: `syslm serve` with K adapters (random, rank R on the chosen
projections: by default PEFT's LoraConfig defaults, r = 8 on q and v) and N streams spread
round-robin over them (stream k uses model
"<name>:a<k mod K>"), against the same server with every stream on the base model. Reported:
aggregate generated tokens/s of both and their ratio (issue 22's bar: 8 adapters over 16
streams keep >= 85% of the base's), with the CPU it ran on.

    bench/serve/bench_lora.py --model bench/models/L110M-Q8_0.gguf [--adapters 8] [--streams 16]
        [--rank 8] [--targets attn_q,attn_v] [--gen 128] [--rounds 2] [-t 2]

(--targets attn_q,attn_k,attn_v,attn_output,ffn_gate,ffn_up,ffn_down adapts every projection.)

The adapters (F16, as llama.cpp's converter writes them) go into a temporary folder, written
with gguf-py by tests/reference/lora_files.py.
"""
import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "reference"))
import bench_serve  # noqa: E402
from lora_files import write_random_adapter  # noqa: E402
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from machine import cpu_name  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--syslm", default=str(bench_serve.ROOT / "build" / "syslm"))
    ap.add_argument("--adapters", type=int, default=8)
    ap.add_argument("--streams", type=int, default=16)
    ap.add_argument("--rank", type=int, default=8)
    ap.add_argument("--targets", default="attn_q,attn_v")
    ap.add_argument("--gen", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--ctx", type=int, default=512)
    ap.add_argument("-t", "--threads", type=int, default=2)
    args = ap.parse_args()
    prompts = bench_serve.kjv_prompts(256)
    with tempfile.TemporaryDirectory() as tmp:
        loras = []
        for i in range(args.adapters):
            path = Path(tmp) / f"a{i}.gguf"
            write_random_adapter(args.model, path, args.rank, i, args.targets.split(","), 0.02,
                                 np.float16)
            loras += ["--lora", f"a{i}={path}"]
        cmd = [args.syslm, "serve", "-m", args.model, "--port", "18183", "--parallel",
               str(args.streams), "--ctx-size", str(args.ctx), "-t", str(args.threads),
               "--max-queue", "1024"] + loras
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            bench_serve.wait_ready(18183)
            name = json.loads(subprocess.run(["curl", "-s", "http://127.0.0.1:18183/v1/models"],
                                             capture_output=True, text=True).stdout)["data"][0]["id"]
            bench_serve.one_request(18183, prompts[0], 8)  # warm-up
            rows = {}
            per_phase = args.streams * args.rounds  # each phase its own prompts: no prefix hits
            for phase, (label, extra) in enumerate((
                    ("base", lambda k: {"model": name}),
                    ("adapters", lambda k: {"model": f"{name}:a{k % args.adapters}"}),
                    ("base again", lambda k: {"model": name}))):
                own = prompts[phase * per_phase:(phase + 1) * per_phase]
                row, _ = bench_serve.run_phase(18183, args.streams, args.rounds, args.gen, own,
                                               False, extra)
                rows[label] = row
                print(label, json.dumps(row), file=sys.stderr)
        finally:
            proc.terminate()
            proc.wait(timeout=60)
    base = (rows["base"]["tok_s"] + rows["base again"]["tok_s"]) / 2
    print(f"CPU: {cpu_name()}, {args.threads} threads; {Path(args.model).name}; "
          f"{args.adapters} adapters of rank {args.rank} on {args.targets} over {args.streams} streams")
    print("| | tok/s | ITL p50 / p99 ms |")
    print("| --- | ---: | ---: |")
    for label in ("base", "adapters", "base again"):
        r = rows[label]
        print(f"| {label} | {r['tok_s']:.1f} | {r['itl_p50']:.0f} / {r['itl_p99']:.0f} |")
    print(f"\nadapters / base (mean of the two base runs): {rows['adapters']['tok_s'] / base:.3f}")


if __name__ == "__main__":
    main()
