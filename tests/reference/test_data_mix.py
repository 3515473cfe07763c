"""`syslm data mix`: strata written as data sets of their own, a weighted mixture of them, and
difficulty levels from `data score`-style perplexities. Two sources whose words never share a
token (lowercase and capitalised GPT-2 single-token words), every document 10 words, so each is
exactly 11 tokens with its separator: a stratum's shards are checked token for token against
its documents, and the mixture's share of each source is counted, within the chunk granularity
that the mixture draws in."""
import json
import random
import re
import struct

import numpy as np

LOWER = ["the", "of", "and", "to", "in", "is", "was", "for", "on", "as"]
UPPER = ["The", "Of", "And", "To", "In", "Is", "Was", "For", "On", "As"]
DOC_TOKENS = 11  # 10 single-token words and the separator


def write_docs(path, words, n, seed):
    rng = random.Random(seed)
    path.write_text("".join(" ".join(rng.choice(words) for _ in range(10)) + "\n"
                            for _ in range(n)))


def tokens(path):
    data = path.read_bytes()
    magic, version, dtype, flags, count = struct.unpack_from("<4sIIIQ", data)
    assert magic == b"SYTK" and version == 1 and dtype == 1 and flags == 0
    return np.frombuffer(data, dtype="<u2", offset=32, count=count).astype(np.int64)


def split(directory, name):
    meta = json.loads((directory / "meta.json").read_text())
    parts = [tokens(directory / s) for s in meta[f"{name}_shards"]]
    return np.concatenate(parts) if parts else np.zeros(0, np.int64)


def test_strata_and_weighted_mixture(tmp_path, run_syslm, vocab_dir):
    write_docs(tmp_path / "a.txt", LOWER, 400, 1)
    write_docs(tmp_path / "b.txt", UPPER, 40, 2)
    out, chunk, budget = tmp_path / "mix", 32, 4000
    run_syslm("data", "mix", "--source", f"a={tmp_path / 'a.txt'}:3", "--source",
              f"b={tmp_path / 'b.txt'}:1", "--tokenizer", vocab_dir / "ggml-vocab-gpt-2.gguf",
              "-o", out, "--docs", "line", "--chunk-tokens", chunk, "--val", 0.1,
              "--tokens", budget)
    mix = json.loads((out / "mixture.json").read_text())
    strata = {s["name"]: s for s in mix["strata"]}
    sep = json.loads((out / "meta.json").read_text())["separator"]
    own = {}
    for name, docs in (("a", 400), ("b", 40)):
        d = out / "strata" / name
        all_tokens = np.concatenate([split(d, "train"), split(d, "val")])
        assert len(all_tokens) == docs * DOC_TOKENS
        assert strata[name]["train_tokens"] + strata[name]["val_tokens"] == docs * DOC_TOKENS
        own[name] = set(all_tokens.tolist()) - {sep}
    assert not own["a"] & own["b"]
    assert abs(strata["a"]["weight"] - 0.75) < 1e-12 and abs(strata["b"]["weight"] - 0.25) < 1e-12
    # b holds about 40 x 11 x 0.9 tokens for a share of 1000: it repeats; a is cut
    assert strata["b"]["repeats"] > 2 and strata["a"]["repeats"] < 1
    # val: every stratum's val, chunk by chunk in turn, whatever the weights
    va, vb = split(out / "strata" / "a", "val"), split(out / "strata" / "b", "val")
    turns = [v[t:t + chunk] for t in range(0, max(len(va), len(vb)), chunk) for v in (va, vb)
             if t < len(v)]
    assert np.array_equal(split(out, "val"), np.concatenate(turns))
    train = split(out, "train")
    assert len(train) == strata["a"]["mixed_tokens"] + strata["b"]["mixed_tokens"]
    for name in ("a", "b"):
        s = strata[name]
        chunks = -(-s["mixed_tokens"] // chunk) + 1
        # each stratum gets its share to within the one chunk that crosses it
        assert s["weight"] * budget <= s["mixed_tokens"] < s["weight"] * budget + chunk
        # its words in the mixture: 10 of every 11 of its tokens, give or take a separator per
        # chunk cut
        n_words = int(np.isin(train, list(own[name])).sum())
        assert abs(n_words - s["mixed_tokens"] * 10 / 11) <= chunks


def test_difficulty_levels_follow_the_perplexity_ranks(tmp_path, run_syslm, vocab_dir):
    n = 61
    write_docs(tmp_path / "a.txt", LOWER, n, 3)
    tok = vocab_dir / "ggml-vocab-gpt-2.gguf"
    plain = tmp_path / "plain"
    run_syslm("data", "mix", "--source", f"a={tmp_path / 'a.txt'}", "--tokenizer", tok, "-o",
              plain, "--docs", "line", "--val", 0)
    rows = split(plain / "strata" / "a", "train").reshape(n, DOC_TOKENS)
    ppl = [float(p) for p in np.random.default_rng(4).permutation(n) * 1.5 + 2]
    scores = tmp_path / "scores.jsonl"
    scores.write_text("".join(json.dumps({"id": i, "file": str(tmp_path / "a.txt"), "tokens": 10,
                                          "ppl": p}) + "\n" for i, p in enumerate(ppl)))
    out = tmp_path / "levels"
    run_syslm("data", "mix", "--source", f"a={tmp_path / 'a.txt'}", "--tokenizer", tok, "-o", out,
              "--docs", "line", "--val", 0, "--strata", "difficulty:3", "--scores", scores)
    rank = np.argsort(np.argsort(ppl, kind="stable"), kind="stable")
    mix = json.loads((out / "mixture.json").read_text())
    assert [s["name"] for s in mix["strata"]] == ["a.easy", "a.medium", "a.hard"]
    for level, s in enumerate(mix["strata"]):
        docs = [i for i in range(n) if rank[i] * 3 // n == level]
        assert np.array_equal(split(out / s["dir"], "train"), rows[docs].reshape(-1))
        assert s["ppl_min"] == min(ppl[i] for i in docs) and s["ppl_max"] == max(ppl[i] for i in docs)
    # a scores file for other documents is refused, naming the mismatch
    scores.write_text("".join(json.dumps({"id": i, "file": str(tmp_path / "a.txt"), "tokens": 1,
                                          "ppl": 1.0}) + "\n" for i in range(n - 1)))
    r = run_syslm("data", "mix", "--source", f"a={tmp_path / 'a.txt'}", "--tokenizer", tok, "-o",
                  out, "--docs", "line", "--strata", "difficulty:3", "--scores", scores, check=False)
    assert r.returncode != 0 and "no score for document 60" in r.stderr
    assert not (out / "mixture.json").exists()


def test_bad_arguments_are_named(tmp_path, run_syslm, vocab_dir):
    write_docs(tmp_path / "a.txt", LOWER, 20, 5)
    tok = vocab_dir / "ggml-vocab-gpt-2.gguf"
    for args, message in (
            (["--source", f"a={tmp_path / 'a.txt'}:-1"], "is not a positive number"),
            (["--source", f"a b={tmp_path / 'a.txt'}"], "the name may hold"),
            (["--source", f"a={tmp_path / 'a.txt'}", "--source", f"a={tmp_path / 'a.txt'}"],
             "two sources named 'a'"),
            (["--source", f"a={tmp_path / 'a.txt'}", "--strata", "difficulty:3"], "need --scores"),
            (["--source", f"a={tmp_path / 'a.txt'}", "--strata", "size:3"], "expected difficulty:K"),
            (["--source", f"a={tmp_path / 'missing.txt'}"], "missing.txt")):
        r = run_syslm("data", "mix", "--tokenizer", tok, "-o", tmp_path / "o", "--val", 0, *args,
                      check=False)
        assert r.returncode != 0 and message in r.stderr, (args, r.stderr)


def test_mixture_search_fits_proxy_runs_and_mixes_by_its_choice(tmp_path, run_syslm, vocab_dir):
    write_docs(tmp_path / "a.txt", LOWER, 300, 6)
    write_docs(tmp_path / "b.txt", UPPER, 100, 7)
    out, chunk = tmp_path / "search", 32
    r = run_syslm("data", "mix", "--source", f"a={tmp_path / 'a.txt'}", "--source",
                  f"b={tmp_path / 'b.txt'}", "--tokenizer", vocab_dir / "ggml-vocab-gpt-2.gguf",
                  "-o", out, "--docs", "line", "--chunk-tokens", chunk, "--val", 0.1, "--search",
                  "regmix", "--runs", 4, "--proxy", "layers=1,dim=16,heads=2,steps=6,seq=16,batch=2",
                  "-t", 1, "--report", tmp_path / "mix.html")
    mix = json.loads((out / "mixture.json").read_text())
    runs = mix["search"]["runs"]
    assert len(runs) == 4 and len({tuple(r["weights"]) for r in runs}) == 4
    for run in runs:
        assert abs(sum(run["weights"]) - 1) < 1e-9 and 0 < run["val_loss"] < 20
    # each run trained on its own mixture: the share of a's tokens follows its weight
    for i, run in enumerate(runs):
        meta = json.loads((out / "search" / f"run_{i}" / "meta.json").read_text())
        assert meta["train_tokens"] >= 6 * 2 * 16
    fit = mix["search"]["fit"]
    assert len(fit["coef"]) == 2 * 2 and fit["loo_rmse"] >= 0  # the weights and their logs
    w = [s["weight"] for s in mix["strata"]]
    assert abs(sum(w) - 1) < 1e-9 and all(0 < x < 1 for x in w)
    pred = mix["search"]["predicted_val_loss"]
    assert pred["chosen"] <= pred["uniform"] + 1e-9 or pred["chosen"] <= pred["natural"] + 1e-9
    assert "search: 4 proxy runs" in r.stdout
    # the top-level mixture follows the chosen weights to within a chunk per stratum
    total = sum(s["mixed_tokens"] for s in mix["strata"])
    budget = sum(s["train_tokens"] for s in mix["strata"])
    for s in mix["strata"]:
        assert s["weight"] * budget <= s["mixed_tokens"] < s["weight"] * budget + chunk
    assert json.loads((out / "meta.json").read_text())["train_tokens"] == total
    # the report: every run's weights and loss, the fit's figures, the predicted losses, the
    # chosen weights, one point per run on the fit's scatter
    html = (tmp_path / "mix.html").read_text()
    cells = re.findall(r"<td>([^<]*)</td>", html)
    for run in runs:
        assert f"{run['val_loss']:.4f}" in cells
        assert all(f"{x:.3f}" in cells for x in run["weights"])
    assert f"{fit['r2']:.3f}" in html and f"{fit['loo_rmse']:.4f}" in html
    assert all(f"{v:.4f}" in cells for v in pred.values())
    assert all(f"{x:.4f}" in cells for x in w)
    assert html.count("<circle") == 4 and html.rstrip().endswith("</html>")
    for args, message in ((["--search", "doremi"], "--search"),
                          (["--search", "regmix", "--proxy", "depth=2"], "unknown key 'depth'")):
        r = run_syslm("data", "mix", "--source", f"a={tmp_path / 'a.txt'}", "--tokenizer",
                      vocab_dir / "ggml-vocab-gpt-2.gguf", "-o", tmp_path / "o", *args,
                      check=False)
        assert r.returncode != 0 and message in r.stderr, (args, r.stderr)
