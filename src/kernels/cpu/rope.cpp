#include "kernels/cpu/rope.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "core/error.hpp"

namespace syslm::kernels {
namespace {

// Dimension index at which a pair completes `rotations` turns over the original context (YaRN).
double yarn_corr_dim(int n_rot, int orig_ctx, double rotations, double base) {
    return n_rot * std::log(orig_ctx / (rotations * 2 * std::numbers::pi)) / (2 * std::log(base));
}

}  // namespace

Rope::Rope(RopeConfig cfg) : cfg_(std::move(cfg)) {
    const int half = cfg_.n_rot / 2;
    SYSLM_CHECK(cfg_.n_rot > 0 && cfg_.n_rot % 2 == 0, "rope: rotated dimension count ", cfg_.n_rot,
                " must be positive and even");
    SYSLM_CHECK(cfg_.freq_factors.empty() || static_cast<int>(cfg_.freq_factors.size()) == half,
                "rope: ", cfg_.freq_factors.size(), " frequency factors for ", half, " pairs");
    inv_freq_.resize(half);
    double lo = 0, hi = 0;
    const bool yarn = cfg_.yarn_orig_ctx > 0;
    mscale_ = cfg_.attn_factor;
    if (yarn) {
        lo = std::max(0.0, std::floor(yarn_corr_dim(cfg_.n_rot, cfg_.yarn_orig_ctx,
                                                    cfg_.yarn_beta_fast, cfg_.freq_base)));
        hi = std::min<double>(cfg_.n_rot - 1,
                              std::ceil(yarn_corr_dim(cfg_.n_rot, cfg_.yarn_orig_ctx,
                                                      cfg_.yarn_beta_slow, cfg_.freq_base)));
        mscale_ = cfg_.yarn_attn_factor * (1.0f + 0.1f * std::log(1.0f / cfg_.freq_scale));
    }
    for (int i = 0; i < half; ++i) {
        const double extrap = std::pow(static_cast<double>(cfg_.freq_base), -2.0 * i / cfg_.n_rot);
        double f = extrap * cfg_.freq_scale;
        if (yarn) {
            // Pairs that rotate fast keep their frequency (extrapolate); slow ones interpolate.
            const double ramp = std::clamp((i - lo) / std::max(0.001, hi - lo), 0.0, 1.0);
            f = f * ramp + extrap * (1.0 - ramp);
        }
        if (!cfg_.freq_factors.empty()) f /= cfg_.freq_factors[i];
        inv_freq_[i] = f;
    }
}

void Rope::apply(float* x, int n_heads, int head_dim, int64_t pos) const {
    rotate(x, n_heads, head_dim, pos, 1.0f);
}

void Rope::apply_backward(float* dy, int n_heads, int head_dim, int64_t pos) const {
    rotate(dy, n_heads, head_dim, pos, -1.0f);
}

void Rope::angles(int64_t pos, float* cs) const {
    for (int i = 0; i < cfg_.n_rot / 2; ++i) {
        const double a = static_cast<double>(pos) * inv_freq_[i];
        cs[2 * i] = static_cast<float>(std::cos(a)) * mscale_;
        cs[2 * i + 1] = static_cast<float>(std::sin(a)) * mscale_;
    }
}

namespace {

// x0 c - x1 s, x0 s + x1 c per pair, with s negated for the backward rotation.
void rotate_pairs(const float* cs, float sin_sign, RopeMode mode, int half, float* x, int n_heads,
                  int head_dim) {
    for (int h = 0; h < n_heads; ++h) {
        float* v = x + static_cast<int64_t>(h) * head_dim;
        for (int i = 0; i < half; ++i) {
            const int a = mode == RopeMode::Norm ? 2 * i : i;
            const int b = mode == RopeMode::Norm ? 2 * i + 1 : i + half;
            const float x0 = v[a], x1 = v[b], c = cs[2 * i], s = cs[2 * i + 1] * sin_sign;
            v[a] = x0 * c - x1 * s;
            v[b] = x0 * s + x1 * c;
        }
    }
}

}  // namespace

void Rope::apply_angles(const float* cs, float* x, int n_heads, int head_dim) const {
    rotate_pairs(cs, 1.0f, cfg_.mode, cfg_.n_rot / 2, x, n_heads, head_dim);
}

void Rope::apply_angles_backward(const float* cs, float* dy, int n_heads, int head_dim) const {
    rotate_pairs(cs, -1.0f, cfg_.mode, cfg_.n_rot / 2, dy, n_heads, head_dim);
}

void Rope::rotate(float* x, int n_heads, int head_dim, int64_t pos, float sin_sign) const {
    thread_local std::vector<float> cs;
    cs.resize(static_cast<size_t>(cfg_.n_rot));
    angles(pos, cs.data());
    rotate_pairs(cs.data(), sin_sign, cfg_.mode, cfg_.n_rot / 2, x, n_heads, head_dim);
}

}  // namespace syslm::kernels
