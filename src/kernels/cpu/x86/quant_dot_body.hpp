// The quantized dot products (vec_dot of every quant type with its partner), written once on
// 256-bit vectors and compiled twice: by quant_dot_avx2.cpp and quant_dot_avx512.cpp, each of
// which defines the int8 primitives below before including this file. Included only by ISA
// files; everything here has internal linkage (kernels/isa.hpp).
//
// Primitives the includer defines (all on 8 int32 lanes; lane i covers bytes 4i..4i+3):
//   dot4(u, s)            sum of the 4 products u8 * s8 per lane
//   dot4_sub(u, c, s)     dot4(u, s) - dot4(c, s)   (levels stored with an offset c)
//   prep_scale(s)         per-lane int32 scales into the form dot4_scaled expects
//   dot4_scaled(u, s, p)  dot4(u, s) * scale, p from prep_scale
//   dot8(u0, s0, u1, s1)  dot4(u0, s0) + dot4(u1, s1), for levels u below 64
//   lane_acc(a, u, s)     a + the products u8 * s8 summed per lane (int16 lanes on AVX2, int32 on
//                         VNNI; the caller keeps AVX2's int16 sums under 2^15)
//   lane_scaled(a, sc)    a's lane sums as int32, lane j times the int8 byte j of sc
//   kScaleAfterSum        true where dot4 is one instruction (VNNI): kernels with a scale per
//                         sub-block then sum each sub-block's lanes first and multiply once,
//                         instead of scaling every dot4 (AVX2 scales for free inside vpmaddwd)
// AVX2 builds them on vpmaddubsw, whose int16 pair sums saturate: every use below keeps a pair
// under 2^15 as long as the partner quant (the s8 operand) is never -128 — which the Q8
// quantizers guarantee (they clamp to [-127, 127]). VNNI (vpdpbusd) has no such limit.
//
// Numeric contract: the integer dot product of each (sub-)block is exact, as in the scalar
// references (quants/quant_rows.hpp); block results are scaled and summed in float (the
// references use double), so results differ from them by float rounding of those sums only.
#pragma once

#include <cstdint>
#include <cstring>

#include "kernels/cpu/x86/quant_helpers.hpp"
#include "kernels/cpu/x86/simd.hpp"
#include "kernels/cpu/x86/x86_kernels.hpp"
#include "kernels/quants/block_layouts.hpp"

namespace syslm::kernels::x86 {
namespace {

float hsum_ps(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

int hsum_epi32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
    return _mm_cvtsi128_si32(s);
}

__m256i load256(const void* p) {
    return _mm256_loadu_si256(static_cast<const __m256i*>(p));
}

__m128i load128(const void* p) {
    return _mm_loadu_si128(static_cast<const __m128i*>(p));
}

// Two consecutive blocks, for prefetching the span a two-block loop step reads.
template <typename Block>
struct Block2 {
    Block b[2];
};

// Signed int8 dot product via the sign trick: |x| (as u8, so -128 -> 128 is right) times y with
// x's sign applied.
__m256i dot_i8(__m256i x, __m256i y) {
    return dot4(_mm256_abs_epi8(x), _mm256_sign_epi8(y, x));
}

// 32 levels of a 4-bit legacy block: the low nibbles of 16 bytes (elements 0..15), then the high
// nibbles (16..31).
__m256i nibbles16(const uint8_t* p) {
    const __m128i t = load128(p);
    const __m256i v = _mm256_set_m128i(_mm_srli_epi16(t, 4), t);
    return _mm256_and_si256(v, _mm256_set1_epi8(0x0F));
}

// Byte j = `value` where bit j of the little-endian 32-bit mask at p is set, else 0.
__m256i bits_to_bytes(const uint8_t* p, char value) {
    const __m256i spread =
        _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(load_u32(p))),
                            _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2,
                                             2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3));
    const __m256i bit = _mm256_set1_epi64x(0x8040201008040201ll);
    const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
    return _mm256_and_si256(set, _mm256_set1_epi8(value));
}

// Lanes 0..3 = lane 2t of s, lanes 4..7 = lane 2t + 1: the scales of the two 16-element
// sub-blocks in a 32-byte group (t in 0..3).
__m256i pair_scales(__m256i s, int t) {
    const __m256i idx =
        _mm256_add_epi32(_mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1), _mm256_set1_epi32(2 * t));
    return _mm256_permutevar8x32_epi32(s, idx);
}

// All lanes = lane j of s.
__m256i lane_scale(__m256i s, int j) {
    return _mm256_permutevar8x32_epi32(s, _mm256_set1_epi32(j));
}

// ---- legacy 32-element blocks -------------------------------------------------------------------

// Q8_0 x Q8_0 and Q8_1 x Q8_1: the same body over blocks of different sizes. Two blocks per
// step with two accumulators, so the FMA latency does not serialise the loop.
template <typename Block>
float dot_q8_legacy(int64_t n, const void* vx, const void* vy) {
    const auto* x = static_cast<const Block*>(vx);
    const auto* y = static_cast<const Block*>(vy);
    const int64_t nb = n / 32;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 2 <= nb; i += 2) {
        prefetch_ahead(reinterpret_cast<const Block2<Block>*>(x + i));
        const __m256i p0 = dot_i8(load256(x[i].qs), load256(y[i].qs));
        const __m256i p1 = dot_i8(load256(x[i + 1].qs), load256(y[i + 1].qs));
        acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p0), _mm256_set1_ps(f16(x[i].d) * f16(y[i].d)),
                               acc0);
        acc1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p1),
                               _mm256_set1_ps(f16(x[i + 1].d) * f16(y[i + 1].d)), acc1);
    }
    if (i < nb) {
        const __m256i p0 = dot_i8(load256(x[i].qs), load256(y[i].qs));
        acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p0), _mm256_set1_ps(f16(x[i].d) * f16(y[i].d)),
                               acc0);
    }
    return hsum_ps(_mm256_add_ps(acc0, acc1));
}

float dot_q8_0_q8_0(int64_t n, const void* x, const void* y) {
    return dot_q8_legacy<BlockQ8_0>(n, x, y);
}

float dot_q8_1_q8_1(int64_t n, const void* x, const void* y) {
    return dot_q8_legacy<BlockQ8_1>(n, x, y);
}

// Symmetric 4/5-bit blocks against Q8_0: levels u in [0, 2c) stand for u - c.
__m256i levels_q4_0(const BlockQ4_0& b) {
    return nibbles16(b.qs);
}

__m256i levels_q5_0(const BlockQ5_0& b) {
    return _mm256_or_si256(nibbles16(b.qs), bits_to_bytes(b.qh, 0x10));
}

template <typename Block, __m256i (*levels)(const Block&), char offset>
float dot_symmetric(int64_t n, const void* vx, const void* vy) {
    const auto* x = static_cast<const Block*>(vx);
    const auto* y = static_cast<const BlockQ8_0*>(vy);
    const int64_t nb = n / 32;
    const __m256i c = _mm256_set1_epi8(offset);
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 2 <= nb; i += 2) {
        prefetch_ahead(reinterpret_cast<const Block2<Block>*>(x + i));
        const __m256i p0 = dot4_sub(levels(x[i]), c, load256(y[i].qs));
        const __m256i p1 = dot4_sub(levels(x[i + 1]), c, load256(y[i + 1].qs));
        acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p0), _mm256_set1_ps(f16(x[i].d) * f16(y[i].d)),
                               acc0);
        acc1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p1),
                               _mm256_set1_ps(f16(x[i + 1].d) * f16(y[i + 1].d)), acc1);
    }
    if (i < nb) {
        const __m256i p0 = dot4_sub(levels(x[i]), c, load256(y[i].qs));
        acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p0), _mm256_set1_ps(f16(x[i].d) * f16(y[i].d)),
                               acc0);
    }
    return hsum_ps(_mm256_add_ps(acc0, acc1));
}

float dot_q4_0_q8_0(int64_t n, const void* x, const void* y) {
    return dot_symmetric<BlockQ4_0, levels_q4_0, 8>(n, x, y);
}

float dot_q5_0_q8_0(int64_t n, const void* x, const void* y) {
    return dot_symmetric<BlockQ5_0, levels_q5_0, 16>(n, x, y);
}

// Q4_0_G8 x Q8_0_G8 (the load-time layout, block_layouts.hpp): per group of 8 blocks, four
// 32-byte loads of nibbles (two blocks each) against the activations laid out to match, three
// rounds of vphaddd leave the 8 block sums in slot order, and one FMA scales all 8. The -8
// offset of the levels is removed per block through the activations' quant sums.
float dot_q4_0_g8_q8_0_g8(int64_t n, const void* vx, const void* vy) {
    const auto* x = static_cast<const BlockQ4_0G8*>(vx);
    const auto* y = static_cast<const BlockQ8_0G8*>(vy);
    const int64_t ng = n / (kG8Blocks * QK4_0);
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    for (int64_t i = 0; i < ng; ++i) {
        prefetch_ahead(x + i);
        __m256i pair[4];
        for (int p = 0; p < 4; ++p) {
            const __m256i q = load256(x[i].qs + 32 * p);
            pair[p] = dot8(_mm256_and_si256(q, m4), load256(y[i].qs + 64 * p),
                           _mm256_and_si256(_mm256_srli_epi16(q, 4), m4),
                           load256(y[i].qs + 64 * p + 32));
        }
        if (i % 2 == 0)
            acc0 = g8_group_fma<3>(pair, y[i].s, x[i].d, y[i].d, acc0);
        else
            acc1 = g8_group_fma<3>(pair, y[i].s, x[i].d, y[i].d, acc1);
    }
    return hsum_ps(_mm256_add_ps(acc0, acc1));
}

// Q4_0_G8 against up to four tokens at once: each weight group's nibbles are loaded and split
// once for all of them (a batch of serving's decode step, a verified draft). Per token it runs
// dot_q4_0_g8_q8_0_g8's operations in the same order, so each result is bit for bit that dot's.
template <int NT>
void dot_q4_0_g8_nt(int64_t n, const BlockQ4_0G8* x, const uint8_t* yb, size_t by, float* s,
                    size_t bs) {
    const int64_t ng = n / (kG8Blocks * QK4_0);
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    __m256 acc0[NT], acc1[NT];
    for (int t = 0; t < NT; ++t) acc0[t] = acc1[t] = _mm256_setzero_ps();
    for (int64_t i = 0; i < ng; ++i) {
        prefetch_ahead(x + i);
        __m256i lo[4], hi[4];
        for (int p = 0; p < 4; ++p) {
            const __m256i q = load256(x[i].qs + 32 * p);
            lo[p] = _mm256_and_si256(q, m4);
            hi[p] = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
        }
        for (int t = 0; t < NT; ++t) {
            const BlockQ8_0G8& y = reinterpret_cast<const BlockQ8_0G8*>(yb + t * by)[i];
            __m256i pair[4];
            for (int p = 0; p < 4; ++p)
                pair[p] = dot8(lo[p], load256(y.qs + 64 * p), hi[p], load256(y.qs + 64 * p + 32));
            if (i % 2 == 0)
                acc0[t] = g8_group_fma<3>(pair, y.s, x[i].d, y.d, acc0[t]);
            else
                acc1[t] = g8_group_fma<3>(pair, y.s, x[i].d, y.d, acc1[t]);
        }
    }
    for (int t = 0; t < NT; ++t) s[t * bs] = hsum_ps(_mm256_add_ps(acc0[t], acc1[t]));
}

struct Q4_0G8Tokens {
    template <int NT>
    static void run(int64_t n, const BlockQ4_0G8* x, const uint8_t* y, size_t by, float* s,
                    size_t bs) {
        if constexpr (NT == 1) *s = dot_q4_0_g8_q8_0_g8(n, x, y);
        else dot_q4_0_g8_nt<NT>(n, x, y, by, s, bs);
    }
};

// Blocks with a minimum against Q8_1: d*dy*sum(q*y) + m*dy*sum(y). sum(y) is recomputed from the
// quants (exact) rather than read from Q8_1's f16 `s`, as the reference does.
__m256i levels_q4_1(const BlockQ4_1& b) {
    return nibbles16(b.qs);
}

__m256i levels_q5_1(const BlockQ5_1& b) {
    return _mm256_or_si256(nibbles16(b.qs), bits_to_bytes(b.qh, 0x10));
}

template <typename Block, __m256i (*levels)(const Block&)>
float dot_with_min(int64_t n, const void* vx, const void* vy) {
    const auto* x = static_cast<const Block*>(vx);
    const auto* y = static_cast<const BlockQ8_1*>(vy);
    const int64_t nb = n / 32;
    const __m256i ones = _mm256_set1_epi8(1);
    __m256 acc_d = _mm256_setzero_ps(), acc_m = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; ++i) {
        const __m256i yq = load256(y[i].qs);
        const __m256i p = dot4(levels(x[i]), yq);
        const __m256i s = dot4(ones, yq);
        const float dy = f16(y[i].d);
        acc_d = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(f16(x[i].d) * dy), acc_d);
        acc_m = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_set1_ps(f16(x[i].m) * dy), acc_m);
    }
    return hsum_ps(_mm256_add_ps(acc_d, acc_m));
}

float dot_q4_1_q8_1(int64_t n, const void* x, const void* y) {
    return dot_with_min<BlockQ4_1, levels_q4_1>(n, x, y);
}

float dot_q5_1_q8_1(int64_t n, const void* x, const void* y) {
    return dot_with_min<BlockQ5_1, levels_q5_1>(n, x, y);
}

// ---- K-quants (super-blocks of 256 against Q8_K) ------------------------------------------------

float dot_q8_k_q8_k(int64_t n, const void* vx, const void* vy) {
    const auto* x = static_cast<const BlockQ8_K*>(vx);
    const auto* y = static_cast<const BlockQ8_K*>(vy);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; ++i) {
        __m256i isum = _mm256_setzero_si256();
        for (int j = 0; j < QK_K; j += 32)
            isum = _mm256_add_epi32(isum, dot_i8(load256(x[i].qs + j), load256(y[i].qs + j)));
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_set1_ps(x[i].d * y[i].d), acc);
    }
    return hsum_ps(acc);
}

// sum over the 16 sub-blocks of scale[s] * bsums[s], scales as 16 int16.
int scaled_bsums(__m256i scales16, const int16_t* bsums) {
    return hsum_epi32(_mm256_madd_epi16(scales16, load256(bsums)));
}

// Q2_K: levels q in [0, 3]; x = d * sc * q - dmin * m per 16 elements.
float dot_q2_k_q8_k(int64_t n, const void* vx, const void* vy) {
    const auto* x = static_cast<const BlockQ2_K*>(vx);
    const auto* y = static_cast<const BlockQ8_K*>(vy);
    const __m256i m3 = _mm256_set1_epi8(3);
    __m256 acc = _mm256_setzero_ps();
    float min_sum = 0;
    for (int64_t i = 0; i < n / QK_K; ++i) {
        prefetch_ahead(x + i);
        const __m128i packed = load128(x[i].scales);
        const __m128i sc = _mm_and_si128(packed, _mm_set1_epi8(0x0F));
        const __m128i mn = _mm_and_si128(_mm_srli_epi16(packed, 4), _mm_set1_epi8(0x0F));
        const int mins = scaled_bsums(_mm256_cvtepu8_epi16(mn), y[i].bsums);
        const __m256i sc_lo = prep_scale(_mm256_cvtepu8_epi32(sc));
        const __m256i sc_hi = prep_scale(_mm256_cvtepu8_epi32(_mm_srli_si128(sc, 8)));
        __m256i isum = _mm256_setzero_si256();
        for (int h = 0; h < 2; ++h) {
            const __m256i planes = load256(x[i].qs + 32 * h);
            const __m256i scales = h == 0 ? sc_lo : sc_hi;
            for (int p = 0; p < 4; ++p) {
                const __m256i q = _mm256_and_si256(_mm256_srli_epi16(planes, 2 * p), m3);
                const __m256i yq = load256(y[i].qs + 128 * h + 32 * p);
                isum = _mm256_add_epi32(isum, dot4_scaled(q, yq, pair_scales(scales, p)));
            }
        }
        const float dy = y[i].d;
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_set1_ps(dy * f16(x[i].d)), acc);
        min_sum += dy * f16(x[i].dmin) * static_cast<float>(mins);
    }
    return hsum_ps(acc) - min_sum;
}

// Q3_K: levels u = low 2 bits | hmask bit << 2 in [0, 7] stand for u - 4; the -4 goes through
// the bsums: sum(sc * (u - 4) * y) = sum(sc * u * y) - 4 * sum(sc * bsum).
float dot_q3_k_q8_k(int64_t n, const void* vx, const void* vy) {
    const auto* x = static_cast<const BlockQ3_K*>(vx);
    const auto* y = static_cast<const BlockQ8_K*>(vy);
    const __m256i m3 = _mm256_set1_epi8(3);
    __m256 acc = _mm256_setzero_ps();
    float off_sum = 0;
    for (int64_t i = 0; i < n / QK_K; ++i) {
        prefetch_ahead(x + i);
        const __m128i sc = q3_k_scales(x[i].scales);
        const int offset = scaled_bsums(_mm256_cvtepi8_epi16(sc), y[i].bsums);
        const __m256i sc_lo = prep_scale(_mm256_cvtepi8_epi32(sc));
        const __m256i sc_hi = prep_scale(_mm256_cvtepi8_epi32(_mm_srli_si128(sc, 8)));
        const __m256i hm = load256(x[i].hmask);
        __m256i isum = _mm256_setzero_si256();
        for (int h = 0; h < 2; ++h) {
            const __m256i planes = load256(x[i].qs + 32 * h);
            const __m256i scales = h == 0 ? sc_lo : sc_hi;
            for (int p = 0; p < 4; ++p) {
                const __m256i low = _mm256_and_si256(_mm256_srli_epi16(planes, 2 * p), m3);
                const __m256i q = _mm256_or_si256(low, bit_to(hm, 4 * h + p, 2));
                const __m256i yq = load256(y[i].qs + 128 * h + 32 * p);
                isum = _mm256_add_epi32(isum, dot4_scaled(q, yq, pair_scales(scales, p)));
            }
        }
        const float d = y[i].d * f16(x[i].d);
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_set1_ps(d), acc);
        off_sum += d * static_cast<float>(4 * offset);
    }
    return hsum_ps(acc) - off_sum;
}

// sum_j m[j] * (bsums[2j] + bsums[2j+1]) over the 8 sub-blocks of 32.
int k4_min_term(uint64_t mins, const int16_t* bsums) {
    const __m128i pairs = _mm_hadd_epi16(load128(bsums), load128(bsums + 8));
    const __m128i m16 = _mm_cvtepu8_epi16(_mm_cvtsi64_si128(static_cast<long long>(mins)));
    __m128i s = _mm_madd_epi16(m16, pairs);
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
    return _mm_cvtsi128_si32(s);
}

// Lane j of the result = the sum of the 8 lanes of v[j].
__m256i sum_lanes8(const __m256i* v) {
    const __m256i a = _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
    const __m256i b = _mm256_hadd_epi32(_mm256_hadd_epi32(v[4], v[5]), _mm256_hadd_epi32(v[6], v[7]));
    // a = [v0..v3 summed over lanes 0-3 | v0..v3 over lanes 4-7], b the same for v4..v7.
    return _mm256_add_epi32(_mm256_permute2x128_si256(a, b, 0x20),
                            _mm256_permute2x128_si256(a, b, 0x31));
}

// What a K-quant row's dot keeps across its super-blocks: the scaled sums and the min / offset
// term subtracted at the end, as a scalar (KSum) or as four lanes (KLaneSum).
struct KSum {
    __m256 acc = _mm256_setzero_ps();
    float sub = 0;
    float finish() const { return hsum_ps(acc) - sub; }
};

struct KLaneSum {
    __m256 acc = _mm256_setzero_ps();
    __m128 sub = _mm_setzero_ps();
    float finish() const {
        __m128 s = _mm_add_ps(sub, _mm_movehl_ps(sub, sub));
        s = _mm_add_ss(s, _mm_movehdup_ps(s));
        return hsum_ps(acc) - _mm_cvtss_f32(s);
    }
};

// One row's dot: Step per super-block into a Sum, then Sum::finish.
template <typename Block, typename Sum, void (*Step)(const Block&, const BlockQ8_K&, Sum&)>
float dot_row(int64_t n, const void* vx, const void* vy) {
    const auto* x = static_cast<const Block*>(vx);
    const auto* y = static_cast<const BlockQ8_K*>(vy);
    Sum sum;
    for (int64_t i = 0; i < n / QK_K; ++i) Step(x[i], y[i], sum);
    return sum.finish();
}

// Chunk c of a Q4_K / Q5_K block: its low-nibble and high-nibble level vectors (2c and 2c + 1),
// Q5_K's bit 4 from hbits (its qh).
template <typename Block, bool with_high>
[[gnu::always_inline]] inline void k4_chunk_levels(const Block& xb, __m256i hbits, int c,
                                                   __m256i& lo, __m256i& hi) {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    const __m256i v = load256(xb.qs + 32 * c);
    lo = _mm256_and_si256(v, m4);
    hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
    if constexpr (with_high) {
        lo = _mm256_or_si256(lo, bit_to(hbits, 2 * c, 4));
        hi = _mm256_or_si256(hi, bit_to(hbits, 2 * c + 1, 4));
    }
}

// Q4_K (with_high = false) and Q5_K (5th bit from qh): each 32-byte chunk of qs holds two
// sub-blocks, low nibbles then high nibbles. One super-block of one row into its sums.
template <typename Block, bool with_high>
[[gnu::always_inline]] inline void k4_step(const Block& xb, const BlockQ8_K& yb, KSum& sum) {
    prefetch_ahead(&xb);
    uint64_t sc8, mn8;
    k4_scales_mins(xb.scales, sc8, mn8);
    const int mins = k4_min_term(mn8, yb.bsums);
    const __m256i scales =
        prep_scale(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128(static_cast<long long>(sc8))));
    __m256i hbits = _mm256_setzero_si256();
    if constexpr (with_high) hbits = load256(xb.qh);
    __m256i isum = _mm256_setzero_si256();
    __m256i sub[8];  // per sub-block dot products (kScaleAfterSum)
    for (int c = 0; c < 4; ++c) {
        __m256i lo, hi;
        k4_chunk_levels<Block, with_high>(xb, hbits, c, lo, hi);
        const int8_t* yq = yb.qs + 64 * c;
        if constexpr (kScaleAfterSum) {
            sub[2 * c] = dot4(lo, load256(yq));
            sub[2 * c + 1] = dot4(hi, load256(yq + 32));
        } else {
            isum = _mm256_add_epi32(isum, dot4_scaled(lo, load256(yq), lane_scale(scales, 2 * c)));
            isum = _mm256_add_epi32(
                isum, dot4_scaled(hi, load256(yq + 32), lane_scale(scales, 2 * c + 1)));
        }
    }
    if constexpr (kScaleAfterSum) isum = _mm256_mullo_epi32(sum_lanes8(sub), scales);
    const float dy = yb.d;
    sum.acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_set1_ps(dy * f16(xb.d)), sum.acc);
    sum.sub += dy * f16(xb.dmin) * static_cast<float>(mins);
}

float dot_q4_k_q8_k(int64_t n, const void* x, const void* y) {
    return dot_row<BlockQ4_K, KSum, k4_step<BlockQ4_K, false>>(n, x, y);
}

float dot_q5_k_q8_k(int64_t n, const void* x, const void* y) {
    return dot_row<BlockQ5_K, KSum, k4_step<BlockQ5_K, true>>(n, x, y);
}

// Q6_K: levels u in [0, 63] stand for u - 32; the -32 goes through the bsums as for Q3_K. One
// super-block of one row into its sums.
[[gnu::always_inline]] inline void q6_k_step(const BlockQ6_K& xb, const BlockQ8_K& yb, KSum& sum) {
    prefetch_ahead(&xb);
    const __m128i sc = load128(xb.scales);
    const int offset = scaled_bsums(_mm256_cvtepi8_epi16(sc), yb.bsums);
    const __m256i sc_lo = prep_scale(_mm256_cvtepi8_epi32(sc));
    const __m256i sc_hi = prep_scale(_mm256_cvtepi8_epi32(_mm_srli_si128(sc, 8)));
    __m256i isum = _mm256_setzero_si256();
    for (int h = 0; h < 2; ++h) {
        const __m256i scales = h == 0 ? sc_lo : sc_hi;
        __m256i q[4];
        q6_k_levels(xb, h, q);
        for (int p = 0; p < 4; ++p) {
            const __m256i yq = load256(yb.qs + 128 * h + 32 * p);
            isum = _mm256_add_epi32(isum, dot4_scaled(q[p], yq, pair_scales(scales, p)));
        }
    }
    const float d = yb.d * f16(xb.d);
    sum.acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_set1_ps(d), sum.acc);
    sum.sub += d * static_cast<float>(32 * offset);
}

float dot_q6_k_q8_k(int64_t n, const void* x, const void* y) {
    return dot_row<BlockQ6_K, KSum, q6_k_step>(n, x, y);
}

// ---- lane order: Q4_K_LANE, Q5_K_LANE and Q6_K_LANE against Q8_K_LANE (block_layouts.hpp) ---
// Lane j of every level vector holds one sub-block's elements (Q6_K: 2j in the first half, 2j + 1
// in the second), so the products are summed per lane over a block or half (lane_acc) and each
// lane is scaled once (lane_scaled), where the file order scales every sub-block's products on
// their own after broadcasting its scale. Zen 3, one thread in L2, ns per super-block on rows of
// 768 / 2048: Q4_K 11.6 / 10.9 in file order, 6.9 / 6.4 in lane order.

// A block of one row against NT tokens' blocks yb[t], into their sums sum[t]: the weights'
// levels, scales and mins are unpacked once for all NT (prefill, serving's batched decode), and
// each token's arithmetic is exactly what it gets alone (NT = 1, lane_step).

// Q4_K_LANE / Q5_K_LANE: the unpacking of Q4_K / Q5_K. Levels below 16 let all eight level
// vectors' int16 lane sums add up under 2^15 on AVX2; Q5_K's, below 32, four at a time. The min
// term stays in four lanes until the row's end.
template <typename Block, bool with_high>
struct K4Lane {
    using Sum = KLaneSum;
    template <int NT>
    [[gnu::always_inline]] static void block(const Block& xb, const BlockQ8_K* const* __restrict yb,
                                             Sum* __restrict sum) {
        prefetch_ahead(&xb);
        uint64_t sc8, mn8;
        k4_scales_mins(xb.scales, sc8, mn8);
        const __m128i m16 = _mm_cvtepu8_epi16(_mm_cvtsi64_si128(static_cast<long long>(mn8)));
        __m256i hbits = _mm256_setzero_si256();
        if constexpr (with_high) hbits = load256(xb.qh);
        __m256i acc[NT][2];
        for (int t = 0; t < NT; ++t) acc[t][0] = acc[t][1] = _mm256_setzero_si256();
        for (int c = 0; c < 4; ++c) {
            __m256i lo, hi;
            k4_chunk_levels<Block, with_high>(xb, hbits, c, lo, hi);
            for (int t = 0; t < NT; ++t) {
                __m256i& a = acc[t][with_high ? c / 2 : 0];
                a = lane_acc(a, lo, load256(yb[t]->qs + 64 * c));
                a = lane_acc(a, hi, load256(yb[t]->qs + 64 * c + 32));
            }
        }
        const __m128i scales = _mm_cvtsi64_si128(static_cast<long long>(sc8));
        const float xd = f16(xb.d), xdmin = f16(xb.dmin);
        for (int t = 0; t < NT; ++t) {
            const __m128i pairs = _mm_hadd_epi16(load128(yb[t]->bsums), load128(yb[t]->bsums + 8));
            const __m128i mins = _mm_madd_epi16(m16, pairs);
            __m256i isum = lane_scaled(acc[t][0], scales);
            if constexpr (with_high) isum = _mm256_add_epi32(isum, lane_scaled(acc[t][1], scales));
            const float dy = yb[t]->d;
            sum[t].acc =
                _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_set1_ps(dy * xd), sum[t].acc);
            sum[t].sub = _mm_fmadd_ps(_mm_cvtepi32_ps(mins), _mm_set1_ps(dy * xdmin), sum[t].sub);
        }
    }
};

// One token: the Step of dot_row / dot_rows_by2.
template <typename Block, typename Lane>
[[gnu::always_inline]] inline void lane_step(const Block& xb, const BlockQ8_K& yb,
                                             typename Lane::Sum& sum) {
    const BlockQ8_K* y = &yb;
    Lane::template block<1>(xb, &y, &sum);
}

// Q6_K_LANE: the unpacking of Q6_K (levels below 64: two int16 lane sums stay under 2^15 on
// AVX2, so each half scales two sums).
[[gnu::always_inline]] inline void q6_k_lane_step(const BlockQ6_K& xb, const BlockQ8_K& yb,
                                                  KSum& sum) {
    prefetch_ahead(&xb);
    const __m128i sc = load128(xb.scales);
    const int offset = scaled_bsums(_mm256_cvtepi8_epi16(sc), yb.bsums);
    // The scales of sub-blocks 2j (first half) and 2j + 1 (second half) in bytes j.
    const __m128i split =
        _mm_shuffle_epi8(sc, _mm_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15));
    __m256i isum = _mm256_setzero_si256();
    for (int h = 0; h < 2; ++h) {
        const __m128i scales = h == 0 ? split : _mm_srli_si128(split, 8);
        __m256i q[4];
        q6_k_levels(xb, h, q);
        const int8_t* yq = yb.qs + 128 * h;
        for (int p = 0; p < 4; p += 2) {
            __m256i acc = lane_acc(_mm256_setzero_si256(), q[p], load256(yq + 32 * p));
            acc = lane_acc(acc, q[p + 1], load256(yq + 32 * p + 32));
            isum = _mm256_add_epi32(isum, lane_scaled(acc, scales));
        }
    }
    const float d = yb.d * f16(xb.d);
    sum.acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_set1_ps(d), sum.acc);
    sum.sub += d * static_cast<float>(32 * offset);
}

float dot_q6_k_lane(int64_t n, const void* x, const void* y) {
    return dot_row<BlockQ6_K, KSum, q6_k_lane_step>(n, x, y);
}

// Against NT tokens (Q8_K_LANE rows `by` bytes apart; s[t * bs] for token t), for
// dot_tokens_by4. Zen 3, one thread, 64 rows x 16 tokens in L2, against the loop over tokens of
// the two-row kernel: Q5_K 25.3 -> 21.5 us (rows of 768), 61.8 -> 48.5 (2048); Q6_K 27.5 ->
// 20.8, 66.9 -> 48.1; Q4_K, whose unpacking is cheapest, 18.8 -> 20.3 and 44.5 -> 45.9, so Q4_K
// keeps the loop.
template <typename Block, typename Lane>
struct LaneTokens {
    template <int NT>
    static void run(int64_t n, const Block* x, const uint8_t* y, size_t by, float* s, size_t bs) {
        typename Lane::Sum sum[NT];
        for (int64_t i = 0; i < n / QK_K; ++i) {
            const BlockQ8_K* yb[NT];
            for (int t = 0; t < NT; ++t) yb[t] = reinterpret_cast<const BlockQ8_K*>(y + t * by) + i;
            Lane::template block<NT>(x[i], yb, sum);
        }
        for (int t = 0; t < NT; ++t) s[t * bs] = sum[t].finish();
    }
};

// Q6_K_LANE's tokens kernel: q6_k_lane_step's arithmetic for NT tokens. Written apart from it
// because Q6_K_LANE through the shared K4Lane-style per-block body measured 5-10% slower for one
// token (Zen 3, 256 x 2048: 17.6-18.9 against 16.9-17.3 us).
struct Q6KLaneTokens {
    template <int NT>
    static void run(int64_t n, const BlockQ6_K* x, const uint8_t* y, size_t by, float* s,
                    size_t bs) {
        if constexpr (NT == 1) {
            *s = dot_row<BlockQ6_K, KSum, q6_k_lane_step>(n, x, y);
        } else {
            KSum sum[NT];
            for (int64_t i = 0; i < n / QK_K; ++i) {
                const BlockQ6_K& xb = x[i];
                const BlockQ8_K* yb[NT];
                for (int t = 0; t < NT; ++t)
                    yb[t] = reinterpret_cast<const BlockQ8_K*>(y + t * by) + i;
                prefetch_ahead(&xb);
                const __m128i sc = load128(xb.scales);
                const __m128i split = _mm_shuffle_epi8(
                    sc, _mm_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15));
                __m256i isum[NT];
                for (int t = 0; t < NT; ++t) isum[t] = _mm256_setzero_si256();
                for (int h = 0; h < 2; ++h) {
                    const __m128i scales = h == 0 ? split : _mm_srli_si128(split, 8);
                    __m256i q[4];
                    q6_k_levels(xb, h, q);
                    for (int t = 0; t < NT; ++t) {
                        const int8_t* yq = yb[t]->qs + 128 * h;
                        for (int p = 0; p < 4; p += 2) {
                            __m256i acc =
                                lane_acc(_mm256_setzero_si256(), q[p], load256(yq + 32 * p));
                            acc = lane_acc(acc, q[p + 1], load256(yq + 32 * p + 32));
                            isum[t] = _mm256_add_epi32(isum[t], lane_scaled(acc, scales));
                        }
                    }
                }
                const __m256i sc16 = _mm256_cvtepi8_epi16(sc);
                const float xd = f16(xb.d);
                for (int t = 0; t < NT; ++t) {
                    const int offset = scaled_bsums(sc16, yb[t]->bsums);
                    const float d = yb[t]->d * xd;
                    sum[t].acc =
                        _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[t]), _mm256_set1_ps(d), sum[t].acc);
                    sum[t].sub += d * static_cast<float>(32 * offset);
                }
            }
            for (int t = 0; t < NT; ++t) s[t * bs] = sum[t].finish();
        }
    }
};

// Rows in pairs against one activation row of Q8_K, each row's arithmetic exactly its one-row
// dot's (dot_row): two independent chains per step keep the core busy where rows are short (a
// 768-wide matrix has 3 super-blocks a row, and one row's closing sums would stall).
template <typename Block, typename Sum, void (*Step)(const Block&, const BlockQ8_K&, Sum&)>
void dot_rows_by2(int64_t n, int nr, const void* vx, size_t bx, const void* vy, float* s) {
    const auto* y = static_cast<const BlockQ8_K*>(vy);
    int r = 0;
    for (; r + 2 <= nr; r += 2) {
        const auto* x0 = reinterpret_cast<const Block*>(static_cast<const uint8_t*>(vx) + r * bx);
        const auto* x1 = reinterpret_cast<const Block*>(reinterpret_cast<const uint8_t*>(x0) + bx);
        Sum sum0, sum1;
        for (int64_t i = 0; i < n / QK_K; ++i) {
            Step(x0[i], y[i], sum0);
            Step(x1[i], y[i], sum1);
        }
        s[r] = sum0.finish();
        s[r + 1] = sum1.finish();
    }
    if (r < nr) s[r] = dot_row<Block, Sum, Step>(n, static_cast<const uint8_t*>(vx) + r * bx, vy);
}

// A multi-row decode kernel (four weight rows per activation block, shared activation loads)
// measured +17% for Q4_0 in isolation but halved L1B Q4_0 decode inside matmul (24.8 vs 42 t/s,
// 16-row tiles on 2 threads), and was 10-35% slower for Q8_0/Q4_K/Q6_K; it was removed. Only
// Q4_K / Q5_K / Q6_K have one now, dot_rows_by2, which shares nothing and changes no arithmetic: it
// runs two rows' chains side by side (Zen 3, one thread in L2: 12.8 -> 11.1 ns per super-block
// on 768-wide rows, 10.8 -> 10.0 at 2048, 9.9 -> 9.7 at 5632). Other types keep vec_dot_rows =
// null here, so matmul loops over the fast vec_dot.

// Overwrites the vec_dot of every quant type in rows[0..n).
void set_quant_dots(TypeTraits* rows, int n) {
    const struct {
        DType type;
        VecDotFn fn;
    } dots[] = {
        {DType::Q4_0, dot_q4_0_q8_0}, {DType::Q4_1, dot_q4_1_q8_1}, {DType::Q5_0, dot_q5_0_q8_0},
        {DType::Q5_1, dot_q5_1_q8_1}, {DType::Q8_0, dot_q8_0_q8_0}, {DType::Q8_1, dot_q8_1_q8_1},
        {DType::Q2_K, dot_q2_k_q8_k}, {DType::Q3_K, dot_q3_k_q8_k}, {DType::Q4_K, dot_q4_k_q8_k},
        {DType::Q5_K, dot_q5_k_q8_k}, {DType::Q6_K, dot_q6_k_q8_k}, {DType::Q8_K, dot_q8_k_q8_k},
        {DType::Q4_0_G8, dot_q4_0_g8_q8_0_g8},
    };
    for (const auto& d : dots)
        if (TypeTraits* r = find_row(rows, n, d.type)) r->vec_dot = d.fn;
    if (TypeTraits* r = find_row(rows, n, DType::Q4_K))
        r->vec_dot_rows = dot_rows_by2<BlockQ4_K, KSum, k4_step<BlockQ4_K, false>>;
    if (TypeTraits* r = find_row(rows, n, DType::Q5_K))
        r->vec_dot_rows = dot_rows_by2<BlockQ5_K, KSum, k4_step<BlockQ5_K, true>>;
    if (TypeTraits* r = find_row(rows, n, DType::Q6_K))
        r->vec_dot_rows = dot_rows_by2<BlockQ6_K, KSum, q6_k_step>;
    using Q4KL = K4Lane<BlockQ4_K, false>;
    using Q5KL = K4Lane<BlockQ5_K, true>;
    if (TypeTraits* r = find_row(rows, n, DType::Q4_K_LANE)) {
        r->vec_dot = dot_row<BlockQ4_K, KLaneSum, lane_step<BlockQ4_K, Q4KL>>;
        r->vec_dot_rows = dot_rows_by2<BlockQ4_K, KLaneSum, lane_step<BlockQ4_K, Q4KL>>;
    }
    if (TypeTraits* r = find_row(rows, n, DType::Q5_K_LANE)) {
        r->vec_dot = dot_row<BlockQ5_K, KLaneSum, lane_step<BlockQ5_K, Q5KL>>;
        r->vec_dot_rows = dot_rows_by2<BlockQ5_K, KLaneSum, lane_step<BlockQ5_K, Q5KL>>;
        r->vec_dot_tokens = dot_tokens_by4<BlockQ5_K, LaneTokens<BlockQ5_K, Q5KL>>;
    }
    if (TypeTraits* r = find_row(rows, n, DType::Q6_K_LANE)) {
        r->vec_dot = dot_q6_k_lane;
        r->vec_dot_rows = dot_rows_by2<BlockQ6_K, KSum, q6_k_lane_step>;
        r->vec_dot_tokens = dot_tokens_by4<BlockQ6_K, Q6KLaneTokens>;
    }
    if (TypeTraits* r = find_row(rows, n, DType::Q4_0_G8)) r->vec_dot_tokens = dot_tokens_by4<BlockQ4_0G8, Q4_0G8Tokens>;
}

}  // namespace
}  // namespace syslm::kernels::x86
