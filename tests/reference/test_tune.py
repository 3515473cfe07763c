"""`syslm tune` end to end on a small model: it measures the stock recipes and its own
candidates on held-out text, writes pareto.json / front.svg / report.html / plan.json /
model.gguf, the chosen point is within the KL limit and on the front, model.gguf holds exactly the
plan's types (read back with gguf-py), the report's front is non-dominated, and a rerun continues
from the measurements without measuring again.
"""
import json
import subprocess
import time
from pathlib import Path

import gguf
import pytest

WORDS = ("And the LORD spake unto Moses saying speak unto the children of Israel that they bring "
         "me an offering of every man that giveth it willingly with his heart ye shall take my "
         "offering gold and silver and brass blue purple scarlet fine linen goats hair").split()


def text(seed, n):
    import random
    r = random.Random(seed)
    return " ".join(r.choice(WORDS) for _ in range(n)) + "\n"


def make_tune_dir(syslm_bin, d, ctx, seed, text_seed):
    """A random 2-layer model (model.gguf) with calib.txt and heldout.txt (disjoint seeds)."""
    subprocess.run([str(syslm_bin), "init", "--vocab-size", "300", "--layers", "2", "--dim", "64",
                    "--heads", "4", "--ctx", str(ctx), "--seed", str(seed), "-o",
                    str(d / "model.gguf")], check=True, capture_output=True)
    (d / "calib.txt").write_text(text(text_seed, 900))
    (d / "heldout.txt").write_text(text(text_seed + 1, 900))
    return d


@pytest.fixture(scope="module")
def tune_dir(syslm_bin, tmp_path_factory):
    return make_tune_dir(syslm_bin, tmp_path_factory.mktemp("tune"), 128, 3, 1)


def tune(syslm_bin, d, *extra):
    args = [str(syslm_bin), "tune", "-m", d / "model.gguf", "--calib", d / "calib.txt", "--eval",
            d / "heldout.txt", "--goal", "size", "--max-kl", "0.01", "-o", d / "tuned",
            "--budget", "5m", "-c", "64", "--eval-chunks", "3", "--sensitivity-chunks", "1",
            "-t", "2", *extra]
    t0 = time.time()
    proc = subprocess.run(list(map(str, args)), capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc, time.time() - t0


def test_tune_measures_chooses_within_the_limit_and_resumes(syslm_bin, tune_dir):
    proc, first_s = tune(syslm_bin, tune_dir)
    out = tune_dir / "tuned"
    report = json.loads((out / "pareto.json").read_text())
    points = report["points"]
    stock = [p for p in points if p["stock"]]
    tuned = [p for p in points if not p["stock"]]
    assert len(stock) == 14  # 7 recipes, with and without the importance matrix
    assert tuned, proc.stderr[-2000:]
    for p in points:
        assert p["kl"] >= 0 and p["ppl"] > 0 and p["file_bytes"] > 0 and p["decode_ts"] > 0
    # The front: no point has at most the size and the KL with one strictly smaller.
    front = [p for p in points if p["label"] in report["front"]]
    for p in front:
        for q in points:
            assert not (q["file_bytes"] <= p["file_bytes"] and q["kl"] <= p["kl"] and
                        (q["file_bytes"] < p["file_bytes"] or q["kl"] < p["kl"])), (p, q)
    chosen = report["chosen"]
    assert chosen is not None and chosen["kl"] <= 0.01
    # The smallest file within the limit is chosen (a stock recipe would be, if it were smaller).
    assert chosen["file_bytes"] == min(p["file_bytes"] for p in points if p["kl"] <= 0.01)
    assert chosen["label"] in report["front"]
    # model.gguf holds exactly the plan's types.
    plan = json.loads((out / "plan.json").read_text())
    assert plan == chosen["plan"]
    reader = gguf.GGUFReader(str(out / "model.gguf"))
    types = {t.name: t.tensor_type.name for t in reader.tensors}
    for name, t in plan["model"]["tensor_types"].items():
        assert types[name] == t, name
    assert plan["model"]["tensor_types"] or plan["model"]["recipe"]
    # Every candidate file but the pruned bases was deleted at the end (each is a copy of the
    # model); the points' decode bytes by type were recorded for the cost model instead.
    assert all(f.name.startswith("base-") for f in (out / "candidates").glob("*.gguf"))
    for p in points:
        assert sum(p["decode_bytes"].values()) > 0, p["label"]
    assert (out / "front.svg").read_text().startswith("<svg")
    assert "<svg" in (out / "report.html").read_text()
    assert "chosen" in proc.stdout
    # A rerun reads every measurement back: nothing new is measured.
    lines = (out / "measurements.jsonl").read_text().count("\n")
    proc2, again_s = tune(syslm_bin, tune_dir)
    assert (out / "measurements.jsonl").read_text().count("\n") == lines
    assert "read back" in proc2.stderr
    assert json.loads((out / "pareto.json").read_text())["chosen"]["plan"] == plan


def test_quantize_tensor_type_rules_from_the_command_line(syslm_bin, tune_dir, tmp_path):
    out = tmp_path / "rules.gguf"
    proc = subprocess.run([str(syslm_bin), "quantize", str(tune_dir / "model.gguf"), str(out),
                           "Q4_0", "--tensor-type", "attn_v=q8_0", "--tensor-type",
                           r"blk\.1\.ffn_up=q5_0"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    types = {t.name: t.tensor_type.name for t in gguf.GGUFReader(str(out)).tensors}
    assert types["blk.0.attn_v.weight"] == "Q8_0" and types["blk.1.attn_v.weight"] == "Q8_0"
    assert types["blk.1.ffn_up.weight"] == "Q5_0" and types["blk.0.ffn_up.weight"] == "Q4_0"
    # Each rule takes one value, so rules may come before the positionals, as llama-quantize's.
    before = tmp_path / "rules-first.gguf"
    proc = subprocess.run([str(syslm_bin), "quantize", "--tensor-type", "attn_v=q8_0",
                           str(tune_dir / "model.gguf"), str(before), "Q4_0"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    types = {t.name: t.tensor_type.name for t in gguf.GGUFReader(str(before)).tensors}
    assert types["blk.0.attn_v.weight"] == "Q8_0" and types["blk.0.attn_q.weight"] == "Q4_0"
    bad = subprocess.run([str(syslm_bin), "quantize", str(tune_dir / "model.gguf"), str(out),
                          "Q4_0", "--tensor-type", "attn_v=q4_k_m"], capture_output=True, text=True)
    assert bad.returncode == 2 and "--tensor-type" in bad.stderr


def test_decode_goal_times_the_best_points_again(syslm_bin, tune_dir):
    args = [str(syslm_bin), "tune", "-m", tune_dir / "model.gguf", "--calib",
            tune_dir / "calib.txt", "--eval", tune_dir / "heldout.txt", "--goal", "decode",
            "--max-kl", "0.05", "-o", tune_dir / "tuned-decode", "--budget", "5m", "-c", "64",
            "--eval-chunks", "2", "--sensitivity-chunks", "1", "-t", "2", "--no-stock"]
    proc = subprocess.run(list(map(str, args)), capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "timed again" in proc.stderr
    report = json.loads((tune_dir / "tuned-decode" / "pareto.json").read_text())
    within = [p for p in report["points"] if p["kl"] <= 0.05]
    assert report["chosen"]["decode_ts"] == max(p["decode_ts"] for p in within)
    assert not any(p["stock"] for p in report["points"])


def test_successive_halving_stops_only_files_clearly_outside_the_limit(syslm_bin, tune_dir):
    """Every file is measured on the first quarter of the held-out chunks (2 of 8); only those
    whose KL may be within the limit are measured on the rest. A random model's outputs are near
    uniform, so its KLs are small: Q8_0 stays near 1e-6 while Q4_0 and below pass 1e-4, so
    with the limit at 1e-5 some file stops early; none within the limit does."""
    out = tune_dir / "tuned-halving"
    args = [str(syslm_bin), "tune", "-m", tune_dir / "model.gguf", "--calib",
            tune_dir / "calib.txt", "--eval", tune_dir / "heldout.txt", "--goal", "size",
            "--max-kl", "1e-5", "-o", out, "--budget", "5m", "-c", "64", "--eval-chunks", "8",
            "--sensitivity-chunks", "1", "-t", "2", "--rounds", "1", "--prune", "off"]
    proc = subprocess.run(list(map(str, args)), capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "successive halving" in proc.stderr
    points = json.loads((out / "pareto.json").read_text())["points"]
    scored = 64 // 2 - 1  # per chunk: its second half, but for the last token
    assert max(p["eval_tokens"] for p in points) == 8 * scored
    cut = [p for p in points if p["eval_tokens"] < 8 * scored]
    assert cut, [(p["label"], p["kl"]) for p in points]
    for p in cut:
        assert p["eval_tokens"] == 2 * scored and p["kl"] > 1e-5, p
    for p in points:
        if p["kl"] <= 1e-5:
            assert p["eval_tokens"] == 8 * scored, p
    assert "tokens" in proc.stdout  # the table's column


def test_killed_tune_resumes_without_measuring_again(syslm_bin, tune_dir):
    """SIGKILL once some points are in measurements.jsonl; --resume finishes the tune, and no
    plan measured before the kill is measured again (each appears once among the lines before
    the confirmation timings)."""
    import signal
    out = tune_dir / "tuned-killed"
    args = [str(syslm_bin), "tune", "-m", str(tune_dir / "model.gguf"), "--calib",
            str(tune_dir / "calib.txt"), "--eval", str(tune_dir / "heldout.txt"), "--goal", "size",
            "--max-kl", "0.01", "--budget", "5m", "-c", "64", "--eval-chunks", "3",
            "--sensitivity-chunks", "1", "-t", "2"]
    proc = subprocess.Popen(args + ["-o", str(out)], stderr=subprocess.PIPE, text=True)
    for line in proc.stderr:
        if "points measured" in line:  # the stock recipes are in the cache
            proc.send_signal(signal.SIGKILL)
            break
    proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    before = [json.loads(l) for l in (out / "measurements.jsonl").read_text().splitlines()]
    assert before and not (out / "pareto.json").exists()
    done = subprocess.run(args + ["--resume", str(out)], capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    after = [json.loads(l) for l in (out / "measurements.jsonl").read_text().splitlines()]
    assert after[:len(before)] == before
    keys = [json.dumps(p["plan"], sort_keys=True) for p in after]
    measured_again = [k for k in keys[len(before):] if k in keys[:len(before)]]
    assert not measured_again
    assert json.loads((out / "pareto.json").read_text())["chosen"]["kl"] <= 0.01
    bad = subprocess.run(args + ["--resume", str(tune_dir / "nowhere")], capture_output=True,
                         text=True)
    assert bad.returncode == 2 and "measurements.jsonl" in bad.stderr


def test_structure_knob_prunes_recovers_and_quantize_takes_the_base(syslm_bin, tune_dir, tmp_path):
    """--prune: the FFN is pruned, distilled back from the input on the calibration text, and
    quantized with the fastest plans within the limit; the point's file has the pruned width and
    its KL is measured against the input. `quantize --plan` of a pruned plan refuses the input
    and rebuilds the tuner's file, type for type, from the recovered base."""
    out = tune_dir / "tuned-structure"
    args = [str(syslm_bin), "tune", "-m", tune_dir / "model.gguf", "--calib",
            tune_dir / "calib.txt", "--eval", tune_dir / "heldout.txt", "--goal", "decode",
            "--max-kl", "1.0", "-o", out, "--budget", "5m", "-c", "64", "--eval-chunks", "2",
            "--sensitivity-chunks", "1", "-t", "2", "--no-stock", "--rounds", "1",
            "--keep-candidates", "--prune", "ffn=0.5", "--prune", "ffn=0.3333",
            "--recover-steps", "20"]
    proc = subprocess.run(list(map(str, args)), capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    n_ff = next(f.parts[-1] for f in gguf.GGUFReader(str(tune_dir / "model.gguf")).fields.values()
                if f.name == "llama.feed_forward_length")
    report = json.loads((out / "pareto.json").read_text())
    pruned = [p for p in report["points"] if "prune" in p["plan"]["model"]]
    widths = {p["plan"]["model"]["prune"]["n_ff"] for p in pruned}
    assert widths == {int(n_ff[0]) // 2, int(n_ff[0]) * 2 // 3}, proc.stderr[-3000:]
    p = next(p for p in pruned if p["plan"]["model"]["prune"]["n_ff"] == int(n_ff[0]) // 2)
    shape = p["plan"]["model"]["prune"]
    assert shape["recover_steps"] == 20
    assert p["kl"] > 0 and p["decode_ts"] > 0 and p["label"].startswith("pruned FFN")
    assert "structure: ffn 0.5" in proc.stderr
    bases = {}
    for b in (out / "candidates").glob("base-*[0-9a-f].gguf"):
        ff = next(f.parts[-1] for f in gguf.GGUFReader(str(b)).fields.values()
                  if f.name == "llama.feed_forward_length")
        bases[int(ff[0])] = b
    assert set(bases) == widths
    base = bases[shape["n_ff"]]
    # The recovery ran its steps (its log is kept beside the base).
    log = (out / "candidates" / base.name.replace(".gguf", "-recovery.log")).read_text()
    assert "step 20/20" in log
    plan = tmp_path / "pruned-plan.json"
    plan.write_text(json.dumps(p["plan"]))
    im = [] if not p["plan"]["model"]["imatrix"] else \
        ["--imatrix", str(base).replace(".gguf", ".imatrix.gguf")]
    bad = subprocess.run([str(syslm_bin), "quantize", "--plan", str(plan), *im,
                          str(tune_dir / "model.gguf"), str(tmp_path / "x.gguf")],
                         capture_output=True, text=True)
    assert bad.returncode == 2 and "base.gguf" in bad.stderr
    good = subprocess.run([str(syslm_bin), "quantize", "--plan", str(plan), *im, str(base),
                           str(tmp_path / "rebuilt.gguf")], capture_output=True, text=True)
    assert good.returncode == 0, good.stderr
    def tensors(path):
        return {t.name: (t.tensor_type.name, bytes(t.data.tobytes()))
                for t in gguf.GGUFReader(str(path)).tensors}
    rebuilt = tensors(tmp_path / "rebuilt.gguf")
    assert any(tensors(f) == rebuilt for f in (out / "candidates").glob("[0-9a-f]*.gguf"))
    badspec = subprocess.run(list(map(str, args[:-6] + ["--prune", "ffn=2"])),
                             capture_output=True, text=True)
    assert badspec.returncode == 2 and "--prune" in badspec.stderr


def generate(syslm_bin, *args):
    """The random model's tokens are bytes that need not form UTF-8: stdout stays bytes."""
    proc = subprocess.run([str(syslm_bin), "generate", "-p", "And the LORD", "-n", "24", "--temp",
                           "0", "--ignore-eos", *map(str, args)], capture_output=True)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout, proc.stderr.decode(errors="replace")


def test_draft_knob_times_speculative_decoding_and_generate_takes_the_plan(syslm_bin, tune_dir,
                                                                           tmp_path):
    """The input model drafts for its own quantized file (the same greedy tokens but where the
    types flip an argmax): every draft setting is timed against plain decoding on held-out
    prompts, the draft enters the plan only with a median above plain decoding's, and
    `generate --plan` takes the plan's model, threads and draft settings exactly."""
    out = tune_dir / "tuned-draft"
    args = [str(syslm_bin), "tune", "-m", tune_dir / "model.gguf", "--calib",
            tune_dir / "calib.txt", "--eval", tune_dir / "heldout.txt", "--goal", "decode",
            "--max-kl", "0.05", "-o", out, "--budget", "5m", "-c", "64", "--eval-chunks", "4",
            "--sensitivity-chunks", "1", "-t", "2", "--rounds", "1", "--prune", "off",
            "--no-stock", "--draft", tune_dir / "model.gguf"]
    proc = subprocess.run(list(map(str, args)), capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    report = json.loads((out / "pareto.json").read_text())
    d = report["draft"]
    assert d["plain_tokens_per_s"] > 0 and d["prompts"] == 4 and d["rounds"] == 3
    assert [t["setting"] for t in d["trials"]] == \
        ["adaptive k (from 4, 1-16)", "k = 2", "k = 4", "k = 8"]
    for t in d["trials"]:
        assert t["tokens_per_s"] > 0 and 0 < t["acceptance"] <= 1, t
    # The file agrees with its input on ~90% of greedy tokens; a draft token after the first
    # rejected one counts as not kept, so longer drafts keep fewer, and two keep most.
    assert d["trials"][1]["acceptance"] > 0.5
    best = max(d["trials"], key=lambda t: t["tokens_per_s"])
    plan = json.loads((out / "plan.json").read_text())
    if best["tokens_per_s"] > d["plain_tokens_per_s"]:
        assert d["chosen"] == best["setting"] and (out / "draft.gguf").exists()
        assert plan["draft"]["file"] == "draft.gguf"
    else:
        assert d["chosen"] == "none" and "draft" not in plan
    assert "draft " in proc.stdout and "plain" in proc.stdout
    # A plan with a fixed-length draft, taken exactly by generate.
    plan["draft"] = {"file": "draft.gguf", "k": 3, "adaptive": False, "k_min": 1, "k_max": 16}
    plan["runtime"]["threads"] = 1
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    (tmp_path / "model.gguf").write_bytes((out / "model.gguf").read_bytes())
    (tmp_path / "draft.gguf").write_bytes((tune_dir / "model.gguf").read_bytes())
    spec, spec_log = generate(syslm_bin, "--plan", tmp_path / "plan.json")
    assert "speculative:" in spec_log
    # The same as the settings given by hand (near-uniform logits of a random model can flip an
    # argmax between one-token and batched verification, so plain decoding is no reference here).
    hand, hand_log = generate(syslm_bin, "-m", out / "model.gguf", "-t", "1", "--draft",
                              tune_dir / "model.gguf", "--draft-k", "3", "--draft-fixed")
    assert spec == hand and spec_log.split("speculative:")[1].split(";")[0] == \
        hand_log.split("speculative:")[1].split(";")[0]  # the same rounds, drafts and acceptances
    clash = subprocess.run([str(syslm_bin), "generate", "--plan", tmp_path / "plan.json", "-p",
                            "x", "--draft-k", "5"], capture_output=True, text=True)
    assert clash.returncode == 2 and "draft.k" in clash.stderr
    size_goal = [("size" if a == "decode" else a) for a in map(str, args)]
    wrong = subprocess.run(size_goal, capture_output=True, text=True)
    assert wrong.returncode == 2 and "--draft" in wrong.stderr


def test_draft_auto_distils_a_quarter_of_the_layers_and_times_it(syslm_bin, tmp_path):
    """--draft auto: the input cut to a quarter of its layers (here 4 -> 1) is distilled back on
    the calibration text, quantized to Q8_0, kept beside the bases, and timed on the chosen file
    like a given draft. A one-layer model has no smaller draft: the tune says so and goes on."""
    d = tmp_path
    subprocess.run([str(syslm_bin), "init", "--vocab-size", "300", "--layers", "4", "--dim", "64",
                    "--heads", "4", "--ctx", "128", "--seed", "7", "-o", str(d / "model.gguf")],
                   check=True, capture_output=True)
    (d / "calib.txt").write_text(text(11, 900))
    (d / "heldout.txt").write_text(text(12, 900))
    args = [str(syslm_bin), "tune", "-m", d / "model.gguf", "--calib", d / "calib.txt", "--eval",
            d / "heldout.txt", "--goal", "decode", "--max-kl", "0.05", "-o", d / "tuned",
            "--budget", "5m", "-c", "64", "--eval-chunks", "2", "--sensitivity-chunks", "1",
            "-t", "2", "--rounds", "1", "--prune", "off", "--no-stock", "--recover-steps", "20",
            "--draft", "auto"]
    proc = subprocess.run(list(map(str, args)), capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "draft: 4 -> 1 layers, distilled for 20 steps" in proc.stderr, proc.stderr[-3000:]
    report = json.loads((d / "tuned" / "pareto.json").read_text())
    drafted = Path(report["draft"]["file"])
    assert drafted.parent == d / "tuned" / "candidates" and drafted.name.startswith("draft-")
    reader = gguf.GGUFReader(str(drafted))
    layers = next(f.parts[-1][0] for f in reader.fields.values() if f.name == "llama.block_count")
    assert layers == 1
    assert {t.tensor_type.name for t in reader.tensors if t.name.endswith("attn_q.weight")} == \
        {"Q8_0"}
    # The distillation ran its steps (its log is kept beside the draft's base).
    logs = list((d / "tuned" / "candidates").glob("base-*-recovery.log"))
    assert len(logs) == 1 and "step 20/20" in logs[0].read_text()
    assert len(report["draft"]["trials"]) == 4
    for t in report["draft"]["trials"]:
        assert t["tokens_per_s"] > 0 and 0 <= t["acceptance"] <= 1, t
    plan = json.loads((d / "tuned" / "plan.json").read_text())
    assert ("draft" in plan) == (report["draft"]["chosen"] != "none")
    # A one-layer model: no smaller draft, the tune still completes.
    subprocess.run([str(syslm_bin), "init", "--vocab-size", "300", "--layers", "1", "--dim", "64",
                    "--heads", "4", "--ctx", "128", "--seed", "7", "-o", str(d / "one.gguf")],
                   check=True, capture_output=True)
    args[args.index(d / "model.gguf")] = d / "one.gguf"
    args[args.index(d / "tuned")] = d / "tuned-one"
    proc = subprocess.run(list(map(str, args)), capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "draft: one layer, no smaller draft to distil" in proc.stderr
    assert "draft" not in json.loads((d / "tuned-one" / "pareto.json").read_text())


def test_length_knob_writes_the_window_policy_and_the_plan_runs_it(syslm_bin, tmp_path):
    """A model with local attention layers: the chosen file's window (32, 16, 8) is measured at
    inputs of 16, 64 and 256 tokens on the held-out text; per length the smallest within the
    limit enters model.gguf as its window policy (read back with gguf-py), the plan runs it
    (runtime.window auto, which `generate --plan` takes and a contradicting --window refuses),
    and -1 leaves the file and the plan as they were."""
    d = tmp_path
    subprocess.run([str(syslm_bin), "init", "--vocab-size", "300", "--layers", "2", "--dim", "64",
                    "--heads", "4", "--ctx", "256", "--window", "32", "--attn-pattern", "1:1",
                    "--seed", "5", "-o", str(d / "model.gguf")], check=True, capture_output=True)
    (d / "calib.txt").write_text(text(21, 900))
    (d / "heldout.txt").write_text(text(22, 900))

    def run_tune(out, *extra):
        args = [str(syslm_bin), "tune", "-m", d / "model.gguf", "--calib", d / "calib.txt",
                "--eval", d / "heldout.txt", "--goal", "size", "--max-kl", "0.05", "-o", out,
                "--budget", "5m", "-c", "64", "--eval-chunks", "2", "--sensitivity-chunks", "1",
                "-t", "2", "--rounds", "1", "--prune", "off", "--no-stock", *extra]
        proc = subprocess.run(list(map(str, args)), capture_output=True, text=True, timeout=900)
        assert proc.returncode == 0, proc.stderr[-4000:]
        return proc

    proc = run_tune(d / "tuned", "--length-ppl-increase", "0.02")
    report = json.loads((d / "tuned" / "pareto.json").read_text())
    (policy,) = report["length_policies"]
    assert policy["knob"] == "window" and policy["lengths"] == [16, 64, 256]
    table = policy["table"]
    assert [(m["length"], m["value"]) for m in table] == \
        [(n, w) for n in (16, 64, 256) for w in (8, 16, 32)]
    for n, chosen in zip(policy["lengths"], policy["values"]):
        rows = {m["value"]: m["ppl"] for m in table if m["length"] == n}
        best = min(rows.values())
        assert rows[chosen] <= best * 1.02  # within the limit
        assert all(rows[w] > best * 1.02 for w in rows if w < chosen)  # and the smallest so
    reader = gguf.GGUFReader(str(d / "tuned" / "model.gguf"))
    assert list(reader.get_field("llama.attention.window_policy.lengths").contents()) == \
        [16, 64, 256]
    assert list(reader.get_field("llama.attention.window_policy.windows").contents()) == \
        policy["values"]
    plan = json.loads((d / "tuned" / "plan.json").read_text())
    assert plan["runtime"]["window"] == "auto"
    assert "window by input length" in proc.stdout
    _, log = generate(syslm_bin, "--plan", d / "tuned" / "plan.json")
    assert "the model's policy for this input length" in log, log
    clash = subprocess.run([str(syslm_bin), "generate", "--plan", d / "tuned" / "plan.json",
                            "-p", "x", "--window", "16"], capture_output=True, text=True)
    assert clash.returncode == 2 and "runtime.window" in clash.stderr
    run_tune(d / "untuned", "--length-ppl-increase", "-1")
    assert "length_policies" not in json.loads((d / "untuned" / "pareto.json").read_text())
    assert "window" not in json.loads((d / "untuned" / "plan.json").read_text())["runtime"]
