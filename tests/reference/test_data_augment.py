"""`syslm data augment`: WordNet synonyms checked against NLTK's WordNet reader (every
replacement is a lemma of the replaced word's first synset in some part of speech, at the rate
asked within binomial bounds, case kept, nothing else touched); span infilling by a model
(everything outside the recorded spans byte for byte, spans on word boundaries and off
newlines, SentencePiece and byte-level vocabularies); seeds; back-translation refused with the
reason; the copies as a stratum that `train --stratum-lr` weights."""
import json
import math
import re
import shutil
import subprocess

import pytest

WORDNET = "/usr/share/wordnet"


def kjv(first, last):
    return subprocess.run(["bible", "-f", f"{first}-{last}"], capture_output=True, text=True,
                          check=True).stdout


def manifest(out):
    return [json.loads(line) for line in (out / "augment.jsonl").read_text().splitlines()]


def originals(path):
    return [d for d in path.read_text().split("\n\n") if d.strip()]


def copies(path):
    return [d for d in path.read_text().split("\n\n") if d]


def apply(text, edits):
    out, pos = [], 0
    b = text.encode()
    for e in edits:
        at = e["at"]
        assert b[at:at + len(e["from"].encode())] == e["from"].encode(), e
        out.append(b[pos:at])
        out.append(e["to"].encode())
        pos = at + len(e["from"].encode())
    out.append(b[pos:])
    return b"".join(out).decode()


def index_counts(word):
    """(tagsense_cnt, sense_cnt) per part of speech from WordNet's index files, as wndb(5WN)
    lays a line out: lemma pos synset_cnt p_cnt [ptr_symbol...] sense_cnt tagsense_cnt ..."""
    out = {}
    for pos, name in (("n", "noun"), ("v", "verb"), ("a", "adj"), ("r", "adv")):
        with open(f"{WORDNET}/index.{name}") as f:
            for line in f:
                if line.startswith(word + " "):
                    x = line.split()
                    p = int(x[3])
                    out[pos] = (int(x[5 + p]), int(x[4 + p]))
    return out


def most_tagged_pos(word):
    counts = index_counts(word)
    return max(counts, key=lambda p: (counts[p], -"nvar".index(p)))


@pytest.fixture(scope="module")
def wordnet(tmp_path_factory):
    """NLTK's reader over Debian's database (it wants a lexnames file, which Debian leaves out:
    its contents only name the lexicographer files)."""
    from nltk.corpus.reader.wordnet import WordNetCorpusReader
    root = tmp_path_factory.mktemp("wn")
    for pos in ("noun", "verb", "adj", "adv"):
        for kind in ("index", "data"):
            shutil.copy(f"{WORDNET}/{kind}.{pos}", root)  # NLTK refuses links out of its root
        shutil.copy(f"{WORDNET}/{pos}.exc", root)
    (root / "lexnames").write_text("".join(f"{i:02d}\tlex.{i}\t0\n" for i in range(45)))
    import nltk
    nltk.data.path.append(str(root))  # NLTK reads only from folders on its path

    class Reader(WordNetCorpusReader):
        def map_wn(self, version="wordnet"):  # no mapping to NLTK's downloadable WordNet
            return None

    return Reader(str(root), None)


def test_synonyms_are_wordnet_synonyms_at_the_rate_asked(tmp_path, run_syslm, wordnet):
    text = tmp_path / "kjv.txt"
    text.write_text("\n\n".join(kjv("Genesis1:1", "Genesis3:24").split("\n")))  # verses
    out = tmp_path / "aug"
    rate = 0.3
    res = run_syslm("data", "augment", "-f", text, "-o", out, "--methods", "synonym",
                    "--rate", rate, "--seed", 5).stdout
    eligible = int(re.search(r"\((\d+) eligible words\)", res).group(1))
    docs = originals(text)
    rows = manifest(out)
    got = copies(out / "synonym" / "kjv.txt")
    assert len(rows) == len(got) > 0
    n_edits = 0
    for row, copy in zip(rows, got):
        assert row["method"] == "synonym"
        original = docs[row["id"]]
        assert apply(original, row["edits"]) == copy  # nothing else touched
        for e in row["edits"]:
            n_edits += 1
            old, new = e["from"], e["to"]
            assert re.fullmatch(r"[A-Za-z]{3,}", old), e
            # case kept: a capital stays, a lower-case word gets no proper noun
            assert new[0].isupper() == old[0].isupper(), e
            # the first synset (NLTK's) of the part of speech with the most sense-tagged senses
            pos = most_tagged_pos(old.lower())
            first = wordnet.synsets(old.lower(), pos)[0]
            assert new.lower().replace(" ", "_") in [n.lower() for n in first.lemma_names()], \
                (e, pos, first.lemma_names())
    # each eligible word replaced with probability `rate`: within 5 binomial standard deviations
    assert abs(n_edits - rate * eligible) <= 5 * math.sqrt(eligible * rate * (1 - rate)), \
        (n_edits, eligible)
    # seeded: the same seed gives the same copies, another seed others
    out2 = tmp_path / "again"
    run_syslm("data", "augment", "-f", text, "-o", out2, "--rate", rate, "--seed", 5)
    assert (out2 / "synonym" / "kjv.txt").read_bytes() == (out / "synonym" / "kjv.txt").read_bytes()
    run_syslm("data", "augment", "-f", text, "-o", out2, "--rate", rate, "--seed", 6)
    assert (out2 / "synonym" / "kjv.txt").read_bytes() != (out / "synonym" / "kjv.txt").read_bytes()


@pytest.mark.parametrize("vocab", ["ggml-vocab-llama-spm.gguf", "ggml-vocab-gpt-2.gguf"])
def test_infill_changes_only_the_spans(tmp_path, run_syslm, vocab_dir, vocab):
    model = tmp_path / "m.gguf"
    run_syslm("init", "--vocab", vocab_dir / vocab, "--layers", 1, "--dim", 32, "--heads", 2,
              "--ctx", 64, "-o", model)
    text = tmp_path / "kjv.txt"
    docs = [d for d in kjv("Psalms23:1", "Psalms25:22").split("\n") if d]
    # a multi-line document and a long one (longer than the 64-token window)
    docs[0] = docs[0] + "\n" + docs[1]
    docs[2] = " ".join(docs[2:8])
    text.write_text("\n\n".join(docs))
    out = tmp_path / "aug"
    res = run_syslm("data", "augment", "-f", text, "-o", out, "--methods", "infill", "-m", model,
                    "--rate", 0.3, "--span", 2, "--candidates", 3, "--right", 4, "-c", 64,
                    "-t", 1).stdout
    spans = int(re.search(r"\((\d+) spans filled\)", res).group(1))
    rows = manifest(out)
    got = copies(out / "infill" / "kjv.txt")
    assert len(rows) == len(got) > 0 and spans >= sum(len(r["edits"]) for r in rows)
    for row, copy in zip(rows, got):
        original = docs[row["id"]]
        assert apply(original, row["edits"]) == copy
        for e in row["edits"]:
            assert "\n" not in e["from"] and "\n" not in e["to"], e
            b = original.encode()
            before, after = b[e["at"] - 1:e["at"]], b[e["at"] + len(e["from"].encode()):][:1]
            # word boundaries: a letter never continues into or out of the span
            for side in ("from", "to"):  # the old span and the text that replaced it
                assert not (before.isalnum() and e[side][:1].isalnum()), e
                assert not (after.isalnum() and e[side][-1:].isalnum()), e
    assert any(r["id"] == 2 for r in rows)  # the long document was filled past its window


def test_bad_methods_are_refused_with_the_reason(tmp_path, run_syslm):
    text = tmp_path / "t.txt"
    text.write_text("In the beginning God created the heaven and the earth.\n")
    r = run_syslm("data", "augment", "-f", text, "-o", tmp_path / "o", "--methods",
                  "backtranslation", check=False)
    assert r.returncode != 0 and "translation models" in r.stderr, r.stderr
    r = run_syslm("data", "augment", "-f", text, "-o", tmp_path / "o", "--methods", "infill",
                  check=False)
    assert r.returncode != 0 and "--model" in r.stderr, r.stderr
    r = run_syslm("data", "augment", "-f", text, "-o", tmp_path / "o", "--wordnet", tmp_path,
                  check=False)
    assert r.returncode != 0 and "wordnet-base" in r.stderr, r.stderr


def test_augmented_copies_are_a_stratum_training_weights(tmp_path, run_syslm, vocab_dir):
    text = tmp_path / "kjv.txt"
    text.write_text("\n\n".join(kjv("Genesis1:1", "Genesis4:26").split("\n")))
    run_syslm("data", "augment", "-f", text, "-o", tmp_path / "aug", "--rate", 0.3)
    tok = vocab_dir / "ggml-vocab-gpt-2.gguf"
    mix = tmp_path / "mix"
    run_syslm("data", "mix", "--source", f"text={text}", "--source",
              f"synonym={tmp_path / 'aug' / 'synonym'}:0.3", "--tokenizer", tok, "-o", mix,
              "--chunk-tokens", 64, "--val", 0.1)
    model = tmp_path / "m.gguf"
    run_syslm("init", "--vocab", tok, "--layers", 1, "--dim", 32, "--heads", 2, "--ctx", 32,
              "-o", model)
    metrics = tmp_path / "m.jsonl"
    run_syslm("train", "--init", model, "--data", mix, "--steps", 20, "--seq", 16, "-b", 2,
              "--lr", 1e-3, "--min-lr", 1e-3, "--warmup", 0, "--stratum-lr", "synonym=0.5",
              "--metrics", metrics, "-o", tmp_path / "t.gguf", "-t", 1)
    steps = [json.loads(line) for line in metrics.read_text().splitlines()]
    steps = [j for j in steps if "stratum" in j and "lr" in j]
    assert {j["stratum"] for j in steps} == {"text", "synonym"}, steps
    for j in steps:  # the copies train at half the rate
        assert j["lr"] == pytest.approx(1e-3 * (0.5 if j["stratum"] == "synonym" else 1.0)), j
