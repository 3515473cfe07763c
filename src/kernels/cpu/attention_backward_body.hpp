// The attention backward job, written once against a vector type V (V512, V256, VScalar) like
// attention_body.hpp, and instantiated in attention_backward.cpp (scalar) and the ISA files.
// Internal linkage only.
//
// One job is one (sequence, KV head): it owns that head's dk / dv columns. Keys are walked in
// blocks of kAttentionBlock; each block's K and V are transposed once into [d][block] scratch so
// that every product is a vector FMA along the block's positions or along d — no horizontal
// sums: per query row t (every query head of the GQA group) that sees the block,
//   s  = q_t K^T          (positions along the lanes)     p = e^(scale s - lse_t), 0 if masked
//   dp = dout_t V^T                                          ds = p (dp - D_t)
//   dq_t += scale ds K,   dk_j += scale ds_j q_t,   dv_j += p_j dout_t   (d along the lanes)
#pragma once

#include <algorithm>
#include <cstdint>

#include "kernels/cpu/attention.hpp"

namespace syslm::kernels {
namespace {

// y[0..n) += a * x[0..n)
template <class V>
void axpy_v(float* y, float a, const float* x, int n) {
    const typename V::T av = V::set1(a);
    int i = 0;
    for (; i + V::W <= n; i += V::W) V::store(y + i, V::fmadd(av, V::load(x + i), V::load(y + i)));
    if (i < n)
        V::store_n(y + i, V::fmadd(av, V::load_n(x + i, n - i), V::load_n(y + i, n - i)), n - i);
}

// out[0..np) = sum_d a[d] * mt[d * ld + 0..np)
template <class V>
void rowvec_times_t(const float* a, const float* mt, int64_t ld, int d, int np, float* out) {
    for (int j = 0; j < np; j += V::W) {
        const int n = std::min(V::W, np - j);
        typename V::T acc = V::zero();
        for (int k = 0; k < d; ++k) {
            const typename V::T m =
                n == V::W ? V::load(mt + k * ld + j) : V::load_n(mt + k * ld + j, n);
            acc = V::fmadd(V::set1(a[k]), m, acc);
        }
        if (n == V::W)
            V::store(out + j, acc);
        else
            V::store_n(out + j, acc, n);
    }
}

template <class V>
void attention_backward_job(const AttentionBackwardJob& j) {
    const AttentionShape& s = *j.shape;
    const int D = s.head_dim, G = s.n_head / s.n_head_kv;
    const int64_t q_stride = static_cast<int64_t>(s.n_head) * D;
    const int64_t kv_off = static_cast<int64_t>(j.kv_head) * D;
    float* kt = j.scratch;                 // [D][kAttentionBlock]
    float* vt = kt + D * kAttentionBlock;  // [D][kAttentionBlock]
    float* sp = vt + D * kAttentionBlock;  // [kAttentionBlock] p, then ds
    float* dp = sp + kAttentionBlock;      // [kAttentionBlock]
    float* dts = dp + kAttentionBlock;     // [n_tokens][G]: D_t = dout_t . o_t per query head
    for (int64_t t = 0; t < j.n_tokens; ++t) {
        std::fill_n(j.dk + t * s.kv_stride + kv_off, D, 0.0f);
        std::fill_n(j.dv + t * s.kv_stride + kv_off, D, 0.0f);
        for (int g = 0; g < G; ++g) {
            const int64_t at = t * q_stride + (static_cast<int64_t>(j.kv_head) * G + g) * D;
            std::fill_n(j.dq + at, D, 0.0f);
            float d_t = 0;
            for (int d = 0; d < D; ++d) d_t += j.dout[at + d] * j.o[at + d];
            dts[t * G + g] = d_t;
        }
    }
    for (int64_t j0 = 0; j0 < j.n_tokens; j0 += kAttentionBlock) {
        const int np = static_cast<int>(std::min<int64_t>(kAttentionBlock, j.n_tokens - j0));
        for (int p = 0; p < np; ++p)
            for (int d = 0; d < D; ++d) {
                kt[d * kAttentionBlock + p] = j.k[(j0 + p) * s.kv_stride + kv_off + d];
                vt[d * kAttentionBlock + p] = j.v[(j0 + p) * s.kv_stride + kv_off + d];
            }
        // Queries that see some of the block: t >= j0, and within the window of its last key.
        const int64_t t_end =
            s.window > 0 ? std::min<int64_t>(j.n_tokens, j0 + np - 1 + s.window) : j.n_tokens;
        for (int64_t t = j0; t < t_end; ++t) {
            const int64_t lo = s.window > 0 ? std::max<int64_t>(0, t - s.window + 1) : 0;
            const int ja = static_cast<int>(std::clamp<int64_t>(lo - j0, 0, np));
            const int jz = static_cast<int>(std::clamp<int64_t>(t - j0 + 1, 0, np));
            if (ja >= jz) continue;
            for (int g = 0; g < G; ++g) {
                const int64_t h = static_cast<int64_t>(j.kv_head) * G + g;
                const float* qt = j.q + t * q_stride + h * D;
                const float* dot_ = j.dout + t * q_stride + h * D;
                float* dqt = j.dq + t * q_stride + h * D;
                const float lse = j.lse[t * s.n_head + h];
                const float Dt = dts[t * G + g];
                rowvec_times_t<V>(qt, kt, kAttentionBlock, D, np, sp);
                rowvec_times_t<V>(dot_, vt, kAttentionBlock, D, np, dp);
                const typename V::T sc = V::set1(s.scale), nl = V::set1(-lse), dtv = V::set1(Dt);
                for (int p = 0; p < np; p += V::W) {
                    const int n = std::min(V::W, np - p);
                    const typename V::T sv = n == V::W ? V::load(sp + p) : V::load_n(sp + p, n);
                    const typename V::T dv = n == V::W ? V::load(dp + p) : V::load_n(dp + p, n);
                    const typename V::T pr = V::exp(V::fmadd(sv, sc, nl));
                    const typename V::T ds = V::mul(pr, V::sub(dv, dtv));
                    if (n == V::W) {
                        V::store(sp + p, pr);
                        V::store(dp + p, ds);
                    } else {
                        V::store_n(sp + p, pr, n);
                        V::store_n(dp + p, ds, n);
                    }
                }
                for (int p = ja; p < jz; ++p) {
                    const float* kj = j.k + (j0 + p) * s.kv_stride + kv_off;
                    axpy_v<V>(dqt, s.scale * dp[p], kj, D);
                    axpy_v<V>(j.dk + (j0 + p) * s.kv_stride + kv_off, s.scale * dp[p], qt, D);
                    axpy_v<V>(j.dv + (j0 + p) * s.kv_stride + kv_off, sp[p], dot_, D);
                }
            }
        }
    }
}

}  // namespace
}  // namespace syslm::kernels
