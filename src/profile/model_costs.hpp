// What one token costs a model, for rooflines: the bytes a decode step must read (weights it
// touches + the KV cache) and the arithmetic of each matrix, with the weight type that decides
// which arithmetic peak applies.
#pragma once

#include <string>
#include <vector>

#include "model/transformer.hpp"
#include "profile/machine_probe.hpp"

namespace syslm::profile {

struct MatrixCost {
    std::string op;  // the profiler's op name: attn_q, attn_k, attn_v, attn_qkv, attn_out, ...
    DType type;
    double flops_per_token;  // 2 * n_in * n_out (times the share of tokens routed, for experts)
    double bytes;            // the whole matrix
};

struct ModelCosts {
    double model_bytes = 0;            // every tensor, as llama-bench's model_size
    double n_params = 0;               // every tensor's elements
    double decode_weight_bytes = 0;    // read per decoded token: matrices (routed experts by the
                                       // share used), norms, one embedding row
    double kv_bytes_per_position = 0;  // K and V of one position, all layers, in the cache type
    double attn_flops_per_pair = 0;    // QK^T and PV for one (query, key) pair, all layers
    // Each layer's attention (model::attention_shape: window, global tokens, random blocks).
    std::vector<kernels::AttentionShape> layer_attention;
    std::vector<MatrixCost> matrices;  // output last

    // (query, key) pairs of n tokens after `depth` cached positions, averaged over the layers:
    // n (n + 1) / 2 from an empty cache when every layer is global; a local layer's queries see
    // at most its window; a linear layer's prefix sums as the pairs of the same FLOPs.
    double attention_pairs(int64_t n, int64_t depth = 0) const;
    // Bytes of cache that n decode steps after `depth` cached positions read: each position's K
    // and V rows once per later query (the last w of a local layer), a linear layer's recurrent
    // state once a step (n_head_kv x d x (d + 1) floats).
    double decode_kv_bytes(int64_t n, int64_t depth = 0) const;
};

ModelCosts model_costs(const model::Model& m, model::KvTypes kv_types);

// The arithmetic peak (operations/s) that applies to a matrix of `type` in prefill with n
// threads: the units of the GEMM panel format it runs on (kernels::gemm_panel: FP32 FMA, the
// BF16 dot product or the AMX tiles); without a GEMM, int8 dot products for quantized types.
double matmul_peak(DType type, const ProbeResult& probe, int threads);

// Seconds per repetition at the roofline.
// Decode: n_gen steps after `depth` cached positions, each reading the weights and the cache so
// far at the probe's read bandwidth.
double decode_roofline_seconds(const ModelCosts& c, int n_gen, const ProbeResult& probe,
                               int threads, int depth = 0);
// Prefill: n_prompt tokens after `depth` cached positions in one batch at the arithmetic peaks of
// the types involved (logits for the last token only, as llama-bench).
double prefill_roofline_seconds(const ModelCosts& c, int n_prompt, const ProbeResult& probe,
                                int threads, int depth = 0);

// The effective peak of a profiled op: for matmul ops the flop-weighted peak of its matrices'
// types, for other ops FP32 FMA.
double op_peak(const ModelCosts& c, const std::string& op, const ProbeResult& probe, int threads);

}  // namespace syslm::profile
