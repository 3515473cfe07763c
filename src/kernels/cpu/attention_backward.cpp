// attention_backward (attention.hpp): one job per KV head, which owns its dk / dv columns and
// walks the query heads of its GQA group, so no two threads write the same gradient. Per query
// row t: D = dout_t . o_t; per visible position j: p = e^(scale q_t.k_j - lse_t),
// ds = p (dout_t . v_j - D), then dq_t += scale ds k_j, dk_j += scale ds q_t, dv_j += p dout_t.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/cpu/attention.hpp"

namespace syslm::kernels {
namespace {

float dot(const float* a, const float* b, int n) {
    float s = 0;
    for (int i = 0; i < n; ++i) s += a[i] * b[i];
    return s;
}

void axpy(float* y, float a, const float* x, int n) {
    for (int i = 0; i < n; ++i) y[i] += a * x[i];
}

}  // namespace

void attention_backward(const AttentionShape& s, const float* q, const float* k, const float* v,
                        const float* o, const float* lse, const float* dout, int64_t n_tokens,
                        float* dq, float* dk, float* dv, ThreadPool& pool) {
    const int D = s.head_dim, G = s.n_head / s.n_head_kv;
    const int64_t q_stride = static_cast<int64_t>(s.n_head) * D;
    std::memset(dq, 0, sizeof(float) * static_cast<size_t>(n_tokens * q_stride));
    for (int64_t t = 0; t < n_tokens; ++t) {
        std::memset(dk + t * s.kv_stride, 0, sizeof(float) * s.n_head_kv * D);
        std::memset(dv + t * s.kv_stride, 0, sizeof(float) * s.n_head_kv * D);
    }
    pool.parallel_for(s.n_head_kv, [&](int64_t b, int64_t e, int) {
        for (int64_t hk = b; hk < e; ++hk) {
            const int64_t kv_off = hk * D;
            for (int g = 0; g < G; ++g) {
                const int64_t h = hk * G + g;
                for (int64_t t = 0; t < n_tokens; ++t) {
                    const float* qt = q + t * q_stride + h * D;
                    const float* dot_ = dout + t * q_stride + h * D;
                    float* dqt = dq + t * q_stride + h * D;
                    const float l = lse[t * s.n_head + h];
                    const float Dt = dot(dot_, o + t * q_stride + h * D, D);
                    const int64_t first = s.window > 0 ? std::max<int64_t>(0, t - s.window + 1) : 0;
                    for (int64_t j = first; j <= t; ++j) {
                        const float* kj = k + j * s.kv_stride + kv_off;
                        const float* vj = v + j * s.kv_stride + kv_off;
                        const float p = std::exp(s.scale * dot(qt, kj, D) - l);
                        const float ds = p * (dot(dot_, vj, D) - Dt);
                        axpy(dqt, s.scale * ds, kj, D);
                        axpy(dk + j * s.kv_stride + kv_off, s.scale * ds, qt, D);
                        axpy(dv + j * s.kv_stride + kv_off, p, dot_, D);
                    }
                }
            }
        }
    });
}

}  // namespace syslm::kernels
