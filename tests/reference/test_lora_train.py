"""LoRA training (`syslm train --lora`, `syslm grad --lora`) against PEFT and against itself.

* Gradients: a PEFT adapter with random A and B (non-zero B, so A's gradient is not zero) on
  every projection of a tiny llama / qwen2 / gpt2; the loss of a batch and the gradients of every
  lora_A / lora_B from PEFT + loss.backward() in float64 (the base frozen: PEFT gives it no
  gradient; float64, so that float32's own rounding in PEFT is not charged to syslm) against
  `syslm grad --lora` on the converted base and adapter (1e-4 relative per tensor, as the full
  model's check). PEFT's gradients go through `convert --lora-hf` like the adapter itself, so they
  take the same re-layout (llama's Q/K row permutation, GPT-2's fused Conv1D).
* QLoRA: on a Q8_0 and a Q4_0 base, the adapter's gradients equal those on the base's exact
  dequantization (F32): the frozen quantized matrices are used as their dequantized values.
  Activation recompute (selective, full) gives them bit for bit.
* Training: `train --lora` lowers the loss of a fixed batch, writes an adapter with which
  inference (`logits --lora`) gives the trained sequence a lower loss, leaves the base untouched, and a run resumed from its
  checkpoint ends with the adapter of an uninterrupted one.
"""
import zlib

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from test_lora import TARGETS, peft_model
from test_train_grads import TOLERANCE, read_gguf

peft = pytest.importorskip("peft")

B, T = 2, 9


def ids_arg(ids):
    return ",".join(map(str, np.asarray(ids).reshape(-1).tolist()))


@pytest.mark.parametrize("variant", list(TARGETS))
def test_lora_gradients_match_peft(variant, tmp_path, run_syslm):
    hf_dir, pm = peft_model(variant, tmp_path)
    with torch.no_grad():  # B at a trained adapter's scale (peft_model's is larger, for logits)
        for n, p in pm.named_parameters():
            if "lora_B" in n:
                p.mul_(0.2)
    pm.save_pretrained(tmp_path / "adapter")
    pm.double()  # the reference in float64: float32's own rounding is not charged to syslm
    n_vocab = pm.config.vocab_size
    gen = torch.Generator().manual_seed(zlib.crc32(("lora-" + variant).encode()))
    ids = torch.randint(0, n_vocab, (B, T + 1), generator=gen)
    logits = pm(input_ids=ids[:, :T]).logits
    loss = F.cross_entropy(logits.reshape(-1, n_vocab), ids[:, 1:].reshape(-1))
    loss.backward()
    lora = {n: p for n, p in pm.named_parameters() if "lora_" in n}
    assert lora and all(p.grad is None for n, p in pm.named_parameters() if n not in lora)
    with torch.no_grad():
        for p in lora.values():
            p.copy_(p.grad)
    pm.float().save_pretrained(tmp_path / "grad_adapter")

    base, adapter = tmp_path / "base.gguf", tmp_path / "adapter.gguf"
    ref_path, got_path = tmp_path / "grads_ref.gguf", tmp_path / "grads.gguf"
    run_syslm("convert", "--hf", hf_dir, "-o", base)
    run_syslm("convert", "--lora-hf", tmp_path / "adapter", "--hf", hf_dir, "-o", adapter)
    run_syslm("convert", "--lora-hf", tmp_path / "grad_adapter", "--hf", hf_dir, "-o", ref_path)
    out = run_syslm("grad", "-m", base, "--lora", adapter, "--ids", ids_arg(ids), "--batch", B,
                    "-o", got_path, "-t", 2).stdout
    got_loss = float(out.split()[1])
    assert abs(got_loss - loss.item()) < 1e-5 * abs(loss.item()), (got_loss, loss.item())

    got, fields = read_gguf(got_path)
    ref, _ = read_gguf(ref_path)
    assert bytes(fields["general.type"].parts[-1]).decode() == "adapter"
    assert set(got) == set(ref) and len(got) == len(lora)
    worst = 0.0
    for name, g in got.items():
        r = ref[name]
        assert g.shape == r.shape, name
        assert np.abs(r).max() > 0, f"{name}: PEFT's gradient is zero, the check would be empty"
        err = np.abs(g - r).max() / np.abs(r).max()
        worst = max(worst, err)
        assert err < TOLERANCE, f"{name}: max rel err {err:.2e}"
    print(f"{variant}: loss {got_loss:.6f} vs {loss.item():.6f}, {len(got)} tensors, "
          f"worst rel err {worst:.2e}")


@pytest.fixture(scope="module")
def llama_q(tmp_path_factory, syslm_bin):
    """A random llama whose matrices quantize (widths multiples of 32), its Q8_0 and Q4_0
    quantizations and their dequantizations, and an adapter with random A and B on it."""
    import subprocess

    from lora_files import write_random_adapter

    d = tmp_path_factory.mktemp("qlora")

    def run(*args):
        subprocess.run([str(syslm_bin), *map(str, args)], check=True, capture_output=True)

    f32 = d / "f32.gguf"
    run("init", "--vocab-size", 320, "-o", f32, "--layers", 2, "--dim", 64, "--heads", 4,
        "--kv-heads", 2, "--ff", 96, "--ctx", 64, "--seed", 3)
    files = {"F32": (f32, f32)}
    for q in ("Q8_0", "Q4_0"):
        quant, back = d / f"{q}.gguf", d / f"{q}-f32.gguf"
        run("quantize", f32, quant, q)
        run("quantize", quant, back, "F32")
        files[q] = (quant, back)
    adapter = write_random_adapter(f32, d / "adapter.gguf", rank=3, seed=11, std=0.3)
    return files, adapter


@pytest.mark.parametrize("qtype", ["Q8_0", "Q4_0"])
def test_qlora_gradients_are_those_of_the_dequantized_base(qtype, llama_q, tmp_path, run_syslm):
    import gguf

    files, adapter = llama_q
    quant, back = files[qtype]
    types = {t.name: t.tensor_type.name for t in gguf.GGUFReader(str(quant)).tensors}
    assert types["blk.0.attn_q.weight"] == qtype and types["blk.1.ffn_down.weight"] == qtype
    rng = np.random.default_rng(7)
    ids = ids_arg(rng.integers(0, 320, size=(B, 17)))
    grads = {}
    for name, model in (("quant", quant), ("back", back), ("f32", files["F32"][0])):
        out = tmp_path / f"{name}.gguf"
        loss = float(run_syslm("grad", "-m", model, "--lora", adapter, "--ids", ids, "--batch", B,
                               "-o", out, "-t", 2).stdout.split()[1])
        grads[name] = (loss, read_gguf(out)[0])
    (lq, gq), (lb, gb), (lf, gf) = grads["quant"], grads["back"], grads["f32"]
    assert abs(lq - lb) < 1e-6 * abs(lb), (lq, lb)
    worst_q = 0.0  # how far quantization moved the gradients: the check is not vacuous
    for name, g in gb.items():
        scale = np.abs(g).max()
        assert scale > 0, name
        assert np.abs(gq[name] - g).max() / scale < TOLERANCE, name
        worst_q = max(worst_q, np.abs(gf[name] - g).max() / scale)
    assert worst_q > 10 * TOLERANCE, f"{qtype} left the gradients unchanged ({worst_q:.1e})"
    # activation recompute recomputes each pair's A x too: bit-identical gradients
    for policy in ("selective", "full"):
        out = tmp_path / f"{policy}.gguf"
        run_syslm("grad", "-m", quant, "--lora", adapter, "--ids", ids, "--batch", B, "-o", out,
                  "-t", 2, "--recompute", policy)
        again = read_gguf(out)[0]
        assert all(np.array_equal(again[n], gq[n]) for n in gq), policy


def test_train_lora_learns_and_leaves_the_base_alone(llama_q, tmp_path, run_syslm):
    import hashlib
    import json

    files, _ = llama_q
    base = files["Q8_0"][0]
    digest = hashlib.sha256(base.read_bytes()).hexdigest()
    rng = np.random.default_rng(3)
    ids = ids_arg(rng.integers(3, 320, size=(2, 33)))
    common = ["train", "--init", base, "--lora", 4, "--lora-alpha", 16, "--lora-targets",
              "q,v,o,down", "--ids", ids, "--batch", 2, "--seq", 32, "--lr", "1e-2",
              "--warmup", 0, "--schedule", "constant", "--clip", 0, "-t", 2, "--json"]
    out = tmp_path / "adapter.gguf"
    summary = json.loads(run_syslm(*common, "--steps", 60, "-o", out).stdout.splitlines()[-1])
    assert summary["final_loss"] < summary["first_loss"] - 0.5, summary
    assert hashlib.sha256(base.read_bytes()).hexdigest() == digest
    tensors, fields = read_gguf(out)
    assert float(fields["adapter.lora.alpha"].parts[-1][0]) == 16.0
    assert sorted({n.split(".")[2] for n in tensors}) == ["attn_output", "attn_q", "attn_v",
                                                           "ffn_down"]
    assert len(tensors) == 2 * 4 * 2  # 2 blocks x 4 targets x (A, B)
    # through inference (`logits --lora`), the adapter lowers the loss of the trained sequence
    seq = ids.split(",")[:33]

    def nll(*extra):
        path = tmp_path / "logits.npy"
        run_syslm("logits", "-m", base, "--ids", ",".join(seq), "-o", path, "-t", 2, *extra)
        z = np.load(path).astype(np.float64)[:32]
        lse = np.log(np.exp(z - z.max(1, keepdims=True)).sum(1)) + z.max(1)
        return float(np.mean(lse - z[np.arange(32), np.array(seq[1:], dtype=int)]))

    assert nll("--lora", out) < nll() - 0.5

    # 30 steps with a checkpoint (the adapter and the run's state; a constant learning rate, so
    # the schedule does not depend on --steps), resumed to 60: the uninterrupted run's adapter,
    # bit for bit
    run_syslm(*common, "--steps", 30, "--checkpoint", tmp_path / "half", "--checkpoint-every", 30)
    run_syslm(*common, "--steps", 60, "--resume", tmp_path / "half", "-o",
              tmp_path / "resumed.gguf")
    full, resumed = read_gguf(out)[0], read_gguf(tmp_path / "resumed.gguf")[0]
    assert all(np.array_equal(full[n], resumed[n]) for n in full)
