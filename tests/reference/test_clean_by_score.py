"""`syslm data clean --scores S --max-ppl X` (CCNet's perplexity filter): documents whose
`data score` perplexity is above X are dropped before any dedup, reported under the rule
"perplexity" and on the report's histogram; scores that do not cover the documents are refused.
Once with perplexities written by the test (known which survive), once with `data score`'s own
output for a random model (its file names and ids are what clean matches)."""
import json
import random

import numpy as np

WORDS = "the of and to in is was for on as with his that he unto".split()


def write_docs(path, n, seed):
    rng = random.Random(seed)
    path.write_text("".join(f"{i} " + " ".join(rng.choice(WORDS) for _ in range(12)) + "\n"
                            for i in range(n)))
    return path.read_text().splitlines()


def kept(out_dir, name):
    return (out_dir / name).read_text().splitlines()


def test_documents_above_the_perplexity_cut_are_dropped(tmp_path, run_syslm):
    docs = write_docs(tmp_path / "a.txt", 30, 1)
    scores = tmp_path / "scores.jsonl"
    ppl = [3.0 * i + 1 for i in range(30)]
    scores.write_text("".join(json.dumps({"id": i, "file": str(tmp_path / "a.txt"), "tokens": 12,
                                          "ppl": p}) + "\n" for i, p in enumerate(ppl)))
    report = tmp_path / "report.html"
    r = run_syslm("data", "clean", "-f", tmp_path / "a.txt", "-o", tmp_path / "out", "--docs",
                  "line", "--dedup", "exact", "--scores", scores, "--max-ppl", 40, "--report",
                  report)
    assert kept(tmp_path / "out", "a.txt") == [d for d, p in zip(docs, ppl) if p <= 40]
    assert "dropped by perplexity: 16 documents" in r.stdout
    html = report.read_text()
    assert "Perplexity under the scoring model" in html and html.count("<rect") >= 40 + 1
    # scores for fewer documents than the file holds, or one flag without the other: refused
    scores.write_text("".join(json.dumps({"id": i, "file": str(tmp_path / "a.txt"), "tokens": 12,
                                          "ppl": 2.0}) + "\n" for i in range(29)))
    r = run_syslm("data", "clean", "-f", tmp_path / "a.txt", "-o", tmp_path / "o2", "--docs",
                  "line", "--scores", scores, "--max-ppl", 40, check=False)
    assert r.returncode != 0 and "no score for document 29" in r.stderr
    r = run_syslm("data", "clean", "-f", tmp_path / "a.txt", "-o", tmp_path / "o3", "--docs",
                  "line", "--scores", scores, check=False)
    assert r.returncode != 0 and "--scores and --max-ppl go together" in r.stderr


def test_data_scores_own_output_filters_at_its_median(tmp_path, run_syslm, vocab_dir):
    docs = write_docs(tmp_path / "a.txt", 40, 2)
    model = tmp_path / "m.gguf"
    run_syslm("init", "--vocab", vocab_dir / "ggml-vocab-gpt-2.gguf", "--layers", 1, "--dim", 16,
              "--heads", 2, "--ctx", 64, "-o", model)
    scores = tmp_path / "scores.jsonl"
    run_syslm("data", "score", "-m", model, "-f", tmp_path / "a.txt", "--docs", "line", "-o",
              scores)
    ppl = [json.loads(line)["ppl"] for line in scores.read_text().splitlines()]
    cut = float(np.median(ppl))
    run_syslm("data", "clean", "-f", tmp_path / "a.txt", "-o", tmp_path / "out", "--docs", "line",
              "--dedup", "exact", "--scores", scores, "--max-ppl", cut)
    assert kept(tmp_path / "out", "a.txt") == [d for d, p in zip(docs, ppl) if p <= cut]


def test_the_report_is_valid_utf8_whatever_the_input(tmp_path, run_syslm):
    """Snippets cut at 600 bytes end on a character boundary; bytes that are not UTF-8 (binary
    input) are shown as U+FFFD, so the page always decodes."""
    docs = ["é" * 400, "bad \xff\xfe bytes " * 3 + "x", "é" * 400]  # 800-byte documents, a dup
    raw = tmp_path / "in.txt"
    raw.write_bytes(b"\n\n".join(d.encode("latin-1") if "\xff" in d else d.encode()
                                 for d in docs) + b"\n")
    report = tmp_path / "r.html"
    run_syslm("data", "clean", "-f", raw, "-o", tmp_path / "out", "--dedup", "exact",
              "--filters", "heuristic", "--report", report)
    html = report.read_bytes().decode("utf-8")  # raises on a cut character or a raw 0xff
    assert "é" * 300 in html
