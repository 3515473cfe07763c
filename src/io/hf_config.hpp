// Hugging Face config.json -> the GGUF hyper-parameter keys llama.cpp's converter writes
// (convert_hf_to_gguf.py), per architecture:
//
//   LlamaForCausalLM, MistralForCausalLM, MixtralForCausalLM -> "llama"
//   Qwen2ForCausalLM -> "qwen2", Qwen2MoeForCausalLM -> "qwen2moe", GPT2LMHeadModel -> "gpt2",
//   BloomForCausalLM -> "bloom", MptForCausalLM -> "mpt", Phi3ForCausalLM -> "phi3",
//   Gemma2ForCausalLM -> "gemma2",
//   Gemma3ForCausalLM and Gemma3ForConditionalGeneration (its language model) -> "gemma3"
//
// Both config generations are read: transformers < 5 (`rope_theta`, `rope_scaling`) and >= 5
// (`rope_parameters` holding rope_theta and the scaling). Anything the engine could not run
// faithfully (another activation, a per-layer sliding window, an unknown RoPE scaling) is an
// Error, not a silent approximation.
//
// Where syslm writes more than llama.cpp: `llama.attention.sliding_window` for Mistral/Mixtral
// (syslm honours it, llama.cpp ignores the key), `qwen2moe.expert_weights_norm` when
// norm_topk_prob is true, and for gemma2 / gemma3 the layers' pattern, gemma3's
// `rope.freq_base_swa` and `attention.scale` (llama.cpp fixes the first two and derives the
// scale from the model size).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "io/gguf.hpp"

namespace syslm::io {

enum class HFFamily {
    Llama,
    Mixtral,
    Qwen2,
    Qwen2Moe,
    Qwen3,
    Qwen3Moe,
    Gpt2,
    Bloom,
    Mpt,
    Phi3,
    Gemma2,
    Gemma3
};

struct HFModelSpec {
    std::string hf_arch;  // config.json "architectures"[0], e.g. "MistralForCausalLM"
    std::string arch;     // general.architecture: llama, qwen2, qwen2moe, qwen3, qwen3moe, gpt2
    HFFamily family = HFFamily::Llama;

    int64_t n_vocab = 0;
    int64_t n_embd = 0;
    int64_t n_layer = 0;
    int64_t n_head = 0;
    int64_t n_head_kv = 0;
    int64_t head_dim = 0;
    int64_t n_ff = 0;      // dense FFN width (gpt2: n_inner or 4 * n_embd)
    int64_t n_ctx = 0;     // training context
    int64_t n_expert = 0;  // 0: dense
    int64_t n_expert_used = 0;
    int64_t n_ff_exp = 0;          // routed expert width (mixtral: intermediate_size)
    int64_t n_ff_shexp = 0;        // qwen2moe shared expert width
    bool tied_embeddings = false;  // tie_word_embeddings: lm_head may be absent
    bool qkv_bias = false;         // q/k/v projections have biases (qwen2; llama attention_bias)
    bool qk_norm = false;          // per-head RMSNorm of q and k (qwen3)
    bool o_bias = false;           // output projection has a bias (llama attention_bias)
    bool mlp_bias = false;         // FFN projections have biases (llama mlp_bias)
    bool permute_qk = false;       // llama arch: Q/K rows reordered for interleaved RoPE pairs

    // llama3 RoPE scaling: the per-pair frequency divisors stored as rope_freqs.weight.
    std::vector<float> rope_freqs;
    // LongRoPE (phi3): rope_factors_long / rope_factors_short.weight.
    std::vector<float> rope_factors_long, rope_factors_short;

    // Where the language model's tensors sit in a multimodal checkpoint ("language_model."),
    // and the other towers' prefixes, left out (Gemma3ForConditionalGeneration).
    std::string tensor_prefix;
    std::vector<std::string> ignored_prefixes;

    // `<arch>.*` keys in the order llama.cpp writes them (general.* is added by the converter).
    std::vector<std::pair<std::string, GGUFValue>> kv;
};

// Parses config.json text; `name` (the file path) prefixes every error.
HFModelSpec parse_hf_config(std::string_view config_json, const std::string& name);
// Reads <model_dir>/config.json.
HFModelSpec read_hf_config(const std::string& model_dir);

// The llama3 RoPE frequency factors exactly as llama.cpp's converter computes them (float32
// frequencies, one factor per rotated pair).
std::vector<float> llama3_rope_factors(double base, int64_t head_dim, double factor,
                                       double low_freq_factor, double high_freq_factor,
                                       double original_context);

}  // namespace syslm::io
