// The attention backward job, written once against a vector type V (V512, V256, VScalar) like
// attention_body.hpp, and instantiated in attention_backward.cpp (scalar) and the ISA files.
// Internal linkage only.
//
// One job is one (sequence, KV head): it owns that head's dk / dv columns. Keys are walked in
// blocks of kAttentionBlock; each block's K and V are transposed once into [d][block] scratch so
// that every product is a vector FMA along the block's positions or along d — no horizontal
// sums. Per tile of 16 (query, head) rows that see the block (every head of the GQA group):
//   s  = q_t K^T          (positions along the lanes)     p = e^(scale s - lse_t), 0 if masked
//   dp = dout_t V^T                                          ds = scale p (dp - D_t)
//   dq_t += ds K          (d along the lanes, dq_t in registers over the block's positions)
//   dk_j += sum over the tile of ds_tj q_t,  dv_j += sum of p_tj dout_t  (dk_j, dv_j in
//   registers over the tile: each is read and written once per tile, not once per row)
#pragma once

#include <algorithm>
#include <cstdint>

#include "kernels/cpu/attention.hpp"
#include "kernels/cpu/vec_tanh.hpp"

namespace syslm::kernels {
namespace {

// Calls f.template operator()<N>() with N = n, for 1 <= n <= 8: the vector counts below are
// compile-time, so their accumulators live in registers (a runtime count spills them).
template <class F>
void with_vector_count(int n, F&& f) {
    switch (n) {
        case 1:
            return f.template operator()<1>();
        case 2:
            return f.template operator()<2>();
        case 3:
            return f.template operator()<3>();
        case 4:
            return f.template operator()<4>();
        case 5:
            return f.template operator()<5>();
        case 6:
            return f.template operator()<6>();
        case 7:
            return f.template operator()<7>();
        default:
            return f.template operator()<8>();
    }
}

// The fixed-size cores of the two helpers below. Separate functions with every argument by value
// (not lambdas over references): the compiler then keeps the N accumulators in registers and
// hoists the tail mask, instead of spilling them around every store it cannot disambiguate.
template <class V, int N, bool Tail>
void rowvec_times_t_n(const float* a, const float* mt, int64_t ld, int d, float* out, int tail) {
    constexpr int W = V::W;
    typename V::T acc[N];
    for (int c = 0; c < N; ++c) acc[c] = V::zero();
    for (int k = 0; k < d; ++k) {
        const typename V::T ak = V::set1(a[k]);
        const float* row = mt + k * ld;
        for (int c = 0; c + 1 < N; ++c) acc[c] = V::fmadd(ak, V::load(row + c * W), acc[c]);
        acc[N - 1] = V::fmadd(
            ak, Tail ? V::load_n(row + (N - 1) * W, tail) : V::load(row + (N - 1) * W), acc[N - 1]);
    }
    for (int c = 0; c + 1 < N; ++c) V::store(out + c * W, acc[c]);
    if (Tail)
        V::store_n(out + (N - 1) * W, acc[N - 1], tail);
    else
        V::store(out + (N - 1) * W, acc[N - 1]);
}

template <class V, int N, bool Tail>
void accumulate_rows_n(float* dst, const float* const* src, const float* coef, int64_t ld, int n,
                       int tail) {
    constexpr int W = V::W;
    typename V::T acc[N];
    for (int c = 0; c + 1 < N; ++c) acc[c] = V::load(dst + c * W);
    acc[N - 1] = Tail ? V::load_n(dst + (N - 1) * W, tail) : V::load(dst + (N - 1) * W);
    for (int r = 0; r < n; ++r) {
        const typename V::T wv = V::set1(coef[r * ld]);
        const float* x = src[r];
        for (int c = 0; c + 1 < N; ++c) acc[c] = V::fmadd(wv, V::load(x + c * W), acc[c]);
        acc[N - 1] = V::fmadd(
            wv, Tail ? V::load_n(x + (N - 1) * W, tail) : V::load(x + (N - 1) * W), acc[N - 1]);
    }
    for (int c = 0; c + 1 < N; ++c) V::store(dst + c * W, acc[c]);
    if (Tail)
        V::store_n(dst + (N - 1) * W, acc[N - 1], tail);
    else
        V::store(dst + (N - 1) * W, acc[N - 1]);
}

// out[0..np) = sum_d a[d] * mt[d * ld + 0..np): positions in chunks of up to 8 vectors, one
// accumulator per vector, so the FMA chains run side by side.
template <class V>
void rowvec_times_t(const float* a, const float* mt, int64_t ld, int d, int np, float* out) {
    constexpr int W = V::W, kVecs = 8;
    for (int j0 = 0; j0 < np; j0 += kVecs * W) {
        const int jn = std::min(kVecs * W, np - j0);
        const int nv = (jn + W - 1) / W, tail = jn - (nv - 1) * W;
        with_vector_count(nv, [=]<int N>() {
            if (tail == W)
                rowvec_times_t_n<V, N, false>(a, mt + j0, ld, d, out + j0, tail);
            else
                rowvec_times_t_n<V, N, true>(a, mt + j0, ld, d, out + j0, tail);
        });
    }
}

constexpr int kBackwardTileRows = 16;  // (query, head) rows sharing each dk / dv update

// dst[0..D) += sum over rows r < n of coef[r * ld + p] * src[r][0..D): D in chunks of up to 8
// vectors held in registers, so dst is read and written once, not once per row.
template <class V>
void accumulate_rows(float* dst, const float* const* src, const float* coef, int64_t ld, int p,
                     int n, int D) {
    constexpr int W = V::W, kVecs = 8;
    const float* const* rows = src;
    for (int d0 = 0; d0 < D; d0 += kVecs * W) {
        const int dn = std::min(kVecs * W, D - d0);
        const int nv = (dn + W - 1) / W, tail = dn - (nv - 1) * W;
        // Row pointers offset by d0 (at most kBackwardTileRows or kAttentionBlock of them).
        const float* off[kAttentionBlock > kBackwardTileRows ? kAttentionBlock : kBackwardTileRows];
        if (d0 > 0) {
            for (int r = 0; r < n; ++r) off[r] = src[r] + d0;
            rows = off;
        }
        with_vector_count(nv, [=]<int N>() {
            if (tail == W)
                accumulate_rows_n<V, N, false>(dst + d0, rows, coef + p, ld, n, tail);
            else
                accumulate_rows_n<V, N, true>(dst + d0, rows, coef + p, ld, n, tail);
        });
    }
}

// Over 80 lines on purpose: one (query block, head) job's recomputed scores, dP, dS and the three
// gradient accumulations share the block's registers and scratch rows; split into calls, each
// would re-read them from memory (the PyTorch gradient tests hold it to the reference).
template <class V>
void attention_backward_job(const AttentionBackwardJob& j) {
    const AttentionShape& s = *j.shape;
    const int D = s.head_dim, G = s.n_head / s.n_head_kv;
    const int64_t q_stride = static_cast<int64_t>(s.n_head) * D;
    const int64_t kv_off = static_cast<int64_t>(j.kv_head) * D;
    constexpr int B = kAttentionBlock, TR = kBackwardTileRows;
    float* kt = j.scratch;             // [D][B] the block's keys, transposed
    float* vt = kt + D * B;            // [D][B] its values, transposed
    float* pt = vt + D * B;            // [TR][B] probabilities of the tile's rows (0 where masked)
    float* dst = pt + TR * B;          // [TR][B] scale * ds
    float* dts = dst + TR * B;         // [n_tokens][G]: D_t = dout_t . o_t per query head
    float* at = dts + j.n_tokens * G;  // [B] the block's positions (ALiBi)
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
    const float* qrow[TR];
    const float* orow[TR];  // dout rows
    const float* krow[B];
    const float* vrow[B];
    // BigBird's random blocks (of RB positions; 0: none): the draw of the last query block
    // asked for, kept while the rows walk through it.
    const int64_t RB = has_random_blocks(s) ? s.random_block_size : 0;
    int64_t drawn[kMaxRandomBlocks];
    int64_t drawn_qb = -1;
    int drawn_n = 0;
    const auto drawn_for = [&](int64_t t) {
        if (RB == 0) return 0;
        if (t / RB != drawn_qb) {
            drawn_qb = t / RB;
            drawn_n = random_key_blocks(s, drawn_qb, drawn);
        }
        return drawn_n;
    };
    // Plain loops, no std::find: an ISA file's std:: instances could serve other files.
    const auto drawn_has = [&](int n, int64_t kb) {
        for (int i = 0; i < n; ++i)
            if (drawn[i] == kb) return true;
        return false;
    };
    const typename V::T sc = V::set1(s.scale), one = V::set1(1.0f);
    const typename V::T cap = V::set1(s.softcap),
                        inv_cap = V::set1(s.softcap > 0 ? 1 / s.softcap : 0);
    for (int64_t j0 = 0; j0 < j.n_tokens; j0 += B) {
        const int np = static_cast<int>(std::min<int64_t>(B, j.n_tokens - j0));
        for (int p = 0; p < B; ++p) at[p] = static_cast<float>(j0 + p);
        for (int p = 0; p < np; ++p) {
            krow[p] = j.k + (j0 + p) * s.kv_stride + kv_off;
            vrow[p] = j.v + (j0 + p) * s.kv_stride + kv_off;
            for (int d = 0; d < D; ++d) {
                kt[d * B + p] = krow[p][d];
                vt[d * B + p] = vrow[p][d];
            }
        }
        // Queries that see some of the block: t >= j0, and within the window of its last key
        // (every later one where the block holds global tokens).
        const int64_t g = s.window > 0 ? s.global_tokens : 0;
        const int64_t t_end = s.window > 0 && j0 >= g
                                  ? std::min<int64_t>(j.n_tokens, j0 + np - 1 + s.window)
                                  : j.n_tokens;
        // Rows (t, g) in order, TR at a time, of tokens [ta, tz).
        const auto rows = [&](int64_t ta, int64_t tz) {
            for (int64_t row0 = ta * G; row0 < tz * G; row0 += TR) {
                const int nr = static_cast<int>(std::min<int64_t>(TR, tz * G - row0));
                for (int r = 0; r < nr; ++r) {
                    const int64_t t = (row0 + r) / G,
                                  h = static_cast<int64_t>(j.kv_head) * G + (row0 + r) % G;
                    qrow[r] = j.q + t * q_stride + h * D;
                    orow[r] = j.dout + t * q_stride + h * D;
                    float* prow = pt + r * B;
                    float* drow = dst + r * B;
                    rowvec_times_t<V>(qrow[r], kt, B, D, np, prow);
                    rowvec_times_t<V>(orow[r], vt, B, D, np, drow);
                    const typename V::T nl = V::set1(-j.lse[t * s.n_head + h]);
                    // ALiBi: the forward's slope * (p - t), added to the scaled score.
                    const typename V::T sl = V::set1(s.alibi ? s.alibi[h] : 0.0f);
                    const typename V::T tv = V::set1(static_cast<float>(t));
                    const typename V::T dtv = V::set1(dts[(row0 + r)]);
                    for (int p = 0; p < np; p += V::W) {
                        const int n = std::min(V::W, np - p);
                        const typename V::T sv =
                            n == V::W ? V::load(prow + p) : V::load_n(prow + p, n);
                        const typename V::T dv =
                            n == V::W ? V::load(drow + p) : V::load_n(drow + p, n);
                        typename V::T arg = V::fmadd(sv, sc, nl);
                        typename V::T dcap =
                            one;  // soft-capping: d(c tanh(x / c)) / dx = 1 - tanh^2
                        if (s.softcap > 0) {
                            const typename V::T t = tanh_v<V>(V::mul(V::mul(sv, sc), inv_cap));
                            arg = V::fmadd(cap, t, nl);
                            dcap = V::sub(one, V::mul(t, t));
                        }
                        if (s.alibi) {
                            const typename V::T pos =
                                n == V::W ? V::load(at + p) : V::load_n(at + p, n);
                            arg = V::fmadd(sl, V::sub(pos, tv), arg);
                        }
                        const typename V::T pr = V::exp(arg);
                        const typename V::T ds =
                            V::mul(V::mul(sc, dcap), V::mul(pr, V::sub(dv, dtv)));
                        if (n == V::W) {
                            V::store(prow + p, pr);
                            V::store(drow + p, ds);
                        } else {
                            V::store_n(prow + p, pr, n);
                            V::store_n(drow + p, ds, n);
                        }
                    }
                    // Masked positions: p and ds exactly 0, so the sums below can run over the
                    // block.
                    const int64_t lo = s.window > 0 ? std::max<int64_t>(0, t - s.window + 1) : 0;
                    const int ja = static_cast<int>(std::clamp<int64_t>(lo - j0, 0, np));
                    const int jz = static_cast<int>(std::clamp<int64_t>(t - j0 + 1, 0, np));
                    const int n_drawn = drawn_for(t);
                    for (int p = 0; p < np; ++p)
                        if (((p < ja && j0 + p >= g) || p >= jz) &&
                            !(n_drawn > 0 && drawn_has(n_drawn, (j0 + p) / RB)))
                            prow[p] = drow[p] = 0.0f;
                    // dq_t += sum_p ds_p k_p
                    accumulate_rows<V>(j.dq + t * q_stride + h * D, krow, drow, 1, 0, np, D);
                }
                for (int p = 0; p < np; ++p) {
                    float* dkp = j.dk + (j0 + p) * s.kv_stride + kv_off;
                    float* dvp = j.dv + (j0 + p) * s.kv_stride + kv_off;
                    accumulate_rows<V>(dkp, qrow, dst, B, p, nr, D);  // dk_p += sum_r ds_rp q_r
                    accumulate_rows<V>(dvp, orow, pt, B, p, nr, D);   // dv_p += sum_r p_rp dout_r
                }
            }
        };
        rows(j0, t_end);
        // BigBird: the later query blocks that drew a random block overlapping this one, for
        // their tokens past the window's rows.
        if (RB == 0 || t_end >= j.n_tokens) continue;
        for (int64_t qb = std::max<int64_t>(1, t_end / RB); qb * RB < j.n_tokens; ++qb) {
            const int n = random_key_blocks(s, qb, drawn);
            bool overlaps = false;
            for (int i = 0; i < n; ++i)
                overlaps = overlaps || (drawn[i] * RB < j0 + np && drawn[i] * RB + RB > j0);
            if (!overlaps) continue;
            drawn_qb = qb;
            drawn_n = n;
            rows(std::max(t_end, qb * RB), std::min(j.n_tokens, qb * RB + RB));
        }
    }
}

}  // namespace
}  // namespace syslm::kernels
