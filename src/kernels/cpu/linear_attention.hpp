// Linear attention (Katharopoulos et al. 2020, "Transformers are RNNs"): the softmax's
// similarity e^(q.k) replaced by phi(q).phi(k) with phi(x) = elu(x) + 1 > 0, so a causal layer is
//   out_t = S_t^T phi(q_t) / (phi(q_t) . z_t),  S_t = sum_{p <= t} phi(k_p) v_p^T,
//   z_t = sum_{p <= t} phi(k_p),
// prefix sums of d x d per KV head: O(T d^2) for T tokens instead of O(T^2 d). No score scale,
// window, ALiBi or soft-capping (AttentionShape::linear refuses them at load). The attention
// entry points (attention.hpp) branch here for a shape with `linear`.
#pragma once

#include <cstdint>
#include <vector>

#include "core/thread_pool.hpp"
#include "kernels/cpu/attention.hpp"

namespace syslm::kernels {

// The recurrent state of one sequence's linear layer in generation: the prefix sums S and z of
// every KV head over positions [0, pos), so a decode token costs O(d^2) however long the
// sequence (the RNN view), and a checkpoint of them at the start of the last call of several
// tokens, so a rollback into or after it (speculative decoding's rejected tokens) resumes from
// it.
struct LinearState {
    std::vector<float> S, z;  // n_head_kv x d x d, n_head_kv x d
    int64_t pos = 0;
    std::vector<float> saved_S, saved_z;
    int64_t saved_pos = -1;  // -1: no checkpoint
    void reset() {           // the next call starts from position 0's empty sums
        pos = 0;
        saved_pos = -1;
    }
};

// Queries at positions pos0 .. pos0 + n_tokens - 1 over the cache's positions up to each (K/V
// rows of s.k_type / s.v_type, contiguous from position 0, or through `paged` when it is not null).
// With a state: its sums are brought to pos0 from the cached rows (from its checkpoint, or from
// position 0, when it is past pos0), then carried through the new rows. Without one: prefix sums
// over the cache when the batch is longer than a head (prefill), else the direct sum
// phi(q).phi(k_p) v_p over the cached rows (O(T d) a token).
// den (may be null): n_tokens x n_head denominators phi(q_t) . z_t, what the backward needs.
void linear_attention(const AttentionShape& s, const float* q, const void* k_cache,
                      const void* v_cache, const KvPagesView* paged, int64_t n_tokens, int64_t pos0,
                      float* out, ThreadPool& pool, Isa isa, float* den = nullptr,
                      LinearState* state = nullptr);

// Gradients over one sequence from position 0 (F32 K/V rows kv_stride apart), from the
// forward's output o and den: dq, and dk, dv (the KV heads' columns) overwritten. The forward's
// prefix sums are rebuilt, then a reverse scan sums each key's later queries.
void linear_attention_backward(const AttentionShape& s, const float* q, const float* k,
                               const float* v, const float* o, const float* den, const float* dout,
                               int64_t n_tokens, float* dq, float* dk, float* dv, ThreadPool& pool,
                               Isa isa);

}  // namespace syslm::kernels
