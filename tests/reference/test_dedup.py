"""`syslm data clean --dedup minhash` on planted near-duplicates (planted_duplicates.py: KJV
passages and fortunes, copies with 2%, 5% and 20% of their words edited) against the truth and
against datasketch's MinHashLSH at the same parameters (128 permutations, 20 bands x 5 rows,
5-word shingles): nearly every 2%-edited copy is found, few 20%-edited ones (their shingle
Jaccard is ~0.3, under the LSH curve), precision stays high, and the pair F1 is datasketch's
within the spread that hash seeds give either tool (0.03: measured 0.674-0.686 for syslm over
5 seeds, 0.679-0.682 for datasketch over 3, on the benchmark's larger corpus)."""
import json

import pytest

import planted_duplicates as pd

pytest.importorskip("datasketch")
if not pd.FORTUNES.is_dir():
    pytest.skip("Debian's fortunes is not installed", allow_module_level=True)

PERM, BANDS, ROWS, SHINGLE = 128, 20, 5, 5


def test_minhash_finds_planted_copies_as_well_as_datasketch(tmp_path, run_syslm):
    docs, truth = pd.corpus(1500, 1000, 0, ())
    originals = len(docs)
    import random

    rng = random.Random(4)
    rate_of = {}
    for rate in (0.02, 0.05, 0.20):
        for _ in range(250):
            i = rng.randrange(originals)
            rate_of[len(docs)] = rate
            docs.append(pd.edit(docs[i], rate, rng))
            truth.append(truth[i])
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(docs) + "\n")
    clusters = tmp_path / "clusters.jsonl"
    out = run_syslm("data", "clean", "-f", corpus, "-o", tmp_path / "out", "--docs", "line",
                    "--dedup", "minhash", "--perm", PERM, "--bands", BANDS, "--rows", ROWS,
                    "--shingle", SHINGLE, "--threshold", 0.3, "-t", 2, "--clusters",
                    clusters).stdout
    rows = [json.loads(l) for l in clusters.read_text().splitlines()]
    assert [r["id"] for r in rows] == list(range(len(docs)))
    labels = [r["cluster"] for r in rows]
    # the output holds exactly the documents kept: each cluster's first
    kept = [d for i, d in enumerate(docs) if labels[i] == i]
    assert (tmp_path / "out" / "corpus.txt").read_text() == "".join(d + "\n" for d in kept), out

    def found(rate):  # copies whose cluster is their original's
        ids = [i for i, r in rate_of.items() if r == rate]
        return sum(labels[i] == labels[truth.index(truth[i])] for i in ids) / len(ids)

    assert found(0.02) > 0.95
    assert found(0.05) > 0.8
    assert found(0.20) < 0.5
    p, r, f1 = pd.pair_scores(labels, truth)
    p_ds, r_ds, f1_ds = pd.pair_scores(pd.datasketch_clusters(docs, PERM, BANDS, ROWS, SHINGLE),
                                       truth)
    print(f"syslm P {p:.3f} R {r:.3f} F1 {f1:.3f}; datasketch P {p_ds:.3f} R {r_ds:.3f} "
          f"F1 {f1_ds:.3f}")
    assert p > 0.85
    assert f1 > f1_ds - 0.03
