"""Training math against PyTorch autograd.

For each dense architecture variant of tiny_hf_models (random-initialised, awkward sizes, FP32):
the loss of a batch of random token sequences (next-token cross-entropy, mean over the batch)
and the gradient of every parameter, from `syslm grad` and from transformers + loss.backward().
PyTorch's gradients are written as an HF checkpoint and converted by `syslm convert`, so they go
through exactly the renaming and re-layout the weights went through (e.g. the Q/K row
permutation of llama's interleaved RoPE, GPT-2's transposed Conv1D) before the tensor-by-tensor
comparison.
"""
import shutil

import zlib

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import tiny_hf_models

B, T = 2, 9
TOLERANCE = 1e-4  # max |syslm - torch| / max |torch| per tensor
DENSE = ["llama", "llama_llama3_rope", "llama_tied", "mistral_swa", "qwen2", "qwen3",
         "qwen3_local_global", "gpt2", "bloom", "mpt", "phi3", "phi3_long_train", "gemma2",
         "gemma3"]


def read_gguf(path):
    import gguf

    reader = gguf.GGUFReader(str(path))
    tensors = {t.name: np.array(t.data, dtype=np.float32).reshape(-1) for t in reader.tensors}
    fields = {name: field for name, field in reader.fields.items()}
    return tensors, fields


def check_against_autograd(variant, model, hf_dir, ids, loss, tmp_path, run_syslm, *extra,
                           extra_keys=None):
    """Runs `syslm grad` on the converted model (with the uint32 keys extra_keys added); checks its
    loss and every gradient against PyTorch's (loss.backward() already run) and returns the syslm
    model and gradient paths."""
    # PyTorch's gradients as a checkpoint of the same model, converted like the weights.
    grad_dir = tmp_path / "grads_hf"
    shutil.copytree(hf_dir, grad_dir)
    # The model saves its own gradients: save_pretrained applies transformers' conversion back to
    # the checkpoint layout (e.g. Mixtral's fused in-memory experts to per-expert w1/w2/w3).
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(p.grad)
    model.save_pretrained(grad_dir)
    ref_path = tmp_path / "grads_ref.gguf"
    run_syslm("convert", "--hf", grad_dir, "-o", ref_path)

    model_path = tmp_path / "model.gguf"
    run_syslm("convert", "--hf", hf_dir, "-o", model_path)
    if extra_keys:
        from test_model_logits import rewrite_with_gguf_py

        edited = tmp_path / "model-keys.gguf"
        rewrite_with_gguf_py(str(model_path), str(edited), extra_keys)
        model_path = edited
    got_path = tmp_path / "grads.gguf"
    out = run_syslm("grad", "-m", model_path, "--ids", ",".join(map(str, ids.reshape(-1).tolist())),
                    "--batch", B, "-o", got_path, "-t", 2, *extra).stdout
    got_loss = float(out.split()[1])
    assert abs(got_loss - loss.item()) < 1e-5 * abs(loss.item()), (got_loss, loss.item())

    got, _ = read_gguf(got_path)
    ref, _ = read_gguf(ref_path)
    if variant in ("gemma2", "gemma3"):  # the converter stored each norm gradient as 1 + g, as
        import gguf  # for weights: take those from the model itself, named by gguf-py's map

        arch = gguf.MODEL_ARCH.GEMMA2 if variant == "gemma2" else gguf.MODEL_ARCH.GEMMA3
        names = gguf.get_tensor_name_map(arch, model.config.num_hidden_layers)
        for hf_name, p in model.named_parameters():
            if hf_name.endswith("norm.weight"):
                ref[names.get_name(hf_name, try_suffixes=(".weight",))] = p.detach().numpy().reshape(-1)
    assert got, "no gradients written"
    if variant in ("gpt2", "bloom"):
        # GPT-2 and BLOOM tie lm_head to the embedding; the GGUF holds the output matrix as a second copy, which
        # syslm trains as the same tensor: both names carry the one tied gradient.
        assert np.array_equal(got["output.weight"], got["token_embd.weight"])
    worst = 0.0
    for name, g in got.items():
        assert name in ref, f"{name}: no PyTorch gradient"
        r = ref[name]
        assert g.shape == r.shape, name
        err = np.abs(g - r).max() / max(np.abs(r).max(), 1e-12)
        worst = max(worst, err)
        assert err < TOLERANCE, f"{name}: max rel err {err:.2e}"
    # Every trainable tensor of the reference has a syslm gradient (RoPE's factors are constants).
    assert set(ref) - {"rope_freqs.weight", "rope_factors_long.weight",
                       "rope_factors_short.weight"} == set(got)
    print(f"{variant}: loss {got_loss:.6f} vs {loss.item():.6f}, worst tensor rel err {worst:.2e}")
    return model_path, got_path


@pytest.mark.parametrize("precision,scale,bar", [("bf16", 1, 3e-2), ("f16", 1024, 4e-3)])
def test_mixed_precision_gradients_stay_near_fp32(precision, scale, bar, tmp_path, run_syslm):
    """BF16 / FP16 mixed precision (rounded matmul operands, f32 accumulation and everything
    else; FP16 with a loss scale, written unscaled): the loss and every gradient stay within the
    format's rounding of PyTorch's FP32 values, and they do differ from FP32 (the path ran)."""
    for variant in ("llama", "gpt2"):
        hf_dir = tiny_hf_models.build(variant, tmp_path / variant)
        model = tiny_hf_models.load(hf_dir)
        n_vocab = model.config.vocab_size
        gen = torch.Generator().manual_seed(zlib.crc32(variant.encode()) + 1)
        ids = torch.randint(0, n_vocab, (B, T + 1), generator=gen)
        logits = model(input_ids=ids[:, :T]).logits
        loss = F.cross_entropy(logits.reshape(-1, n_vocab), ids[:, 1:].reshape(-1))
        loss.backward()
        grad_dir = tmp_path / f"{variant}_grads_hf"
        shutil.copytree(hf_dir, grad_dir)
        with torch.no_grad():
            for p in model.parameters():
                p.copy_(p.grad)
        model.save_pretrained(grad_dir)
        ref_path = tmp_path / f"{variant}_ref.gguf"
        run_syslm("convert", "--hf", grad_dir, "-o", ref_path)
        model_path = tmp_path / f"{variant}.gguf"
        run_syslm("convert", "--hf", hf_dir, "-o", model_path)
        got_path = tmp_path / f"{variant}_{precision}.gguf"
        out = run_syslm("grad", "-m", model_path, "--precision", precision, "--loss-scale", scale,
                        "-t", 2, "--batch", B,
                        "--ids", ",".join(map(str, ids.reshape(-1).tolist())), "-o",
                        got_path).stdout
        got_loss = float(out.split()[1])
        assert abs(got_loss - loss.item()) < 5e-3 * loss.item(), (got_loss, loss.item())
        got, _ = read_gguf(got_path)
        ref, _ = read_gguf(ref_path)
        worst, least = 0.0, 1.0
        for name, g in got.items():
            r = ref[name]
            err = np.abs(g - r).max() / max(np.abs(r).max(), 1e-12)
            worst, least = max(worst, err), min(least, err)
            assert err < bar, f"{variant} {name}: {precision} rel err {err:.2e}"
        assert worst > 1e-5, f"{precision} gradients equal fp32's: the {precision} path did not run"
        print(f"{variant} {precision}: loss {got_loss:.6f} vs fp32 {loss.item():.6f}, "
              f"rel err per tensor {least:.1e}..{worst:.1e}")


def check_recompute_is_bit_identical(model_path, got_path, ids, tmp_path, run_syslm, *extra):
    for policy in ("selective", "full"):
        recomputed = tmp_path / f"grads_{policy}.gguf"
        run_syslm("grad", "-m", model_path, "--ids", ",".join(map(str, ids.reshape(-1).tolist())),
                  "--batch", B, "-o", recomputed, "-t", 2, "--recompute", policy, *extra)
        again, _ = read_gguf(recomputed)
        for name, g in read_gguf(got_path)[0].items():
            assert np.array_equal(g, again[name]), f"{name}: {policy} recompute changed it"


@pytest.mark.parametrize("variant", DENSE)
def test_gradients_match_autograd(variant, tmp_path, run_syslm):
    hf_dir = tiny_hf_models.build(variant, tmp_path / "hf")
    model = tiny_hf_models.load(hf_dir)
    n_vocab = model.config.vocab_size
    gen = torch.Generator().manual_seed(zlib.crc32(variant.encode()))
    ids = torch.randint(0, n_vocab, (B, T + 1), generator=gen)

    logits = model(input_ids=ids[:, :T]).logits
    loss = F.cross_entropy(logits.reshape(-1, n_vocab), ids[:, 1:].reshape(-1))
    loss.backward()
    model_path, got_path = check_against_autograd(variant, model, hf_dir, ids, loss, tmp_path,
                                                  run_syslm)
    # Activation recompute, selective or full, gives bit-identical gradients.
    check_recompute_is_bit_identical(model_path, got_path, ids, tmp_path, run_syslm)


def test_global_token_gradients_match_autograd(tmp_path, run_syslm):
    """Global tokens (syslm's attention.global_tokens = 2 on Qwen3's local layers, window 5):
    the loss and gradients of a batch of 17 tokens against PyTorch with the same visibility as
    an explicit mask."""
    from test_model_logits import global_token_masks

    hf_dir = tiny_hf_models.build("qwen3_local_global", tmp_path / "hf")
    model = tiny_hf_models.load(hf_dir)
    n_vocab, length = model.config.vocab_size, 17
    ids = torch.randint(0, n_vocab, (B, length + 1), generator=torch.Generator().manual_seed(5))
    logits = model(input_ids=ids[:, :length], attention_mask=global_token_masks(length, 5, 2)).logits
    loss = F.cross_entropy(logits.reshape(-1, n_vocab), ids[:, 1:].reshape(-1))
    loss.backward()
    check_against_autograd("qwen3_local_global", model, hf_dir, ids, loss, tmp_path, run_syslm,
                           extra_keys={"qwen3.attention.global_tokens": 2})


@pytest.mark.parametrize("variant,z_coef", [("mixtral", 0.0), ("qwen3moe", 0.0), ("mixtral", 0.02)])
def test_moe_gradients_match_autograd(variant, z_coef, tmp_path, run_syslm):
    """Mixtral and Qwen3-MoE (4 experts, top-2, renormalised weights): cross-entropy plus HF's
    load-balancing auxiliary loss (router_aux_loss_coef, all layers' rows), and the router
    z-loss of ST-MoE (the mean over layers and rows of logsumexp(router logits)^2, written out
    here in PyTorch), every gradient incl. the router's and each expert's."""
    coef = 0.05  # large enough that the auxiliary loss's gradient shows in the router's
    hf_dir = tiny_hf_models.build(variant, tmp_path / "hf")
    model = tiny_hf_models.load(hf_dir)
    model.config.router_aux_loss_coef = coef
    n_vocab = model.config.vocab_size
    gen = torch.Generator().manual_seed(zlib.crc32(variant.encode()))
    ids = torch.randint(0, n_vocab, (B, T + 1), generator=gen)

    out = model(input_ids=ids[:, :T], output_router_logits=True)
    ce = F.cross_entropy(out.logits.reshape(-1, n_vocab), ids[:, 1:].reshape(-1))
    assert out.aux_loss is not None and out.aux_loss.item() > 0
    loss = ce + coef * out.aux_loss
    if z_coef > 0:
        z = torch.stack([torch.logsumexp(r, dim=-1).pow(2).mean() for r in out.router_logits])
        loss = loss + z_coef * z.mean()
    loss.backward()
    extra = ("--moe-aux-coef", coef, "--router-z-loss", z_coef)
    model_path, got_path = check_against_autograd(variant, model, hf_dir, ids, loss, tmp_path,
                                                  run_syslm, *extra)
    check_recompute_is_bit_identical(model_path, got_path, ids, tmp_path, run_syslm, *extra)


def test_shared_expert_training_is_refused_clearly(tmp_path, run_syslm):
    hf_dir = tiny_hf_models.build("qwen2moe", tmp_path / "hf")
    model_path = tmp_path / "model.gguf"
    run_syslm("convert", "--hf", hf_dir, "-o", model_path)
    proc = run_syslm("grad", "-m", model_path, "--ids", "1,2,3", "-o", tmp_path / "g.gguf",
                     check=False)
    assert proc.returncode != 0
    assert "shared experts" in proc.stderr
