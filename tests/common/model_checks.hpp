// Small helpers the model-level tests share: random token ids, a model's logits for a prompt
// (F32 KV cache, every row), and the largest element-wise difference of two logit sets.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "model/transformer.hpp"

namespace syslm::testing {

inline std::vector<int32_t> random_tokens(int n, int vocab, uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (auto& v : t) v = static_cast<int32_t>(rng() % static_cast<uint32_t>(vocab));
    return t;
}

inline std::vector<float> logits_of(const std::string& path, const std::vector<int32_t>& tokens,
                                    int n_ctx = 64) {
    const model::Model m(path);
    model::Context ctx(m, n_ctx, 2, n_ctx, DType::F32);
    const auto l = ctx.forward(tokens, true);
    return {l.begin(), l.end()};
}

inline double max_diff(const std::vector<float>& a, const std::vector<float>& b) {
    double d = 0;
    for (size_t i = 0; i < a.size(); ++i)
        d = std::max(d, std::fabs(static_cast<double>(a[i]) - static_cast<double>(b[i])));
    return d;
}

// max |a - b| / max |b|: a logit set's largest difference relative to the reference's scale.
inline float max_rel_diff(std::span<const float> a, std::span<const float> b) {
    float scale = 0, diff = 0;
    for (size_t i = 0; i < a.size(); ++i) {
        scale = std::max(scale, std::fabs(b[i]));
        diff = std::max(diff, std::fabs(a[i] - b[i]));
    }
    return diff / scale;
}

}  // namespace syslm::testing
