"""A corpus with planted near-duplicates and its ground truth, for the dedup checks
(test_dedup.py, bench/curate/bench_dedup.py): passages of four consecutive KJV verses (Debian's
bible-kjv) and fortunes (Debian's fortunes), each original kept once (exactly repeated ones
dropped), and copies of some of them with a share of their words replaced, deleted or
duplicated at random. Returns the documents in a shuffled order with each one's original, and
the MinHash pair scoring both tools share."""
import random
import re
import subprocess
from pathlib import Path

FORTUNES = Path("/usr/share/games/fortunes")


def passages(limit):
    text = subprocess.run(["bible", "-f", "Genesis1:1-Revelation22:21"], capture_output=True,
                          text=True, check=True).stdout
    verses = [re.sub(r"^\S+ ", "", v).strip() for v in text.splitlines() if v.strip()]
    out = [" ".join(verses[i:i + 4]) for i in range(0, len(verses) - 3, 4)]
    return out[:limit]


def fortunes(limit):
    out = []
    for f in sorted(FORTUNES.glob("*")):
        if f.suffix or not f.is_file():
            continue
        for block in f.read_text(errors="replace").split("\n%\n"):
            block = " ".join(block.split())
            if len(block.split()) >= 12:
                out.append(block)
    return out[:limit]


def normalized(doc):
    return " ".join(re.sub(r"[^a-z\x80-\uffff]+", " ", doc.lower()).split())


def edit(doc, rate, rng):
    words = doc.split()
    out = []
    for w in words:
        u = rng.random()
        if u < rate / 3:  # replaced
            out.append(rng.choice(words))
        elif u < 2 * rate / 3:  # deleted
            continue
        elif u < rate:  # doubled
            out += [w, w]
        else:
            out.append(w)
    return " ".join(out)


def corpus(n_passages, n_fortunes, copies, rates, seed=1):
    """Originals, plus `copies` edited copies of randomly chosen originals at each rate.
    Returns (documents, truth): truth[i] is the index of document i's original."""
    rng = random.Random(seed)
    originals, seen = [], set()
    for d in passages(n_passages) + fortunes(n_fortunes):
        key = normalized(d)
        if key not in seen:
            seen.add(key)
            originals.append(d)
    docs = [(d, i) for i, d in enumerate(originals)]
    for rate in rates:
        for _ in range(copies):
            i = rng.randrange(len(originals))
            docs.append((edit(originals[i], rate, rng), i))
    rng.shuffle(docs)
    return [d for d, _ in docs], [t for _, t in docs]


def pair_scores(predicted, truth):
    """Precision, recall and F1 of the same-cluster pairs of `predicted` (a cluster label per
    document) against those of `truth`."""
    from collections import Counter

    def pairs(counter):
        return sum(n * (n - 1) // 2 for n in counter.values())

    both = pairs(Counter(zip(predicted, truth)))
    found, real = pairs(Counter(predicted)), pairs(Counter(truth))
    p = both / found if found else 1.0
    r = both / real if real else 1.0
    return p, r, 2 * p * r / (p + r) if p + r else 0.0


def shingles(doc, k):
    w = normalized(doc).split()
    if len(w) < k:
        return [" ".join(w).encode()] if w else []
    return [" ".join(w[i:i + k]).encode() for i in range(len(w) - k + 1)]


def datasketch_clusters(docs, perm, bands, rows, k):
    """datasketch's MinHashLSH at the same parameters: each document queried against the earlier
    ones, then inserted; candidates join clusters (union-find), named by their first document."""
    from datasketch import MinHash, MinHashLSH

    lsh = MinHashLSH(num_perm=perm, params=(bands, rows))
    parent = list(range(len(docs)))

    def find(x):
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for i, d in enumerate(docs):
        m = MinHash(num_perm=perm)
        m.update_batch(shingles(d, k))
        for j in lsh.query(m):
            a, b = find(i), find(int(j))
            parent[max(a, b)] = min(a, b)
        lsh.insert(str(i), m)
    return [find(i) for i in range(len(docs))]
