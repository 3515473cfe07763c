// Deterministic test inputs for the quantization kernels. Built from integer arithmetic and
// correctly rounded float operations only (no libm transcendental functions), so the same seed
// gives the same floats on every IEEE machine — the golden hashes in quant_golden_test.cpp rely
// on that.
//
// Each 32-element chunk gets a "kind" that exercises a different path of the quantizers: plain
// noise at scales from 2^-13 to 2^7, a single large outlier, all-negative and all-positive
// chunks, sparse chunks, constant chunks, exact zeros, values below ggml's all-zero threshold,
// values on the quantization grid (rounding ties), and chunks with both huge and tiny members.
// Magnitudes stay below 30000 so that every type's f16 scales stay finite.
#pragma once

#include <cstdint>
#include <vector>

#include "core/dtype.hpp"

// The golden fingerprints need these exact floats: no fused multiply-adds (GCC's ISO mode never
// contracts; clang would with FMA targets).
#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#endif

namespace syslm::kernels::testing {

// Every weight and partner type with a vec_dot, for the tests that run them all.
inline constexpr DType kVecDotTypes[] = {
    DType::F32,       DType::F16,      DType::BF16,     DType::Q4_0,      DType::Q4_1,
    DType::Q5_0,      DType::Q5_1,     DType::Q8_0,     DType::Q8_1,      DType::Q2_K,
    DType::Q3_K,      DType::Q4_K,     DType::Q5_K,     DType::Q6_K,      DType::Q8_K,
    DType::Q4_0_G8,   DType::Q8_0_G8,  DType::Q8_0_G8W, DType::Q4_K_LANE, DType::Q5_K_LANE,
    DType::Q6_K_LANE, DType::Q8_K_LANE};

class SplitMix64 {
public:
    explicit SplitMix64(uint64_t seed) : state_(seed) {}
    uint64_t next() {
        uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        return z ^ (z >> 31);
    }
    // Approximately normal with unit variance: the sum of four 24-bit uniforms, centred.
    float normal() {
        int64_t s = 0;
        for (int i = 0; i < 4; ++i) s += static_cast<int64_t>(next() >> 40);
        const float centred = static_cast<float>(s - (int64_t{1} << 25));
        return centred * (1.7320508f / 16777216.0f);  // sqrt(3) / 2^24: variance 4 * 1/12 * 3
    }
    float uniform() { return static_cast<float>(next() >> 40) * (1.0f / 16777216.0f); }

private:
    uint64_t state_;
};

enum class ChunkKind {
    kNoise,
    kOutlier,
    kAllNegative,
    kAllPositive,
    kSparse,
    kConstant,
    kZero,
    kTiny,
    kGrid,
    kWideRange,
    kCount
};

inline float power_of_two(int e) {
    float v = 1.0f;
    for (; e > 0; --e) v *= 2.0f;
    for (; e < 0; ++e) v *= 0.5f;
    return v;
}

// n floats with chunk kinds chosen pseudo-randomly (noise twice as often as the rest).
inline std::vector<float> make_quant_input(uint64_t seed, int64_t n) {
    SplitMix64 rng(seed);
    std::vector<float> x(static_cast<size_t>(n));
    for (int64_t c = 0; c < n; c += 32) {
        const int64_t len = n - c < 32 ? n - c : 32;
        float* v = x.data() + c;
        const uint64_t pick = rng.next() % (static_cast<uint64_t>(ChunkKind::kCount) + 3);
        const auto kind = pick >= static_cast<uint64_t>(ChunkKind::kCount)
                              ? ChunkKind::kNoise
                              : static_cast<ChunkKind>(pick);
        const float scale =
            power_of_two(static_cast<int>(rng.next() % 19) - 12) * (0.5f + rng.uniform());
        for (int64_t j = 0; j < len; ++j) v[j] = rng.normal() * scale;
        switch (kind) {
            case ChunkKind::kNoise:
                break;
            case ChunkKind::kOutlier:
                v[rng.next() % len] *= 40.0f;
                break;
            case ChunkKind::kAllNegative:
                for (int64_t j = 0; j < len; ++j) v[j] = -(v[j] < 0 ? -v[j] : v[j]) - 0.25f * scale;
                break;
            case ChunkKind::kAllPositive:
                for (int64_t j = 0; j < len; ++j) v[j] = (v[j] < 0 ? -v[j] : v[j]) + 0.5f * scale;
                break;
            case ChunkKind::kSparse:
                for (int64_t j = 0; j < len; ++j)
                    if (rng.next() % 4 != 0) v[j] = 0.0f;
                break;
            case ChunkKind::kConstant:
                for (int64_t j = 1; j < len; ++j) v[j] = v[0];
                break;
            case ChunkKind::kZero:
                for (int64_t j = 0; j < len; ++j) v[j] = 0.0f;
                break;
            case ChunkKind::kTiny:
                for (int64_t j = 0; j < len; ++j) v[j] *= 1e-18f;
                break;
            case ChunkKind::kGrid:
                for (int64_t j = 0; j < len; ++j)
                    v[j] = static_cast<float>(static_cast<int>(rng.next() % 33) - 16) * 0.125f;
                break;
            case ChunkKind::kWideRange:
                for (int64_t j = 0; j < len; ++j)
                    if (rng.next() % 2) v[j] *= 1e-4f;
                v[rng.next() % len] = 300.0f * scale;
                break;
            case ChunkKind::kCount:
                break;
        }
    }
    return x;
}

// Realistic weights: unit-variance noise times a per-row scale, with rare outliers.
inline std::vector<float> make_weight_like(uint64_t seed, int64_t rows, int64_t cols) {
    SplitMix64 rng(seed);
    std::vector<float> x(static_cast<size_t>(rows * cols));
    for (int64_t r = 0; r < rows; ++r) {
        const float row_scale = 0.02f * (0.5f + rng.uniform());
        for (int64_t c = 0; c < cols; ++c) {
            float v = rng.normal() * row_scale;
            if (rng.next() % 997 == 0) v *= 12.0f;
            x[static_cast<size_t>(r * cols + c)] = v;
        }
    }
    return x;
}

// An importance vector (per-column mean squared activation, as an imatrix holds): positive,
// spread over four orders of magnitude, with a few columns 1000x the rest (the outlier channels
// activation-aware quantization exists for) and some exactly zero.
inline std::vector<float> make_importance(uint64_t seed, int64_t n) {
    SplitMix64 rng(seed);
    std::vector<float> w(static_cast<size_t>(n));
    for (auto& v : w) {
        const uint64_t pick = rng.next() % 64;
        v = pick == 0 ? 0.0f : power_of_two(static_cast<int>(rng.next() % 14) - 7) * (0.25f + rng.uniform());
        if (pick == 1) v *= 1000.0f;
    }
    return w;
}

// FNV-1a over bytes: a compact fingerprint of quantized blocks for golden comparisons.
inline uint64_t fnv1a(const void* data, size_t n, uint64_t h = 0xcbf29ce484222325ull) {
    const auto* p = static_cast<const uint8_t*>(data);
    for (size_t i = 0; i < n; ++i) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

}  // namespace syslm::kernels::testing
