"""`syslm data classify train` (a byte n-gram naive Bayes quality classifier, labels good / bad)
and `data clean --quality-model`: good text is KJV passages and fortunes (Debian's bible-kjv and
fortunes), bad text is what web crawls are full of (random characters, a spam line repeated,
boilerplate, keyword salad). Four fifths train, one fifth is held out: accuracy there, then a
clean of the held-out mix keeps the good and drops the bad; a language identifier is refused as
a quality model. (Good text with its words shuffled is not caught: measured in the README.)"""
import json
import random

from planted_duplicates import fortunes, passages

SPAM = "buy now cheap best deal free online click win prize offer discount sale".split()


def bad(rng):
    kind = rng.randrange(4)
    if kind == 0:
        return "".join(chr(rng.choice([rng.randrange(33, 127), rng.randrange(0x400, 0x4ff)]))
                       for _ in range(rng.randrange(80, 300)))
    if kind == 1:
        return "\n".join([" ".join(rng.choice(SPAM) for _ in range(6))] * rng.randrange(5, 20))
    if kind == 2:
        return (f"Copyright {rng.randrange(1990, 2026)} All rights reserved. Privacy Policy | "
                f"Terms of Use | Home > Category {rng.randrange(99)} > Item {rng.randrange(999)}")
    return " ".join(rng.choice(SPAM) for _ in range(rng.randrange(20, 60)))


def write(path, docs):
    path.write_text("\n\n".join(d.replace("\n\n", "\n") for d in docs) + "\n")
    return path


def test_quality_classifier_separates_good_from_bad_text(tmp_path, run_syslm):
    rng = random.Random(1)
    good = passages(3000) + fortunes(3000)
    rng.shuffle(good)
    junk = [bad(rng) for _ in range(3000)]
    cut_g, cut_b = len(good) * 4 // 5, len(junk) * 4 // 5
    files = {name: write(tmp_path / f"{name}.txt", docs) for name, docs in (
        ("good", good[:cut_g]), ("bad", junk[:cut_b]), ("test_good", good[cut_g:]),
        ("test_bad", junk[cut_b:]))}
    model = tmp_path / "quality.gguf"
    out = run_syslm("data", "classify", "train", "--pos", files["good"], "--neg", files["bad"],
                    "--test-pos", files["test_good"], "--test-neg", files["test_bad"], "-o",
                    model, "--json").stdout
    r = json.loads(out.strip().splitlines()[-1])
    assert r["accuracy"] > 0.95 and min(r["per_label"].values()) > 0.9, out
    # clean a held-out mix with it
    mixed = write(tmp_path / "mixed" / "m.txt" if (tmp_path / "mixed").mkdir() is None else None,
                  good[cut_g:] + junk[cut_b:])
    res = run_syslm("data", "clean", "-f", mixed, "-o", tmp_path / "clean", "--dedup", "exact",
                    "--quality-model", model, "--min-quality", 0.5).stdout
    kept = set((tmp_path / "clean" / "m.txt").read_text().split("\n\n"))
    kept_good = sum(d.replace("\n\n", "\n") in kept for d in good[cut_g:])
    kept_bad = sum(d.replace("\n\n", "\n") in kept for d in junk[cut_b:])
    assert kept_good > 0.9 * (len(good) - cut_g) and kept_bad < 0.1 * (len(junk) - cut_b), res
    assert "dropped by quality" in res
    # a language identifier is not a quality model, and the other way round
    ident = tmp_path / "langid.gguf"
    run_syslm("data", "langid", "--train", f"en={files['good']}", "--train",
              f"xx={files['bad']}", "-o", ident, "--docs", "blank")
    r = run_syslm("data", "clean", "-f", mixed, "-o", tmp_path / "c2", "--quality-model", ident,
                  check=False)
    assert r.returncode != 0 and "not a quality model" in r.stderr
    r = run_syslm("data", "langid", "-m", model, "--test", f"en={files['test_good']}",
                  check=False)
    assert r.returncode != 0 and "not a language-identification model" in r.stderr
