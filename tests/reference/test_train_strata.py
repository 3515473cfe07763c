"""`syslm train --curriculum easy-to-hard --stratum-lr ...` on a `data mix` directory with
difficulty levels: every step trains on one stratum, of a level the curriculum's phase allows,
at the schedule's rate times that stratum's scale; the per-stratum losses are reported; a resumed
run draws the same strata and reaches the same losses bit for bit; bad arguments are named."""
import json

import numpy as np

from test_data_mix import LOWER, UPPER, write_docs

STEPS = 24
LR = 1e-3


def make_mix(tmp_path, run_syslm, vocab_dir, levels=True):
    tok = vocab_dir / "ggml-vocab-gpt-2.gguf"
    args = []
    for name, words, seed in (("a", LOWER, 1), ("b", UPPER, 2)):
        write_docs(tmp_path / f"{name}.txt", words, 300, seed)
        args += ["--source", f"{name}={tmp_path / (name + '.txt')}"]
    if levels:
        scores = tmp_path / "scores.jsonl"
        rng = np.random.default_rng(3)
        scores.write_text("".join(
            json.dumps({"id": i, "file": str(tmp_path / f"{n}.txt"), "tokens": 10,
                        "ppl": float(rng.uniform(2, 50))}) + "\n"
            for n in ("a", "b") for i in range(300)))
        args += ["--strata", "difficulty:3", "--scores", scores]
    out = tmp_path / ("levels" if levels else "plain")
    run_syslm("data", "mix", *args, "--tokenizer", tok, "-o", out, "--docs", "line",
              "--chunk-tokens", 64, "--val", 0.1)
    return out


def train(run_syslm, model, mix, tmp_path, name, *extra, curriculum=True, steps=STEPS):
    metrics = tmp_path / f"{name}.jsonl"
    start = ["--resume", extra[1]] if extra[:1] == ("--resume",) else ["--init", model]
    extra = extra[2:] if extra[:1] == ("--resume",) else extra
    run_syslm("train", *start, "--data", mix, "--steps", steps, "--seq", 16, "-b", 2,
              "--lr", LR, "--min-lr", LR, "--warmup", 0, "--stratum-lr", "hard=0.5,b=2",
              "--metrics", metrics, "-o", tmp_path / f"{name}.gguf", "-t", 1,
              *(["--curriculum", "easy-to-hard"] if curriculum else []), *extra)
    lines = [json.loads(line) for line in metrics.read_text().splitlines()]
    return [j for j in lines if "loss" in j and "step" in j], lines[-1]


def test_curriculum_and_stratum_learning_rates(tmp_path, run_syslm, vocab_dir):
    mix = make_mix(tmp_path, run_syslm, vocab_dir)
    model = tmp_path / "m.gguf"
    run_syslm("init", "--vocab", vocab_dir / "ggml-vocab-gpt-2.gguf", "--layers", 1, "--dim", 32,
              "--heads", 2, "--ctx", 32, "-o", model)
    steps, summary = train(run_syslm, model, mix, tmp_path, "whole")
    assert len(steps) == STEPS
    level = {"easy": 0, "medium": 1, "hard": 2}
    seen = set()
    for j in steps:
        source, lv = j["stratum"].split(".")
        assert level[lv] <= (j["step"] - 1) * 3 // STEPS, j  # the curriculum's phase
        # b=2 comes after hard=0.5: the later name wins for b.hard
        scale = 2.0 if source == "b" else 0.5 if lv == "hard" else 1.0
        assert abs(j["lr"] - LR * scale) <= 1e-6 * LR * scale, j
        seen.add(j["stratum"])
    assert any(s.endswith(".hard") for s in seen)
    strata = {s["name"]: s for s in summary["strata"]}
    assert sum(s["steps"] for s in strata.values()) == STEPS
    assert strata["a.hard"]["lr_scale"] == 0.5 and strata["b.easy"]["lr_scale"] == 2
    # Without the curriculum (whose phases follow --steps): resumed at step 12, the same strata
    # and losses as one run
    whole, _ = train(run_syslm, model, mix, tmp_path, "plain", curriculum=False)
    ck = tmp_path / "ck"
    first, _ = train(run_syslm, model, mix, tmp_path, "first", "--checkpoint", ck,
                     "--checkpoint-every", 12, curriculum=False, steps=12)
    rest, _ = train(run_syslm, model, mix, tmp_path, "rest", "--resume", ck, curriculum=False)
    assert len(first) == 12 and len(rest) == STEPS - 12
    assert [(j["stratum"], j["loss"]) for j in first + rest] == \
        [(j["stratum"], j["loss"]) for j in whole]
    assert len({j["stratum"] for j in whole}) > 3  # all levels drawn without the curriculum


def test_bad_strata_arguments_are_named(tmp_path, run_syslm, vocab_dir):
    plain = make_mix(tmp_path, run_syslm, vocab_dir, levels=False)
    model = tmp_path / "m.gguf"
    run_syslm("init", "--vocab", vocab_dir / "ggml-vocab-gpt-2.gguf", "--layers", 1, "--dim", 32,
              "--heads", 2, "--ctx", 32, "-o", model)
    base = ["train", "--init", model, "--steps", 2, "--seq", 16, "-b", 2, "-o", tmp_path / "o.gguf"]
    for extra, message in (
            (["--data", plain, "--curriculum", "easy-to-hard"], "a curriculum needs difficulty"),
            (["--data", plain, "--stratum-lr", "c=2"], "'c' names no stratum"),
            (["--data", plain, "--stratum-lr", "a=-1"], "not a number >= 0"),
            (["--data", plain / "strata" / "a", "--stratum-lr", "a=2"], "mixture.json")):
        r = run_syslm(*base, *extra, check=False)
        assert r.returncode != 0 and message in r.stderr, (extra, r.stderr)
