"""`syslm data langid` on fortunes in seven languages (Debian's fortunes packages; four of five
files to train, the fifth to test): accuracy over all held-out fortunes and per language, the
model file read back, and `data clean --lang` keeping the English ones of a mixed file."""
import json

import pytest

import fortune_languages as fl

if not all(fl.files(lang) for lang in fl.PACKAGES):
    pytest.skip("Debian's fortunes packages are not all installed", allow_module_level=True)


def test_langid_identifies_held_out_fortunes(tmp_path, run_syslm):
    train, test = [], []
    for lang in fl.PACKAGES:
        tr, te = fl.split(lang, tmp_path)
        train += [f"--train={lang}={f}" for f in tr]
        test += [f"--test={lang}={f}" for f in te]
    model = tmp_path / "langid.gguf"
    out = run_syslm("data", "langid", "-o", model, *train, *test, "--json").stdout
    r = json.loads(out.strip().splitlines()[-1])
    assert r["documents"] > 10000
    assert r["accuracy"] > 0.95, out  # measured 0.978 (fastText on the same data: 0.964)
    assert min(r["per_language"].values()) > 0.9, out
    again = json.loads(run_syslm("data", "langid", "-m", model, *test,
                                 "--json").stdout.strip().splitlines()[-1])
    assert again == r
    # a mixed file: the English fortunes of the test split, then the German ones
    en = [d for f in fl.split("en", tmp_path)[1] for d in fl.documents(f)][:200]
    de = [d for f in fl.split("de", tmp_path)[1] for d in fl.documents(f)][:200]
    mixed = tmp_path / "mixed.txt"
    mixed.write_text("\n%\n".join(en + de) + "\n")
    run_syslm("data", "clean", "-f", mixed, "-o", tmp_path / "out", "--docs", "percent",
              "--dedup", "exact", "--lang", "en", "--lang-model", model)
    kept = fl.documents(tmp_path / "out" / "mixed.txt")
    assert len(kept) > 0.9 * len(set(en))
    assert sum(d in de for d in kept) < 0.05 * len(de)
