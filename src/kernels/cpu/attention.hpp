// Causal self-attention of a batch of new tokens over a layer's KV cache (keys already rotated).
// Token t sits at position pos0 + t and attends to the cached positions p with
// pos - window < p <= pos (window = 0: no window). GQA/MQA: query head h reads KV head
// h / (n_head / n_head_kv). Only the visible positions are scanned.
#pragma once

#include <cstdint>

#include "core/thread_pool.hpp"

namespace syslm::kernels {

struct AttentionShape {
    int n_head;
    int n_head_kv;
    int head_dim;
    int64_t kv_stride;  // floats between consecutive positions in the K and V caches
    int window = 0;
    float scale;  // usually 1/sqrt(head_dim)
};

// q: n_tokens rows of n_head*head_dim; out: same shape.
void attention(const AttentionShape& s, const float* q, const float* k_cache, const float* v_cache,
               int64_t n_tokens, int64_t pos0, float* out, ThreadPool& pool);

}  // namespace syslm::kernels
