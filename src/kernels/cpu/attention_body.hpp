// The attention block kernel, written once against a vector type V (V512, V256, or the scalar
// VScalar) and instantiated in attention.cpp and the ISA files. Internal linkage only.
//
// Queries lie along the vector lanes: column i of a job is one (token, head), so the scores of a
// block are the small matrix product S[j][i] = sum_d K[j][d] Qt[d][i] (a broadcast key element
// times a vector of queries), the masks are per-lane compares of the position with each column's
// visible range, and the online softmax runs down the columns with no horizontal reductions.
// P.V is the product O[i][:] += sum_j P[j][i] V[j][:] (a broadcast probability times vectors of a
// value row), fused with the rescale of O by e^(m_old - m_new).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/cpu/attention.hpp"
#include "kernels/cpu/vec_tanh.hpp"

namespace syslm::kernels {
namespace {

// A vector of K or V elements: floats as they are, f16 (an F16 cache read in place) widened.
template <class V>
typename V::T load_kv(const float* p) {
    return V::load(p);
}
template <class V>
typename V::T load_kv(const uint16_t* p) {
    return V::load_h(p);
}
template <class V>
typename V::T load_kv_n(const float* p, int n) {
    return V::load_n(p, n);
}
template <class V>
typename V::T load_kv_n(const uint16_t* p, int n) {
    return V::load_h_n(p, n);
}

// The K or V rows of a block: row j at base + j * stride, or (an F16 cache read in place across
// pages) wherever a table of row pointers says.
template <class E>
struct StridedRows {
    const E* base;
    int64_t stride;
    const E* operator[](int j) const { return base + j * stride; }
};
template <class E>
struct RowTable {
    const E* const* rows;
    const E* operator[](int j) const { return rows[j]; }
};

// S rows j..j+R (key rows kr[r]) x query vectors i..i+C.
template <class V, int R, int C>
void score_tile(const float* const* kr, const float* qt, int nqp, int d, float* s) {
    typename V::T acc[R][C];
    for (int r = 0; r < R; ++r)
        for (int c = 0; c < C; ++c) acc[r][c] = V::zero();
    for (int k = 0; k < d; ++k) {
        typename V::T q[C];
        for (int c = 0; c < C; ++c) q[c] = V::load(qt + static_cast<int64_t>(k) * nqp + c * V::W);
        for (int r = 0; r < R; ++r) {
            const typename V::T kb = V::set1(kr[r][k]);
            for (int c = 0; c < C; ++c) acc[r][c] = V::fmadd(kb, q[c], acc[r][c]);
        }
    }
    for (int r = 0; r < R; ++r)
        for (int c = 0; c < C; ++c) V::store(s + r * nqp + c * V::W, acc[r][c]);
}

template <class V, int C>
void score_rows(const float* const* kr, const float* qt, int nqp, int d, float* s) {
    score_tile<V, V::kScoreRows, C>(kr, qt, nqp, d, s);
}

// O rows i..i+R (rescaled by c[i]) += sum_j P[j][i] V[j][d0 .. d0 + C vectors]; with Tail the
// last vector holds only `tail` floats. V rows are floats or f16, placed as `Rows` says.
template <class V, int R, int C, bool Tail, class Rows>
void pv_tile(const AttentionColumns& a, int i, int d0, int tail, Rows v, int np) {
    typename V::T acc[R][C];
    auto ld = [&](const auto* p, int c) {
        return Tail && c == C - 1 ? load_kv_n<V>(p + c * V::W, tail) : load_kv<V>(p + c * V::W);
    };
    for (int r = 0; r < R; ++r) {
        const typename V::T cr = V::set1(a.c[i + r]);
        const float* o = a.o + static_cast<int64_t>(i + r) * a.d + d0;
        for (int c = 0; c < C; ++c) acc[r][c] = V::mul(ld(o, c), cr);
    }
    for (int j = 0; j < np; ++j) {
        const auto* vr = v[j] + d0;
        const float* pj = a.s + static_cast<int64_t>(j) * a.nqp + i;
        typename V::T vv[C];
        for (int c = 0; c < C; ++c) vv[c] = ld(vr, c);
        for (int r = 0; r < R; ++r) {
            const typename V::T p = V::set1(pj[r]);
            for (int c = 0; c < C; ++c) acc[r][c] = V::fmadd(p, vv[c], acc[r][c]);
        }
    }
    for (int r = 0; r < R; ++r) {
        float* o = a.o + static_cast<int64_t>(i + r) * a.d + d0;
        for (int c = 0; c < C; ++c) {
            if (Tail && c == C - 1)
                V::store_n(o + c * V::W, acc[r][c], tail);
            else
                V::store(o + c * V::W, acc[r][c]);
        }
    }
}

// All of d for query rows i..i+R.
template <class V, int R, class Rows>
void pv_rows(const AttentionColumns& a, int i, Rows v, int np) {
    constexpr int W = V::W, C = V::kPvVecs;
    const int full = a.d / W, tail = a.d % W;
    int c = 0;
    for (; c + C <= full; c += C) pv_tile<V, R, C, false>(a, i, c * W, 0, v, np);
    for (; c < full; ++c) pv_tile<V, R, 1, false>(a, i, c * W, 0, v, np);
    if (tail) pv_tile<V, R, 1, true>(a, i, full * W, tail, v, np);
}

template <class V, int R>
void pv_remainder(const AttentionColumns& a, int i, int rows, const float* v, int64_t stride,
                  int np) {
    if constexpr (R > 0) {
        if (rows == R)
            pv_rows<V, R>(a, i, StridedRows<float>{v, stride}, np);
        else
            pv_remainder<V, R - 1>(a, i, rows, v, stride, np);
    }
}

template <class V>
void attend_block(const AttentionColumns& a, const float* k, const float* v, int64_t stride,
                  int64_t p0, int np) {
    constexpr int W = V::W, R = V::kScoreRows, C = V::kScoreVecs;
    // 1. Scores. Rows past np repeat the last key row (their scores land in the scratch's spare
    // rows and are never read), so the tile needs no row remainder.
    for (int j = 0; j < np; j += R) {
        const float* kr[R];
        for (int r = 0; r < R; ++r) kr[r] = k + std::min(j + r, np - 1) * stride;
        float* s = a.s + static_cast<int64_t>(j) * a.nqp;
        int i = 0;
        for (; i + C * W <= a.nqp; i += C * W) score_rows<V, C>(kr, a.qt + i, a.nqp, a.d, s + i);
        for (; i < a.nqp; i += W) score_rows<V, 1>(kr, a.qt + i, a.nqp, a.d, s + i);
    }
    // Soft-capping, then ALiBi: each column's slope times (position - its own position), added
    // to its scores.
    if (a.softcap > 0) {
        const typename V::T cap = V::set1(a.softcap), inv = V::set1(1.0f / a.softcap);
        for (int j = 0; j < np; ++j)
            for (int i = 0; i < a.nqp; i += W) {
                float* sj = a.s + j * a.nqp + i;
                V::store(sj, softcap_v<V>(V::load(sj), cap, inv));
            }
    }
    if (a.slope)
        for (int i = 0; i < a.nqp; i += W) {
            const typename V::T sl = V::load(a.slope + i), hi = V::load(a.hi + i);
            for (int j = 0; j < np; ++j) {
                float* sj = a.s + j * a.nqp + i;
                const typename V::T d = V::sub(V::set1(static_cast<float>(p0 + j)), hi);
                V::store(sj, V::fmadd(sl, d, V::load(sj)));
            }
        }
    // 2. Online softmax down each column: new max over the visible scores, rescale factor,
    // probabilities (0 where masked) and their sum.
    for (int i = 0; i < a.nqp; i += W) {
        const typename V::T lo = V::load(a.lo + i), hi = V::load(a.hi + i);
        const typename V::T m_old = V::load(a.m + i);
        typename V::T m = m_old;
        for (int j = 0; j < np; ++j) {
            const typename V::T p = V::set1(static_cast<float>(p0 + j));
            const typename V::M vis = V::both(V::le(lo, p), V::le(p, hi));
            m = V::select(vis, V::max(m, V::load(a.s + j * a.nqp + i)), m);
        }
        const typename V::T c = V::exp(V::sub(m_old, m));
        typename V::T sum = V::zero();
        for (int j = 0; j < np; ++j) {
            const typename V::T p = V::set1(static_cast<float>(p0 + j));
            const typename V::M vis = V::both(V::le(lo, p), V::le(p, hi));
            float* sj = a.s + j * a.nqp + i;
            const typename V::T e = V::keep(vis, V::exp(V::sub(V::load(sj), m)));
            V::store(sj, e);
            sum = V::add(sum, e);
        }
        V::store(a.m + i, m);
        V::store(a.l + i, V::fmadd(V::load(a.l + i), c, sum));
        V::store(a.c + i, c);
    }
    // 3. O = O * c + P.V for the real (unpadded) columns.
    constexpr int RP = V::kPvRows;
    int i = 0;
    for (; i + RP <= a.nq; i += RP) pv_rows<V, RP>(a, i, StridedRows<float>{v, stride}, np);
    if (i < a.nq) pv_remainder<V, RP - 1>(a, i, a.nq - i, v, stride, np);
}

// Row mode, for jobs with only a few columns (decode without a large GQA group), where query lanes
// would sit mostly empty: qt holds the queries as rows [nq][d] and the positions lie along the
// lanes. Scores are dot products along d, the softmax runs along each row of s
// ([nq][kAttentionBlock]) and P.V is pv_rows on a one-row view. K and V rows are floats, or the
// f16 rows of an F16 cache read in place (the same values as widened rows, and the same
// arithmetic, without writing and re-reading a widened copy).
template <class V, class Rows>
void attend_block_rows(const AttentionColumns& a, Rows k, Rows v, int64_t p0, int np) {
    constexpr int W = V::W;
    const int full = a.d / W * W, tail = a.d - full;
    const int np_w = (np + W - 1) / W * W;  // <= kAttentionBlock, a multiple of W
    for (int i = 0; i < a.nq; ++i) {
        const float* q = a.qt + static_cast<int64_t>(i) * a.d;
        float* s = a.s + static_cast<int64_t>(i) * kAttentionBlock;
        // Visible part of the block for this row (one row of the tile may see none of it).
        const int64_t ja = std::clamp<int64_t>(static_cast<int64_t>(a.lo[i]) - p0, 0, np);
        const int64_t jz = std::clamp<int64_t>(static_cast<int64_t>(a.hi[i]) - p0 + 1, 0, np);
        if (ja >= jz) continue;  // nothing visible: m, l, o stay as they are
        float m = a.m[i];
        const float slope = a.slope ? a.slope[i] : 0.0f;
        // Four positions at a time: four independent FMA chains instead of one, each position's
        // sum taken in the same order as alone (the same bits).
        int j = static_cast<int>(ja);
        for (; j + 4 <= jz; j += 4) {
            const auto *k0 = k[j], *k1 = k[j + 1], *k2 = k[j + 2], *k3 = k[j + 3];
            typename V::T a0 = V::zero(), a1 = V::zero(), a2 = V::zero(), a3 = V::zero();
            for (int d = 0; d < full; d += W) {
                const typename V::T qv = V::load(q + d);
                a0 = V::fmadd(qv, load_kv<V>(k0 + d), a0);
                a1 = V::fmadd(qv, load_kv<V>(k1 + d), a1);
                a2 = V::fmadd(qv, load_kv<V>(k2 + d), a2);
                a3 = V::fmadd(qv, load_kv<V>(k3 + d), a3);
            }
            if (tail) {
                const typename V::T qv = V::load_n(q + full, tail);
                a0 = V::fmadd(qv, load_kv_n<V>(k0 + full, tail), a0);
                a1 = V::fmadd(qv, load_kv_n<V>(k1 + full, tail), a1);
                a2 = V::fmadd(qv, load_kv_n<V>(k2 + full, tail), a2);
                a3 = V::fmadd(qv, load_kv_n<V>(k3 + full, tail), a3);
            }
            s[j] = V::hsum(a0);
            s[j + 1] = V::hsum(a1);
            s[j + 2] = V::hsum(a2);
            s[j + 3] = V::hsum(a3);
        }
        for (; j < jz; ++j) {
            const auto* kr = k[j];
            typename V::T acc = V::zero();
            for (int d = 0; d < full; d += W)
                acc = V::fmadd(V::load(q + d), load_kv<V>(kr + d), acc);
            if (tail) acc = V::fmadd(V::load_n(q + full, tail), load_kv_n<V>(kr + full, tail), acc);
            s[j] = V::hsum(acc);
        }
        if (a.softcap > 0) {
            const typename V::T cap = V::set1(a.softcap), inv = V::set1(1.0f / a.softcap);
            for (int j = static_cast<int>(ja); j < jz; j += W) {
                const int n = std::min<int>(W, static_cast<int>(jz) - j);
                V::store_n(s + j, softcap_v<V>(V::load_n(s + j, n), cap, inv), n);
            }
        }
        for (int j = 0; j < np_w; ++j) {
            if (j < ja || j >= jz) {
                s[j] = -1e30f;  // e^(s - m) underflows to 0
                continue;
            }
            if (a.slope) s[j] = std::fma(slope, static_cast<float>(p0 + j) - a.hi[i], s[j]);
            m = std::max(m, s[j]);
        }
        const typename V::T mv = V::set1(m);
        typename V::T sum = V::zero();
        for (int j = 0; j < np_w; j += W) {
            const typename V::T e = V::exp(V::sub(V::load(s + j), mv));
            V::store(s + j, e);
            sum = V::add(sum, e);
        }
        const float c = std::exp(a.m[i] - m);
        a.m[i] = m;
        a.l[i] = a.l[i] * c + V::hsum(sum);
        a.c[i] = c;
        AttentionColumns row = a;  // one row: P[0][j] = s[j], its rescale factor and output
        row.s = s;
        row.nqp = 1;
        row.c = a.c + i;
        row.o = a.o + static_cast<int64_t>(i) * a.d;
        pv_rows<V, 1>(row, 0, v, np);
    }
}

template <class V>
void attend_block_rows_f32(const AttentionColumns& a, const float* k, const float* v,
                           int64_t stride, int64_t p0, int np) {
    attend_block_rows<V>(a, StridedRows<float>{k, stride}, StridedRows<float>{v, stride}, p0, np);
}

template <class V>
void attend_block_rows_f16(const AttentionColumns& a, const uint16_t* const* k,
                           const uint16_t* const* v, int64_t p0, int np) {
    attend_block_rows<V>(a, RowTable<uint16_t>{k}, RowTable<uint16_t>{v}, p0, np);
}

// F16 cache rows widened to floats (AttentionKernels::widen_f16).
template <class V>
void widen_f16_rows(const uint16_t* src, int64_t stride, int np, int d, float* dst) {
    constexpr int W = V::W;
    const int full = d / W * W;
    for (int j = 0; j < np; ++j) {
        const uint16_t* r = src + j * stride;
        float* o = dst + static_cast<int64_t>(j) * d;
        for (int i = 0; i < full; i += W) V::store(o + i, V::load_h(r + i));
        if (full < d) V::store_n(o + full, V::load_h_n(r + full, d - full), d - full);
    }
}

}  // namespace
}  // namespace syslm::kernels
