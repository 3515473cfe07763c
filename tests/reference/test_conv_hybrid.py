"""Conv + attention hybrids (syslm's <arch>.attention.conv_kernel, tensors
blk.N.attn_conv.weight) against transformers' Llama whose attention norm is followed by the
same short causal depthwise convolution: out[t] = sum_{j < k} w[j] * norm(x)[t - j], per channel.

The converted model gets the key and random taps through gguf-py; syslm's logits (prefill, then
decode through the KV cache, which keeps each layer's last normed rows) and every gradient, the
taps' included, must match PyTorch's.
"""
import torch
import torch.nn.functional as F
from transformers.models.llama.modeling_llama import LlamaRMSNorm

import gguf_edit
import tiny_hf_models
from syslm_checks import (check_changes_logits, check_gradients, check_logits,
                          reference_gradients)

K = 3


class ConvRMSNorm(LlamaRMSNorm):
    """The attention norm, then the causal depthwise convolution over positions."""

    def forward(self, x):
        a = super().forward(x)
        out = a * self.taps[0]
        for j in range(1, self.taps.shape[0]):
            out = out + F.pad(a, (0, 0, j, 0))[:, : a.shape[1]] * self.taps[j]
        return out


def conv_model(tmp_path, run_syslm):
    hf_dir = tiny_hf_models.build("llama", tmp_path / "hf")
    model = tiny_hf_models.load(hf_dir)
    gen = torch.Generator().manual_seed(31)
    taps = {}
    for il, layer in enumerate(model.model.layers):
        norm = layer.input_layernorm
        norm.__class__ = ConvRMSNorm
        w = torch.randn(K, model.config.hidden_size, generator=gen) * 0.5
        w[0] += 1
        norm.taps = torch.nn.Parameter(w)
        taps[f"blk.{il}.attn_conv.weight"] = w.numpy()
    base = tmp_path / "base.gguf"
    run_syslm("convert", "--hf", hf_dir, "-o", base)
    path = tmp_path / "conv.gguf"
    gguf_edit.rewrite(base, path, keys={"llama.attention.conv_kernel": K}, tensors=taps)
    return hf_dir, model, base, path


def test_conv_hybrid_logits_match(tmp_path, run_syslm):
    _, model, base, path = conv_model(tmp_path, run_syslm)
    tokens = torch.randint(0, model.config.vocab_size, (23,),
                           generator=torch.Generator().manual_seed(4))
    # One prefill of 9 tokens, then decode steps reading each layer's kept normed rows.
    ref = check_logits(run_syslm, path, model, tokens, 9, tmp_path, "conv hybrid")
    check_changes_logits(run_syslm, base, tokens, 9, ref, tmp_path)  # the convolution matters


def test_conv_hybrid_gradients_match(tmp_path, run_syslm):
    hf_dir, model, _, path = conv_model(tmp_path, run_syslm)
    ids = torch.randint(0, model.config.vocab_size, (2, 12),
                        generator=torch.Generator().manual_seed(9))
    loss, ref = reference_gradients(run_syslm, model, hf_dir, ids, tmp_path)
    for il, layer in enumerate(model.model.layers):
        ref[f"blk.{il}.attn_conv.weight"] = layer.input_layernorm.taps.grad.numpy().reshape(-1)
    check_gradients(run_syslm, path, ids, loss, ref, tmp_path, "conv hybrid")
