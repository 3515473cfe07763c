// Hugging Face tensor names -> llama.cpp's GGUF tensor names (gguf-py tensor_mapping.py), with the
// transforms llama.cpp's converter applies:
//
//   - llama arch (Llama/Mistral/Mixtral): Q and K rows are permuted within each head from HF's
//     half-split RoPE layout to llama.cpp's interleaved pairs: new row 2j+s of a head holds old
//     row s*head_dim/2 + j (s in {0,1}), for weights and biases alike.
//   - GPT-2: Conv1D weights are stored [in, out] and are transposed to Linear's [out, in].
//   - MoE: per-expert 2-D weights are stacked into one 3-D tensor per layer (ffn_*_exps) whose
//     outermost dimension is the expert.
//
// Planning also validates the checkpoint against config.json: every expected tensor present with
// the expected shape, and no tensor left over.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "io/hf_config.hpp"

namespace syslm::io {

enum class HFTransform {
    None,
    PermuteQ,   // llama Q weight/bias: permute rows with n_head heads
    PermuteK,   // llama K weight/bias: permute rows with n_head_kv heads
    Transpose,  // GPT-2 Conv1D weight [in, out] -> [out, in]
    GroupQkv,   // BLOOM's fused QKV rows per head (q, k, v of head 0, then head 1, ...) ->
                // every head's q rows, then k, then v (what llama.cpp's converter writes)
    AddOne,     // Gemma's norm weights: HF multiplies by 1 + w, the GGUF stores 1 + w
};

struct HFTensorPlan {
    std::string name;                   // GGUF name, e.g. "blk.0.attn_q.weight"
    std::vector<std::string> sources;   // HF tensors; several = experts stacked, outermost
    std::vector<int64_t> source_shape;  // PyTorch shape every source has
    HFTransform transform = HFTransform::None;
    std::vector<float> generated;  // data of a computed tensor (rope_freqs); sources empty
    std::vector<int64_t> ne;       // GGML shape of the result, ne[0] innermost
};

using HFShapes = std::map<std::string, std::vector<int64_t>>;  // HF name -> PyTorch shape

// Lists the GGUF tensors to write, in a readable order (embeddings, blocks, output). `where`
// (the model folder) prefixes errors: a missing tensor, a shape mismatch, or a tensor the
// architecture does not use.
std::vector<HFTensorPlan> plan_hf_tensors(const HFModelSpec& spec, const HFShapes& shapes,
                                          const std::string& where);

// Applies a row permutation of llama.cpp's converter to `rows` rows of `cols` floats.
void permute_rope_rows(const float* src, float* dst, int64_t rows, int64_t cols, int64_t n_head);

// `rows` rows of `cols` floats in the order a row transform puts them (PermuteQ, PermuteK,
// GroupQkv); x itself for the others. A LoRA B moves with its base weight's rows.
std::vector<float> reorder_hf_rows(std::vector<float> x, int64_t rows, int64_t cols,
                                   HFTransform t, const HFModelSpec& spec);

// True for tensors llama.cpp always stores as F32, whatever the output type: 1-D tensors, norms,
// biases, the MoE router and GPT-2's position embeddings.
bool hf_tensor_forced_f32(const HFTensorPlan& plan);

}  // namespace syslm::io
