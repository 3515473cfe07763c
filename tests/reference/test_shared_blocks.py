"""Cross-layer parameter sharing (ALBERT; syslm's <arch>.block_source) against transformers.

A 3-layer Llama whose layer 2 computes with layer 0's modules (the same nn.Linear / RMSNorm
objects, so PyTorch sums their gradients over both uses) is the reference. Its weights are saved
as an ordinary checkpoint (layer 2 a copy of layer 0) and converted; gguf-py then writes the
shared file: layer 2's tensors dropped, llama.block_source = [0, 1, 0] added. syslm's logits
(prefill and KV-cache decode) and gradients on the shared file must match, `syslm convert
--unshare` must give back the converted file's tensors, and the shared file is smaller.
"""
import os

import numpy as np
import torch

import gguf_edit
import tiny_hf_models
from syslm_checks import check_gradients, check_logits, reference_gradients, save_untied
from test_train_grads import read_gguf

SOURCE = [0, 1, 0]
LEAVES = ["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
          "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj", "input_layernorm",
          "post_attention_layernorm"]


def tie(model, source):
    """Layer il computes with layer source[il]'s modules."""
    layers = model.model.layers
    for il, src in enumerate(source):
        for path in LEAVES if src != il else []:
            parent, _, leaf = path.rpartition(".")
            owner = layers[il].get_submodule(parent) if parent else layers[il]
            setattr(owner, leaf, layers[src].get_submodule(path))


def test_shared_blocks_match_tied_transformers(tmp_path, run_syslm):
    hf_dir = tiny_hf_models.build("llama", tmp_path / "hf")  # 3 layers
    model = tiny_hf_models.load(hf_dir)
    tie(model, SOURCE)
    assert model.model.layers[2].mlp.up_proj is model.model.layers[0].mlp.up_proj
    untied_dir = tmp_path / "hf_untied"
    save_untied(hf_dir, {k: v.detach() for k, v in model.state_dict().items()}, untied_dir)
    full = tmp_path / "full.gguf"
    run_syslm("convert", "--hf", untied_dir, "-o", full)
    shared = tmp_path / "shared.gguf"
    gguf_edit.rewrite(full, shared, keys={"llama.block_source": SOURCE},  # an int32 array
                      drop=[f"blk.{il}." for il, s in enumerate(SOURCE) if s != il])
    print(f"file: shared {os.path.getsize(shared)} bytes, unshared {os.path.getsize(full)}")
    assert os.path.getsize(shared) < os.path.getsize(full)

    # convert --unshare gives back every layer's tensors.
    back = tmp_path / "back.gguf"
    run_syslm("convert", "--unshare", shared, "-o", back)
    want, _ = read_gguf(full)
    got, fields = read_gguf(back)
    assert "llama.block_source" not in fields
    assert set(got) == set(want)
    for name in want:
        assert np.array_equal(got[name], want[name]), name

    # Logits: prefill 9 tokens in one batch, then 12 decode steps through the cache.
    n_vocab = model.config.vocab_size
    tokens = torch.randint(0, n_vocab, (21,), generator=torch.Generator().manual_seed(8))
    check_logits(run_syslm, shared, model, tokens, 9, tmp_path, "shared blocks")

    # Gradients: PyTorch sums a tied module's over its uses; syslm writes one per stored tensor.
    ids = torch.randint(0, n_vocab, (2, 10), generator=torch.Generator().manual_seed(4))
    loss, ref = reference_gradients(run_syslm, model, hf_dir, ids, tmp_path)
    check_gradients(run_syslm, shared, ids, loss,
                    {n: g for n, g in ref.items() if not n.startswith("blk.2.")}, tmp_path,
                    "shared blocks")
