"""Model math against HF transformers.

For every architecture variant in tiny_hf_models (random-initialised, awkward sizes, float32):
save with save_pretrained, convert with `syslm convert`, and compare syslm's logits with
transformers' for a random prompt — at prefill (11 tokens in one batch) and at each of 16 decode
steps through the KV cache. The same model re-written by gguf-py (llama.cpp's own GGUF writer)
must give the same logits too.
"""
import zlib

import numpy as np
import pytest
import torch

import gguf_edit
import tiny_hf_models

PREFILL, DECODE = 11, 16
TOLERANCE = 1e-4  # max |syslm - hf| / max |hf| per position
MAX_SEEN: dict[str, float] = {}


def rel_err_per_position(got: np.ndarray, ref: np.ndarray) -> np.ndarray:
    return np.abs(got - ref).max(axis=1) / np.abs(ref).max(axis=1)


def rewrite_with_gguf_py(src, dst, extra_u32=None):
    """Copies every key and tensor of src into dst with gguf-py's GGUFWriter, adding the uint32
    keys of extra_u32 (name -> value)."""
    gguf_edit.rewrite(src, dst, keys=extra_u32)


@pytest.mark.parametrize("variant", list(tiny_hf_models.VARIANTS))
def test_logits_match_transformers(variant, tmp_path, run_syslm):
    hf_dir = tiny_hf_models.build(variant, tmp_path / "hf")
    model = tiny_hf_models.load(hf_dir)
    n_vocab = model.config.get_text_config().vocab_size  # a multimodal model's language model's
    ids = torch.Generator().manual_seed(zlib.crc32(variant.encode()))
    tokens = torch.randint(0, n_vocab, (PREFILL + DECODE,), generator=ids)
    with torch.no_grad():
        ref = model(tokens[None]).logits[0].float().numpy()

    gguf_path = tmp_path / "model.gguf"
    run_syslm("convert", "--hf", hf_dir, "-o", gguf_path)
    copy_path = tmp_path / "model-gguf-py.gguf"
    rewrite_with_gguf_py(str(gguf_path), str(copy_path))

    for path in (gguf_path, copy_path):
        out = tmp_path / "logits.npy"
        run_syslm("logits", "-m", path, "--ids", ",".join(map(str, tokens.tolist())),
                  "--prefill", PREFILL, "-o", out, "-t", 2, "--cache-type", "f32")
        got = np.load(out)
        assert got.shape == ref.shape
        err = rel_err_per_position(got, ref)
        MAX_SEEN[variant] = max(MAX_SEEN.get(variant, 0.0), float(err.max()))
        print(f"{variant} ({path.name}): max rel err prefill {err[:PREFILL].max():.2e}, "
              f"decode {err[PREFILL:].max():.2e}")
        assert err[:PREFILL].max() < TOLERANCE, f"prefill rel err {err[:PREFILL]}"
        assert err[PREFILL:].max() < TOLERANCE, f"decode rel err {err[PREFILL:]}"


def global_token_masks(T, window, n_global):
    """transformers' per-layer-type 4D masks for T positions: the local layers see their window
    and the first n_global positions (syslm's attention.global_tokens), the global ones all."""
    t = torch.arange(T)[:, None]
    p = torch.arange(T)[None, :]
    causal = p <= t
    local = causal & ((t - p < window) | (p < n_global))
    as_float = lambda m: torch.zeros(T, T).masked_fill(~m, float("-inf"))[None, None]
    return {"full_attention": as_float(causal), "sliding_attention": as_float(local)}


def test_global_tokens_match_masked_transformers(tmp_path, run_syslm):
    """Global tokens (the first G positions visible to every local layer besides its window),
    checked against transformers' Qwen3 run with the same visibility as an explicit mask: prefill
    and decode through the KV cache (the ring cache: KvRing in tests/model)."""
    hf_dir = tiny_hf_models.build("qwen3_local_global", tmp_path / "hf")  # window 5 on layers 0, 1
    model = tiny_hf_models.load(hf_dir)
    n = 40
    tokens = torch.randint(0, model.config.vocab_size, (n,), generator=torch.Generator().manual_seed(3))
    gguf_path = tmp_path / "model.gguf"
    run_syslm("convert", "--hf", hf_dir, "-o", gguf_path)
    for n_global in (1, 3):
        with torch.no_grad():
            ref = model(tokens[None], attention_mask=global_token_masks(n, 5, n_global)).logits[0].numpy()
            plain = model(tokens[None]).logits[0].numpy()
        assert np.abs(ref - plain)[8:].max() > 1e-2  # the global tokens change what follows
        path = tmp_path / f"global{n_global}.gguf"
        rewrite_with_gguf_py(str(gguf_path), str(path), {"qwen3.attention.global_tokens": n_global})
        out = tmp_path / "logits.npy"
        run_syslm("logits", "-m", path, "--ids", ",".join(map(str, tokens.tolist())),
                  "--prefill", 12, "-o", out, "-t", 2, "--cache-type", "f32")
        err = rel_err_per_position(np.load(out), ref)
        print(f"global tokens {n_global}: max rel err prefill {err[:12].max():.2e}, "
              f"decode {err[12:].max():.2e}")
        assert err.max() < TOLERANCE, err


@pytest.mark.parametrize("variant", ["llama", "gpt2", "mixtral"])
def test_f16_kv_cache_stays_close(variant, tmp_path, run_syslm):
    """The default F16 KV cache rounds keys and values to 11 significant bits: logits move by
    about that much, not more (the F32 cache above is the exact path)."""
    hf_dir = tiny_hf_models.build(variant, tmp_path / "hf")
    model = tiny_hf_models.load(hf_dir)
    gen = torch.Generator().manual_seed(7)
    tokens = torch.randint(0, model.config.vocab_size, (PREFILL + DECODE,), generator=gen)
    with torch.no_grad():
        ref = model(tokens[None]).logits[0].float().numpy()
    gguf_path = tmp_path / "model.gguf"
    run_syslm("convert", "--hf", hf_dir, "-o", gguf_path)
    out = tmp_path / "logits.npy"
    run_syslm("logits", "-m", gguf_path, "--ids", ",".join(map(str, tokens.tolist())),
              "--prefill", PREFILL, "-o", out, "-t", 2)
    err = rel_err_per_position(np.load(out), ref)
    print(f"{variant}: F16 KV cache max rel err {err.max():.2e}")
    assert err.max() < 2e-3
