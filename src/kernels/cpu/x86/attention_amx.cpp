// Prefill attention on the AMX tiles: one job of attention.cpp (a tile of query tokens x the GQA
// group of one KV head) with the FP32 kernel's online softmax, its two products on tiles, in
// transposed form so that the softmax runs with queries along the vector lanes (as the FP32
// kernel's columns: every max, exp, sum and rescale is a vector operation):
//   Sᵀ = K Qᵀ    each block of 32 keys as bf16 rows [key][d]; the job's queries, scaled, in the
//                pair layout [d/2][32 queries][2] per group of 32 (the GEMM's packer);
//   Oᵀ += Vᵀ Pᵀ  the block's V transposed to bf16 rows [d][32 keys]; the probabilities in the
//                pair layout [keys/2][32 queries][2].
// Oᵀ ([D][queries] f32) is rescaled per block in memory, and transposed into o at the end.
// A group of 32 queries skips the key blocks none of its rows can see.
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/attention.hpp"
#include "kernels/cpu/gemm.hpp"
#include "kernels/cpu/scratch.hpp"
#include "kernels/cpu/x86/amx_tiles.hpp"
#include "kernels/cpu/x86/simd.hpp"
#include "kernels/cpu/x86/transpose_avx512.hpp"
#include "kernels/cpu/x86/vec_avx512.hpp"

namespace syslm::kernels::x86 {
namespace {

constexpr int kTile = 16;
constexpr int kKeys = 32;     // keys per block: the depth of one P V tile product
constexpr int kRows = 32;     // queries per group: 2 accumulator tiles wide
constexpr float kNoMax = -1e30f;  // as attention.cpp's: finite, so e^(m - m') is never NaN

// 16 floats to bf16 (nearest even) at dst.
void store_bf16(uint16_t* dst, __m512 v) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), (__m256i)_mm512_cvtneps_pbh(v));
}

}  // namespace

// Over 80 lines on purpose: the tile configuration, the packed K/V panels and the running
// softmax state of one block of queries live across the whole loop; it is also left as measured
// on the Xeon with AMX (2026-12-01), since a machine without the tiles cannot test a split.
void attention_job_amx(const AttentionAmxJob& j) {
    const int D = j.D, G = j.G;
    const int nq = static_cast<int>(j.t1 - j.t0) * G;
    const int nqp = (nq + kRows - 1) / kRows * kRows;
    const GemmKernels& kn = gemm_kernels(Isa::Avx512);
    thread_local Scratch q_scratch, qf_scratch, k_scratch, v_scratch, ot_scratch, bound_scratch;
    uint16_t* qp = q_scratch.get<uint16_t>(static_cast<size_t>(nqp) * D);   // [group][D/2][32][2]
    float* qf = qf_scratch.get<float>(static_cast<size_t>(nqp) * D);        // scaled rows
    uint16_t* kb = k_scratch.get<uint16_t>(static_cast<size_t>(kKeys) * D);  // [32 keys][D]
    uint16_t* vt = v_scratch.get<uint16_t>(static_cast<size_t>(D) * kKeys);  // [D][32 keys]
    float* ot = ot_scratch.get<float>(static_cast<size_t>(D) * nqp);        // Oᵀ [D][nqp]
    int32_t* lo = bound_scratch.get<int32_t>(static_cast<size_t>(2 * nqp));
    int32_t* hi = lo + nqp;
    alignas(64) float st[kKeys * kRows];    // Sᵀ of a block and group: [key][32 queries]
    alignas(64) uint32_t pt[kKeys / 2 * kRows];  // Pᵀ pairs: [key/2][32 queries] (2 bf16)

    // Queries scaled, then packed per group; each row's visible positions [lo, hi] (padding:
    // none); m, l, Oᵀ cleared.
    for (int i = 0; i < nqp; ++i) {
        float* dst = qf + static_cast<int64_t>(i) * D;
        j.m[i] = kNoMax;
        j.l[i] = 0.0f;
        if (i >= nq) {
            std::fill_n(dst, D, 0.0f);
            lo[i] = 1;
            hi[i] = 0;
            continue;
        }
        const int64_t t = j.t0 + i / G, pos = j.pos0 + t;
        const float* src = j.q + t * j.q_stride + static_cast<int64_t>(j.hk * G + i % G) * D;
        for (int d = 0; d < D; ++d) dst[d] = src[d] * j.scale;
        hi[i] = static_cast<int32_t>(pos);
        lo[i] = static_cast<int32_t>(j.window > 0 ? std::max<int64_t>(0, pos - j.window + 1) : 0);
    }
    kn.pack_bf16_from_f32(qf, D, nqp, D, qp);  // panels of 32 queries: [D/2][32][2] each
    std::fill_n(ot, static_cast<size_t>(D) * nqp, 0.0f);

    const int64_t first = j.window > 0 ? std::max<int64_t>(0, j.pos0 + j.t0 - j.window + 1) : 0;
    const int64_t end = j.pos0 + j.t1;  // one past the last visible position
    configure_tiles();
    for (int64_t pb = first; pb < end; pb += kKeys) {
        const int np = static_cast<int>(std::min<int64_t>(kKeys, end - pb));
        const float* krows = j.k + (pb - j.kv_first) * j.kv_stride;
        const float* vrows = j.v + (pb - j.kv_first) * j.kv_stride;
        // K as bf16 rows, V transposed to bf16 rows [d][key]; keys past np zero.
        for (int r = 0; r < kKeys; ++r) {
            uint16_t* dst = kb + r * D;
            if (r < np) {
                for (int d = 0; d < D; d += kTile)
                    store_bf16(dst + d, _mm512_loadu_ps(krows + r * j.kv_stride + d));
            } else {
                std::memset(dst, 0, static_cast<size_t>(D) * 2);
            }
        }
        for (int k0 = 0; k0 < kKeys; k0 += kTile)
            for (int d0 = 0; d0 < D; d0 += kTile) {
                __m512 r[kTile], t[kTile];
                for (int i = 0; i < kTile; ++i)
                    r[i] = k0 + i < np ? _mm512_loadu_ps(vrows + (k0 + i) * j.kv_stride + d0)
                                       : _mm512_setzero_ps();
                transpose16(r, t);  // t[c] = column d0 + c over keys k0 .. k0 + 15
                for (int c = 0; c < kTile; ++c) store_bf16(vt + (d0 + c) * kKeys + k0, t[c]);
            }
        memory_fence();
        for (int g0 = 0; g0 < nqp; g0 += kRows) {
            // Rows of a group are consecutive tokens: the first row sees least, the last most.
            const int last = std::min(nq, g0 + kRows) - 1;
            if (g0 > last || pb > hi[last] || pb + np - 1 < lo[g0]) continue;
            zero_acc_2x2();
            const uint16_t* qg = qp + static_cast<int64_t>(g0) * D;  // this group's panel
            for (int d = 0; d < D; d += 32)
                dp_bf16_2x2(kb + d, kb + kTile * D + d, D * 2, qg + d * kRows,
                            qg + d * kRows + 2 * kTile, kRows * 4);
            store_acc_2x2(st, kRows);
            memory_fence();

            // Online softmax, 16 queries per vector: mask, block max, rescale, probabilities.
            for (int h = 0; h < kRows; h += kTile) {
                const __m512i vlo = _mm512_loadu_si512(lo + g0 + h);
                const __m512i vhi = _mm512_loadu_si512(hi + g0 + h);
                __mmask16 vis[kKeys];
                __m512 mx = _mm512_set1_ps(kNoMax);
                for (int r = 0; r < np; ++r) {
                    const __m512i p = _mm512_set1_epi32(static_cast<int32_t>(pb + r));
                    vis[r] = _mm512_cmple_epi32_mask(vlo, p) & _mm512_cmpge_epi32_mask(vhi, p);
                    mx = _mm512_mask_max_ps(mx, vis[r], mx, _mm512_load_ps(st + r * kRows + h));
                }
                const __m512 m_old = _mm512_loadu_ps(j.m + g0 + h);
                const __m512 m_new = _mm512_max_ps(m_old, mx);
                const __m512 c = V512::exp(_mm512_sub_ps(m_old, m_new));
                __m512 sum = _mm512_setzero_ps();
                for (int r = 0; r < kKeys; r += 2) {
                    __m512 e[2];
                    for (int u = 0; u < 2; ++u) {
                        const int rr = r + u;
                        e[u] = rr < np ? _mm512_maskz_mov_ps(
                                             vis[rr], V512::exp(_mm512_sub_ps(
                                                          _mm512_load_ps(st + rr * kRows + h), m_new)))
                                       : _mm512_setzero_ps();
                        sum = _mm512_add_ps(sum, e[u]);
                    }
                    const __m512i lo16 = _mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(e[0]));
                    const __m512i hi16 = _mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(e[1]));
                    _mm512_store_si512(pt + r / 2 * kRows + h,
                                       _mm512_or_si512(lo16, _mm512_slli_epi32(hi16, 16)));
                }
                _mm512_storeu_ps(j.l + g0 + h, _mm512_fmadd_ps(_mm512_loadu_ps(j.l + g0 + h), c, sum));
                _mm512_storeu_ps(j.m + g0 + h, m_new);
                for (int d = 0; d < D; ++d) {
                    float* row = ot + static_cast<int64_t>(d) * nqp + g0 + h;
                    _mm512_storeu_ps(row, _mm512_mul_ps(_mm512_loadu_ps(row), c));
                }
            }
            memory_fence();

            // Oᵀ[:, g0 .. g0 + 32) += Vᵀ Pᵀ, 32 columns of the head at a time.
            for (int d0 = 0; d0 < D; d0 += 32) {
                float* og = ot + static_cast<int64_t>(d0) * nqp + g0;
                load_acc_2x2(og, nqp);
                dp_bf16_2x2(vt + d0 * kKeys, vt + (d0 + kTile) * kKeys, kKeys * 2, pt, pt + kTile,
                            kRows * 4);
                store_acc_2x2(og, nqp);
            }
            memory_fence();
        }
    }
    _tile_release();

    // o[i][d] = Oᵀ[d][i], 16 x 16 blocks at a time.
    for (int i0 = 0; i0 < nqp; i0 += kTile)
        for (int d0 = 0; d0 < D; d0 += kTile) {
            __m512 r[kTile], t[kTile];
            for (int d = 0; d < kTile; ++d)
                r[d] = _mm512_loadu_ps(ot + static_cast<int64_t>(d0 + d) * nqp + i0);
            transpose16(r, t);
            for (int i = 0; i < kTile; ++i)
                _mm512_storeu_ps(j.o + static_cast<int64_t>(i0 + i) * D + d0, t[i]);
        }
}

}  // namespace syslm::kernels::x86
