#include "kernels/cpu/linear_attention.hpp"

#include <cmath>
#include <vector>

#include "core/half.hpp"

namespace syslm::kernels {
namespace {

inline float phi(float x) {
    return x > 0 ? x + 1.0f : std::exp(x);
}
inline float dphi(float x) {
    return x > 0 ? 1.0f : std::exp(x);
}

// Row p of KV head hk of a layer's keys or values, widened to floats.
class CacheRows {
public:
    CacheRows(const AttentionShape& s, const void* k, const void* v, const KvPagesView* paged)
        : s_(s), k_(k), v_(v), paged_(paged), elem_(s.kv_type == DType::F16 ? 2 : 4) {}
    void key(int64_t p, int hk, float* dst) const {
        read(paged_ ? page(paged_->k, p) : at(k_, p), hk, dst);
    }
    void value(int64_t p, int hk, float* dst) const {
        read(paged_ ? page(paged_->v, p) : at(v_, p), hk, dst);
    }

private:
    const uint8_t* at(const void* base, int64_t p) const {
        return static_cast<const uint8_t*>(base) + p * s_.kv_stride * elem_;
    }
    const uint8_t* page(const void* const* pages, int64_t p) const {
        const int64_t ps = paged_->page_size;
        return static_cast<const uint8_t*>(pages[p / ps]) + (p % ps) * s_.kv_stride * elem_;
    }
    void read(const uint8_t* row, int hk, float* dst) const {
        const int d = s_.head_dim;
        if (elem_ == 4) {
            const float* r = reinterpret_cast<const float*>(row) + int64_t{hk} * d;
            for (int i = 0; i < d; ++i) dst[i] = r[i];
        } else {
            const uint16_t* r = reinterpret_cast<const uint16_t*>(row) + int64_t{hk} * d;
            for (int i = 0; i < d; ++i) dst[i] = f16_to_f32(r[i]);
        }
    }
    const AttentionShape& s_;
    const void *k_, *v_;
    const KvPagesView* paged_;
    int64_t elem_;
};

// S += g v^T (d x d, row i of S for feature i), z += g.
void accumulate(float* S, float* z, const float* g, const float* v, int d) {
    for (int i = 0; i < d; ++i) {
        const float gi = g[i];
        float* row = S + int64_t{i} * d;
        for (int j = 0; j < d; ++j) row[j] += gi * v[j];
        z[i] += gi;
    }
}

// out = S^T f / (f . z); returns f . z.
float query(const float* S, const float* z, const float* f, int d, float* out) {
    float den = 0;
    for (int j = 0; j < d; ++j) out[j] = 0;
    for (int i = 0; i < d; ++i) {
        const float fi = f[i];
        den += fi * z[i];
        const float* row = S + int64_t{i} * d;
        for (int j = 0; j < d; ++j) out[j] += fi * row[j];
    }
    for (int j = 0; j < d; ++j) out[j] /= den;
    return den;
}

}  // namespace

void linear_attention(const AttentionShape& s, const float* q, const void* k_cache,
                      const void* v_cache, const KvPagesView* paged, int64_t n_tokens, int64_t pos0,
                      float* out, ThreadPool& pool, float* den) {
    const int d = s.head_dim, G = s.n_head / s.n_head_kv;
    const int64_t QD = int64_t{s.n_head} * d;
    const CacheRows rows(s, k_cache, v_cache, paged);
    const bool scan = n_tokens > d;  // prefix sums cost d^2 a position, the direct sum d a pair
    pool.parallel_for(s.n_head_kv, [&](int64_t b, int64_t e, int) {
        // Per thread, sized once: decoding allocates nothing per token.
        thread_local std::vector<float> S, z, f, g, v, acc, dn;
        S.assign(scan ? size_t(d) * d : 0, 0.0f);
        for (auto* x : {&z, &g, &v}) x->resize(size_t(d));
        f.resize(size_t(G) * d);
        acc.resize(size_t(G) * d);
        dn.resize(size_t(G));
        for (int hk = static_cast<int>(b); hk < e; ++hk) {
            if (scan) {
                std::fill(S.begin(), S.end(), 0.0f);
                std::fill(z.begin(), z.end(), 0.0f);
                for (int64_t p = 0; p < pos0 + n_tokens; ++p) {
                    rows.key(p, hk, g.data());
                    for (float& x : g) x = phi(x);
                    rows.value(p, hk, v.data());
                    accumulate(S.data(), z.data(), g.data(), v.data(), d);
                    if (p < pos0) continue;
                    const int64_t t = p - pos0;
                    for (int h = hk * G; h < (hk + 1) * G; ++h) {
                        const float* qr = q + t * QD + int64_t{h} * d;
                        for (int i = 0; i < d; ++i) f[i] = phi(qr[i]);
                        const float r =
                            query(S.data(), z.data(), f.data(), d, out + t * QD + int64_t{h} * d);
                        if (den) den[t * s.n_head + h] = r;
                    }
                }
                continue;
            }
            // Direct sums: each cached row read and mapped once for the group's G heads.
            for (int64_t t = 0; t < n_tokens; ++t) {
                for (int gi = 0; gi < G; ++gi) {
                    const float* qr = q + t * QD + int64_t{hk * G + gi} * d;
                    for (int i = 0; i < d; ++i) f[size_t(gi) * d + i] = phi(qr[i]);
                }
                std::fill(acc.begin(), acc.end(), 0.0f);
                std::fill(dn.begin(), dn.end(), 0.0f);
                for (int64_t p = 0; p <= pos0 + t; ++p) {
                    rows.key(p, hk, g.data());
                    for (float& x : g) x = phi(x);
                    rows.value(p, hk, v.data());
                    for (int gi = 0; gi < G; ++gi) {
                        const float* fg = f.data() + size_t(gi) * d;
                        float w = 0;
                        for (int i = 0; i < d; ++i) w += fg[i] * g[i];
                        float* a = acc.data() + size_t(gi) * d;
                        for (int j = 0; j < d; ++j) a[j] += w * v[j];
                        dn[gi] += w;
                    }
                }
                for (int gi = 0; gi < G; ++gi) {
                    const int h = hk * G + gi;
                    float* o = out + t * QD + int64_t{h} * d;
                    for (int j = 0; j < d; ++j) o[j] = acc[size_t(gi) * d + j] / dn[gi];
                    if (den) den[t * s.n_head + h] = dn[gi];
                }
            }
        }
    });
}

void linear_attention_backward(const AttentionShape& s, const float* q, const float* k,
                               const float* v, const float* o, const float* den, const float* dout,
                               int64_t n_tokens, float* dq, float* dk, float* dv,
                               ThreadPool& pool) {
    const int d = s.head_dim, G = s.n_head / s.n_head_kv;
    const int64_t QD = int64_t{s.n_head} * d, KS = s.kv_stride, T = n_tokens;
    pool.parallel_for(s.n_head_kv, [&](int64_t b, int64_t e, int) {
        // Per query row and head of the group: dnum = dout / den, dden = -(dout . o) / den.
        // Per thread, sized once per batch shape.
        thread_local std::vector<float> S, z, g, f, dnum, dden;
        S.resize(size_t(d) * d);
        for (auto* x : {&z, &g, &f}) x->resize(size_t(d));
        dnum.resize(size_t(T) * G * d);
        dden.resize(size_t(T) * G);
        for (int hk = static_cast<int>(b); hk < e; ++hk) {
            std::fill(S.begin(), S.end(), 0.0f);
            std::fill(z.begin(), z.end(), 0.0f);
            for (int64_t t = 0; t < T; ++t) {  // the forward's prefix sums again: dq
                const float* kr = k + t * KS + int64_t{hk} * d;
                for (int i = 0; i < d; ++i) g[i] = phi(kr[i]);
                accumulate(S.data(), z.data(), g.data(), v + t * KS + int64_t{hk} * d, d);
                for (int gi = 0; gi < G; ++gi) {
                    const int h = hk * G + gi;
                    const int64_t r = t * QD + int64_t{h} * d;
                    const float dn = den[t * s.n_head + h];
                    float* dnu = dnum.data() + (t * G + gi) * d;
                    float dot = 0;
                    for (int j = 0; j < d; ++j) {
                        dnu[j] = dout[r + j] / dn;
                        dot += dout[r + j] * o[r + j];
                    }
                    const float dd = dden[t * G + gi] = -dot / dn;
                    for (int i = 0; i < d; ++i) {  // df_i = S_i . dnum + z_i dden
                        const float* row = S.data() + int64_t{i} * d;
                        float df = z[i] * dd;
                        for (int j = 0; j < d; ++j) df += row[j] * dnu[j];
                        dq[r + i] = df * dphi(q[r + i]);
                    }
                }
            }
            // Reverse: R = sum_{t >= p} phi(q_t) dnum_t^T, r = sum_{t >= p} phi(q_t) dden_t.
            std::fill(S.begin(), S.end(), 0.0f);  // R
            std::fill(z.begin(), z.end(), 0.0f);  // r
            for (int64_t t = T - 1; t >= 0; --t) {
                for (int gi = 0; gi < G; ++gi) {
                    const float* qr = q + t * QD + int64_t{hk * G + gi} * d;
                    for (int i = 0; i < d; ++i) f[i] = phi(qr[i]);
                    const float* dnu = dnum.data() + (t * G + gi) * d;
                    const float dd = dden[t * G + gi];
                    for (int i = 0; i < d; ++i) {
                        float* row = S.data() + int64_t{i} * d;
                        for (int j = 0; j < d; ++j) row[j] += f[i] * dnu[j];
                        z[i] += f[i] * dd;
                    }
                }
                const float* kr = k + t * KS + int64_t{hk} * d;
                const float* vr = v + t * KS + int64_t{hk} * d;
                float* dkr = dk + t * KS + int64_t{hk} * d;
                float* dvr = dv + t * KS + int64_t{hk} * d;
                for (int j = 0; j < d; ++j) dvr[j] = 0;
                for (int i = 0; i < d; ++i) {  // dg_i = R_i . v + r_i; dv += g_i R_i
                    const float* row = S.data() + int64_t{i} * d;
                    const float gi = phi(kr[i]);
                    float dg = z[i];
                    for (int j = 0; j < d; ++j) {
                        dg += row[j] * vr[j];
                        dvr[j] += gi * row[j];
                    }
                    dkr[i] = dg * dphi(kr[i]);
                }
            }
        }
    });
}

}  // namespace syslm::kernels
