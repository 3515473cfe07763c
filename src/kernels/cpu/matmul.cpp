#include "kernels/cpu/matmul.hpp"

#include <algorithm>
#include <cstdlib>
#include <vector>

#include "core/error.hpp"
#include "kernels/cpu/gemm.hpp"
#include "kernels/type_traits.hpp"

namespace syslm::kernels {

void matmul_vec_dot(const WeightView& w, const float* x, int64_t n_tokens, float* y,
                    ThreadPool& pool, const float* bias) {
    const TypeTraits& tt = type_traits(w.type);
    const size_t w_row = row_bytes(w.type, w.n_in);
    const auto* w_bytes = static_cast<const uint8_t*>(w.data);

    // Activations in the partner type; F32 weights use the activations as they are.
    const void* xq = x;
    size_t x_row = static_cast<size_t>(w.n_in) * sizeof(float);
    thread_local std::vector<uint8_t> scratch;
    if (tt.vec_dot_type != DType::F32) {
        const TypeTraits& pt = type_traits(tt.vec_dot_type);
        x_row = row_bytes(tt.vec_dot_type, w.n_in);
        scratch.resize(x_row * static_cast<size_t>(n_tokens));
        uint8_t* dst = scratch.data();
        pool.parallel_for(n_tokens, [&](int64_t b, int64_t e, int) {
            for (int64_t t = b; t < e; ++t)
                pt.from_float_fast(x + t * w.n_in, dst + t * x_row, w.n_in);
        });
        xq = scratch.data();
    }
    const auto* xb = static_cast<const uint8_t*>(xq);
    // Output tiles of kTileRows weight rows x kTileTokens tokens: the tile's activation rows stay
    // in L2 while its weight rows stream through L1 once per token block. Tiles are ordered
    // token-block-major so threads working at the same time share the activation block. Decode
    // (one token) is one row of tiles: each thread reads a contiguous slice of the weights.
    constexpr int64_t kTileRows = 16, kTileTokens = 64;
    const int64_t row_tiles = (w.n_out + kTileRows - 1) / kTileRows;
    const int64_t tok_tiles = (n_tokens + kTileTokens - 1) / kTileTokens;
    pool.parallel_for(row_tiles * tok_tiles, [&](int64_t b, int64_t e, int) {
        for (int64_t tile = b; tile < e; ++tile) {
            const int64_t r0 = (tile % row_tiles) * kTileRows,
                          r1 = std::min(w.n_out, r0 + kTileRows);
            const int64_t t0 = (tile / row_tiles) * kTileTokens;
            const int64_t t1 = std::min(n_tokens, t0 + kTileTokens);
            for (int64_t t = t0; t < t1; ++t) {
                const uint8_t* xt = xb + t * x_row;
                float* yt = y + t * w.n_out;
                for (int64_t o = r0; o < r1; ++o)
                    yt[o] = tt.vec_dot(w.n_in, w_bytes + o * w_row, xt) + (bias ? bias[o] : 0.0f);
            }
        }
    });
}

int64_t gemm_min_tokens() {
    static const int64_t n = [] {
        const char* env = std::getenv("SYSLM_GEMM_MIN_TOKENS");
        if (!env) return kGemmMinTokens;
        char* end = nullptr;
        const long long v = std::strtoll(env, &end, 10);
        if (end == env || *end != '\0' || v < 1)
            fail("SYSLM_GEMM_MIN_TOKENS='", env, "': expected a positive number of tokens");
        return static_cast<int64_t>(v);
    }();
    return n;
}

GemmPanel matmul_gemm_panel(DType type, int64_t n_tokens) {
    if (n_tokens < gemm_min_tokens()) return GemmPanel::None;
    return gemm_panel(type, active_isa());
}

void matmul(const WeightView& w, const float* x, int64_t n_tokens, float* y, ThreadPool& pool,
            const float* bias) {
    const GemmPanel panel = matmul_gemm_panel(w.type, n_tokens);
    if (panel != GemmPanel::None) {
        gemm(w, x, n_tokens, y, pool, bias, active_isa(), panel);
        return;
    }
    matmul_vec_dot(w, x, n_tokens, y, pool, bias);
}

}  // namespace syslm::kernels
