// The KV cache's element types on the command line, as llama.cpp takes them: --cache-type-k and
// --cache-type-v (f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1), and --cache-type for both.
// generate, perplexity, logits, bench, eval and serve share them.
#pragma once

#include <CLI/CLI.hpp>

#include <string>

#include "model/kv_cache.hpp"

namespace syslm::cli {

struct CacheTypeArgs {
    std::string both, k, v;  // empty: not given
    bool hadamard = false;
    // K's type: --cache-type-k, else --cache-type, else F16; V's likewise.
    model::KvTypes types() const;
    bool given() const { return !both.empty() || !k.empty() || !v.empty() || hadamard; }
};

void add_cache_type_options(CLI::App& app, CacheTypeArgs& a);

}  // namespace syslm::cli
