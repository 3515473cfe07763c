#include "kernels/cpu/linear_attention.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/half.hpp"
#include "kernels/type_traits.hpp"

namespace syslm::kernels {
namespace {

// Row p of KV head hk of a layer's keys or values, widened to floats.
class CacheRows {
public:
    CacheRows(const AttentionShape& s, const void* k, const void* v, const KvPagesView* paged)
        : s_(s), k_(k, s.k_type, s.kv_stride), v_(v, s.v_type, s.kv_stride), paged_(paged) {}
    void key(int64_t p, int hk, float* dst) const {
        read(k_, paged_ ? paged_->k : nullptr, p, hk, dst);
    }
    void value(int64_t p, int hk, float* dst) const {
        read(v_, paged_ ? paged_->v : nullptr, p, hk, dst);
    }

private:
    struct Of {
        Of(const void* b, DType t, int64_t stride)
            : base(b),
              type(t),
              row(row_bytes(t, stride)),
              to_float(t == DType::F32 || t == DType::F16 ? nullptr : type_traits(t).to_float) {}
        const void* base;
        DType type;
        size_t row;
        ToFloatFn to_float;
    };
    void read(const Of& c, const void* const* pages, int64_t p, int hk, float* dst) const {
        const int d = s_.head_dim;
        const int64_t ps = paged_ ? paged_->page_size : 0;
        const uint8_t* row = pages ? static_cast<const uint8_t*>(pages[p / ps]) + (p % ps) * c.row
                                   : static_cast<const uint8_t*>(c.base) + p * c.row;
        row += row_bytes(c.type, int64_t{hk} * d);
        if (c.type == DType::F32) {
            const float* r = reinterpret_cast<const float*>(row);
            for (int i = 0; i < d; ++i) dst[i] = r[i];
        } else if (c.type == DType::F16) {
            const uint16_t* r = reinterpret_cast<const uint16_t*>(row);
            for (int i = 0; i < d; ++i) dst[i] = f16_to_f32(r[i]);
        } else {
            c.to_float(row, dst, d);
        }
    }
    const AttentionShape& s_;
    Of k_, v_;
    const KvPagesView* paged_;
};

}  // namespace

namespace {

// With a recurrent state: its sums are brought to pos0 from the cached rows, checkpointed there
// (calls of several tokens), then carried through the new rows, each query read against them.
void linear_attention_recurrent(const AttentionShape& s, const float* q, const CacheRows& rows,
                                int64_t n_tokens, int64_t pos0, float* out, ThreadPool& pool,
                                const LinearAttentionKernels& la, float* den, LinearState& st) {
    if (n_tokens <= 0) return;
    const int d = s.head_dim, G = s.n_head / s.n_head_kv;
    const int64_t QD = int64_t{s.n_head} * d;
    const size_t dd = size_t(d) * d, heads = size_t(s.n_head_kv);
    if (st.S.size() != heads * dd) {
        st.S.assign(heads * dd, 0.0f);
        st.z.assign(heads * size_t(d), 0.0f);
        st.saved_S.resize(st.S.size());
        st.saved_z.resize(st.z.size());
        st.reset();
    }
    if (st.pos > pos0) {  // rolled back: from the checkpoint when it is not past pos0, else anew
        if (st.saved_pos >= 0 && st.saved_pos <= pos0) {
            st.S = st.saved_S;
            st.z = st.saved_z;
            st.pos = st.saved_pos;
        } else {
            st.pos = 0;
        }
    }
    if (st.pos == 0) {  // nothing absorbed yet (new, reset or rolled back to the start)
        std::fill(st.S.begin(), st.S.end(), 0.0f);
        std::fill(st.z.begin(), st.z.end(), 0.0f);
    }
    const int64_t from = st.pos;
    // A call of several tokens (a prefill chunk, speculative decoding's verify) may be rolled
    // back into: keep its first position's sums. A single token's call keeps the older
    // checkpoint (also valid: rows after it are caught up from the cache), so plain decoding
    // copies no state per token.
    const bool checkpoint = n_tokens > 1;
    pool.parallel_for(s.n_head_kv, [&](int64_t b, int64_t e, int) {
        thread_local std::vector<float> f, g, v;
        for (auto* x : {&f, &g, &v}) x->resize(size_t(d));
        for (int hk = static_cast<int>(b); hk < e; ++hk) {
            float* S = st.S.data() + size_t(hk) * dd;
            float* z = st.z.data() + size_t(hk) * d;
            for (int64_t p = from; p < pos0 + n_tokens; ++p) {
                if (p == pos0 && checkpoint) {  // this call's first position
                    std::copy(S, S + dd, st.saved_S.data() + size_t(hk) * dd);
                    std::copy(z, z + d, st.saved_z.data() + size_t(hk) * d);
                }
                rows.key(p, hk, g.data());
                la.phi(g.data(), g.data(), d);
                rows.value(p, hk, v.data());
                la.update(S, z, g.data(), v.data(), 1.0f, d);
                if (p < pos0) continue;
                const int64_t t = p - pos0;
                for (int h = hk * G; h < (hk + 1) * G; ++h) {
                    la.phi(q + t * QD + int64_t{h} * d, f.data(), d);
                    float* o = out + t * QD + int64_t{h} * d;
                    const float r = la.query(S, z, f.data(), d, o);
                    for (int j = 0; j < d; ++j) o[j] /= r;
                    if (den) den[t * s.n_head + h] = r;
                }
            }
        }
    });
    if (checkpoint) st.saved_pos = pos0;
    st.pos = pos0 + n_tokens;
}

}  // namespace

void linear_attention(const AttentionShape& s, const float* q, const void* k_cache,
                      const void* v_cache, const KvPagesView* paged, int64_t n_tokens, int64_t pos0,
                      float* out, ThreadPool& pool, Isa isa, float* den, LinearState* state) {
    const LinearAttentionKernels& la = attention_kernels(isa).linear;
    const int d = s.head_dim, G = s.n_head / s.n_head_kv;
    const int64_t QD = int64_t{s.n_head} * d;
    const CacheRows rows(s, k_cache, v_cache, paged);
    if (state)
        return linear_attention_recurrent(s, q, rows, n_tokens, pos0, out, pool, la, den, *state);
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
                    la.phi(g.data(), g.data(), d);
                    rows.value(p, hk, v.data());
                    la.update(S.data(), z.data(), g.data(), v.data(), 1.0f, d);
                    if (p < pos0) continue;
                    const int64_t t = p - pos0;
                    for (int h = hk * G; h < (hk + 1) * G; ++h) {
                        const float* qr = q + t * QD + int64_t{h} * d;
                        la.phi(qr, f.data(), d);
                        float* o = out + t * QD + int64_t{h} * d;
                        const float r = la.query(S.data(), z.data(), f.data(), d, o);
                        for (int j = 0; j < d; ++j) o[j] /= r;
                        if (den) den[t * s.n_head + h] = r;
                    }
                }
                continue;
            }
            // Direct sums: each cached row read and mapped once for the group's G heads.
            for (int64_t t = 0; t < n_tokens; ++t) {
                for (int gi = 0; gi < G; ++gi) {
                    const float* qr = q + t * QD + int64_t{hk * G + gi} * d;
                    la.phi(qr, f.data() + size_t(gi) * d, d);
                }
                std::fill(acc.begin(), acc.end(), 0.0f);
                std::fill(dn.begin(), dn.end(), 0.0f);
                for (int64_t p = 0; p <= pos0 + t; ++p) {
                    rows.key(p, hk, g.data());
                    la.phi(g.data(), g.data(), d);
                    rows.value(p, hk, v.data());
                    for (int gi = 0; gi < G; ++gi) {
                        const float w = la.dot(f.data() + size_t(gi) * d, g.data(), d);
                        la.axpy(acc.data() + size_t(gi) * d, w, v.data(), d);
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
                               int64_t n_tokens, float* dq, float* dk, float* dv, ThreadPool& pool,
                               Isa isa) {
    const LinearAttentionKernels& la = attention_kernels(isa).linear;
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
                la.phi(kr, g.data(), d);
                la.update(S.data(), z.data(), g.data(), v + t * KS + int64_t{hk} * d, 1.0f, d);
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
                    la.rows_dot(S.data(), z.data(), dnu, dd, d, dq + r);  // S_i.dnum + z_i dden
                    la.mul_dphi(q + r, dq + r, d);
                }
            }
            // Reverse: R = sum_{t >= p} phi(q_t) dnum_t^T, r = sum_{t >= p} phi(q_t) dden_t.
            std::fill(S.begin(), S.end(), 0.0f);  // R
            std::fill(z.begin(), z.end(), 0.0f);  // r
            for (int64_t t = T - 1; t >= 0; --t) {
                for (int gi = 0; gi < G; ++gi) {
                    const float* qr = q + t * QD + int64_t{hk * G + gi} * d;
                    la.phi(qr, f.data(), d);
                    la.update(S.data(), z.data(), f.data(), dnum.data() + (t * G + gi) * d,
                              dden[t * G + gi], d);
                }
                const float* kr = k + t * KS + int64_t{hk} * d;
                const float* vr = v + t * KS + int64_t{hk} * d;
                float* dkr = dk + t * KS + int64_t{hk} * d;
                float* dvr = dv + t * KS + int64_t{hk} * d;
                la.phi(kr, g.data(), d);
                la.grad_v(S.data(), g.data(), d, dvr);              // dv = R^T g
                la.rows_dot(S.data(), z.data(), vr, 1.0f, d, dkr);  // dg_i = R_i . v + r_i
                la.mul_dphi(kr, dkr, d);
            }
        }
    });
}

}  // namespace syslm::kernels
