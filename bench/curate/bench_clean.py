#!/usr/bin/env python3
"""Throughput of `syslm data clean --dedup exact,minhash --filters heuristic` on one core, against
issue 23's bar of 50 MB per minute per core: the planted-duplicates corpus
(tests/reference/planted_duplicates.py: KJV passages and fortunes, with near copies) repeated
with fresh edits to about 16 MB, one document per blank-line block. The heuristic rules' word
minimum is lowered to 8 (a passage or fortune is shorter than Gopher's 50), so that nearly every
document reaches the MinHash step instead of being dropped first.

    bench/curate/bench_clean.py [--syslm build/syslm] [--mb 16]
"""
import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "reference"))
import planted_duplicates as pd  # noqa: E402
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from machine import cpu_name  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--syslm", default=str(ROOT / "build" / "syslm"))
    ap.add_argument("--mb", type=float, default=16)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        raw = tmp / "raw.txt"
        size, seed, docs = 0, 1, 0
        with raw.open("w") as f:
            while size < a.mb * 1e6:
                for d in pd.corpus(6000, 4000, 3000, (0.02, 0.05, 0.1, 0.2), seed)[0]:
                    f.write(d + "\n\n")
                    size += len(d.encode()) + 2
                    docs += 1
                seed += 1
        rules = tmp / "rules.toml"
        rules.write_text("min_words = 8\n")
        t0 = time.perf_counter()
        out = subprocess.run([a.syslm, "data", "clean", "-f", raw, "-o", tmp / "clean", "--dedup",
                              "exact,minhash", "--filters", "heuristic", "--filter-config", rules,
                              "--docs", "blank", "-t", "1"], capture_output=True, text=True,
                             check=True).stdout
        seconds = time.perf_counter() - t0
    mb_min = size / 1e6 / seconds * 60
    print(f"CPU: {cpu_name()}, 1 thread")
    print(out.strip().splitlines()[0])
    print(f"{size / 1e6:.1f} MB, {docs} documents in {seconds:.2f} s: {mb_min:.0f} MB per minute "
          f"per core, {mb_min / 50:.1f}x the bar of 50")


if __name__ == "__main__":
    main()
