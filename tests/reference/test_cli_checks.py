"""Numbers checked at the door, and one convention for every error.

Every error is one line `syslm: error: <what>` on stderr. Exit status 2: the command line (a value
an option does not accept, options that contradict each other); 1: anything else (files, data,
numbers that go bad at run time). The README says so.
- Options: NaN, infinities and out-of-range values are refused naming the option and its range.
- Training whose loss turns NaN stops with an error before the update, and the last checkpoint
  keeps finite weights; perplexity of a model with NaN weights is an error, not `PPL = -nan`.
- GGUF hyperparameters out of range are refused at load, naming the key.
- The training contract's command (`--arch gpt2 --vocab 50257 ... --synthetic-data`) runs without
  a tokenizer file.
"""
import json
import math
import struct
import subprocess

import gguf
import numpy as np
import pytest

from test_train_grads import read_gguf

TINY_OPTIONS = {"--arch": "llama", "--vocab": "300", "--layers": "1", "--dim": "32",
                "--heads": "4", "--ctx": "32", "--batch": "2", "--seq": "16", "-t": "1"}


def tiny(**changed):
    """`train` arguments of a tiny model on random tokens, with some options changed."""
    opts = dict(TINY_OPTIONS)
    opts.update({"--" + k.replace("_", "-"): v for k, v in changed.items()})
    return ["--synthetic-data", *[x for kv in opts.items() for x in kv]]


TINY = tiny()


def run(syslm_bin, *args):
    return subprocess.run([str(syslm_bin), *map(str, args)], capture_output=True, text=True,
                          timeout=600)


def expect_error(proc, status, *patterns):
    """Exit `status` and one error line (after any progress output) holding every pattern."""
    errors = [l for l in proc.stderr.splitlines() if l.startswith("syslm: error: ")]
    assert proc.returncode == status, f"exit {proc.returncode}, wanted {status}:\n{proc.stderr}"
    assert len(errors) == 1, proc.stderr
    for p in patterns:
        assert p in errors[0], f"{p!r} not in {errors[0]!r}"


@pytest.mark.parametrize("option,value,says", [
    ("--lr", "nan", "[0, inf)"), ("--lr", "inf", "[0, inf)"), ("--lr", "-1", "[0, inf)"),
    ("--min-lr", "nan", "[0, inf)"), ("--weight-decay", "nan", "[0, inf)"),
    ("--clip", "nan", "[0, inf)"), ("--beta1", "2", "[0, 1)"), ("--beta2", "1", "[0, 1)"),
    ("--eps", "0", "(0, inf)"), ("--warmup", "-5", "-5"), ("--ctx", "0", "0"),
    ("--momentum", "nan", "[0, 1)"), ("--topk-ratio", "0", "(0, 1]"),
])
def test_train_refuses_bad_numbers_naming_the_option(syslm_bin, option, value, says):
    extra = ["--grad-compress", "topk"] if option == "--topk-ratio" else []
    args = tiny(**{option[2:].replace("-", "_"): value})
    proc = run(syslm_bin, "train", *args, "--steps", 1, *extra)
    expect_error(proc, 2, option, says)


def test_seq_longer_than_the_context_is_refused(syslm_bin):
    proc = run(syslm_bin, "train", *tiny(seq="1000"), "--steps", 1)
    expect_error(proc, 2, "--seq 1000", "context of 32")


@pytest.fixture(scope="module")
def tiny_model(syslm_bin, tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny") / "m.gguf"
    proc = run(syslm_bin, "init", "--vocab-size", 300, "--layers", 1, "--dim", 32, "--heads", 4,
               "--ctx", 64, "-o", path)
    assert proc.returncode == 0, proc.stderr
    return path


@pytest.mark.parametrize("option,value", [("--temp", "nan"), ("--temp", "-1"), ("--top-p", "2"),
                                          ("--min-p", "nan"), ("--repeat-penalty", "0")])
def test_generate_refuses_bad_sampling_numbers(syslm_bin, tiny_model, option, value):
    proc = run(syslm_bin, "generate", "-m", tiny_model, "-p", "x", "-n", 2, option, value)
    expect_error(proc, 2, option)


def test_usage_and_file_errors_follow_one_convention(syslm_bin, tiny_model, tmp_path):
    expect_error(run(syslm_bin, "generate", "-m", tmp_path, "-p", "x"), 2, "--model",
                 "directory")
    expect_error(run(syslm_bin, "train", "--no-such-option"), 2, "--no-such-option")
    expect_error(run(syslm_bin, "train", "--synthetic-data", "--steps", 1), 2, "--init")
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + bytes(20))
    expect_error(run(syslm_bin, "info", "-m", bad), 1, str(bad))
    assert run(syslm_bin, "train", "--help").returncode == 0


def test_the_training_contracts_command_needs_no_tokenizer(syslm_bin, tmp_path):
    out = tmp_path / "gpt2.gguf"
    proc = run(syslm_bin, "train", "--arch", "gpt2", "--vocab", 50257, "--layers", 12, "--heads",
               12, "--dim", 768, "--batch", 4, "--seq", 64, "--steps", 2, "--threads", 2,
               "--synthetic-data", "--json", "-o", out)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert math.isfinite(summary["final_loss"]) and summary["final_loss"] > 0
    info = json.loads(run(syslm_bin, "info", "-m", out, "--json", "--no-tensors").stdout)
    meta = {e["key"]: e["value"] for e in info["metadata"]}
    assert meta["gpt2.block_count"] == 12 and meta["gpt2.embedding_length"] == 768
    # The byte-fallback vocabulary encodes any text and decodes it back.
    text = "In the beginning — 1:1 ✓"
    ids = run(syslm_bin, "tokenize", "-m", out, "-p", text, "--ids")
    assert ids.returncode == 0, ids.stderr
    assert len(json.loads(ids.stdout)) >= len(text.encode())  # one token per byte, and BOS


def test_precision_auto_trains_in_the_precision_it_measured_faster(syslm_bin):
    """`--precision auto` names its choice and the GEMM timings behind it, and the run reports
    the precision it trained in: bf16 exactly when bf16 measured over 1.25x f32."""
    proc = run(syslm_bin, "train", *TINY, "--steps", 2, "--precision", "auto", "--json")
    assert proc.returncode == 0, proc.stderr
    line = next(l for l in proc.stderr.splitlines() if l.startswith("precision auto:"))
    chosen = line.split()[2]
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert summary["precision"] == chosen and chosen in ("f32", "bf16")
    f32 = float(line.split("f32 on ")[1].split()[1])
    bf16 = float(line.split("bf16 on ")[1].split()[1]) if "bf16 on " in line else 0.0
    assert (chosen == "bf16") == (bf16 > 1.25 * f32), line
    expect_error(run(syslm_bin, "train", *TINY, "--steps", 1, "--precision", "fp8"), 1,
                 "precision 'fp8'")


def test_a_loss_that_turns_nan_stops_training_and_keeps_the_last_checkpoint(syslm_bin, tmp_path):
    ck = tmp_path / "ck"
    # lr 1e30: the first update makes the weights ~1e30, and the next forward overflows.
    proc = run(syslm_bin, "train", *TINY, "--steps", 10, "--lr", "1e30", "--warmup", 0,
               "--checkpoint", ck, "--checkpoint-every", 1, "-o", tmp_path / "out.gguf")
    expect_error(proc, 1, "training step", "stopped before the update")
    assert not (tmp_path / "out.gguf").exists()
    weights, _ = read_gguf(ck / "model.gguf")
    assert all(np.isfinite(w).all() for w in weights.values())
    resumed = run(syslm_bin, "train", "--resume", ck, "--synthetic-data", "--batch", 2, "--seq",
                  16, "-t", 1, "--steps", 1)
    assert resumed.returncode == 0, resumed.stderr  # the checkpoint itself is sound


def with_nan_weight(src, dst):
    reader = gguf.GGUFReader(str(src))
    data = bytearray(src.read_bytes())
    t = next(t for t in reader.tensors if t.name == "blk.0.attn_q.weight")
    assert t.tensor_type == gguf.GGMLQuantizationType.F32
    struct.pack_into("<f", data, t.data_offset + 4 * 5, float("nan"))
    dst.write_bytes(bytes(data))


def test_perplexity_of_a_nan_model_is_an_error(syslm_bin, tiny_model, tmp_path):
    text = tmp_path / "t.txt"
    text.write_text("In the beginning God created the heaven and the earth. " * 40)
    ok = run(syslm_bin, "perplexity", "-m", tiny_model, "-f", text, "-c", 32)
    assert ok.returncode == 0, ok.stderr
    bad = tmp_path / "nan.gguf"
    with_nan_weight(tiny_model, bad)
    expect_error(run(syslm_bin, "perplexity", "-m", bad, "-f", text, "-c", 32), 1,
                 "log-likelihood", "not finite numbers")


@pytest.mark.parametrize("key,value,says", [
    ("llama.attention.layer_norm_rms_epsilon", float("nan"), "layer_norm_rms_epsilon = nan"),
    ("llama.rope.freq_base", 0.0, "rope.freq_base = 0"),
    ("llama.context_length", 2**32 - 1, "context_length = 4294967295"),
])
def test_out_of_range_hyperparameters_are_refused_at_load(syslm_bin, tiny_model, tmp_path, key,
                                                          value, says):
    reader = gguf.GGUFReader(str(tiny_model))
    field = reader.fields[key]
    data = bytearray(tiny_model.read_bytes())
    part = field.parts[field.data[0]]
    offset = part.ctypes.data - reader.data.ctypes.data  # where the value lies in the file
    if part.dtype == np.float32:
        struct.pack_into("<f", data, offset, value)
    else:
        assert part.dtype == np.uint32
        struct.pack_into("<I", data, offset, value)
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(bytes(data))
    expect_error(run(syslm_bin, "generate", "-m", bad, "-p", "x", "-n", 1), 1, str(bad), says)


@pytest.mark.parametrize("option,value,says", [
    ("--share-blocks", "0", "--share-blocks"), ("--share-blocks", "2:ring", "cycle or sequence"),
    ("--share-blocks", "9", "9 blocks for 1 layers"), ("--linear-attn", "x", "--linear-attn"),
    ("--attn-pattern", "5", "--attn-pattern"), ("--random-blocks", "3:8", "B at least 16"),
    ("--random-blocks", "2:", "--random-blocks"), ("--random-blocks", "17", "between 1 and 16"),
])
def test_structure_options_refuse_nonsense_as_usage_errors(syslm_bin, option, value, says):
    extra = ["--window", "8"] if option in ("--attn-pattern", "--random-blocks") else []
    expect_error(run(syslm_bin, "train", *TINY, *extra, option, value, "--steps", "1"), 2, says)
    if extra:  # and without the window they need
        expect_error(run(syslm_bin, "train", *TINY, option, value, "--steps", "1"), 2,
                     "needs --window")


def test_expert_top_p_options(syslm_bin, tiny_model, tmp_path):
    """--expert-top-p takes a p in (0, 1] or auto; a top-k (or dense) model refuses a p, a model
    without a policy refuses auto, in serve too."""
    expect_error(run(syslm_bin, "perplexity", "-m", tiny_model, "-f", tiny_model,
                     "--expert-top-p", "0"), 2, "--expert-top-p")
    moe = tmp_path / "moe.gguf"
    run(syslm_bin, "init", "--vocab-size", 300, "--layers", 1, "--dim", 32, "--heads", 4,
        "--experts", 4, "--experts-used", 2, "--expert-top-p", 0.5, "-o", moe)
    expect_error(run(syslm_bin, "generate", "-m", tiny_model, "-p", "hi", "-n", 1,
                     "--expert-top-p", "0.5"), 1, "top-p")
    expect_error(run(syslm_bin, "generate", "-m", moe, "-p", "hi", "-n", 1,
                     "--expert-top-p", "auto"), 1, "syslm tune experts")
    ok = subprocess.run([str(syslm_bin), "generate", "-m", str(moe), "-p", "hi", "-n", "2",
                         "--expert-top-p", "0.2"], capture_output=True, timeout=600)
    assert ok.returncode == 0 and b"experts: top-p 0.2" in ok.stderr, ok.stderr  # any bytes out
    expect_error(run(syslm_bin, "serve", "-m", moe, "--port", 0, "--expert-top-p", "auto"), 1,
                 "syslm tune experts")
