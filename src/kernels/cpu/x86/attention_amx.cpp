// Prefill attention on the AMX tiles: one job of attention.cpp (a tile of query tokens x the GQA
// group of one KV head) with the online softmax of the FP32 kernel, its two products on tiles:
//   S = Q Kᵀ   queries as bf16 rows (16 x 32 depth per tile, scaled, packed once per job), each
//              block of 32 keys in the pair layout [d/2][32 keys][2] (the GEMM's packer);
//   O += P V   the block's probabilities as bf16 rows [query][32 keys], V in the pair layout
//              [keys/2][32 d][2] per 32 columns of the head.
// Scores come back from the tiles as f32 rows (one query per row): mask, row max, exp and sum
// run on them in AVX-512, and O rows are rescaled in memory before each product adds into them.
// Queries go in groups of 32 rows (2 x 2 accumulator tiles); a group skips the key blocks none
// of its rows can see.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/attention.hpp"
#include "kernels/cpu/gemm.hpp"
#include "kernels/cpu/scratch.hpp"
#include "kernels/cpu/x86/amx_tiles.hpp"
#include "kernels/cpu/x86/simd.hpp"
#include "kernels/cpu/x86/vec_avx512.hpp"

namespace syslm::kernels::x86 {
namespace {

constexpr int kTile = 16;
constexpr int kKeys = 32;     // keys per block: the depth of one P V tile product
constexpr int kRows = 32;     // query rows per group: 2 accumulator tiles high
constexpr float kNoMax = -1e30f;  // as attention.cpp's: finite, so e^(m - m') is never NaN

// The largest lane (shuffles: GCC 12's _mm512_reduce_* trip -Wuninitialized).
float hmax(__m512 v) {
    v = _mm512_max_ps(v, _mm512_shuffle_f32x4(v, v, 0x4E));
    v = _mm512_max_ps(v, _mm512_shuffle_f32x4(v, v, 0xB1));
    __m128 m = _mm512_castps512_ps128(v);
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
}

// 16 floats to bf16 (nearest even) at dst.
void store_bf16(uint16_t* dst, __m512 v) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), (__m256i)_mm512_cvtneps_pbh(v));
}

}  // namespace

void attention_job_amx(const AttentionAmxJob& j) {
    const int D = j.D, G = j.G;
    const int nq = static_cast<int>(j.t1 - j.t0) * G;
    const int nqp = (nq + kRows - 1) / kRows * kRows;
    const GemmKernels& kn = gemm_kernels(Isa::Avx512);
    thread_local Scratch q_scratch, k_scratch, v_scratch, vrows_scratch, bound_scratch;
    uint16_t* qb = q_scratch.get<uint16_t>(static_cast<size_t>(nqp) * D);   // [row][D]
    uint16_t* kb = k_scratch.get<uint16_t>(static_cast<size_t>(D) * kKeys);  // [D/2][32][2]
    uint16_t* vb = v_scratch.get<uint16_t>(static_cast<size_t>(D) * kKeys);  // [D/32][16][32][2]
    float* vrows = vrows_scratch.get<float>(static_cast<size_t>(kKeys) * D);  // a short block
    int32_t* lo = bound_scratch.get<int32_t>(static_cast<size_t>(2 * nqp));
    int32_t* hi = lo + nqp;
    alignas(64) float s[kRows * kKeys];
    alignas(64) uint16_t p[kRows * kKeys];

    // Queries as scaled bf16 rows; each row's visible positions [lo, hi] (padding: none).
    const __m512 scale = _mm512_set1_ps(j.scale);
    for (int i = 0; i < nqp; ++i) {
        uint16_t* dst = qb + static_cast<int64_t>(i) * D;
        j.m[i] = kNoMax;
        j.l[i] = 0.0f;
        std::fill_n(j.o + static_cast<int64_t>(i) * D, D, 0.0f);
        if (i >= nq) {
            std::memset(dst, 0, static_cast<size_t>(D) * 2);
            lo[i] = 1;
            hi[i] = 0;
            continue;
        }
        const int64_t t = j.t0 + i / G, pos = j.pos0 + t;
        const float* src = j.q + t * j.q_stride + static_cast<int64_t>(j.hk * G + i % G) * D;
        for (int d = 0; d < D; d += kTile)
            store_bf16(dst + d, _mm512_mul_ps(_mm512_loadu_ps(src + d), scale));
        hi[i] = static_cast<int32_t>(pos);
        lo[i] = static_cast<int32_t>(j.window > 0 ? std::max<int64_t>(0, pos - j.window + 1) : 0);
    }

    const int64_t first = j.window > 0 ? std::max<int64_t>(0, j.pos0 + j.t0 - j.window + 1) : 0;
    const int64_t end = j.pos0 + j.t1;  // one past the last visible position
    const __m512i iota = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    configure_tiles();
    for (int64_t pb = first; pb < end; pb += kKeys) {
        const int np = static_cast<int>(std::min<int64_t>(kKeys, end - pb));
        const float* krows = j.k + (pb - j.kv_first) * j.kv_stride;
        const float* vsrc = j.v + (pb - j.kv_first) * j.kv_stride;
        int64_t vld = j.kv_stride;
        kn.pack_bf16_from_f32(krows, j.kv_stride, np, D, kb);  // rows past np: zero
        if (np < kKeys) {  // zero keys past np, so V's pair rows are whole
            for (int r = 0; r < kKeys; ++r) {
                if (r < np)
                    std::copy_n(vsrc + r * j.kv_stride, D, vrows + static_cast<int64_t>(r) * D);
                else
                    std::fill_n(vrows + static_cast<int64_t>(r) * D, D, 0.0f);
            }
            vsrc = vrows;
            vld = D;
        }
        kn.pack_bf16_from_f32_t(vsrc, vld, D, kKeys, vb);  // panels of 32 columns of the head
        memory_fence();
        for (int g0 = 0; g0 < nqp; g0 += kRows) {
            // Rows of a group are consecutive tokens: the first row sees least, the last most.
            const int last = std::min(nq, g0 + kRows) - 1;
            if (g0 > last || pb > hi[last] || pb + np - 1 < lo[g0]) continue;
            _tile_zero(0);
            _tile_zero(1);
            _tile_zero(2);
            _tile_zero(3);
            const uint16_t* qa = qb + static_cast<int64_t>(g0) * D;
            for (int d = 0; d < D; d += 32) {
                _tile_loadd(4, qa + d, D * 2);
                _tile_loadd(5, qa + kTile * D + d, D * 2);
                _tile_loadd(6, kb + d * kKeys, kKeys * 4);
                _tile_loadd(7, kb + d * kKeys + 2 * kTile, kKeys * 4);
                _tile_dpbf16ps(0, 4, 6);
                _tile_dpbf16ps(1, 4, 7);
                _tile_dpbf16ps(2, 5, 6);
                _tile_dpbf16ps(3, 5, 7);
            }
            _tile_stored(0, s, kKeys * 4);
            _tile_stored(1, s + kTile, kKeys * 4);
            _tile_stored(2, s + kTile * kKeys, kKeys * 4);
            _tile_stored(3, s + kTile * kKeys + kTile, kKeys * 4);
            memory_fence();

            // Online softmax per row: mask, max, rescale of l and O, probabilities as bf16.
            for (int r = 0; r < kRows; ++r) {
                const int i = g0 + r;
                uint16_t* pr = p + r * kKeys;
                const __m512i rel0 = _mm512_add_epi32(iota, _mm512_set1_epi32(static_cast<int32_t>(pb)));
                const __m512i rel1 = _mm512_add_epi32(rel0, _mm512_set1_epi32(kTile));
                const __m512i vlo = _mm512_set1_epi32(lo[i]), vhi = _mm512_set1_epi32(hi[i]);
                const __m512i lim = _mm512_set1_epi32(static_cast<int32_t>(pb + np));
                const __mmask16 v0 = _mm512_cmpge_epi32_mask(rel0, vlo) &
                                     _mm512_cmple_epi32_mask(rel0, vhi) &
                                     _mm512_cmplt_epi32_mask(rel0, lim);
                const __mmask16 v1 = _mm512_cmpge_epi32_mask(rel1, vlo) &
                                     _mm512_cmple_epi32_mask(rel1, vhi) &
                                     _mm512_cmplt_epi32_mask(rel1, lim);
                if ((v0 | v1) == 0) {
                    std::memset(pr, 0, kKeys * 2);
                    continue;
                }
                const __m512 s0 = _mm512_load_ps(s + r * kKeys), s1 = _mm512_load_ps(s + r * kKeys + kTile);
                const __m512 none = _mm512_set1_ps(kNoMax);
                const float mx = hmax(_mm512_max_ps(_mm512_mask_blend_ps(v0, none, s0),
                                                    _mm512_mask_blend_ps(v1, none, s1)));
                const float m_new = std::max(j.m[i], mx);
                const __m512 mv = _mm512_set1_ps(m_new);
                const __m512 e0 = _mm512_maskz_mov_ps(v0, V512::exp(_mm512_sub_ps(s0, mv)));
                const __m512 e1 = _mm512_maskz_mov_ps(v1, V512::exp(_mm512_sub_ps(s1, mv)));
                const float c = std::exp(j.m[i] - m_new);  // 0 on the first visible block
                j.l[i] = j.l[i] * c + V512::hsum(_mm512_add_ps(e0, e1));
                j.m[i] = m_new;
                store_bf16(pr, e0);
                store_bf16(pr + kTile, e1);
                if (c != 1.0f) {
                    float* orow = j.o + static_cast<int64_t>(i) * D;
                    const __m512 cv = _mm512_set1_ps(c);
                    for (int d = 0; d < D; d += kTile)
                        _mm512_storeu_ps(orow + d, _mm512_mul_ps(_mm512_loadu_ps(orow + d), cv));
                }
            }
            memory_fence();

            // O[g0 .. g0 + 32) += P V, 32 columns of the head at a time.
            float* og = j.o + static_cast<int64_t>(g0) * D;
            for (int d0 = 0; d0 < D; d0 += 32) {
                const uint16_t* vp = vb + static_cast<int64_t>(d0) * kKeys;  // panel d0 / 32
                _tile_loadd(0, og + d0, D * 4);
                _tile_loadd(1, og + d0 + kTile, D * 4);
                _tile_loadd(2, og + kTile * D + d0, D * 4);
                _tile_loadd(3, og + kTile * D + d0 + kTile, D * 4);
                _tile_loadd(4, p, kKeys * 2);
                _tile_loadd(5, p + kTile * kKeys, kKeys * 2);
                _tile_loadd(6, vp, kKeys * 4);
                _tile_loadd(7, vp + 2 * kTile, kKeys * 4);
                _tile_dpbf16ps(0, 4, 6);
                _tile_dpbf16ps(1, 4, 7);
                _tile_dpbf16ps(2, 5, 6);
                _tile_dpbf16ps(3, 5, 7);
                _tile_stored(0, og + d0, D * 4);
                _tile_stored(1, og + d0 + kTile, D * 4);
                _tile_stored(2, og + kTile * D + d0, D * 4);
                _tile_stored(3, og + kTile * D + d0 + kTile, D * 4);
            }
            memory_fence();
        }
    }
    _tile_release();
}

}  // namespace syslm::kernels::x86
