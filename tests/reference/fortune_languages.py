"""Fortunes in seven languages from Debian's fortunes packages (en: fortunes and fortunes-min;
de, it, es, ru, pl, eo: fortunes-<lang>), as lists of files per language, for the language
identification checks; each language's files split into train and test (every fifth file)."""
import subprocess
from pathlib import Path

PACKAGES = {"en": ["fortunes-min", "fortunes"], "de": ["fortunes-de"], "it": ["fortunes-it"],
            "es": ["fortunes-es"], "ru": ["fortunes-ru"], "pl": ["fortunes-pl"],
            "eo": ["fortunes-eo"]}


def files(lang):
    out = []
    for pkg in PACKAGES[lang]:
        r = subprocess.run(["dpkg", "-L", pkg], capture_output=True, text=True)
        if r.returncode != 0:
            return []
        for line in r.stdout.split():
            p = Path(line)
            if "games/fortunes" in line and p.is_file() and not p.is_symlink() and \
                    p.suffix not in (".dat", ".u8"):
                out.append(p)
    return sorted(out)


def documents(path):
    text = path.read_bytes().decode("utf-8", errors="replace")
    return [d.strip() for d in text.split("\n%\n") if d.strip() and d.strip() != "%"]


def split(lang, tmp):
    """(train files, test files) of a language: every fifth file for test; a language of one
    file (eo) has its documents split the same way into two files under tmp."""
    fs = files(lang)
    if len(fs) != 1:
        return [f for i, f in enumerate(fs) if i % 5 != 4], [f for i, f in enumerate(fs) if i % 5 == 4]
    docs = documents(fs[0])
    out = []
    for part, keep in (("train", lambda i: i % 5 != 4), ("test", lambda i: i % 5 == 4)):
        p = Path(tmp) / f"{lang}-{part}.txt"
        p.write_text("\n%\n".join(d for i, d in enumerate(docs) if keep(i)) + "\n")
        out.append([p])
    return out[0], out[1]
