#!/usr/bin/env python3
"""Issue 23's end-to-end check: does cleaning pay off in the model? A corpus of KJV passages and
English fortunes is polluted with 30% duplicates (exact copies and copies with a few words
edited) and 20% junk (random characters, a line repeated, web boilerplate), by document count.
The README's model shape (llama, 4 layers, dim 256, 8 heads, batches of 8 x 128) is trained from
scratch for the same number of steps on the raw corpus and on `syslm data clean`'s output
(exact + MinHash + substring dedup, heuristic filters with the word minimum at 8), both with a
4096-token BPE trained by syslm on the clean originals, and scored by perplexity on clean
held-out text (the books Ruth, Ecclesiastes and James, and one fortune file, none of them in
either corpus).

    bench/curate/bench_end_to_end.py [--steps 600] [--keep DIR]
"""
import argparse
import json
import random
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "reference"))
sys.path.insert(0, str(ROOT / "bench"))
import planted_duplicates as pd  # noqa: E402
from machine import cpu_name  # noqa: E402

HELD_OUT = re.compile(r"^(Ruth|Eccl|Jas)[0-9]")
BOILERPLATE = ["Copyright {y} All rights reserved. Privacy Policy | Terms of Use | Cookie Settings",
               "Click here to subscribe to our newsletter! Follow us on Facebook and Twitter.",
               "Home > Products > Category {n} > Item {m} | Add to cart | Share | Print"]


def run(cmd):
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, check=True).stdout


def originals():
    """(KJV passages, fortunes, held-out KJV verses, held-out fortunes): passages of four verses
    outside the held-out books Ruth, Ecclesiastes and James, fortunes of 8 words or more outside
    the held-out fortune file `wisdom`."""
    refs = run(["bible", "-f", "Genesis1:1-Revelation22:21"]).splitlines()
    train_verses = [re.sub(r"^\S+ ", "", v) for v in refs if v.strip() and not HELD_OUT.match(v)]
    held_kjv = [re.sub(r"^\S+ ", "", v) for v in refs if HELD_OUT.match(v)]
    kjv = [" ".join(train_verses[i:i + 4]) for i in range(0, len(train_verses) - 3, 4)]
    fortunes, held_fortunes = [], []
    for f in sorted(pd.FORTUNES.glob("*")):
        if f.suffix or not f.is_file():
            continue
        blocks = [" ".join(b.split()) for b in f.read_text(errors="replace").split("\n%\n")]
        blocks = [b for b in blocks if len(b.split()) >= 8]
        (held_fortunes if f.name == "wisdom" else fortunes).extend(blocks)
    return kjv, fortunes, held_kjv, held_fortunes


def junk(rng):
    kind = rng.randrange(3)
    if kind == 0:  # random characters
        return "".join(chr(rng.choice([rng.randrange(33, 127), rng.randrange(0x400, 0x4ff),
                                       rng.randrange(0x4e00, 0x4fff)]))
                       for _ in range(rng.randrange(80, 400)))
    if kind == 1:  # one line repeated
        line = " ".join(rng.choice(["buy", "now", "cheap", "best", "deal", "free", "online"])
                        for _ in range(6))
        return "\n".join([line] * rng.randrange(10, 40))
    return " ".join(t.format(y=rng.randrange(1990, 2026), n=rng.randrange(99), m=rng.randrange(999))
                    for t in rng.sample(BOILERPLATE, 3))


def polluted(docs, rng):
    """docs plus duplicates (30% of the result) and junk (20%), shuffled."""
    n = len(docs)
    total = int(n / 0.5)
    out = list(docs)
    for _ in range(int(0.3 * total)):
        d = rng.choice(docs)
        out.append(d if rng.random() < 0.5 else pd.edit(d, 0.05, rng))
    out += [junk(rng) for _ in range(int(0.2 * total))]
    rng.shuffle(out)
    return out


def train(syslm, tok, text, work, steps):
    data = work / "data"
    run([syslm, "data", "prepare", "-f", text, "--tokenizer", tok, "-o", data, "--val", 0.01,
         "--docs", "blank"])
    meta = json.loads((data / "meta.json").read_text())
    run([syslm, "train", "--arch", "llama", "--tokenizer", tok, "--layers", 4, "--dim", 256,
         "--heads", 8, "--ctx", 256, "--data", data, "--batch", 8, "--seq", 128, "--steps", steps,
         "--lr", 2e-3, "--min-lr", 2e-4, "--warmup", 50, "--seed", 1, "--log-every", steps,
         "-o", work / "model.gguf"])
    return meta["train_tokens"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--syslm", default=str(ROOT / "build" / "syslm"))
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--keep", help="keep the work folder here")
    a = ap.parse_args()
    tmp = Path(a.keep) if a.keep else Path(tempfile.mkdtemp())
    tmp.mkdir(parents=True, exist_ok=True)
    kjv, fortunes, held_kjv, held_fortunes = originals()
    docs, held = kjv + fortunes, "\n".join(held_kjv + held_fortunes) + "\n"
    rng = random.Random(1)
    raw = polluted(docs, rng)
    (tmp / "raw").mkdir(exist_ok=True)
    (tmp / "raw" / "corpus.txt").write_text("\n\n".join(raw) + "\n")
    (tmp / "originals.txt").write_text("\n\n".join(docs) + "\n")
    (tmp / "heldout.txt").write_text(held)
    tok = tmp / "tok.gguf"
    run([a.syslm, "tokenizer", "train", "-f", tmp / "originals.txt", "--vocab", 4096, "-o", tok])
    (tmp / "rules.toml").write_text("min_words = 8\n")
    cleaned = run([a.syslm, "data", "clean", "-f", tmp / "raw", "-o", tmp / "clean", "--dedup",
                   "exact,minhash,substring", "--filters", "heuristic", "--filter-config",
                   tmp / "rules.toml", "--docs", "blank", "--report", tmp / "report.html"])
    rows = {}
    for name, text in (("raw", tmp / "raw" / "corpus.txt"), ("cleaned", tmp / "clean" / "corpus.txt")):
        work = tmp / name
        work.mkdir(exist_ok=True)
        tokens = train(a.syslm, tok, text, work, a.steps)
        ppl = json.loads(run([a.syslm, "perplexity", "-m", work / "model.gguf", "-f",
                              tmp / "heldout.txt", "-c", 128, "--json"]).strip().splitlines()[-1])
        rows[name] = (len(Path(text).read_text().split("\n\n")), tokens, ppl)
    print(f"CPU: {cpu_name()}; {len(docs)} original documents, {len(raw)} after pollution")
    print(cleaned.strip())
    print(f"\nllama 4 x 256, {a.steps} steps of 8 x 128 tokens, seed 1; held-out: Ruth, "
          f"Ecclesiastes, James and the fortune file wisdom\n")
    print("| corpus | documents | train tokens | held-out perplexity | held-out loss |")
    print("| --- | ---: | ---: | ---: | ---: |")
    import math
    for name, (n, tokens, ppl) in rows.items():
        print(f"| {name} | {n} | {tokens} | {ppl['ppl']:.2f} | {math.log(ppl['ppl']):.4f} |")
    if not a.keep:
        shutil.rmtree(tmp)


if __name__ == "__main__":
    main()
