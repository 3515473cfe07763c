"""Linear attention (syslm's <arch>.attention.linear_pattern) against PyTorch: transformers' Llama
with an attention function registered for the test, which runs the layers marked linear as the
dense masked form of elu(x) + 1 feature-map attention (Katharopoulos et al. 2020):
    out_t = sum_{p <= t} phi(q_t).phi(k_p) v_p / sum_{p <= t} phi(q_t).phi(k_p)
and the others as ordinary causal softmax attention. syslm computes the linear layers by prefix
sums (training, prefill) or direct sums over the KV cache (decode): logits at prefill and every
decode step, and every gradient, must match.
"""
import torch
import torch.nn.functional as F
from transformers import AttentionInterface
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface

import gguf_edit
from syslm_checks import check_changes_logits, check_logits, llama_with_attention
from test_train_grads import B, check_against_autograd

PATTERN = [True, False, True]  # layers 0 and 2 linear, layer 1 softmax


def attention(module, query, key, value, attention_mask, scaling, dropout=0.0, **kwargs):
    groups = query.shape[1] // key.shape[1]
    key = key.repeat_interleave(groups, dim=1)
    value = value.repeat_interleave(groups, dim=1)
    n_q, n_k = query.shape[2], key.shape[2]
    causal = torch.ones(n_q, n_k, dtype=torch.bool).tril(n_k - n_q)
    if PATTERN[module.layer_idx]:
        weights = (F.elu(query) + 1) @ (F.elu(key) + 1).transpose(2, 3)
        weights = weights.masked_fill(~causal, 0)
        weights = weights / weights.sum(-1, keepdim=True)
    else:
        scores = (query @ key.transpose(2, 3)) * scaling
        weights = scores.masked_fill(~causal, float("-inf")).softmax(-1)
    return (weights @ value).transpose(1, 2).contiguous(), weights


AttentionInterface.register("syslm_linear_test", attention)
# The function masks by itself; transformers still builds a mask for the name.
AttentionMaskInterface.register("syslm_linear_test", ALL_MASK_ATTENTION_FUNCTIONS["sdpa"])


def linear_model(tmp_path, run_syslm):
    hf_dir, model, base = llama_with_attention(tmp_path, run_syslm, "syslm_linear_test")
    path = tmp_path / "linear.gguf"
    gguf_edit.rewrite(base, path, keys={"llama.attention.linear_pattern": PATTERN})
    return hf_dir, model, base, path


def test_linear_attention_logits_match(tmp_path, run_syslm):
    _, model, base, path = linear_model(tmp_path, run_syslm)
    tokens = torch.randint(0, model.config.vocab_size, (27,),
                           generator=torch.Generator().manual_seed(12))
    # Prefill 15 tokens (prefix sums: more than a head's 12 dimensions), then 12 decode steps.
    ref = check_logits(run_syslm, path, model, tokens, 15, tmp_path, "linear attention")
    check_changes_logits(run_syslm, base, tokens, 15, ref, tmp_path)  # the softmax model's


def test_linear_attention_gradients_match(tmp_path, run_syslm):
    hf_dir, model, _, _ = linear_model(tmp_path, run_syslm)
    n_vocab = model.config.vocab_size
    length = 17  # more tokens than a head's 12 dimensions: the training forward's prefix sums
    ids = torch.randint(0, n_vocab, (B, length + 1), generator=torch.Generator().manual_seed(21))
    logits = model(input_ids=ids[:, :length]).logits
    loss = F.cross_entropy(logits.reshape(-1, n_vocab), ids[:, 1:].reshape(-1))
    loss.backward()
    check_against_autograd("llama", model, hf_dir, ids, loss, tmp_path, run_syslm,
                           extra_keys={"llama.attention.linear_pattern": PATTERN})
