#!/usr/bin/env python3
"""Near-duplicate detection against datasketch, same machine, one core each.

The corpus (tests/reference/planted_duplicates.py): passages of four KJV verses and fortunes,
each once, plus edited copies of random ones (words replaced, deleted or doubled at 2%, 5%, 10%
and 20%), with the original of every document known. Both tools use 128 permutations, 5-word
shingles of the normalized text and LSH with 20 bands of 5 rows (threshold ~0.55); syslm runs
`data clean --dedup minhash -t 1` on the corpus file (reading, normalizing, hashing, clustering
and writing included), datasketch is timed building each MinHash (update_batch) and querying and
inserting it in MinHashLSH. Reported: precision, recall and F1 of the same-cluster pairs against
the truth, and documents per second per core.

    bench/curate/bench_dedup.py [--syslm build/syslm] [--passages 6000] [--copies 1500]
"""
import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "reference"))
import planted_duplicates as pd  # noqa: E402

PERM, BANDS, ROWS, SHINGLE = 128, 20, 5, 5
THRESHOLDS = [float(x) for x in __import__("os").environ.get("THRESHOLDS", "0.5,0").split(",")]


def syslm_clusters(syslm, docs, threshold, tmp):
    corpus = tmp / "corpus.txt"
    corpus.write_text("\n".join(docs) + "\n")
    clusters = tmp / "clusters.jsonl"
    t0 = time.perf_counter()
    cmd = [syslm, "data", "clean", "-f", corpus, "-o", tmp / "out", "--docs", "line", "--dedup",
           "minhash", "--perm", PERM, "--bands", BANDS, "--rows", ROWS, "--shingle", SHINGLE,
           "--threshold", threshold, "-t", 1, "--clusters", clusters]
    subprocess.run([str(c) for c in cmd], check=True, capture_output=True)
    seconds = time.perf_counter() - t0
    labels = [json.loads(l)["cluster"] for l in clusters.read_text().splitlines()]
    return labels, seconds


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--syslm", default=str(ROOT / "build" / "syslm"))
    ap.add_argument("--passages", type=int, default=6000)
    ap.add_argument("--fortunes", type=int, default=4000)
    ap.add_argument("--copies", type=int, default=1500, help="copies per edit rate")
    a = ap.parse_args()
    docs, truth = pd.corpus(a.passages, a.fortunes, a.copies, (0.02, 0.05, 0.10, 0.20))
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo")
                if l.startswith("model name")), "?")
    print(f"CPU: {cpu}; {len(docs)} documents ({len(set(truth))} originals), "
          f"{PERM} permutations, {BANDS} x {ROWS} bands, {SHINGLE}-word shingles, one core")
    print("| tool | precision | recall | F1 | docs/s per core |")
    print("| --- | ---: | ---: | ---: | ---: |")
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        for threshold in THRESHOLDS:
            labels, s = syslm_clusters(a.syslm, docs, threshold, Path(tmp))
            rows[f"syslm, verified >= {threshold}" if threshold else "syslm, LSH only"] = (
                pd.pair_scores(labels, truth), len(docs) / s)
    t0 = time.perf_counter()
    labels = pd.datasketch_clusters(docs, PERM, BANDS, ROWS, SHINGLE)
    rows["datasketch MinHashLSH"] = (pd.pair_scores(labels, truth),
                                     len(docs) / (time.perf_counter() - t0))
    for name, ((p, r, f1), speed) in rows.items():
        print(f"| {name} | {p:.4f} | {r:.4f} | {f1:.4f} | {speed:.0f} |")
    ds = rows["datasketch MinHashLSH"][1]
    for name, (_, speed) in rows.items():
        print(f"{name}: {speed / ds:.1f}x datasketch's speed")


if __name__ == "__main__":
    main()
