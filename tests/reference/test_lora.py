"""LoRA adapters against PEFT: a PEFT adapter with random A and B (llama: Q/K rows permuted in the
GGUF; qwen2: biases; gpt2: fused Conv1D QKV) on every projection, converted by `syslm convert
--lora-hf` to llama.cpp's adapter GGUF, gives syslm's `logits --lora` the logits of transformers
+ PEFT (1e-4 relative, as the base models' check); --lora-scaled 0.5 those of PEFT with half
the scaling; rsLoRA's alpha / sqrt(r); `syslm lora merge` a model whose logits are those of
PEFT's merge_and_unload. Bad adapter files are one-line errors naming the file and tensor."""
import json
import zlib

import numpy as np
import pytest
import torch

import tiny_hf_models
from test_model_logits import TOLERANCE, rel_err_per_position

peft = pytest.importorskip("peft")

TARGETS = {
    "llama": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
    "qwen2": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
    "gpt2": ["c_attn", "c_proj", "c_fc"],
}


def peft_model(variant, root, rslora=False):
    hf_dir = tiny_hf_models.build(variant, root / "hf")
    model = tiny_hf_models.load(hf_dir)
    cfg = peft.LoraConfig(r=4, lora_alpha=12, target_modules=TARGETS[variant], lora_dropout=0.0,
                          init_lora_weights=False, use_rslora=rslora,
                          fan_in_fan_out=variant == "gpt2")
    pm = peft.get_peft_model(model, cfg)
    g = torch.Generator().manual_seed(zlib.crc32(variant.encode()))
    with torch.no_grad():  # B non-zero, large enough that the adapter moves the logits
        for name, p in pm.named_parameters():
            if "lora_" in name:
                p.copy_(0.3 * torch.randn(p.shape, generator=g))
    pm.eval()
    pm.save_pretrained(root / "adapter")
    return hf_dir, pm


def logits(run_syslm, tmp_path, model, ids, *extra):
    out = tmp_path / "logits.npy"
    run_syslm("logits", "-m", model, "--ids", ",".join(map(str, ids)), "--prefill", 20, "-o", out,
              "-t", 2, "--cache-type", "f32", *extra)
    return np.load(out)


@pytest.mark.parametrize("variant", list(TARGETS))
def test_adapter_logits_match_peft(variant, tmp_path, run_syslm):
    hf_dir, pm = peft_model(variant, tmp_path)
    n_vocab = pm.config.vocab_size
    # 20 prefill rows (the prefill GEMMs) and 4 decoded (the row kernel)
    ids = torch.randint(0, n_vocab, (24,), generator=torch.Generator().manual_seed(5)).tolist()
    with torch.no_grad():
        ref = pm(torch.tensor([ids])).logits[0].numpy()
        with pm.disable_adapter():
            base_ref = pm(torch.tensor([ids])).logits[0].numpy()
    base = tmp_path / "base.gguf"
    adapter = tmp_path / "adapter.gguf"
    run_syslm("convert", "--hf", hf_dir, "-o", base)
    out = run_syslm("convert", "--lora-hf", tmp_path / "adapter", "--hf", hf_dir, "-o", adapter).stdout
    assert "rank 4" in out, out
    got = logits(run_syslm, tmp_path, base, ids, "--lora", adapter)
    assert rel_err_per_position(got, ref).max() < TOLERANCE
    # the adapter matters: without it the logits are the base model's, far from PEFT's
    assert rel_err_per_position(logits(run_syslm, tmp_path, base, ids), base_ref).max() < TOLERANCE
    assert rel_err_per_position(base_ref, ref).max() > 100 * TOLERANCE
    # half the scale, as PEFT's scaling halved
    for m in pm.modules():
        if hasattr(m, "scaling") and isinstance(m.scaling, dict) and "default" in m.scaling:
            m.scaling["default"] *= 0.5
    with torch.no_grad():
        half = pm(torch.tensor([ids])).logits[0].numpy()
    got = logits(run_syslm, tmp_path, base, ids, "--lora-scaled", adapter, "0.5")
    assert rel_err_per_position(got, half).max() < TOLERANCE
    # merged: W + s B A in the base's type (F32 here), equal to PEFT's merge
    merged = tmp_path / "merged.gguf"
    run_syslm("lora", "merge", "-m", base, "--lora", adapter, "-o", merged)
    for m in pm.modules():
        if hasattr(m, "scaling") and isinstance(m.scaling, dict) and "default" in m.scaling:
            m.scaling["default"] *= 2.0
    with torch.no_grad():
        merged_ref = pm.merge_and_unload()(torch.tensor([ids])).logits[0].numpy()
    assert rel_err_per_position(logits(run_syslm, tmp_path, merged, ids), merged_ref).max() < TOLERANCE


def test_rslora_scale(tmp_path, run_syslm):
    hf_dir, pm = peft_model("llama", tmp_path, rslora=True)
    ids = [3, 17, 99, 5, 250, 8, 41] * 3 + [7, 7]
    with torch.no_grad():
        ref = pm(torch.tensor([ids])).logits[0].numpy()
    base, adapter = tmp_path / "base.gguf", tmp_path / "adapter.gguf"
    run_syslm("convert", "--hf", hf_dir, "-o", base)
    run_syslm("convert", "--lora-hf", tmp_path / "adapter", "--hf", hf_dir, "-o", adapter)
    got = logits(run_syslm, tmp_path, base, ids, "--lora", adapter)
    assert rel_err_per_position(got, ref).max() < TOLERANCE


def test_bad_adapters_are_named_errors(tmp_path, run_syslm):
    hf_dir, _ = peft_model("llama", tmp_path)
    base, adapter = tmp_path / "base.gguf", tmp_path / "adapter.gguf"
    run_syslm("convert", "--hf", hf_dir, "-o", base)
    run_syslm("convert", "--lora-hf", tmp_path / "adapter", "--hf", hf_dir, "-o", adapter)
    # an adapter for another model: a qwen2 base
    other = tiny_hf_models.build("qwen2", tmp_path / "other")
    other_gguf = tmp_path / "other.gguf"
    run_syslm("convert", "--hf", other, "-o", other_gguf)
    r = run_syslm("logits", "-m", other_gguf, "--ids", "1,2", "-o", tmp_path / "x.npy",
                  "--lora", adapter, check=False)
    assert r.returncode == 1 and "adapter for 'llama'" in r.stderr, r.stderr
    # a model file given as an adapter
    r = run_syslm("logits", "-m", base, "--ids", "1,2", "-o", tmp_path / "x.npy", "--lora", base,
                  check=False)
    assert r.returncode == 1 and "not 'adapter'" in r.stderr, r.stderr
    # DoRA is refused at conversion
    cfg_path = tmp_path / "adapter" / "adapter_config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["use_dora"] = True
    cfg_path.write_text(json.dumps(cfg))
    r = run_syslm("convert", "--lora-hf", tmp_path / "adapter", "--hf", hf_dir, "-o",
                  tmp_path / "dora.gguf", check=False)
    assert r.returncode == 1 and "DoRA" in r.stderr, r.stderr


def test_f16_adapters_are_kept_exact(tmp_path, run_syslm):
    """An adapter stored in F16 (as llama.cpp's converter writes them) is kept in F16 in memory:
    its logits equal those of the same values stored as F32, through the prefill GEMMs and the
    decode row kernel."""
    import gguf

    hf_dir, _ = peft_model("llama", tmp_path)
    base, adapter = tmp_path / "base.gguf", tmp_path / "adapter.gguf"
    run_syslm("convert", "--hf", hf_dir, "-o", base)
    run_syslm("convert", "--lora-hf", tmp_path / "adapter", "--hf", hf_dir, "-o", adapter)
    reader = gguf.GGUFReader(str(adapter))
    paths = {}
    for dtype in (np.float16, np.float32):
        paths[dtype] = tmp_path / f"adapter-{np.dtype(dtype).name}.gguf"
        w = gguf.GGUFWriter(str(paths[dtype]), arch="llama")
        w.add_string("general.type", "adapter")
        w.add_string("adapter.type", "lora")
        w.add_float32("adapter.lora.alpha", float(reader.fields["adapter.lora.alpha"].parts[-1][0]))
        for t in reader.tensors:  # the values of F16, in either type
            values = np.array(t.data, dtype=np.float32).reshape(tuple(reversed(t.shape.tolist())))
            w.add_tensor(t.name, values.astype(np.float16).astype(dtype))
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
    types = {t.tensor_type.name for t in gguf.GGUFReader(str(paths[np.float16])).tensors}
    assert types == {"F16"}, types
    ids = [3, 17, 99, 5, 250, 8, 41] * 3 + [7, 7, 9]
    got = {d: logits(run_syslm, tmp_path, base, ids, "--lora", p) for d, p in paths.items()}
    base_only = logits(run_syslm, tmp_path, base, ids)
    assert rel_err_per_position(got[np.float16], got[np.float32]).max() < TOLERANCE
    assert rel_err_per_position(got[np.float16], base_only).max() > 100 * TOLERANCE
