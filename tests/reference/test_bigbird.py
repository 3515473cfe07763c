"""BigBird's block-sparse attention (syslm's <arch>.attention.random_blocks, .random_block_size
and .random_seed, with a window and global tokens) against PyTorch: transformers' Llama with an
attention function registered for the test, which applies the dense mask written out here from
its definition. A local layer's query at position t sees the keys p <= t with t - p < window, the
first global tokens, and the key blocks its query block (t // size) drew: min(R, candidates) of
the blocks wholly at or after the global tokens and wholly before the window of the block's first
query, by Floyd's sampling with SplitMix64 (the layer's seed mixes in its index). Logits at
prefill and every decode step, and every gradient, must match; the file without random blocks
must give other logits.
"""
import torch
from transformers import AttentionInterface
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface

import gguf_edit
from syslm_checks import check_changes_logits, check_logits, llama_with_attention
from test_train_grads import B, check_against_autograd

LOCAL = [True, False, True]  # layers 0 and 2 local (BigBird), layer 1 global
WINDOW, GLOBAL, RANDOM, SIZE, SEED = 5, 2, 2, 16, 4242
KEYS = {
    "llama.attention.sliding_window": WINDOW,
    "llama.attention.sliding_window_pattern": LOCAL,
    "llama.attention.global_tokens": GLOBAL,
    "llama.attention.random_blocks": RANDOM,
    "llama.attention.random_block_size": SIZE,
    "llama.attention.random_seed": SEED,
}
MASK64 = (1 << 64) - 1


def splitmix64(x):
    z = (x + 0x9E3779B97F4A7C15) & MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


def drawn_blocks(layer, qb):
    seed = splitmix64((SEED << 32) | layer)
    c0 = -(-GLOBAL // SIZE)
    c1 = max(c0, (qb * SIZE - WINDOW + 1) // SIZE)
    n = c1 - c0
    m = min(RANDOM, n)
    if m == n:
        return set(range(c0, c1))
    key = splitmix64(seed ^ splitmix64(qb))
    chosen = []
    for j in range(n - m, n):
        x = splitmix64((key + j) & MASK64) % (j + 1)
        chosen.append(j if x in chosen else x)
    return {c0 + x for x in chosen}


def visible(layer, n_q, n_k):
    """[n_q, n_k] bool: the last n_q of n_k positions as queries."""
    mask = torch.zeros(n_q, n_k, dtype=torch.bool)
    for i in range(n_q):
        t = n_k - n_q + i
        drawn = drawn_blocks(layer, t // SIZE)
        for p in range(t + 1):
            mask[i, p] = t - p < WINDOW or p < GLOBAL or p // SIZE in drawn
    return mask


def attention(module, query, key, value, attention_mask, scaling, dropout=0.0, **kwargs):
    groups = query.shape[1] // key.shape[1]
    key = key.repeat_interleave(groups, dim=1)
    value = value.repeat_interleave(groups, dim=1)
    n_q, n_k = query.shape[2], key.shape[2]
    il = module.layer_idx
    mask = (visible(il, n_q, n_k) if LOCAL[il]
            else torch.ones(n_q, n_k, dtype=torch.bool).tril(n_k - n_q))
    scores = (query @ key.transpose(2, 3)) * scaling
    weights = scores.masked_fill(~mask, float("-inf")).softmax(-1)
    return (weights @ value).transpose(1, 2).contiguous(), weights


AttentionInterface.register("syslm_bigbird_test", attention)
AttentionMaskInterface.register("syslm_bigbird_test", ALL_MASK_ATTENTION_FUNCTIONS["sdpa"])


def test_draw_reaches_beyond_the_window():
    # The mask the checks below use is not a plain window: blocks are drawn, at random.
    draws = [drawn_blocks(0, qb) for qb in range(5, 12)]
    assert all(len(d) == RANDOM for d in draws)
    assert len({frozenset(d) for d in draws}) > 3
    assert drawn_blocks(0, 9) != drawn_blocks(2, 9) or drawn_blocks(0, 10) != drawn_blocks(2, 10)


def bigbird_model(tmp_path, run_syslm):
    hf_dir, model, base = llama_with_attention(tmp_path, run_syslm, "syslm_bigbird_test")
    path = tmp_path / "bigbird.gguf"
    gguf_edit.rewrite(base, path, keys=KEYS)
    plain = tmp_path / "window.gguf"  # the same window and global tokens, no random blocks
    gguf_edit.rewrite(base, plain, keys={k: v for k, v in KEYS.items() if "random" not in k})
    return hf_dir, model, plain, path


def test_bigbird_logits_match(tmp_path, run_syslm):
    _, model, plain, path = bigbird_model(tmp_path, run_syslm)
    tokens = torch.randint(0, model.config.vocab_size, (130,),
                           generator=torch.Generator().manual_seed(31))
    # Prefill 83 tokens (two query tiles, several query blocks that draw), then 47 decode steps.
    ref = check_logits(run_syslm, path, model, tokens, 83, tmp_path, "BigBird")
    check_changes_logits(run_syslm, plain, tokens, 83, ref, tmp_path)


def test_bigbird_gradients_match(tmp_path, run_syslm):
    hf_dir, model, _, _ = bigbird_model(tmp_path, run_syslm)
    n_vocab = model.config.vocab_size
    length = 150  # three key blocks of the backward, rows reached only through random blocks
    ids = torch.randint(0, n_vocab, (B, length + 1), generator=torch.Generator().manual_seed(8))
    logits = model(input_ids=ids[:, :length]).logits
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, n_vocab), ids[:, 1:].reshape(-1))
    loss.backward()
    check_against_autograd("llama", model, hf_dir, ids, loss, tmp_path, run_syslm,
                           extra_keys=KEYS)
