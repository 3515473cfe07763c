#include "kernels/cpu/causal_conv.hpp"

#include <algorithm>

namespace syslm::kernels {
namespace {

constexpr int64_t kChannels = 64;  // channels per job: whole cache lines, one writer of dw each

}  // namespace

void causal_conv(const float* a, const float* w, int k, int64_t B, int64_t T, int64_t dim,
                 float* out, ThreadPool& pool) {
    pool.parallel_for(B * T, [&](int64_t r0, int64_t r1, int) {
        for (int64_t r = r0; r < r1; ++r) {
            const int64_t t = r % T;
            float* o = out + r * dim;
            const float* x = a + r * dim;
            for (int64_t c = 0; c < dim; ++c) o[c] = w[c] * x[c];
            for (int j = 1; j < k && j <= t; ++j) {
                const float* wj = w + j * dim;
                const float* xj = a + (r - j) * dim;
                for (int64_t c = 0; c < dim; ++c) o[c] += wj[c] * xj[c];
            }
        }
    });
}

void causal_conv_backward(const float* a, const float* w, const float* dout, int k, int64_t B,
                          int64_t T, int64_t dim, float* da, float* dw, ThreadPool& pool) {
    // da[t] = sum_j w[j] dout[t + j] (same sequence); dw[j] += sum_t a[t - j] dout[t]. Jobs own
    // channel ranges, so each dw element has one writer.
    pool.parallel_for((dim + kChannels - 1) / kChannels, [&](int64_t g0, int64_t g1, int) {
        const int64_t c0 = g0 * kChannels, c1 = std::min(dim, g1 * kChannels);
        for (int64_t b = 0; b < B; ++b)
            for (int64_t t = 0; t < T; ++t) {
                const int64_t r = b * T + t;
                float* d = da + r * dim;
                const float* g = dout + r * dim;
                for (int64_t c = c0; c < c1; ++c) d[c] = w[c] * g[c];
                for (int j = 1; j < k && t + j < T; ++j) {
                    const float* wj = w + j * dim;
                    const float* gj = dout + (r + j) * dim;
                    for (int64_t c = c0; c < c1; ++c) d[c] += wj[c] * gj[c];
                }
                for (int j = 0; j < k && j <= t; ++j) {
                    float* dwj = dw + j * dim;
                    const float* x = a + (r - j) * dim;
                    for (int64_t c = c0; c < c1; ++c) dwj[c] += x[c] * g[c];
                }
            }
    });
}

}  // namespace syslm::kernels
