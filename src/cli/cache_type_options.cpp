#include "cli/cache_type_options.hpp"

namespace syslm::cli {

model::KvTypes CacheTypeArgs::types() const {
    const auto pick = [&](const std::string& one) {
        return model::kv_cache_type(!one.empty() ? one : !both.empty() ? both : "f16");
    };
    model::KvTypes t(pick(k), pick(v));
    t.hadamard = hadamard;
    return t;
}

void add_cache_type_options(CLI::App& app, CacheTypeArgs& a) {
    const auto& names = model::kv_cache_type_names();
    app.add_option("--cache-type", a.both,
                   "KV cache element type of keys and values: f16 (default, as llama.cpp), f32 "
                   "(exact), bf16, q8_0 (half f16's memory), q4_0, q4_1, q5_0, q5_1")
        ->check(CLI::IsMember(names));
    app.add_option("--cache-type-k", a.k, "The keys' type alone (as --cache-type)")
        ->check(CLI::IsMember(names));
    app.add_option("--cache-type-v", a.v, "The values' type alone (as --cache-type)")
        ->check(CLI::IsMember(names));
    app.add_flag("--cache-hadamard", a.hadamard,
                 "Rotate keys, values and queries per head by a Hadamard transform before the "
                 "cache (spreads outlier channels before quantization; power-of-two heads)");
}

}  // namespace syslm::cli
