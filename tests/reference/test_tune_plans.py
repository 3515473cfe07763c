"""Plans applied exactly: `syslm tune --goal serve` writes a plan with serve settings, and
`syslm serve --plan` runs the engine with exactly those (read back from its ready line); `train
--plan` trains with the plan's micro-batch, accumulation, recompute, precision and threads (read
back from its JSON summary); `quantize --plan` rebuilds the tuned file tensor for tensor. An
option that contradicts the plan is a usage error (exit 2), a plan with a misspelt setting is
refused, and the serve goal's report holds the default and tuned serving figures.
"""
import json
import re
import signal
import subprocess

import gguf
import pytest

from test_tune import make_tune_dir


@pytest.fixture(scope="module")
def served(syslm_bin, tmp_path_factory):
    d = make_tune_dir(syslm_bin, tmp_path_factory.mktemp("tune_serve"), 256, 5, 3)
    args = [syslm_bin, "tune", "-m", d / "model.gguf", "--calib", d / "calib.txt", "--eval",
            d / "heldout.txt", "--goal", "serve", "--streams", "4", "--serve-requests", "1",
            "--serve-tokens", "8", "--p99-ttft", "30s", "--max-kl", "0.05", "-o", d / "tuned",
            "--budget", "5m", "-c", "64", "--eval-chunks", "2", "--sensitivity-chunks", "1",
            "--rounds", "1", "--no-stock", "-t", "2"]
    proc = subprocess.run(list(map(str, args)), capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return d, proc


def test_serve_goal_reports_default_and_tuned_serving(served):
    d, proc = served
    report = json.loads((d / "tuned" / "pareto.json").read_text())
    serving = [p for p in report["points"] if p["streams"] == 4]
    assert len(serving) >= 2
    for p in serving:
        assert p["serve_ts"] > 0 and 0 < p["ttft_p99"] <= 30 and p["plan"]["serve"]
    defaults = [p for p in serving if p["label"].endswith("@ serve defaults")]
    assert len(defaults) >= 1
    chosen = report["chosen"]
    assert chosen["streams"] == 4 and chosen["kl"] <= 0.05
    # The chosen point is the search's confirmed one (the medians of alternating runs), never
    # slower than the default settings so confirmed.
    m = re.search(r"serving at 4 streams .* default settings ([\d.]+) tok/s .* tuned ([\d.]+) "
                  r"tok/s", proc.stdout)
    assert m, proc.stdout
    assert float(m.group(2)) >= float(m.group(1))
    assert abs(chosen["serve_ts"] - float(m.group(2))) <= 0.06
    plan = json.loads((d / "tuned" / "plan.json").read_text())
    assert plan == chosen["plan"]
    # Before and after: the input file as it is (an empty model plan) at serve's defaults,
    # timed alternately with the tuned plan; the ratio printed is theirs.
    m = re.search(r"before and after at 4 streams .*`syslm serve -m model.gguf` at its defaults "
                  r"([\d.]+) tok/s .* the tuned plan \(its file and runtime\) ([\d.]+) tok/s "
                  r".*: ([\d.]+)x", proc.stdout)
    assert m, proc.stdout
    before, after, ratio = map(float, m.groups())
    assert before > 0 and after > 0 and abs(ratio - after / before) <= 0.01 * ratio + 0.005
    inputs = [p for p in serving if p["label"] == "input @ serve defaults"]
    assert len(inputs) == 1 and abs(inputs[0]["serve_ts"] - before) <= 0.06
    assert inputs[0]["plan"]["model"].get("recipe", "") == "" and inputs[0]["kl"] == 0


def ready_line(syslm_bin, *args):
    proc = subprocess.Popen([str(syslm_bin), "serve", "--port", "0", *map(str, args)],
                            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    try:
        for line in proc.stderr:
            if "ready:" in line:
                return line
            if "error" in line:
                return line
        return ""
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)


def test_serve_plan_applies_exactly_the_settings(syslm_bin, served, tmp_path):
    d, _ = served
    plan = json.loads((d / "tuned" / "plan.json").read_text())
    # Settings unlike the defaults, so that taking them is visible.
    plan["runtime"]["threads"] = 1
    plan["serve"].update(parallel=3, token_budget=96, page_size=8, kv_pages=50, ctx=200,
                         cache_type="f32")
    p = d / "tuned" / "plan-edited.json"  # beside model.gguf: -m is not needed
    p.write_text(json.dumps(plan))
    line = ready_line(syslm_bin, "--plan", p)
    assert "50 KV pages of 8 positions (0 MiB, f32)" in line, line
    assert "3 parallel, context 200, token budget 96, 1 threads" in line, line
    # An option that agrees is fine; one that contradicts is a usage error.
    assert "3 parallel" in ready_line(syslm_bin, "--plan", p, "--parallel", "3")
    bad = subprocess.run([str(syslm_bin), "serve", "--port", "0", "--plan", str(p),
                          "--token-budget", "512"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "contradicts the plan's serve.token_budget 96" in bad.stderr
    plan["serve"]["page_sise"] = 8
    p.write_text(json.dumps(plan))
    bad = subprocess.run([str(syslm_bin), "serve", "--port", "0", "--plan", str(p)],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 1 and "serve.page_sise is not a setting" in bad.stderr


def test_quantize_plan_rebuilds_the_tuned_file(syslm_bin, served, tmp_path):
    d, _ = served
    out = tmp_path / "rebuilt.gguf"
    plan = json.loads((d / "tuned" / "plan.json").read_text())
    # A pruned plan (the structure knob) is quantized from its recovered base, left beside it.
    pruned = "prune" in plan["model"]
    source = d / "tuned" / "base.gguf" if pruned else d / "model.gguf"
    args = [syslm_bin, "quantize", "--plan", d / "tuned" / "plan.json", source, out]
    if plan["model"]["imatrix"]:
        no = subprocess.run(list(map(str, args)), capture_output=True, text=True)
        assert no.returncode == 2 and "--imatrix" in no.stderr
        args += ["--imatrix", d / "tuned" / ("base-imatrix.gguf" if pruned else "imatrix.gguf")]
    if pruned:
        wrong = [a if a != source else d / "model.gguf" for a in args]
        refused = subprocess.run(list(map(str, wrong)), capture_output=True, text=True)
        assert refused.returncode == 2 and "base.gguf" in refused.stderr
    proc = subprocess.run(list(map(str, args)), capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    tuned = {t.name: (t.tensor_type.name, bytes(t.data.tobytes()))
             for t in gguf.GGUFReader(str(d / "tuned" / "model.gguf")).tensors}
    rebuilt = {t.name: (t.tensor_type.name, bytes(t.data.tobytes()))
               for t in gguf.GGUFReader(str(out)).tensors}
    assert rebuilt == tuned
    both = subprocess.run([str(syslm_bin), "quantize", "--plan", str(d / "tuned" / "plan.json"),
                           str(d / "model.gguf"), str(out), "Q4_0"], capture_output=True, text=True)
    assert both.returncode == 2


def test_train_plan_applies_exactly_the_settings(syslm_bin, tmp_path):
    plan = {"syslm_plan": 1, "model": {"recipe": "", "imatrix": False, "tensor_types": {}},
            "runtime": {"threads": 1, "batch": 512},
            "train": {"micro_batch": 2, "accum": 3, "recompute": "selective", "precision": "bf16"}}
    p = tmp_path / "plan.json"
    p.write_text(json.dumps(plan))
    base = [str(syslm_bin), "train", "--arch", "llama", "--vocab", "97", "--layers", "2",
            "--dim", "32", "--heads", "2", "--ctx", "64", "--synthetic-data", "--seq", "16",
            "--steps", "2", "--json", "--plan", str(p)]
    proc = subprocess.run(base, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert (summary["micro_batch"], summary["accum"], summary["recompute"], summary["precision"],
            summary["threads"]) == (2, 3, "selective", "bf16", 1)
    bad = subprocess.run(base + ["--batch", "4"], capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and "contradicts the plan's train.micro_batch 2" in bad.stderr
    bad = subprocess.run(base + ["--memory-limit", "1GiB"], capture_output=True, text=True,
                         timeout=300)
    assert bad.returncode == 2
    del plan["train"]
    p.write_text(json.dumps(plan))
    bad = subprocess.run(base, capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and "no training settings" in bad.stderr


def test_tune_train_keeps_the_loss_curve_and_its_plan_applies(syslm_bin, tmp_path):
    """`syslm tune train` times real `syslm train` runs of the command; every counted trial has
    the command's global batch and its losses step for step; plan.json applied with
    `train --plan` gives the chosen settings; options the trials set are refused."""
    command = ["--arch", "llama", "--vocab", "97", "--layers", "2", "--dim", "32", "--heads", "2",
               "--ctx", "64", "--synthetic-data", "--seq", "16", "--batch", "4"]
    out = tmp_path / "tt"
    proc = subprocess.run([str(syslm_bin), "tune", "train", "-o", str(out), "--steps", "3",
                           "--memory-limit", "4GiB", "--", *command],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads((out / "trials.json").read_text())
    trials = report["trials"]
    base = trials[0]
    assert (base["micro_batch"], base["accum"]) == (4, 1)
    counted = [t for t in trials if t["fits"] and t["same_curve"] and not t["error"]]
    assert len(counted) >= 6  # micro-batches 1, 2, 4 at least, with the recompute policies
    for t in trials:
        assert t["micro_batch"] * t["accum"] == 4
        if t["same_curve"]:
            for a, b in zip(t["losses"], base["losses"]):
                assert abs(a - b) <= report["loss_rtol"] * abs(b)
    plan = json.loads((out / "plan.json").read_text())
    assert plan["train"]["micro_batch"] * plan["train"]["accum"] == 4
    # report.html: one table row and one mark (hover: its settings) per trial, the limit drawn.
    page = (out / "report.html").read_text()
    assert page.count("<tr><td>") == len(trials)
    assert page.count("<title>micro-batch") == sum(1 for t in trials if not t["error"])
    assert "memory limit" in page and page.count("<svg") == 1
    for t in trials:
        assert f"<td>{t['micro_batch']}</td><td>{t['accum']}</td><td>{t['recompute']}</td>" in page
    assert re.search(r"training: the command's settings [\d.]+ tok/s", proc.stdout)
    cmd = [c for c in command if c not in ("--batch", "4")]
    ran = subprocess.run([str(syslm_bin), "train", *cmd, "--steps", "2", "--json", "--plan",
                          str(out / "plan.json")], capture_output=True, text=True, timeout=300)
    assert ran.returncode == 0, ran.stderr[-2000:]
    summary = json.loads(ran.stdout.strip().splitlines()[-1])
    assert (summary["micro_batch"], summary["accum"], summary["recompute"],
            summary["threads"]) == (plan["train"]["micro_batch"], plan["train"]["accum"],
                                    plan["train"]["recompute"], plan["runtime"]["threads"])
    bad = subprocess.run([str(syslm_bin), "tune", "train", "-o", str(out), "--", *command,
                          "--steps", "9"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "--steps" in bad.stderr


def test_tune_train_searches_precision_under_the_loss_limit(syslm_bin, tmp_path):
    """With --max-loss-change, `tune train` also runs the trials in the other precision: each
    counted trial in another precision than the command's has every step's loss within that
    limit, and the plan's precision is the chosen trial's (applied by `train --plan`)."""
    command = ["--arch", "llama", "--vocab", "97", "--layers", "2", "--dim", "32", "--heads", "2",
               "--ctx", "64", "--synthetic-data", "--seq", "16", "--batch", "2",
               "--precision", "f32"]
    out = tmp_path / "tp"
    proc = subprocess.run([str(syslm_bin), "tune", "train", "-o", str(out), "--steps", "3",
                           "--max-loss-change", "0.05", "--", *command],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads((out / "trials.json").read_text())
    assert report["max_loss_change"] == 0.05
    trials = report["trials"]
    base = trials[0]
    assert base["precision"] == "f32"
    assert {t["precision"] for t in trials} == {"f32", "bf16"}
    for t in trials:
        if not t["same_curve"]:
            continue
        limit = report["loss_rtol"] if t["precision"] == "f32" else 0.05
        for a, b in zip(t["losses"], base["losses"]):
            assert abs(a - b) <= limit * abs(b)
    assert any(t["precision"] == "bf16" and t["same_curve"] for t in trials), \
        "bf16 moved a loss by more than 5% in 3 steps of a 2-layer model"
    plan = json.loads((out / "plan.json").read_text())
    cmd = command[:-4]  # without --batch 2 --precision f32: the plan sets them
    ran = subprocess.run([str(syslm_bin), "train", *cmd, "--steps", "2", "--json", "--plan",
                          str(out / "plan.json")], capture_output=True, text=True, timeout=300)
    assert ran.returncode == 0, ran.stderr[-2000:]
    summary = json.loads(ran.stdout.strip().splitlines()[-1])
    assert summary["precision"] == plan["train"]["precision"]
    no = subprocess.run([str(syslm_bin), "tune", "train", "-o", str(out), "--max-loss-change",
                         "0", "--", *command], capture_output=True, text=True, timeout=60)
    assert no.returncode != 0
