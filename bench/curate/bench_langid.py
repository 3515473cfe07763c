#!/usr/bin/env python3
"""Language identification: syslm's byte n-gram naive Bayes against fastText (PyPI `fasttext`,
supervised with character n-grams 1-4, trained on the same text), same machine.

Data: fortunes in seven languages from Debian's fortunes packages
(tests/reference/fortune_languages.py), each language's files split into train (four of five)
and test; a fortune is a document. Reported: accuracy per language and over all test fortunes,
and training and prediction time.

    bench/curate/bench_langid.py [--syslm build/syslm]
"""
import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "reference"))
import fortune_languages as fl  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--syslm", default=str(ROOT / "build" / "syslm"))
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        train, test = {}, {}
        for lang in fl.PACKAGES:
            train[lang], test[lang] = fl.split(lang, tmp)
        args = [f"--train={l}={f}" for l, fs in train.items() for f in fs]
        args += [f"--test={l}={f}" for l, fs in test.items() for f in fs]
        t0 = time.perf_counter()
        out = subprocess.run([a.syslm, "data", "langid", "-o", str(Path(tmp) / "m.gguf"), *args],
                             capture_output=True, text=True, check=True).stdout
        syslm_s = time.perf_counter() - t0
        print("syslm (train and test):\n" + out.strip() + f"\n{syslm_s:.2f} s")
        import fasttext

        lines = []
        for lang, fs in train.items():
            for f in fs:
                lines += [f"__label__{lang} " + " ".join(d.split()) for d in fl.documents(f)]
        data = Path(tmp) / "ft.txt"
        data.write_text("\n".join(lines) + "\n")
        t0 = time.perf_counter()
        model = fasttext.train_supervised(str(data), minn=2, maxn=4, epoch=25, lr=1.0, dim=16, loss="softmax",
                                          verbose=0)
        right = total = 0
        per = {}
        for lang, fs in test.items():
            for f in fs:
                for d in fl.documents(f):
                    ok = model.predict(" ".join(d.split()))[0][0] == f"__label__{lang}"
                    c = per.setdefault(lang, [0, 0])
                    c[0] += ok
                    c[1] += 1
                    right += ok
                    total += 1
        ft_s = time.perf_counter() - t0
        print("fastText (minn 2, maxn 4, 25 epochs, lr 1.0, dim 16, softmax loss):")
        for lang, (r, n) in sorted(per.items()):
            print(f"{lang:8s} {100 * r / n:6.2f}% of {n}")
        print(f"all      {100 * right / total:6.2f}% of {total}\n{ft_s:.2f} s")


if __name__ == "__main__":
    main()
