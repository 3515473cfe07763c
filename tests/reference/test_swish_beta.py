"""Learnable activations: SwiGLU's gate with a Swish beta per channel (syslm's
<arch>.feed_forward.swish_beta, tensors blk.N.ffn_act_beta.weight) against transformers' Llama
whose MLP act_fn is replaced by x * sigmoid(beta * x) with beta an nn.Parameter.

The converted model gets the key and random betas (negative ones too) through gguf-py; syslm's
logits (prefill and KV-cache decode) and every gradient, the betas' included, must match
PyTorch's. A short `syslm train --swish-beta` run must move the betas away from 1.
"""
import numpy as np
import torch

import gguf_edit
import tiny_hf_models
from syslm_checks import (check_changes_logits, check_gradients, check_logits,
                          reference_gradients)
from test_train_grads import read_gguf


class SwishBeta(torch.nn.Module):
    def __init__(self, beta):
        super().__init__()
        self.beta = torch.nn.Parameter(beta)

    def forward(self, x):
        return x * torch.sigmoid(self.beta * x)


def test_swish_beta_matches_transformers(tmp_path, run_syslm):
    hf_dir = tiny_hf_models.build("llama", tmp_path / "hf")
    model = tiny_hf_models.load(hf_dir)
    gen = torch.Generator().manual_seed(17)
    betas = {}
    for il, layer in enumerate(model.model.layers):
        beta = torch.rand(model.config.intermediate_size, generator=gen) * 2.5 - 0.5
        layer.mlp.act_fn = SwishBeta(beta)
        betas[f"blk.{il}.ffn_act_beta.weight"] = beta.numpy()
    base = tmp_path / "base.gguf"
    run_syslm("convert", "--hf", hf_dir, "-o", base)
    path = tmp_path / "beta.gguf"
    gguf_edit.rewrite(base, path, keys={"llama.feed_forward.swish_beta": True}, tensors=betas)

    n_vocab = model.config.vocab_size
    tokens = torch.randint(0, n_vocab, (20,), generator=torch.Generator().manual_seed(2))
    ref = check_logits(run_syslm, path, model, tokens, 8, tmp_path, "swish beta")
    # The betas matter: the same file read as SwiGLU (beta = 1) gives other logits.
    check_changes_logits(run_syslm, base, tokens, 8, ref, tmp_path)

    ids = torch.randint(0, n_vocab, (2, 10), generator=torch.Generator().manual_seed(6))
    loss, ref = reference_gradients(run_syslm, model, hf_dir, ids, tmp_path)
    for il, layer in enumerate(model.model.layers):
        ref[f"blk.{il}.ffn_act_beta.weight"] = layer.mlp.act_fn.beta.grad.numpy()
    check_gradients(run_syslm, path, ids, loss, ref, tmp_path, "swish beta")


def test_training_learns_the_betas(tmp_path, run_syslm):
    out = tmp_path / "trained.gguf"
    run_syslm("train", "--arch", "llama", "--swish-beta", "--layers", 2, "--dim", 48, "--heads", 4,
              "--synthetic-data", "--vocab", 300, "--seq", 32, "--batch", 4, "--steps", 30,
              "--lr", 3e-3, "-o", out, "-t", 2)
    got, fields = read_gguf(out)
    assert "llama.feed_forward.swish_beta" in fields
    beta = got["blk.0.ffn_act_beta.weight"]
    assert beta.size > 0 and np.abs(beta - 1).max() > 1e-3, beta[:8]
