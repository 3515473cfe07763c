// Random-initialised test models written under the test build's scratch folder: the small
// shapes the tests of several layers share (awkward sizes, GQA), with the SentencePiece
// vocabulary of tests/fixtures/vocab.
#pragma once

#include <cstdint>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "model/random_init.hpp"

namespace syslm::testing {

// 2 layers, width 48, 6 heads on 2 KV heads (6 for gpt2), FFN 72; "mixtral" is llama with 4
// experts, top-2, "mixtral_top_p" with 6, top-p 0.5 (1 to 4 each); "llama_local_global", "gemma2"
// and "gemma3" have a local layer 0 and a global layer 1; "llama_local_global_tokens" the same
// with 2 global tokens; "llama_shared" has 3 layers, the last computing with layer 0's block;
// "llama_swish_beta" learns a Swish beta per FFN channel; "llama_linear" has linear attention in
// layer 0; "llama_conv" a causal convolution of 3 taps before each attention. A "_hd32" suffix
// gives any of them width 128 and 4 heads of 32 on 2 KV heads (quantized KV caches need whole
// 32-element blocks per head).
inline model::InitConfig small_model_config(const std::string& name, int n_ctx, uint64_t seed) {
    const bool hd32 = name.ends_with("_hd32");
    const std::string arch = hd32 ? name.substr(0, name.size() - 5) : name;
    model::InitConfig c;
    c.arch = arch.starts_with("mixtral") || arch.starts_with("llama_") ? "llama" : arch;
    c.n_layer = 2;
    c.n_embd = 48;
    c.n_head = 6;
    c.n_head_kv = arch == "gpt2" ? 6 : 2;
    c.n_ff = 72;
    c.n_ctx = n_ctx;
    c.seed = seed;
    if (arch == "mixtral") {
        c.n_expert = 4;
        c.n_expert_used = 2;
    }
    if (arch == "mixtral_top_p") {  // 1 to 4 of 6 experts, until their probabilities reach 0.5
        c.n_expert = 6;
        c.n_expert_used = 4;
        c.expert_top_p = 0.5f;
    }
    if (arch.starts_with("llama_local_global") || arch.starts_with("gemma")) {
        c.window = 5;  // layer 0 local, 1 global
        c.local_layers = {true, false};
    }
    if (arch == "llama_local_global_tokens") c.global_tokens = 2;
    if (arch == "llama_shared") {
        c.n_layer = 3;
        c.block_source = {0, 1, 0};
    }
    c.swish_beta = arch == "llama_swish_beta";
    if (arch == "llama_linear") c.linear_layers = {true, false};
    if (arch == "llama_conv") c.conv_kernel = 3;
    if (arch == "gemma3") c.rope_freq_base = 1e6f;  // the global layer's; the local one's 1e4
    if (hd32) {
        c.n_embd = 128;
        c.n_head = 4;
        c.n_head_kv = 2;
    }
    return c;
}

// n token ids below 1000 (every test vocabulary is larger), seeded.
inline std::vector<int32_t> random_ids(size_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<int32_t> ids(n);
    for (auto& v : ids) v = static_cast<int32_t>(rng() % 1000);
    return ids;
}

inline std::string write_test_model(const std::string& name, const model::InitConfig& c) {
    std::filesystem::create_directories(SYSLM_TEST_TMP);
    const std::string path = std::string(SYSLM_TEST_TMP) + "/" + name + ".gguf";
    model::write_random_model(c, SYSLM_VOCAB_DIR "/ggml-vocab-llama-spm.gguf", path);
    return path;
}

}  // namespace syslm::testing
