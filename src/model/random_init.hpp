// Builds a new model file with random-initialised weights (GPT-2 style: N(0, 0.02), residual
// output projections scaled by 1/sqrt(2 * layers), norms at 1) and a tokenizer copied from an
// existing GGUF (e.g. a vocabulary-only file). The starting point for training, and the
// embedded default model of the quick start before a trained one exists.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/dtype.hpp"
#include "model/shared_blocks.hpp"

namespace syslm::model {

struct InitConfig {
    std::string arch = "llama";  // llama | qwen2 | qwen2moe | qwen3 | qwen3moe | gpt2 | bloom | mpt
                                 // | phi3 | gemma2 | gemma3
    int n_layer = 4;
    int n_embd = 256;
    int n_head = 8;
    int n_head_kv = 0;  // 0: same as n_head
    int n_ff = 0;       // 0: llama/qwen2 ~ 8/3 * n_embd rounded to 32, gpt2 4 * n_embd
    int n_ctx = 2048;
    int n_expert = 0, n_expert_used = 0;
    float expert_top_p = 0.0f;  // top-p routing (0: top-k), between these two counts
    int n_expert_used_min = 1;
    // Local attention: the window (0: every layer global) and, when not every layer is local,
    // which are (attention_pattern below).
    int window = 0;
    std::vector<bool> local_layers;
    int global_tokens = 0;  // first positions every local layer also sees (with a window)
    // BigBird: random key blocks each local layer's query block also sees (HParams), drawn
    // with the seed below; 0: none.
    int random_blocks = 0, random_block_size = 64;
    // Cross-layer sharing: layer il computes with block block_source[il] (HParams); empty: none.
    std::vector<int> block_source;
    // Layers with linear attention (HParams::linear_layers; attention_pattern "L:S" gives L
    // linear, then S softmax layers); empty: none.
    std::vector<bool> linear_layers;
    bool swish_beta = false;
    // Conv + attention hybrid: taps of the causal depthwise convolution before every layer's
    // attention (HParams::conv_kernel; lag 0 starts at 1, the others near 0); 0: none.
    int conv_kernel = 0;  // SwiGLU's gate with a learned Swish beta per channel (init 1)
    float rope_freq_base = 10000.0f;
    float norm_eps = 1e-5f;
    uint64_t seed = 1;
    DType type = DType::F32;  // F32 | F16 | BF16 for the matrices
    std::string name = "syslm random-init";
};

// "R[:B]" (e.g. "3:64"): R random blocks of B positions (default 64), within the kernels' limits.
std::pair<int, int> random_blocks_spec(const std::string& spec);

// "L:G" (e.g. "5:1"): L local layers, then G global ones, repeated over n_layer layers.
std::vector<bool> attention_pattern(const std::string& spec, int n_layer);

// Writes the model to out_path (atomically). The tokenizer.* keys of vocab_path are copied.
void write_random_model(const InitConfig& cfg, const std::string& vocab_path,
                        const std::string& out_path);

}  // namespace syslm::model
