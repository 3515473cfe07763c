"""Run control of `syslm train` on real data (KJV-style text prepared by syslm itself): a run
killed with SIGKILL after a checkpoint and resumed gives bit-identical final weights to an
uninterrupted run; SIGINT saves a checkpoint and exits cleanly; metrics are JSON lines; and
gradient accumulation of 4 micro-batches equals one 4x batch.
"""
import json
import signal
import subprocess
import time

import numpy as np
import pytest

from test_train_grads import read_gguf

TEXT = "\n".join(f"And the {w} of the land was {v} in the days of old, saith the LORD."
                 for w in ("people", "king", "river", "city", "field", "house", "mountain")
                 for v in ("great", "good", "small", "many", "few", "dark", "bright")) * 40


@pytest.fixture
def prepared(tmp_path, run_syslm):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(TEXT)
    tok = tmp_path / "tok.gguf"
    run_syslm("tokenizer", "train", "-f", corpus, "--vocab", 300, "-o", tok)
    data = tmp_path / "data"
    run_syslm("data", "prepare", "-f", corpus, "--tokenizer", tok, "-o", data, "--val", 0.05,
              "--docs", "line", "--chunk-tokens", 256)
    return tok, data


def train_args(tok, data, steps, extra=()):
    return ["train", "--arch", "llama", "--tokenizer", tok, "--layers", 2, "--dim", 64,
            "--heads", 4, "--ctx", 64, "--data", data, "--batch", 4, "--seq", 32, "--steps",
            steps, "--lr", 3e-3, "--warmup", 5, "--seed", 3, "-t", 2, *extra]


def test_kill_and_resume_is_bit_exact(prepared, tmp_path, syslm_bin, run_syslm):
    tok, data = prepared
    steps = 400
    run_syslm(*train_args(tok, data, steps, ["-o", tmp_path / "straight.gguf"]))

    ck = tmp_path / "ck"
    args = [str(a) for a in train_args(tok, data, steps, ["--checkpoint", ck,
                                                           "--checkpoint-every", 20])]
    proc = subprocess.Popen([str(syslm_bin), *args], stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while not (ck / "state.bin").exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert (ck / "state.bin").exists(), "no checkpoint before the kill"
    resume = ["train", "--resume", ck, "--data", data, "--batch", 4, "--seq", 32, "--steps", steps,
              "--lr", 3e-3, "--warmup", 5, "--seed", 3, "-t", 2, "-o", tmp_path / "resumed.gguf"]
    run_syslm(*resume)
    a, _ = read_gguf(tmp_path / "straight.gguf")
    b, _ = read_gguf(tmp_path / "resumed.gguf")
    assert a.keys() == b.keys()
    for name in a:
        assert np.array_equal(a[name], b[name]), name


def test_sigint_saves_and_exits(prepared, tmp_path, syslm_bin):
    tok, data = prepared
    ck = tmp_path / "ck"
    metrics = tmp_path / "m.jsonl"
    args = [str(a) for a in train_args(tok, data, 100000, ["--checkpoint", ck, "--metrics",
                                                           metrics])]
    proc = subprocess.Popen([str(syslm_bin), *args], stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 60
    while (not metrics.exists() or metrics.stat().st_size == 0) and time.time() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "interrupted" in err and (ck / "model.gguf").exists() and (ck / "state.bin").exists()
    lines = [json.loads(line) for line in metrics.read_text().splitlines()]
    assert lines and all("loss" in l or "final_loss" in l for l in lines)


def test_accumulation_equals_larger_batch(prepared, tmp_path, run_syslm):
    """4 micro-batches of 1 sequence accumulated == one batch of 4: the loader's stream is the
    same windows in the same order whatever the batch size."""
    tok, data = prepared
    base = ["train", "--arch", "llama", "--tokenizer", tok, "--layers", 2, "--dim", 64,
            "--heads", 4, "--ctx", 64, "--data", data, "--seq", 32, "--steps", 3,
            "--optimizer", "sgd", "--lr", 0.1, "--seed", 3, "-t", 2]
    run_syslm(*base, "--batch", 4, "-o", tmp_path / "big.gguf")
    run_syslm(*base, "--batch", 1, "--accum", 4, "-o", tmp_path / "acc.gguf")
    a, _ = read_gguf(tmp_path / "big.gguf")
    b, _ = read_gguf(tmp_path / "acc.gguf")
    for name in a:
        np.testing.assert_allclose(b[name], a[name], rtol=0, atol=1e-5 * np.abs(a[name]).max(),
                                   err_msg=name)


def test_config_file_equals_flags(prepared, tmp_path, run_syslm):
    tok, data = prepared
    run_syslm(*train_args(tok, data, 4, ["-o", tmp_path / "flags.gguf"]))
    cfg = tmp_path / "run.toml"
    cfg.write_text(f'arch = "llama"\ntokenizer = "{tok}"\nlayers = 2\ndim = 64\nheads = 4\n'
                   f'ctx = 64\ndata = "{data}"\nbatch = 4\nseq = 32\nsteps = 99\nlr = 3e-3\n'
                   f'warmup = 5\nseed = 3\n')
    run_syslm("train", "--config", cfg, "--steps", 4, "-t", 2, "-o", tmp_path / "config.gguf")
    a, _ = read_gguf(tmp_path / "flags.gguf")
    b, _ = read_gguf(tmp_path / "config.gguf")
    for name in a:
        assert np.array_equal(a[name], b[name]), name
    cfg.write_text(cfg.read_text() + "learning_rate = 1\n")
    proc = run_syslm("train", "--config", cfg, check=False)
    assert proc.returncode != 0 and "'learning_rate' is not an option" in proc.stderr


def test_fp16_loss_scaling_skips_overflow_and_resumes_bit_exactly(prepared, tmp_path, run_syslm):
    """--precision f16: an initial loss scale far too large overflows fp16 (inf gradients), so
    those steps are skipped and halve the scale; after --loss-scale-window finite steps it
    doubles; training still learns; and the scale is part of the checkpoint, so a resumed run
    ends bit-identical to a straight one."""
    tok, data = prepared
    f16 = ["--precision", "f16", "--loss-scale", 2.0 ** 40, "--loss-scale-window", 8,
           "--schedule", "constant"]
    metrics = tmp_path / "m.jsonl"
    run_syslm(*train_args(tok, data, 60, [*f16, "--metrics", metrics, "-o", tmp_path / "a.gguf"]))
    steps = [json.loads(l) for l in metrics.read_text().splitlines()]
    steps = [s for s in steps if "loss_scale" in s]
    assert len(steps) == 60
    skipped = [s for s in steps if s["skipped"]]
    assert skipped and steps[0]["skipped"], "2^40 must overflow fp16"
    for prev, cur in zip(steps, steps[1:]):
        if prev["skipped"]:
            assert cur["loss_scale"] == prev["loss_scale"] / 2
    grew = any(cur["loss_scale"] == 2 * prev["loss_scale"] for prev, cur in zip(steps, steps[1:]))
    assert grew, "8 finite steps in a row must double the scale"
    assert steps[-1]["loss"] < 0.8 * steps[0]["loss"]

    ck = tmp_path / "ck"
    run_syslm(*train_args(tok, data, 30, [*f16, "--checkpoint", ck, "--checkpoint-every", 30]))
    run_syslm("train", "--resume", ck, "--data", data, "--batch", 4, "--seq", 32, "--steps", 60,
              "--lr", 3e-3, "--warmup", 5, "--seed", 3, "-t", 2, *f16, "-o", tmp_path / "b.gguf")
    a, _ = read_gguf(tmp_path / "a.gguf")
    b, _ = read_gguf(tmp_path / "b.gguf")
    for name in a:
        assert np.array_equal(a[name], b[name]), name


def test_failed_checkpoint_write_keeps_the_last_good_one(prepared, tmp_path, syslm_bin,
                                                         run_syslm):
    """A checkpoint that cannot be written (here the file-size limit of the process, as a full
    disk would: every write past it fails) is a clear error, and the previous checkpoint stays
    whole and resumable."""
    import resource

    tok, data = prepared
    ck = tmp_path / "ck"
    run_syslm(*train_args(tok, data, 20, ["--checkpoint", ck, "--checkpoint-every", 10]))
    before = {p.name: p.read_bytes() for p in ck.iterdir()}

    def small_files():
        resource.setrlimit(resource.RLIMIT_FSIZE, (100_000, 100_000))
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # writes fail with EFBIG instead

    args = ["train", "--resume", ck, "--data", data, "--batch", 4, "--seq", 32, "--steps", 40,
            "--lr", 3e-3, "--warmup", 5, "--seed", 3, "-t", 2, "--checkpoint", ck,
            "--checkpoint-every", 10]
    proc = subprocess.run([str(syslm_bin), *map(str, args)], capture_output=True, text=True,
                          preexec_fn=small_files, timeout=300)
    assert proc.returncode != 0
    assert "write failed" in proc.stderr and "model.gguf" in proc.stderr, proc.stderr
    assert {p.name: p.read_bytes() for p in ck.iterdir()} == before
    run_syslm(*args)  # and it resumes from there
