#!/usr/bin/env python3
"""Continual training with replay (issue 23 §4): a model trained on the KJV is extended on
fortunes, with 0%, 10% and 30% of the new training mixture replaying the old text (`syslm data
mix` weights), and forgetting is measured as the rise of its perplexity on held-out KJV books,
beside what it learned (perplexity on a held-out fortune file).

The base: the README's model shape (llama 4 x 256, 8 heads) trained from scratch for --base-steps
steps of 8 x 128 tokens on KJV passages (without Ruth, Ecclesiastes and James). Each extension:
--steps more steps from the base (`train --init`), at a lower peak rate.

    bench/curate/bench_continual.py [--base-steps 600] [--steps 300] [--keep DIR]
"""
import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "bench" / "curate"))
from bench_end_to_end import originals  # noqa: E402
from machine import cpu_name  # noqa: E402


def run(cmd):
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, check=True).stdout


def ppl(syslm, model, text):
    out = run([syslm, "perplexity", "-m", model, "-f", text, "-c", 128, "--json"])
    return json.loads(out.strip().splitlines()[-1])["ppl"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--syslm", default=str(ROOT / "build" / "syslm"))
    ap.add_argument("--base-steps", type=int, default=600)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--keep", help="keep the work folder here")
    a = ap.parse_args()
    tmp = Path(a.keep) if a.keep else Path(tempfile.mkdtemp())
    tmp.mkdir(parents=True, exist_ok=True)
    kjv, fortunes, held_kjv, held_fortunes = originals()
    for name, lines, sep in (("kjv", kjv, "\n\n"), ("fortunes", fortunes, "\n\n"),
                             ("heldout_kjv", held_kjv, "\n"),
                             ("heldout_fortunes", held_fortunes, "\n")):
        (tmp / f"{name}.txt").write_text(sep.join(lines) + "\n")
    tok = tmp / "tok.gguf"
    run([a.syslm, "tokenizer", "train", "-f", tmp / "kjv.txt", "-f", tmp / "fortunes.txt",
         "--vocab", 4096, "-o", tok])
    shape = ["--batch", 8, "--seq", 128, "--seed", 1, "--tokenizer", tok]
    run([a.syslm, "data", "prepare", "-f", tmp / "kjv.txt", "--tokenizer", tok, "-o",
         tmp / "kjv_data", "--docs", "blank", "--val", 0.01])
    base = tmp / "base.gguf"
    run([a.syslm, "train", "--arch", "llama", "--layers", 4, "--dim", 256, "--heads", 8, "--ctx",
         256, "--data", tmp / "kjv_data", "--steps", a.base_steps, "--lr", 2e-3, "--min-lr", 2e-4,
         "--warmup", 50, "--log-every", a.base_steps, "-o", base, *shape])
    rows = [("base (KJV only)", ppl(a.syslm, base, tmp / "heldout_kjv.txt"),
             ppl(a.syslm, base, tmp / "heldout_fortunes.txt"))]
    for replay in (0.0, 0.1, 0.3):
        mix = tmp / f"mix_{replay}"
        sources = ["--source", f"fortunes={tmp / 'fortunes.txt'}:{1 - replay}"]
        if replay > 0:
            sources += ["--source", f"kjv={tmp / 'kjv.txt'}:{replay}"]
        run([a.syslm, "data", "mix", *sources, "--tokenizer", tok, "-o", mix, "--docs", "blank",
             "--val", 0.01])
        model = tmp / f"continued_{replay}.gguf"
        run([a.syslm, "train", "--init", base, "--data", mix, "--steps", a.steps, "--lr", 1e-3,
             "--min-lr", 1e-4, "--warmup", 20, "--log-every", a.steps, "-o", model, *shape[:-2]])
        rows.append((f"+ {a.steps} steps on fortunes, {replay:.0%} KJV replay",
                     ppl(a.syslm, model, tmp / "heldout_kjv.txt"),
                     ppl(a.syslm, model, tmp / "heldout_fortunes.txt")))
    print(f"CPU: {cpu_name()}; llama 4 x 256, base {a.base_steps} steps on KJV passages, "
          f"extensions {a.steps} steps; batches of 8 x 128\n")
    print("| model | held-out KJV books ppl (forgetting) | held-out fortunes ppl |")
    print("| --- | ---: | ---: |")
    for name, k, f in rows:
        print(f"| {name} | {k:.2f} ({k / rows[0][1]:.2f}x base) | {f:.2f} |")
    if not a.keep:
        shutil.rmtree(tmp)


if __name__ == "__main__":
    main()
