"""`syslm convert --hf DIR -o model.gguf` against independent references.

Each tiny random model of tiny_hf_models.py is converted and the GGUF is read back with llama.cpp's
own Python package (gguf-py's GGUFReader):
  - every tensor: its GGUF name is the one gguf-py's TensorNameMap gives the HF name, and its data,
    with llama.cpp's documented transforms undone (Q/K RoPE permutation of the llama arch, GPT-2's
    Conv1D transpose, experts stacked), equals the HF state dict exactly; nothing is missing or
    extra; rope_freqs equals transformers' own llama3 frequency ratio;
  - --outtype f16/bf16 bytes equal gguf-py's quants.quantize of the same data; 1-D tensors, norms,
    biases, the router and position embeddings stay F32;
  - the hyper-parameter keys equal config.json's values;
  - the tokenizer: tokens/types/merges/special ids/flags match tokenizer.json, and
    `syslm tokenize` on the GGUF gives the ids HF's tokenizer gives;
  - sharded (index.json) and BF16/F16 checkpoints convert to the same tensors;
  - bad input (unknown architecture, missing/extra/mis-shaped tensor, corrupt safetensors, unknown
    pre-tokenizer) exits 1 with one error naming the file and tensor, leaving no output file.
"""
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys

import gguf
import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType as QT
from safetensors.numpy import load_file, save_file

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import tiny_hf_models as thm  # noqa: E402

ARCH = {"llama": gguf.MODEL_ARCH.LLAMA, "qwen2": gguf.MODEL_ARCH.QWEN2,
        "qwen2moe": gguf.MODEL_ARCH.QWEN2MOE, "qwen3": gguf.MODEL_ARCH.QWEN3,
        "qwen3moe": gguf.MODEL_ARCH.QWEN3MOE,
        "gpt2": gguf.MODEL_ARCH.GPT2, "bloom": gguf.MODEL_ARCH.BLOOM, "mpt": gguf.MODEL_ARCH.MPT,
        "phi3": gguf.MODEL_ARCH.PHI3, "gemma2": gguf.MODEL_ARCH.GEMMA2,
        "gemma3": gguf.MODEL_ARCH.GEMMA3}


def bloom_group_qkv(w, n_head):
    """llama.cpp's converter regroups BLOOM's fused QKV rows from per head (q, k, v of head 0,
    then head 1, ...) to every head's q rows, then k, then v."""
    per_head = w.reshape(n_head, 3, -1, *w.shape[1:])
    return np.concatenate([per_head[:, i].reshape(-1, *w.shape[1:]) for i in range(3)])


@pytest.fixture(scope="session")
def models(tmp_path_factory):
    """Builds each variant once per session, on first use."""
    root = tmp_path_factory.mktemp("hf")
    built = {}

    def get(name):
        if name not in built:
            built[name] = thm.build(name, root)
        return built[name]

    return get


@pytest.fixture(scope="session")
def convert(syslm_bin, tmp_path_factory):
    out_root = tmp_path_factory.mktemp("gguf")
    done = {}

    def run(model_dir, outtype="f32", *extra, name=None):
        key = (str(model_dir), outtype, extra, name)
        if key not in done:
            out = out_root / f"{pathlib.Path(model_dir).name}-{outtype}-{len(done)}.gguf"
            args = [str(syslm_bin), "convert", "--hf", str(model_dir), "-o", str(out),
                    "--outtype", outtype, *extra]
            if name:
                args += ["--name", name]
            proc = subprocess.run(args, capture_output=True, text=True, timeout=600)
            assert proc.returncode == 0, f"convert failed:\n{proc.stderr}"
            done[key] = out
        return done[key]

    return run


def field(reader, key):
    f = reader.get_field(key)
    return None if f is None else f.contents()


def config_of(model_dir):
    return json.loads((pathlib.Path(model_dir) / "config.json").read_text())


def rope_theta(cfg):
    return cfg.get("rope_theta", (cfg.get("rope_parameters") or {}).get("rope_theta"))


def unpermute(w, n_head):
    """Inverse of llama.cpp's LlamaModel.permute: rows of each head go from interleaved RoPE pairs
    back to HF's [first halves | second halves]."""
    rows = w.shape[0]
    return (w.reshape(n_head, rows // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape))


def llamacpp_permute(w, n_head):
    """llama.cpp's LlamaModel.permute, as documented in convert_hf_to_gguf.py."""
    return (w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape))


def test_unpermute_inverts_llamacpp_permutation():
    rng = np.random.default_rng(0)
    w = rng.standard_normal((6 * 12, 7)).astype(np.float32)
    assert np.array_equal(unpermute(llamacpp_permute(w, 6), 6), w)
    assert not np.array_equal(llamacpp_permute(w, 6), w)


def expected_tensors(model_dir):
    """GGUF name -> array as llama.cpp's converter would store it (numpy order), built from the
    HF state dict with gguf-py's name map and the documented transforms."""
    cfg = config_of(model_dir)
    sd = load_file(str(pathlib.Path(model_dir) / "model.safetensors"))
    arch_name = {"LlamaForCausalLM": "llama", "MistralForCausalLM": "llama",
                 "MixtralForCausalLM": "llama", "Qwen2ForCausalLM": "qwen2",
                 "Qwen2MoeForCausalLM": "qwen2moe", "Qwen3ForCausalLM": "qwen3",
                 "Qwen3MoeForCausalLM": "qwen3moe",
                 "GPT2LMHeadModel": "gpt2", "BloomForCausalLM": "bloom",
                 "MptForCausalLM": "mpt", "Phi3ForCausalLM": "phi3", "Gemma2ForCausalLM": "gemma2",
                 "Gemma3ForCausalLM": "gemma3",
                 "Gemma3ForConditionalGeneration": "gemma3"}[cfg["architectures"][0]]
    cfg = cfg.get("text_config", cfg)  # a multimodal checkpoint's language model
    n_layer = cfg.get("num_hidden_layers", cfg.get("n_layer", cfg.get("n_layers")))
    names = gguf.get_tensor_name_map(ARCH[arch_name], n_layer)
    out, experts = {}, {}
    for hf_name, w in sd.items():
        m = re.match(r"(.*\.experts)\.(\d+)\.(.*)", hf_name)
        if m:  # per-expert weights: llama.cpp maps the merged name and stacks the experts
            merged = f"{m.group(1)}.{m.group(3)}"
            if arch_name == "llama":
                merged = merged.replace("model.layers", "layers").replace(
                    "block_sparse_moe.experts", "feed_forward.experts")
            gname = names.get_name(merged, try_suffixes=(".weight", ".bias"))
            assert gname, f"gguf-py has no name for {merged}"
            experts.setdefault(gname, {})[int(m.group(2))] = w
            continue
        if hf_name.startswith(("vision_tower.", "multi_modal_projector.")):
            continue  # the converter takes the language model only
        mapped = hf_name.removeprefix("transformer.") if arch_name == "bloom" else hf_name
        mapped = mapped.removeprefix("language_model.")  # as llama.cpp's Gemma3Model strips it
        gname = names.get_name(mapped, try_suffixes=(".weight", ".bias"))
        assert gname, f"gguf-py has no name for {hf_name}"
        if arch_name == "bloom" and "query_key_value" in hf_name:
            w = bloom_group_qkv(w, cfg["n_head"])
        if arch_name == "llama" and hf_name.endswith(("q_proj.weight", "q_proj.bias")):
            w = llamacpp_permute(w, cfg["num_attention_heads"])
        if arch_name == "llama" and hf_name.endswith(("k_proj.weight", "k_proj.bias")):
            w = llamacpp_permute(w, cfg["num_key_value_heads"])
        if arch_name == "gpt2" and hf_name.endswith(("c_attn.weight", "c_proj.weight", "c_fc.weight")):
            w = w.T
        if arch_name in ("gemma2", "gemma3") and hf_name.endswith("norm.weight"):
            w = w + np.float32(1)  # llama.cpp's Gemma2Model / Gemma3Model store HF's 1 + w
        out[gname] = np.ascontiguousarray(w)
    for gname, parts in experts.items():
        out[gname] = np.stack([parts[e] for e in sorted(parts)])
    if arch_name in ("gpt2", "bloom") and "output.weight" not in out:
        out["output.weight"] = out["token_embd.weight"]  # llama.cpp repeats the tied embedding
    return arch_name, out


def hf_llama3_factors(model_dir):
    """transformers' own llama3 RoPE: the default inverse frequencies over the scaled ones."""
    from transformers import AutoConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
    config = AutoConfig.from_pretrained(model_dir)
    scaled, _ = ROPE_INIT_FUNCTIONS["llama3"](config, "cpu")
    cfg = config_of(model_dir)
    dim = cfg["hidden_size"] // cfg["num_attention_heads"]
    base = torch.arange(0, dim, 2, dtype=torch.int64).float() / dim
    default = 1.0 / (rope_theta(cfg) ** base)
    return (default / scaled).numpy()


@pytest.mark.parametrize("variant", list(thm.VARIANTS))
def test_tensors_match_hf_state_dict(variant, models, convert):
    d = models(variant)
    r = gguf.GGUFReader(convert(d))
    arch, expected = expected_tensors(d)
    got = {t.name: t for t in r.tensors}
    if variant == "llama_llama3_rope":
        assert "rope_freqs.weight" in got
        rf = got.pop("rope_freqs.weight")
        np.testing.assert_allclose(rf.data, hf_llama3_factors(d), rtol=2e-6)
        # All three llama3 regimes occur: kept (1), fully scaled (factor), and smoothed between.
        assert (rf.data == 1).any() and (rf.data == 8).any()
        assert ((rf.data > 1) & (rf.data < 8)).any()
    if variant.startswith("phi3"):  # LongRoPE's factors, as config.json lists them
        rope = config_of(d)["rope_parameters"]
        for kind in ("long", "short"):
            t = got.pop(f"rope_factors_{kind}.weight")
            assert t.tensor_type == QT.F32
            np.testing.assert_array_equal(t.data, np.float32(rope[f"{kind}_factor"]))
    assert set(got) == set(expected), (sorted(set(got) ^ set(expected)))
    if variant == "llama_tied":
        assert "output.weight" not in got  # llama.cpp reads token_embd for a tied output
    for name, t in got.items():
        assert t.tensor_type == QT.F32, name
        want = expected[name]
        assert list(t.shape) == list(reversed(want.shape)), name  # GGML ne = reversed numpy shape
        assert np.array_equal(t.data.reshape(want.shape), want), name
    # The inverse transforms on the GGUF side give back the HF tensors.
    sd = load_file(str(pathlib.Path(d) / "model.safetensors"))
    if arch == "llama":
        cfg = config_of(d)
        q = got["blk.1.attn_q.weight"].data.reshape(-1, cfg["hidden_size"])
        k = got["blk.1.attn_k.weight"].data.reshape(-1, cfg["hidden_size"])
        assert np.array_equal(unpermute(q, cfg["num_attention_heads"]),
                              sd["model.layers.1.self_attn.q_proj.weight"])
        assert np.array_equal(unpermute(k, cfg["num_key_value_heads"]),
                              sd["model.layers.1.self_attn.k_proj.weight"])
    if arch == "gpt2":
        qkv = got["blk.0.attn_qkv.weight"].data
        assert np.array_equal(qkv.reshape(qkv.shape[0], -1).T, sd["transformer.h.0.attn.c_attn.weight"])


def norm_like(name):
    return name.endswith("_norm.weight") or not name.endswith(".weight")


@pytest.mark.parametrize("variant,outtype", [("llama", "f16"), ("qwen2moe", "bf16"),
                                             ("gpt2", "f16"), ("mixtral", "bf16")])
def test_outtype_matches_gguf_py_quants(variant, outtype, models, convert):
    d = models(variant)
    r = gguf.GGUFReader(convert(d, outtype))
    _, expected = expected_tensors(d)
    qt = {"f16": QT.F16, "bf16": QT.BF16}[outtype]
    assert field(r, "general.file_type") == {"f16": 1, "bf16": 32}[outtype]
    seen_half = 0
    for t in r.tensors:
        want = expected[t.name].astype(np.float32)
        forced_f32 = (want.ndim <= 1 or norm_like(t.name) or t.name.endswith(".ffn_gate_inp.weight")
                      or t.name == "position_embd.weight")
        if forced_f32:
            assert t.tensor_type == QT.F32, t.name
            assert np.array_equal(t.data.reshape(want.shape), want), t.name
        else:
            assert t.tensor_type == qt, t.name
            ref = gguf.quants.quantize(want, qt)
            assert np.array_equal(np.frombuffer(t.data.tobytes(), np.uint8),
                                  np.frombuffer(ref.tobytes(), np.uint8)), t.name
            seen_half += 1
    assert seen_half > 0


def expect_kv(r, key, value):
    got = field(r, key)
    if isinstance(value, float):
        assert got == pytest.approx(value, rel=1e-7), key
    else:
        assert got == value, key


@pytest.mark.parametrize("variant", list(thm.VARIANTS))
def test_metadata_matches_config(variant, models, convert):
    d = models(variant)
    cfg = config_of(d)
    cfg = cfg.get("text_config", cfg)  # a multimodal checkpoint's language model
    r = gguf.GGUFReader(convert(d))
    arch = field(r, "general.architecture")
    expect_kv(r, "general.file_type", 0)
    expect_kv(r, "general.quantization_version", 2)
    if arch == "gpt2":
        expect_kv(r, "gpt2.context_length", cfg["n_positions"])
        expect_kv(r, "gpt2.embedding_length", cfg["n_embd"])
        expect_kv(r, "gpt2.block_count", cfg["n_layer"])
        expect_kv(r, "gpt2.feed_forward_length", cfg["n_inner"])
        expect_kv(r, "gpt2.attention.head_count", cfg["n_head"])
        expect_kv(r, "gpt2.attention.layer_norm_epsilon", cfg["layer_norm_epsilon"])
        return
    if arch == "mpt":
        expect_kv(r, "mpt.context_length", cfg["max_seq_len"])
        expect_kv(r, "mpt.embedding_length", cfg["d_model"])
        expect_kv(r, "mpt.block_count", cfg["n_layers"])
        expect_kv(r, "mpt.feed_forward_length", cfg["expansion_ratio"] * cfg["d_model"])
        expect_kv(r, "mpt.attention.head_count", cfg["n_heads"])
        expect_kv(r, "mpt.attention.layer_norm_epsilon", cfg["layer_norm_epsilon"])
        expect_kv(r, "mpt.attention.max_alibi_bias", cfg["attn_config"]["alibi_bias_max"])
        return
    if arch == "phi3":
        rope = cfg["rope_parameters"]
        orig = cfg["original_max_position_embeddings"]
        expect_kv(r, "phi3.context_length", cfg["max_position_embeddings"])
        expect_kv(r, "phi3.rope.scaling.original_context_length", orig)
        expect_kv(r, "phi3.embedding_length", cfg["hidden_size"])
        expect_kv(r, "phi3.feed_forward_length", cfg["intermediate_size"])
        expect_kv(r, "phi3.block_count", cfg["num_hidden_layers"])
        expect_kv(r, "phi3.attention.head_count", cfg["num_attention_heads"])
        expect_kv(r, "phi3.attention.head_count_kv", cfg["num_key_value_heads"])
        expect_kv(r, "phi3.attention.layer_norm_rms_epsilon", cfg["rms_norm_eps"])
        expect_kv(r, "phi3.rope.dimension_count", cfg["hidden_size"] // cfg["num_attention_heads"])
        expect_kv(r, "phi3.rope.freq_base", rope["rope_theta"])
        expect_kv(r, "phi3.attention.sliding_window", cfg.get("sliding_window") or 0)
        # llama.cpp's Phi3MiniModel: sqrt(1 + ln(max / original) / ln(original)).
        scale = cfg["max_position_embeddings"] / orig
        expect_kv(r, "phi3.rope.scaling.attn_factor",
                  float(np.float32(np.sqrt(1 + np.log(scale) / np.log(orig)))))
        return
    if arch == "gemma2":
        expect_kv(r, "gemma2.context_length", cfg["max_position_embeddings"])
        expect_kv(r, "gemma2.embedding_length", cfg["hidden_size"])
        expect_kv(r, "gemma2.block_count", cfg["num_hidden_layers"])
        expect_kv(r, "gemma2.feed_forward_length", cfg["intermediate_size"])
        expect_kv(r, "gemma2.attention.head_count", cfg["num_attention_heads"])
        expect_kv(r, "gemma2.attention.head_count_kv", cfg["num_key_value_heads"])
        expect_kv(r, "gemma2.attention.key_length", cfg["head_dim"])
        expect_kv(r, "gemma2.attention.layer_norm_rms_epsilon", cfg["rms_norm_eps"])
        expect_kv(r, "gemma2.rope.freq_base", rope_theta(cfg))
        expect_kv(r, "gemma2.attn_logit_softcapping", cfg["attn_logit_softcapping"])
        expect_kv(r, "gemma2.final_logit_softcapping", cfg["final_logit_softcapping"])
        expect_kv(r, "gemma2.attention.scale", float(np.float32(cfg["query_pre_attn_scalar"] ** -0.5)))
        expect_kv(r, "gemma2.attention.sliding_window", cfg["sliding_window"])
        assert field(r, "gemma2.attention.sliding_window_pattern") == [
            t == "sliding_attention" for t in cfg["layer_types"]]
        assert field(r, "gemma2.rope.freq_base_swa") is None
        return
    if arch == "gemma3":
        expect_kv(r, "gemma3.context_length", cfg["max_position_embeddings"])
        expect_kv(r, "gemma3.embedding_length", cfg["hidden_size"])
        expect_kv(r, "gemma3.block_count", cfg["num_hidden_layers"])
        expect_kv(r, "gemma3.feed_forward_length", cfg["intermediate_size"])
        expect_kv(r, "gemma3.attention.head_count", cfg["num_attention_heads"])
        expect_kv(r, "gemma3.attention.head_count_kv", cfg["num_key_value_heads"])
        expect_kv(r, "gemma3.attention.key_length", cfg["head_dim"])
        expect_kv(r, "gemma3.attention.layer_norm_rms_epsilon", cfg["rms_norm_eps"])
        rope = cfg["rope_parameters"]
        expect_kv(r, "gemma3.rope.freq_base", rope["full_attention"]["rope_theta"])
        if rope["full_attention"]["rope_type"] == "linear":
            expect_kv(r, "gemma3.rope.scaling.type", "linear")
            expect_kv(r, "gemma3.rope.scaling.factor", rope["full_attention"]["factor"])
        else:
            assert field(r, "gemma3.rope.scaling.type") is None
        expect_kv(r, "gemma3.rope.freq_base_swa", rope["sliding_attention"]["rope_theta"])
        expect_kv(r, "gemma3.attention.scale", float(np.float32(cfg["query_pre_attn_scalar"] ** -0.5)))
        expect_kv(r, "gemma3.attention.sliding_window", cfg["sliding_window"])
        assert field(r, "gemma3.attention.sliding_window_pattern") == [
            t == "sliding_attention" for t in cfg["layer_types"]]
        return
    if arch == "bloom":
        expect_kv(r, "bloom.embedding_length", cfg["hidden_size"])
        expect_kv(r, "bloom.block_count", cfg["n_layer"])
        expect_kv(r, "bloom.feed_forward_length", 4 * cfg["hidden_size"])
        expect_kv(r, "bloom.attention.head_count", cfg["n_head"])
        expect_kv(r, "bloom.attention.layer_norm_epsilon", cfg["layer_norm_epsilon"])
        return
    a = arch + "."
    assert arch == {"llama": "llama", "qwen2": "qwen2", "qwen2moe": "qwen2moe",
                    "qwen3": "qwen3", "qwen3moe": "qwen3moe"}.get(variant.split("_")[0], "llama")
    expect_kv(r, a + "context_length", cfg["max_position_embeddings"])
    expect_kv(r, a + "embedding_length", cfg["hidden_size"])
    expect_kv(r, a + "block_count", cfg["num_hidden_layers"])
    expect_kv(r, a + "feed_forward_length", cfg["intermediate_size"])
    expect_kv(r, a + "attention.head_count", cfg["num_attention_heads"])
    expect_kv(r, a + "attention.head_count_kv", cfg["num_key_value_heads"])
    expect_kv(r, a + "attention.layer_norm_rms_epsilon", cfg["rms_norm_eps"])
    expect_kv(r, a + "rope.freq_base", float(rope_theta(cfg)))
    head_dim = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    expect_kv(r, a + "rope.dimension_count", head_dim)
    if variant in ("qwen3", "qwen3moe"):  # their head_dim is not hidden / heads
        expect_kv(r, a + "attention.key_length", head_dim)
        expect_kv(r, a + "attention.value_length", head_dim)
    scaling = cfg.get("rope_parameters") or cfg.get("rope_scaling") or {}
    if scaling.get("rope_type") == "linear":
        expect_kv(r, a + "rope.scaling.type", "linear")
        expect_kv(r, a + "rope.scaling.factor", scaling["factor"])
    elif scaling.get("rope_type") == "yarn":
        expect_kv(r, a + "rope.scaling.type", "yarn")
        expect_kv(r, a + "rope.scaling.factor", scaling["factor"])
        expect_kv(r, a + "rope.scaling.original_context_length",
                  scaling["original_max_position_embeddings"])
    else:
        assert field(r, a + "rope.scaling.type") is None
    if variant == "mistral_swa":
        expect_kv(r, a + "attention.sliding_window", cfg["sliding_window"])
    elif variant == "qwen3_local_global":
        expect_kv(r, a + "attention.sliding_window", cfg["sliding_window"])
        assert field(r, a + "attention.sliding_window_pattern") == [
            t == "sliding_attention" for t in cfg["layer_types"]]
    else:
        assert field(r, a + "attention.sliding_window") is None
    if variant == "mixtral":
        expect_kv(r, a + "expert_count", cfg["num_local_experts"])
        expect_kv(r, a + "expert_used_count", cfg["num_experts_per_tok"])
    if variant == "qwen2moe":
        expect_kv(r, a + "expert_count", cfg["num_experts"])
        expect_kv(r, a + "expert_used_count", cfg["num_experts_per_tok"])
        expect_kv(r, a + "expert_feed_forward_length", cfg["moe_intermediate_size"])
        expect_kv(r, a + "expert_shared_feed_forward_length", cfg["shared_expert_intermediate_size"])
    if variant == "qwen3moe":  # transformers 5 saves num_experts as num_local_experts
        expect_kv(r, a + "expert_count", cfg.get("num_experts", cfg.get("num_local_experts")))
        expect_kv(r, a + "expert_used_count", cfg["num_experts_per_tok"])
        expect_kv(r, a + "expert_feed_forward_length", cfg["moe_intermediate_size"])
        assert field(r, a + "expert_shared_feed_forward_length") is None
        assert field(r, a + "expert_weights_norm") is None  # renormalised: the default
    if arch == "llama":
        expect_kv(r, "llama.vocab_size", cfg["vocab_size"])


@pytest.mark.parametrize("variant", ["llama", "qwen2", "gpt2", "mixtral"])
def test_tokenizer_metadata(variant, models, convert):
    from transformers import AutoTokenizer
    d = models(variant)
    cfg = config_of(d)
    tj = json.loads((d / "tokenizer.json").read_text())
    hf = AutoTokenizer.from_pretrained(d)
    r = gguf.GGUFReader(convert(d))
    tokens = field(r, "tokenizer.ggml.tokens")
    types = field(r, "tokenizer.ggml.token_type")
    assert len(tokens) == len(types) == cfg["vocab_size"]
    vocab = hf.get_vocab()
    for text, i in vocab.items():
        assert tokens[i] == text, i
    for i in range(len(vocab), cfg["vocab_size"]):  # padding rows of the embedding
        assert tokens[i] == f"[PAD{i}]" and types[i] == 5
    for a in tj["added_tokens"]:
        if a["content"] != tj["model"].get("unk_token"):  # <unk> is UNKNOWN (2)
            assert types[a["id"]] == (3 if a["special"] else 4), a
    if tj["model"].get("byte_fallback"):
        expect_kv(r, "tokenizer.ggml.model", "llama")
        expect_kv(r, "tokenizer.ggml.pre", "default")
        expect_kv(r, "tokenizer.ggml.add_space_prefix", True)
        scores = field(r, "tokenizer.ggml.scores")
        for b in range(256):
            assert types[vocab[f"<0x{b:02X}>"]] == 6
        assert types[vocab["<unk>"]] == 2
        # SPM's bigram picks the highest score: merge rank r must score -r.
        for rank, (left, right) in enumerate(tj["model"]["merges"][:50]):
            first = next(k for k, m in enumerate(tj["model"]["merges"]) if "".join(m) == left + right)
            assert scores[vocab[left + right]] == -first
        expect_kv(r, "tokenizer.ggml.bos_token_id", vocab["<s>"])
        expect_kv(r, "tokenizer.ggml.eos_token_id", vocab["</s>"])
        expect_kv(r, "tokenizer.ggml.unknown_token_id", vocab["<unk>"])
        expect_kv(r, "tokenizer.ggml.add_bos_token", True)
    else:
        expect_kv(r, "tokenizer.ggml.model", "gpt2")
        expect_kv(r, "tokenizer.ggml.pre", {"qwen2": "qwen2", "gpt2": "gpt-2"}[variant])
        merges = field(r, "tokenizer.ggml.merges")
        assert merges == [" ".join(m) for m in tj["model"]["merges"]]
        expect_kv(r, "tokenizer.ggml.add_bos_token", False)
        expect_kv(r, "tokenizer.ggml.eos_token_id", hf.eos_token_id)
    if variant == "qwen2":
        expect_kv(r, "tokenizer.chat_template", thm.CHAT_TEMPLATE)
        expect_kv(r, "tokenizer.ggml.padding_token_id", vocab["<|endoftext|>"])


@pytest.mark.parametrize("variant", ["llama", "qwen2", "gpt2"])
def test_tokenize_like_hf(variant, models, convert, run_syslm, tmp_path):
    """The converted tokenizer, run by `syslm tokenize`, gives HF's ids (with and without BOS)."""
    from transformers import AutoTokenizer
    d = models(variant)
    hf = AutoTokenizer.from_pretrained(d)
    g = convert(d)
    texts = thm.TEST_TEXTS + ["\n".join(thm.corpus()[:60])]
    for i, text in enumerate(texts):
        p = tmp_path / f"t{i}.txt"
        p.write_text(text, encoding="utf-8")
        got = json.loads(run_syslm("tokenize", "-m", g, "-f", p, "--no-bos", "--ids").stdout)
        assert got == hf.encode(text, add_special_tokens=False), text
        got = json.loads(run_syslm("tokenize", "-m", g, "-f", p, "--ids").stdout)
        assert got == hf.encode(text), text


def test_sharded_checkpoint_converts_identically(models, convert, tmp_path):
    d = models("qwen2moe")
    model = thm.load(d)
    sharded = tmp_path / "sharded"
    model.save_pretrained(sharded, max_shard_size="100KB")
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(d / f, sharded / f)
    assert (sharded / "model.safetensors.index.json").exists()
    assert len(list(sharded.glob("model-*.safetensors"))) > 2
    a = convert(d, "f32", name="m").read_bytes()
    b = convert(sharded, "f32", name="m").read_bytes()
    assert a == b


@pytest.mark.parametrize("dtype,outtype", [(torch.bfloat16, "f32"), (torch.float16, "f16"),
                                           (torch.bfloat16, "f16")])
def test_half_precision_checkpoints(dtype, outtype, models, convert, tmp_path):
    d = models("mistral_swa")
    half = tmp_path / "half"
    thm.load(d).to(dtype).save_pretrained(half)
    shutil.copy(d / "tokenizer.json", half / "tokenizer.json")
    shutil.copy(d / "tokenizer_config.json", half / "tokenizer_config.json")
    sd = {k: v.float().numpy() for k, v in thm.load(half).state_dict().items()}
    ref = gguf.GGUFReader(convert(d, outtype))
    r = gguf.GGUFReader(convert(half, outtype))
    cfg = config_of(d)
    for t in r.tensors:
        if t.name == "blk.0.ffn_down.weight":
            want = sd["model.layers.0.mlp.down_proj.weight"]
        elif t.name == "blk.0.attn_k.weight":
            want = llamacpp_permute(sd["model.layers.0.self_attn.k_proj.weight"], cfg["num_key_value_heads"])
        else:
            assert t.tensor_type == next(x.tensor_type for x in ref.tensors if x.name == t.name)
            continue
        if outtype == "f32":
            assert np.array_equal(t.data.reshape(want.shape), want), t.name
        else:
            ref_bytes = gguf.quants.quantize(want, QT.F16).tobytes()
            assert t.data.tobytes() == ref_bytes, t.name


# ---- bad input: one clear error, exit code 1, no output file ----

def copy_model(models, variant, tmp_path):
    dst = tmp_path / variant
    shutil.copytree(models(variant), dst)
    return dst


def convert_fails(run_syslm, model_dir, tmp_path, *patterns, extra=()):
    out = tmp_path / "out.gguf"
    proc = run_syslm("convert", "--hf", model_dir, "-o", out, *extra, check=False)
    assert proc.returncode == 1, proc.stderr
    lines = [l for l in proc.stderr.splitlines() if l.strip()]
    assert lines and lines[0].startswith("syslm: error:"), proc.stderr
    for p in patterns:
        assert p in proc.stderr, (p, proc.stderr)
    assert not out.exists()
    assert not list(tmp_path.glob("out.gguf.tmp*"))
    return proc.stderr


def edit_config(model_dir, **changes):
    cfg = config_of(model_dir)
    cfg.update(changes)
    (model_dir / "config.json").write_text(json.dumps(cfg))


def test_unknown_architecture(models, run_syslm, tmp_path):
    d = copy_model(models, "llama", tmp_path)
    edit_config(d, architectures=["FalconForCausalLM"])
    convert_fails(run_syslm, d, tmp_path, "config.json", "FalconForCausalLM", "not supported")


def test_missing_tensor(models, run_syslm, tmp_path):
    d = copy_model(models, "qwen2", tmp_path)
    sd = load_file(str(d / "model.safetensors"))
    del sd["model.layers.1.mlp.up_proj.weight"]
    save_file(sd, str(d / "model.safetensors"))
    convert_fails(run_syslm, d, tmp_path, "missing tensor 'model.layers.1.mlp.up_proj.weight'")


def test_unexpected_tensor(models, run_syslm, tmp_path):
    d = copy_model(models, "llama", tmp_path)
    sd = load_file(str(d / "model.safetensors"))
    sd["model.layers.0.self_attn.q_norm.weight"] = np.ones(12, np.float32)
    save_file(sd, str(d / "model.safetensors"))
    convert_fails(run_syslm, d, tmp_path, "unexpected tensor 'model.layers.0.self_attn.q_norm.weight'")


def test_shape_mismatch(models, run_syslm, tmp_path):
    d = copy_model(models, "mixtral", tmp_path)
    edit_config(d, intermediate_size=96)
    convert_fails(run_syslm, d, tmp_path, "model.layers.0.block_sparse_moe.experts.0.w1.weight",
                  "[104, 72]", "[96, 72]")


def test_truncated_safetensors(models, run_syslm, tmp_path):
    d = copy_model(models, "gpt2", tmp_path)
    st = d / "model.safetensors"
    st.write_bytes(st.read_bytes()[:-100])
    convert_fails(run_syslm, d, tmp_path, str(st), "beyond the data section")


def test_corrupt_header(models, run_syslm, tmp_path):
    d = copy_model(models, "gpt2", tmp_path)
    st = d / "model.safetensors"
    data = bytearray(st.read_bytes())
    data[8:12] = b"{{{{"
    st.write_bytes(bytes(data))
    convert_fails(run_syslm, d, tmp_path, str(st), "not valid JSON")


def test_missing_shard(models, run_syslm, tmp_path):
    model = thm.load(models("llama"))
    d = tmp_path / "sharded"
    model.save_pretrained(d, max_shard_size="100KB")
    shutil.copy(models("llama") / "tokenizer.json", d / "tokenizer.json")
    shard = sorted(d.glob("model-*.safetensors"))[1]
    shard.unlink()
    convert_fails(run_syslm, d, tmp_path, shard.name, "missing")


def test_unknown_pre_tokenizer_needs_pre(models, run_syslm, tmp_path, syslm_bin):
    d = copy_model(models, "qwen2", tmp_path)
    tj = json.loads((d / "tokenizer.json").read_text())
    tj["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = r"\p{L}+|\p{N}+|[^\p{L}\p{N}]+"
    (d / "tokenizer.json").write_text(json.dumps(tj, ensure_ascii=False))
    convert_fails(run_syslm, d, tmp_path, "unknown BPE pre-tokenizer", "--pre")
    out = tmp_path / "ok.gguf"
    run_syslm("convert", "--hf", d, "-o", out, "--pre", "qwen2")
    assert field(gguf.GGUFReader(out), "tokenizer.ggml.pre") == "qwen2"
    convert_fails(run_syslm, d, tmp_path, "not a pre-tokenizer llama.cpp knows", extra=("--pre", "nope"))


def test_vocab_only(models, run_syslm, tmp_path):
    d = models("gpt2")
    out = tmp_path / "vocab.gguf"
    run_syslm("convert", "--hf", d, "-o", out, "--vocab-only")
    r = gguf.GGUFReader(out)
    assert len(r.tensors) == 0
    assert field(r, "tokenizer.ggml.model") == "gpt2"
    ids = json.loads(run_syslm("tokenize", "-m", out, "-p", "Hello world", "--no-bos", "--ids").stdout)
    from transformers import AutoTokenizer
    assert ids == AutoTokenizer.from_pretrained(d).encode("Hello world", add_special_tokens=False)
